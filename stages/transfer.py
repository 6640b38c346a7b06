"""Stage transfer@METHOD: build the method's initial model (vocabularies and embeddings) from the pretrained one."""

from __future__ import annotations

import argparse

from stages import _paths as paths
from vocabridge.config import load_params
from vocabridge.entry import run
from vocabridge.fileio import atomic_dir, write_json
from vocabridge.nmt.model import save_model
from vocabridge.transfer import Resources, get_method


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("method")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    method = get_method(args.method)
    lang = params.lang
    res = Resources(pretrained=paths.PRETRAINED,
                    downstream_spm={"src": paths.SPM / "downstream" / f"{lang.src}.model",
                                    "tgt": paths.SPM / "downstream" / f"{lang.tgt}.model"},
                    seed=params.finetune.train.seed)
    model, src, tgt, diagnostics = method.build(res)
    with atomic_dir(paths.init_model(args.method)) as tmp:
        save_model(model, src, tgt, tmp)
        write_json(tmp / "diagnostics.json", diagnostics | {"method": args.method, "vocab_size": {
            "src": len(src), "tgt": len(tgt)}, "vocabulary": method.vocabulary})


if __name__ == "__main__":
    run(main)
