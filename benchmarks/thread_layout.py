"""Two one-thread fine-tunes side by side against one fine-tune with every core (how the flow schedules), and
against two fine-tunes with every core each (what two long stages side by side did before the flow shared the
cores among them).

    python benchmarks/thread_layout.py                 # 40 updates each, after 5 warm-up updates
    python benchmarks/thread_layout.py --updates 80 --cores 2

Each worker is a separate process that fine-tunes the pipeline's pretrained model (data/models/upstream/base, run
`dvc repro pretrain` first) on the downstream training set with the default profile's `finetune.train`
settings (batches, bf16, Adam) with train_throughput.py's timed loop of vocabridge/nmt/train.py's step, and
reports its target tokens/s.
Layout A: one process with `--cores` threads. Layout B: `--cores` processes with one thread each, started
together. Layout C: `--cores` processes with `--cores` threads each (more torch threads than cores). Layout D: one
process with `--cores` threads beside one with a single thread (a long stage given every core while a short stage
runs beside it). Printed: target tokens/s of each layout (B and C summed over their processes; D per process), the
ratio B / A (above 1: running independent fine-tunes side by side with one thread each finishes the matrix sooner),
B / C (above 1: stages side by side should share the cores rather than take them all each) and D's wide process
against A (below 1: the stage with every core is slowed by the one beside it).
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
    from vocabridge.nmt.precision import resolve_bf16

    torch.set_num_threads(threads)
    params = load_params()
    cfg, lang = params.finetune.train, params.lang
    model, src, tgt = load_model(Path("data/models/upstream/base"), "cpu")
    corpus = Path("data/corpora/downstream")
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}"),
                           src, tgt, cfg.max_len)
    bf16 = resolve_bf16(cfg.bf16, torch.device("cpu")).bf16  # as the fine-tune decides it on this CPU
    timed = ours(model, src, tgt, data, cfg, updates, warm, bf16)  # train_throughput.py's timed loop
    return {"threads": threads, "tokens_per_s": timed["tokens_per_s"]}


def run_workers(threads: list[int], updates: int, warm: int) -> list[float]:
    """Target tokens/s of each worker (one per entry of `threads`, its torch threads), all started together."""
    cmds = [[sys.executable, __file__, "--worker", str(t), "--updates", str(updates), "--warm", str(warm)]
            for t in threads]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for cmd in cmds]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("a worker failed")
    return [r["tokens_per_s"] for r in results]


def run_layout(processes: int, threads: int, updates: int, warm: int) -> float:
    """Target tokens/s of `processes` workers of `threads` threads started together, summed."""
    return sum(run_workers([threads] * processes, updates, warm))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--skip-oversubscribed", action="store_true", help="leave out layout C")
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
    if not args.skip_oversubscribed:
        over = run_layout(args.cores, args.cores, args.updates, args.warm)
        print(f"C: {args.cores} processes x {args.cores} threads: {over:8.0f} target tokens/s (summed)")
        print(f"ratio B / C: {side / over:.2f}x")
    wide, narrow = run_workers([args.cores, 1], args.updates, args.warm)
    print(f"D: 1 process x {args.cores} threads beside 1 x 1 thread: {wide:8.0f} + {narrow:.0f} target tokens/s")
    print(f"ratio D's {args.cores}-thread process / A: {wide / one:.2f}x")


if __name__ == "__main__":
    main()
