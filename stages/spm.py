"""Stage spm@DOMAIN: SentencePiece unigram models per language for one domain, into data/spm/DOMAIN.

upstream: the pretrained model's vocabulary (IT training text); downstream: the adapted vocabulary
(Bible training text plus monolingual text, never dev/test).
"""

from __future__ import annotations

import argparse

from vocabridge import workspace as paths
from vocabridge.config import LANGS, load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.fileio import atomic_dir, write_lines
from vocabridge.tokenizers import load_spm, train_all, vocab_lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("domain", choices=["upstream", "downstream"])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    corpus = paths.CORPORA / args.domain
    texts = {}
    for code in LANGS:
        texts[code] = read_text_lines(corpus / f"train.{code}")
        if (corpus / f"mono.{code}").is_file():
            texts[code] += read_text_lines(corpus / f"mono.{code}")
    cfg = getattr(params.spm, args.domain)
    models = train_all(texts, {c: getattr(cfg, c) for c in LANGS}, params.spm.seed, params.spm.threads,
                       f"spm.{args.domain}")
    with atomic_dir(paths.SPM / args.domain) as tmp:
        for code, blob in models.items():
            (tmp / f"{code}.model").write_bytes(blob)
            write_lines(tmp / f"{code}.vocab", vocab_lines(load_spm(tmp / f"{code}.model")))
    print(f"spm.{args.domain}: " + ", ".join(f"{c} {len(texts[c])} lines" for c in LANGS))


if __name__ == "__main__":
    run(main)
