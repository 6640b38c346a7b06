"""Decoding speed: transformers' generate (what evaluate uses) vs CTranslate2, same model, same beam.

    python benchmarks/decode_speed.py [--model data/models/upstream/base] [--corpus upstream] [--sentences 500]
                                      [--threads N] [--repeat N]

Prints sentences/s of each on the test set, the ratio, both BLEU scores and how many outputs are identical
(greedy: all; beam search: nearly all, see vocabridge/ct2.py).
Needs the `bench` extra (ctranslate2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.ct2 import translate_ct2
from vocabridge.evaluate import score
from vocabridge.nmt.model import load_model
from vocabridge.nmt.train import threads_of
from vocabridge.nmt.translate import translate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("data/models/upstream/base"))
    parser.add_argument("--corpus", default="upstream", help="data/corpora/CORPUS/test.* is translated")
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--threads", type=int, help="CPU threads of each decoder (default: compute.threads)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, alternating; the fastest counts")
    args = parser.parse_args()
    params = load_params()
    cfg, lang = params.evaluate, params.lang
    threads = args.threads or threads_of(params.compute.threads)
    torch.set_num_threads(threads)
    corpus = Path("data/corpora") / args.corpus
    sources = read_text_lines(corpus / f"test.{lang.src}")[: args.sentences]
    refs = read_text_lines(corpus / f"test.{lang.tgt}")[: args.sentences]
    model, src, tgt = load_model(args.model)
    common = {"beam": cfg.beam, "length_penalty": cfg.length_penalty, "batch_tokens": cfg.batch_tokens}
    hf_runs, ct_runs = [], []
    for _ in range(max(1, args.repeat)):  # alternating, so that both meet the same background load
        hf_runs.append(translate(model, src, tgt, sources, progress=False, **common))
        ct_runs.append(translate_ct2(args.model, sources, threads=threads, **common))
    (hf_hyps, hf), (ct_hyps, ct) = (max(runs, key=lambda r: r[1]["sentences_per_second"])
                                    for runs in (hf_runs, ct_runs))
    same = sum(a == b for a, b in zip(hf_hyps, ct_hyps, strict=True))
    print(f"{len(sources)} sentences of {corpus}, beam {cfg.beam}, {threads} threads, model {args.model}, "
          f"fastest of {max(1, args.repeat)}")
    print(f"transformers generate: {hf['sentences_per_second']:7.2f} sent/s  BLEU {score(hf_hyps, refs)['bleu']:.2f}")
    print(f"CTranslate2:           {ct['sentences_per_second']:7.2f} sent/s  BLEU {score(ct_hyps, refs)['bleu']:.2f}")
    print(f"ratio CTranslate2 / transformers: {ct['sentences_per_second'] / hf['sentences_per_second']:.2f}x; "
          f"identical outputs: {same}/{len(sources)}")


if __name__ == "__main__":
    main()
