"""Masked-LM pretraining (the plm stage's updates) on the C library's allocator against TCMalloc, side by side.

Each arm is a child process on one allocator (`$VOCABRIDGE_ALLOCATOR`: `system`, the installed TCMalloc and, where
installed, jemalloc) running `--updates` updates of the profile's BERT (plm.arch, plm.train's batches of sentences
and mask rate) on batches of varying lengths, as the stage's are: random pieces, each sentence as long as a line of
`--text` (words x 1.5 pieces, cut to plm.train.max_len; default the workspace's upstream English text, else 5-60
pieces). The arms take turns over `--rounds` rounds; per arm: seconds an update (the fastest round), the resident
memory after the first 20 updates and at the end (the largest round). Ratios: system / arm (>1: the arm faster).

    python benchmarks/allocator.py [--profile plm] [--updates 200] [--rounds 2] [--text FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def rss_mb() -> int:
    return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) // 1024


def lengths(text: Path | None, n: int, most: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    if text is not None and text.is_file():
        words = [len(line.split()) for line in text.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [min(most, max(3, round(1.5 * rng.choice(words)) + 2)) for _ in range(n)]
    return [rng.randint(5, min(60, most)) for _ in range(n)]


def child(args: argparse.Namespace) -> None:
    """One arm: the updates, then a JSON line of figures."""
    from vocabridge import allocator

    allocator.reexec()
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from vocabridge.config import profile_params
    from vocabridge.plm.bert import MlmTrainer

    params, _ = profile_params(HERE, args.profile)
    cfg, vocab = params.plm, max([s.vocab_size for s in params.plms.values()] or [8000])
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    arch = cfg.arch
    model = BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=arch.hidden, num_hidden_layers=arch.layers,
                                       num_attention_heads=arch.heads, intermediate_size=arch.ffn,
                                       max_position_embeddings=arch.max_positions))
    tokenizer = _tokenizer(vocab)
    sizes = lengths(args.text, args.updates * cfg.train.batch_sentences, cfg.train.max_len)
    rng = random.Random(2)
    ids = [[2] + [rng.randrange(5, vocab) for _ in range(n - 2)] + [3] for n in sizes]
    trainer = MlmTrainer(model, tokenizer, ids, ids[:8], cfg.train, Path(os.devnull), {}, "allocator", "cpu")
    plan = trainer.plan(0)
    started, warm = time.perf_counter(), None
    for step in range(args.updates):
        trainer._step(trainer.collate(plan[step], step)[0])
        if step == 19:
            warm, started = rss_mb(), time.perf_counter()
    seconds = (time.perf_counter() - started) / max(args.updates - 20, 1)
    print(json.dumps({"allocator": allocator.current(), "seconds": seconds, "rss_warm": warm, "rss_end": rss_mb()}))


def _tokenizer(vocab: int):
    """A BERT tokenizer of `vocab` pieces (the collator needs its special ids and size only)."""
    from tokenizers import Tokenizer, models

    from vocabridge.plm.bert import SPECIAL_TOKENS, _as_bert_tokenizer

    pieces = [(t, 0.0) for t in SPECIAL_TOKENS] + [(f"\u2581p{i}", -1.0) for i in range(vocab - len(SPECIAL_TOKENS))]
    unigram = Tokenizer(models.Unigram(pieces, unk_id=1))
    unigram.add_special_tokens(SPECIAL_TOKENS)
    return _as_bert_tokenizer(unigram, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="plm", help="profiles/NAME.yaml over params.yaml (default plm)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the flow gives a cell's stage one)")
    ap.add_argument("--updates", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--text", type=Path, default=HERE / "data" / "corpora" / "upstream" / "train.en",
                    help="sentence lengths from this text's lines (default the workspace's upstream English)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    from vocabridge.allocator import find, find_tcmalloc
    from vocabridge.nmt.precision import describe_cpu

    arms = {"system": "system", "tcmalloc": find_tcmalloc()}
    if jemalloc := find("libjemalloc.so.2"):
        arms["jemalloc"] = jemalloc
    missing = [name for name, path in arms.items() if path is None]
    for name in missing:
        print(f"{name}: not installed (Debian: apt install libtcmalloc-minimal4)")
        del arms[name]
    cpu = describe_cpu()
    print(f"machine: {cpu['cpu']}, {cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}, "
          f"{args.threads} thread(s); {args.updates} masked-LM updates of profile {args.profile}'s BERT a round, "
          f"{args.rounds} rounds; lengths from {args.text if args.text.is_file() else 'uniform 5-60 pieces'}")
    best: dict[str, dict] = {}
    command = [sys.executable, __file__, "--child", "--profile", args.profile, "--threads", str(args.threads),
               "--updates", str(args.updates), "--text", str(args.text)]
    for _ in range(args.rounds):
        for name, path in arms.items():
            env = dict(os.environ, VOCABRIDGE_ALLOCATOR=path)
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            row = json.loads(out.stdout.strip().splitlines()[-1])
            if row["allocator"] != name:
                raise SystemExit(f"error: arm {name} ran on {row['allocator']}")
            old = best.setdefault(name, row)
            best[name] = {"allocator": name, "seconds": min(old["seconds"], row["seconds"]),
                          "rss_warm": max(old["rss_warm"], row["rss_warm"]),
                          "rss_end": max(old["rss_end"], row["rss_end"])}
    base = best["system"]["seconds"]
    print("\n| allocator | s / update | RSS after 20 updates MB | RSS at the end MB | ratio |\n|---|---|---|---|---|")
    for name, row in best.items():
        print(f"| {name} | {row['seconds']:.3f} | {row['rss_warm']} | {row['rss_end']} | {base / row['seconds']:.2f} |")


if __name__ == "__main__":
    main()
