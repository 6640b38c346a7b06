"""Where a fine-tune update's time goes: torch.profiler over a few of vocabridge's training updates.

The fine-tune stage's batch budget and precision (`finetune.train`), the default model (`pretrain.arch`) from
random weights, upstream training pairs, at $VOCABRIDGE_THREADS threads (1: as the flow runs fine-tunes). Prints
seconds per update and torch's operator table (self time), so one sees how much is matrix products (and how
near the CPU's matmul peak they run: benchmarks/train_throughput.py) and how much is everything else.

    VOCABRIDGE_THREADS=1 python benchmarks/profile_step.py [--updates 10] [--rows 30]

Needs data/corpora/upstream and data/spm/upstream (`dvc repro spm@upstream`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.nmt.data import Parallel, make_batches
from vocabridge.nmt.model import build_model
from vocabridge.nmt.precision import describe_cpu
from vocabridge.nmt.train import Trainer, threads_of
from vocabridge.nmt.vocab import pair_vocabs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--rows", type=int, default=30, help="operators shown")
    args = parser.parse_args()
    params = load_params()
    cfg, lang = params.finetune.train, params.lang
    threads = threads_of(params.compute.threads)
    torch.set_num_threads(threads)
    src, tgt = pair_vocabs(Path(f"data/spm/upstream/{lang.src}.model"), Path(f"data/spm/upstream/{lang.tgt}.model"))
    corpus = Path("data/corpora/upstream")
    pairs = 200 * (args.updates + args.warm)
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}")[:pairs],
                           read_text_lines(corpus / f"train.{lang.tgt}")[:pairs], src, tgt, cfg.max_len)
    model = build_model(params.pretrain.arch, src, tgt, seed=1)
    trainer = Trainer(model, src, tgt, data, ([], []), cfg, Path("/tmp/vb-profile-ckpt"), {}, "profile")
    batches = make_batches(data, cfg.batch_tokens, cfg.seed, 0)[: args.warm + args.updates]
    model.train()
    for idx in batches[: args.warm]:
        trainer._step(trainer.collate(idx, 0)[0])
    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for idx in batches[args.warm:]:
            trainer._step(trainer.collate(idx, 0)[0])
    seconds = (time.perf_counter() - started) / len(batches[args.warm:])
    cpu = describe_cpu()
    print(f"{cpu['cpu']} ({cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}), {threads} "
          f"threads, {trainer.precision.name}; batch_tokens {cfg.batch_tokens}; {seconds:.3f} s per update "
          f"(profiler on)")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
