"""Stage cbow: CBOW vectors of the downstream text (train + mono, never dev/test) per language.

Segmented with the downstream SentencePiece models; dimension = the pretrained model's embedding dimension.
"""

from __future__ import annotations

import json

from stages._args import stage_args
from vocabridge import workspace as paths
from vocabridge.cbow import domain_text, save_vectors, train_cbow
from vocabridge.entry import run
from vocabridge.fileio import atomic_dir, write_json
from vocabridge.tokenizers import load_spm


def main(argv: list[str]) -> None:
    params = stage_args(__doc__, argv)
    dim = json.loads((paths.PRETRAINED / "config.json").read_text())["d_model"]
    corpus = paths.CORPORA / "downstream"
    stats = {}
    with atomic_dir(paths.CBOW) as tmp:
        for lang in (params.lang.src, params.lang.tgt):
            lines = domain_text(corpus, lang)
            kv = train_cbow(lines, load_spm(paths.SPM / "downstream" / f"{lang}.model"), dim, params.cbow, lang)
            save_vectors(kv, tmp / f"{lang}.bin")
            stats[lang] = {"lines": len(lines), "tokens": len(kv), "dim": dim}
        write_json(tmp / "stats.json", stats)
    print(stats)


if __name__ == "__main__":
    run(main)
