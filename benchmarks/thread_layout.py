"""Two one-thread fine-tunes side by side against one fine-tune with every core (how the flow schedules).

    python benchmarks/thread_layout.py                 # 40 updates each, after 5 warm-up updates
    python benchmarks/thread_layout.py --updates 80 --cores 2

Each worker is a separate process that fine-tunes the pipeline's pretrained model (data/models/upstream/base, run
`dvc repro pretrain` first) on the downstream training set with the default profile's `finetune.train`
settings (batches, bf16, Adam) with train_throughput.py's timed loop of vocabridge/nmt/train.py's step, and
reports its target tokens/s.
Layout A: one process with `--cores` threads. Layout B: `--cores` processes with one thread each, started
together. Printed: target tokens/s of each layout (B summed over its processes) and the ratio B / A: above 1,
running independent fine-tunes side by side with one thread each finishes the matrix sooner.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def worker(threads: int, updates: int, warm: int) -> dict:
    import torch

    from benchmarks.train_throughput import ours
    from vocabridge.config import load_params
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.nmt.data import Parallel
    from vocabridge.nmt.model import load_model

    torch.set_num_threads(threads)
    params = load_params()
    cfg, lang = params.finetune.train, params.lang
    model, src, tgt = load_model(Path("data/models/upstream/base"), "cpu")
    corpus = Path("data/corpora/downstream")
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}"),
                           src, tgt, cfg.max_len)
    tokens_per_s, _ = ours(model, src, tgt, data, cfg, updates, warm)  # train_throughput.py's timed loop
    return {"threads": threads, "tokens_per_s": tokens_per_s}


def run_layout(processes: int, threads: int, updates: int, warm: int) -> float:
    """Target tokens/s of `processes` workers started together, summed."""
    cmd = [sys.executable, __file__, "--worker", str(threads), "--updates", str(updates), "--warm", str(warm)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("a worker failed")
    return sum(r["tokens_per_s"] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.updates, args.warm)))
        return
    one = run_layout(1, args.cores, args.updates, args.warm)
    side = run_layout(args.cores, 1, args.updates, args.warm)
    print(f"fine-tuning the pretrained model, {args.updates} updates per process after {args.warm} warm-up")
    print(f"A: 1 process x {args.cores} threads:  {one:8.0f} target tokens/s")
    print(f"B: {args.cores} processes x 1 thread: {side:8.0f} target tokens/s (summed)")
    print(f"ratio B / A: {side / one:.2f}x")


if __name__ == "__main__":
    main()
