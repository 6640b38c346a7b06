"""Stage prepare@DOMAIN: build the upstream (IT) or downstream (Bible) corpus into data/corpora/DOMAIN."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vocabridge import workspace as paths
from vocabridge.config import load_params
from vocabridge.corpora.build import build_downstream, build_upstream, write_corpus
from vocabridge.corpora.user import USER_CORPORA, check_inside
from vocabridge.entry import run
from vocabridge.fileio import atomic_dir

BUILDERS = {"upstream": build_upstream, "downstream": build_downstream}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("domain", choices=sorted(BUILDERS))
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", type=Path, help="output folder (default data/corpora/DOMAIN)")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    domain = getattr(params.prepare, args.domain)
    check_inside(domain.files, USER_CORPORA / args.domain, f"prepare.{args.domain}", f"prepare@{args.domain}")
    corpus = BUILDERS[args.domain](params.prepare, params.lang)
    recipe = domain.recipe
    with atomic_dir(args.out or paths.CORPORA / args.domain) as tmp:
        stats = write_corpus(corpus, tmp, args.domain, recipe)
    print(json.dumps({k: stats[k] for k in ("domain", "pairs", "mono", "dropped")}, indent=1))


if __name__ == "__main__":
    run(main)
