"""The estimator's seconds per update against the real trainer's on real batches, side by side.

`vocabridge estimate` prices training from `vocabridge.estimate.time_updates`: the Trainer's own `_step` on a
random batch of the real shape, timed a few times. This script runs, in one process on the same threads, (a)
that figure and (b) the same Trainer over consecutive real batches of the upstream corpus (the pretrain stage's
batches: `pretrain.train`, `pretrain.arch`, each batch its own shape), and prints both and their ratio. A ratio
far from 1 is what the estimate of a whole run inherits.

    python benchmarks/estimate_step.py [--updates 20] [--threads 2] [--stage pretrain|finetune]

Run it in a workspace with data/corpora/upstream and data/spm/upstream (`dvc repro spm@upstream`).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.estimate import time_updates, typical_pieces, vocab_size
from vocabridge.nmt.data import Parallel, make_batches
from vocabridge.nmt.model import build_model
from vocabridge.nmt.precision import describe_cpu
from vocabridge.nmt.train import Trainer
from vocabridge.nmt.vocab import pair_vocabs


def real_seconds(params, cfg, threads: int, updates: int, warm: int) -> tuple[float, float]:
    """Seconds per update and target tokens per update of the Trainer on the upstream corpus's own batches."""
    lang = params.lang
    torch.set_num_threads(threads)
    src, tgt = pair_vocabs(Path(f"data/spm/upstream/{lang.src}.model"), Path(f"data/spm/upstream/{lang.tgt}.model"))
    corpus = Path("data/corpora/upstream")
    pairs = 60 * cfg.batch_tokens // 10  # enough pairs for the batches timed, sampled over the whole file
    sources, targets = read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}")
    step = max(1, len(sources) // pairs)
    data = Parallel.encode(sources[::step], targets[::step], src, tgt, cfg.max_len)
    model = build_model(params.pretrain.arch, src, tgt, seed=1).train()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(model, src, tgt, data, ([], []), cfg, Path(tmp), {}, "bench")
        plan = make_batches(data, cfg.batch_tokens, cfg.seed, 0)[: warm + updates]
        for i, idx in enumerate(plan):
            if i == warm:
                started, tokens = time.perf_counter(), 0
            trainer._step(trainer.collate(idx, i)[0])
            if i >= warm:
                tokens += int(sum(len(data.tgt[j]) for j in idx))
        seconds = time.perf_counter() - started
    return seconds / updates, tokens / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=20)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--stage", choices=("pretrain", "finetune"), default="pretrain")
    args = parser.parse_args()
    params = load_params()
    cfg = getattr(params, args.stage).train
    pieces = typical_pieces(params, "upstream")
    estimated, precision = time_updates(params.pretrain.arch, vocab_size(params, "upstream"), pieces, cfg,
                                        args.threads, torch.device("cpu"))
    real, tokens = real_seconds(params, cfg, args.threads, args.updates, args.warm)
    cpu = describe_cpu()
    print(f"{cpu['cpu']} ({cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}), "
          f"{args.threads} thread(s), {precision}; {args.stage}.train batch_tokens {cfg.batch_tokens}; "
          f"typical pieces {pieces}")
    print(f"estimator (one random batch of the real shape): {estimated:.3f} s/update")
    print(f"real batches ({args.updates} consecutive, {tokens:.0f} target tokens each): {real:.3f} s/update")
    print(f"real / estimated: {real / estimated:.2f}")


if __name__ == "__main__":
    main()
