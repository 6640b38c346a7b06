"""Does bf16 change what the plm stage's BERT learns? fp32 and bf16 masked-LM pretraining side by side on real text.

Trains the plm study's BERT (plm.arch, plm.train's batch and learning rate) twice from the same weights with the
same batches and masks, once with `bf16: false` and once with `bf16: true`, on a workspace's German text (the
first 60,000 upstream lines, the downstream training and monolingual text; the downstream dev text held out, as
the plm stage does), and prints both held-out curves (loss, masked-piece accuracy) and both training times. One
thread, as the flow runs a plm stage beside another.

    python benchmarks/mlm_precision_curve.py --corpora WS/data/corpora [--profile plm] [--updates 800] [--lang de]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import torch

from vocabridge.config import PlmLanguage, profile_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.plm.bert import MlmTrainer, build_bert, encode_sentences, train_plm_tokenizer

HERE = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpora", type=Path, required=True, help="a workspace's data/corpora (prepared)")
    ap.add_argument("--profile", default="plm")
    ap.add_argument("--updates", type=int, default=800)
    ap.add_argument("--lang", default="de")
    ap.add_argument("--upstream-lines", type=int, default=60_000)
    ap.add_argument("--json", type=Path, help="also write both curves here")
    args = ap.parse_args()
    params, _ = profile_params(HERE, args.profile)
    torch.set_num_threads(1)
    corpora, code = args.corpora, args.lang
    text = read_text_lines(corpora / "upstream" / f"train.{code}")[: args.upstream_lines]
    for name in ("train", "mono"):
        if (corpora / "downstream" / f"{name}.{code}").is_file():
            text += read_text_lines(corpora / "downstream" / f"{name}.{code}")
    held_out = read_text_lines(corpora / "downstream" / f"dev.{code}")
    scratch = Path(tempfile.mkdtemp(prefix="mlm-precision-"))
    tokenizer = train_plm_tokenizer(text, params.plms.get(code, PlmLanguage()).vocab_size,
                                    scratch / "tokenizer")
    train = encode_sentences(tokenizer, text, params.plm.train.max_len)
    held = encode_sentences(tokenizer, held_out, params.plm.train.max_len)
    runs = {}
    for bf16 in (False, True):
        cfg = dataclasses.replace(params.plm.train, max_updates=args.updates, eval_every=max(args.updates // 4, 1),
                                  checkpoint_every=args.updates, patience=0, bf16=bf16,
                                  warmup=min(params.plm.train.warmup, max(args.updates // 4, 1)))
        trainer = MlmTrainer(build_bert(params.plm.arch, tokenizer, cfg.seed), tokenizer, train, held, cfg,
                             scratch / f"bf16-{bf16}", {"bf16": bf16}, f"plm {code} bf16={bf16}")
        state = trainer.train()
        runs[trainer.precision.name] = {"seconds": round(state.seconds, 1), "curve": state.curve}
    fp32, bf16 = runs.get("fp32"), runs.get("bf16")
    print(f"{len(train)} training sentences, {len(held)} held out; {args.updates} updates each, 1 thread")
    if bf16 is None:
        print("this machine computes bf16 as fp32 (no native bf16): one arm only")
        bf16 = fp32
    print("| update | fp32 held-out loss | fp32 accuracy | bf16 held-out loss | bf16 accuracy |\n|---|---|---|---|---|")
    for a, b in zip(fp32["curve"], bf16["curve"], strict=True):
        print(f"| {a['step']} | {a['held_out_loss']} | {a['held_out_accuracy']} | {b['held_out_loss']} "
              f"| {b['held_out_accuracy']} |")
    print(f"training seconds: fp32 {fp32['seconds']}, bf16 {bf16['seconds']} "
          f"({fp32['seconds'] / max(bf16['seconds'], 1e-9):.2f}x)")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
