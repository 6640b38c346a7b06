"""How good the +BT rows' synthetic sources are: the backward model of a workspace (`backtranslation.upstream`)
translates the first N downstream test sentences of the target language back into the source language, as the
backtranslate stage translates the monolingual text (same decoder, beam and batches), scored against the test
set's real sources with sacrebleu (BLEU, chrF). Also prints the share of back-translated pairs in a +BT row's
fine-tuning data, and the mean length of the synthetic and the real sources.

    python benchmarks/backtranslation_quality.py --workspace W [--sentences 500] [--out DIR]

A backward model trained on the upstream domain alone (Sato et al.'s setting) can be near zero BLEU on the
downstream domain at this scale: then the +BT rows fine-tune mostly on noise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import sacrebleu

from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.fileio import write_json
from vocabridge.grid import machine
from vocabridge.nmt.train import threads_of, use_compute
from vocabridge.nmt.translate import ModelTranslator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=Path("."))
    parser.add_argument("--sentences", type=int, default=500)
    parser.add_argument("--out", type=Path, help="write backtranslation_quality.json here")
    args = parser.parse_args()
    ws = args.workspace
    params = load_params(ws / "params.yaml")
    cfg, lang = params.backtranslation, params.lang
    corpora = ws / "data" / "corpora"
    targets = read_text_lines(corpora / "downstream" / f"test.{lang.tgt}")[: args.sentences]
    sources = read_text_lines(corpora / "downstream" / f"test.{lang.src}")[: args.sentences]
    translator = ModelTranslator(ws / "data" / "models" / "upstream" / cfg.upstream, params.evaluate.decoder,
                                 use_compute(params.compute), params.evaluate.bf16, threads_of(params.compute.threads))
    hyps, speed = translator(targets, beam=cfg.beam, batch_tokens=cfg.batch_tokens)
    stats = json.loads((corpora / "backtranslated" / "stats.json").read_text(encoding="utf-8"))
    synthetic = read_text_lines(corpora / "backtranslated" / f"train.{lang.src}")
    real = params.finetune.train_pairs or len(read_text_lines(corpora / "downstream" / f"train.{lang.src}"))
    words = [len(line.split()) for line in synthetic]
    result = {
        "backward_model": cfg.upstream, "direction": f"{lang.tgt}->{lang.src}", "sentences": len(targets),
        "bleu": round(sacrebleu.corpus_bleu(hyps, [sources]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hyps, [sources]).score, 2),
        "synthetic_pairs": stats.get("pairs", 0), "real_pairs": real,
        "synthetic_share": round(stats.get("pairs", 0) / (stats.get("pairs", 0) + real), 3),
        "synthetic_mean_words": round(sum(words) / max(1, len(words)), 2),
        "test_source_mean_words": round(sum(len(s.split()) for s in sources) / max(1, len(sources)), 2),
        "sample": [{"target": t, "back_translation": h, "real_source": s}
                   for t, h, s in list(zip(targets, hyps, sources, strict=True))[:5]],
        "decoding": {"beam": cfg.beam, "decoder": params.evaluate.decoder, **speed}, "machine": machine(),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "sample"}, indent=1))
    if args.out:
        write_json(args.out / "backtranslation_quality.json", result)


if __name__ == "__main__":
    main()
