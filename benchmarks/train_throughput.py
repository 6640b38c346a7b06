"""Training throughput: vocabridge's loop vs transformers' Seq2SeqTrainer, side by side.

Same model (the params' pretrain.arch), same upstream data, same number of updates, same threads. Three loops:

- vocabridge: length-bucketed token batches (nmt.data), its precision (`pretrain.train.bf16`, auto);
- Seq2SeqTrainer as a user would write it first: random batches, DataCollatorForSeq2Seq padding, fp32;
- Seq2SeqTrainer with `train_sampling_strategy="group_by_length"` (transformers' own answer to padding) and the
  same precision as ours: the fair anchor.

For each: real (unpadded) target tokens per second, the share of padded positions, and the share of the
machine's measured matmul peak that the loop's arithmetic reaches (torch's FLOP counter on a sample of its own
batches, forward and backward, padding included; the peak from a large matmul at the same threads and precision).

    python benchmarks/train_throughput.py [--updates 60] [--pairs 30000]

Needs data/corpora/upstream and data/spm/upstream (`dvc repro spm@upstream`) and the `bench` extra.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import (
    AutoModelForSeq2SeqLM,
    DataCollatorForSeq2Seq,
    MarianTokenizer,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)

from vocabridge.config import load_params
from vocabridge.corpora.user import read_text_lines
from vocabridge.nmt.data import Parallel, collate, make_batches, padding_share
from vocabridge.nmt.model import build_model, save_model
from vocabridge.nmt.precision import describe_cpu, resolve_bf16
from vocabridge.nmt.train import Trainer, threads_of
from vocabridge.nmt.vocab import pair_vocabs

FLOP_SAMPLE = 3  # batches per loop whose arithmetic is counted


class StepClock(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter())


class CountingCollator:
    """The peer's collator, recording what each batch held: real and padded target tokens, and the batch."""

    def __init__(self, inner):
        self.inner, self.batches = inner, []

    def __call__(self, features):
        batch = self.inner(features)
        self.batches.append(batch)
        return batch


def matmul_peak(threads: int, bf16: bool, n: int = 2048, reps: int = 5) -> float:
    """FLOP/s of a large square matmul at `threads` in the loop's precision: what this CPU can reach."""
    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if bf16 else torch.float32
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    started = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - started)


def step_flops(model, batch: dict[str, torch.Tensor], bf16: bool) -> float:
    """FLOPs of one training step's forward and backward on `batch` (torch's counter: matmuls, attention)."""
    model.train()
    with FlopCounterMode(display=False) as counter:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        loss.backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def ours(model, src, tgt, data, cfg, updates: int, warm: int, bf16: bool) -> dict:
    trainer = Trainer(model, src, tgt, data, ([], []), cfg, Path("/tmp/vb-bench-ckpt"), {}, "bench")
    batches = make_batches(data, cfg.batch_tokens, cfg.seed, 0)[: updates + warm]
    model.train()
    tokens, started = 0, 0.0
    for i, idx in enumerate(batches):
        if i == warm:
            started = time.perf_counter()
        trainer._step(trainer.collate(idx, 0)[0])
        if i >= warm:
            tokens += int(sum(len(data.tgt[j]) for j in idx))
    seconds = time.perf_counter() - started
    flops = np.mean([step_flops(model, collate(data, idx, src.pad_id, tgt.pad_id, tgt.pad_id), bf16)
                     for idx in batches[warm: warm + FLOP_SAMPLE]])
    return {"tokens_per_s": tokens / seconds, "padding": padding_share(data, batches),
            "flops_per_s": flops * updates / seconds}


def peer(model_dir: Path, data, batch_size: int, updates: int, warm: int, grouped: bool, bf16: bool) -> dict:
    tok = MarianTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    rows = [{"input_ids": s.tolist(), "labels": t.tolist()} for s, t in zip(data.src, data.tgt, strict=True)]
    args = Seq2SeqTrainingArguments(
        output_dir="/tmp/vb-bench-peer", per_device_train_batch_size=batch_size, max_steps=updates + warm,
        learning_rate=7e-4, warmup_steps=100, label_smoothing_factor=0.1, max_grad_norm=1.0, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, dataloader_num_workers=0, seed=1, bf16=bf16,
        train_sampling_strategy="group_by_length" if grouped else "random")
    clock, collator = StepClock(), CountingCollator(DataCollatorForSeq2Seq(tok, model=model))
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=rows, callbacks=[clock], data_collator=collator)
    trainer.train()
    timed = collator.batches[warm: updates + warm]  # collated just before their step: the timed window's batches
    seconds = clock.times[-1] - clock.times[warm - 1]
    real = sum(int((b["labels"] != -100).sum()) for b in timed)
    padded = sum(b["labels"].numel() + b["input_ids"].numel() for b in timed)
    real_both = real + sum(int(b["attention_mask"].sum()) for b in timed)
    flops = np.mean([step_flops(model, dict(b), bf16) for b in timed[:FLOP_SAMPLE]])
    return {"tokens_per_s": real / seconds, "padding": 1 - real_both / padded, "flops_per_s": flops * updates / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=30000)
    args = parser.parse_args()
    params = load_params()
    cfg, lang = params.pretrain.train, params.lang
    threads = threads_of(params.compute.threads)
    torch.set_num_threads(threads)
    bf16 = resolve_bf16(cfg.bf16, torch.device("cpu")).bf16
    src, tgt = pair_vocabs(Path(f"data/spm/upstream/{lang.src}.model"), Path(f"data/spm/upstream/{lang.tgt}.model"))
    corpus = Path("data/corpora/upstream")
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}")[: args.pairs],
                           read_text_lines(corpus / f"train.{lang.tgt}")[: args.pairs], src, tgt, cfg.max_len)
    batches = make_batches(data, cfg.batch_tokens, cfg.seed, 0)
    batch_size = round(np.mean([len(b) for b in batches]))  # the peers get as many sentences per update
    model_dir = Path("/tmp/vb-bench-model")
    model = build_model(params.pretrain.arch, src, tgt, seed=1)
    save_model(model, src, tgt, model_dir)
    results = {
        f"vocabridge (token buckets, {'bf16' if bf16 else 'fp32'})":
            (ours(model, src, tgt, data, cfg, args.updates, args.warm, bf16), bf16),
        "Seq2SeqTrainer (random batches, fp32)":
            (peer(model_dir, data, batch_size, args.updates, args.warm, grouped=False, bf16=False), False),
        f"Seq2SeqTrainer (group_by_length, {'bf16' if bf16 else 'fp32'})":
            (peer(model_dir, data, batch_size, args.updates, args.warm, grouped=True, bf16=bf16), bf16),
    }
    peaks = {False: matmul_peak(threads, False)} | ({True: matmul_peak(threads, True)} if bf16 else {})
    cpu = describe_cpu()
    print(f"{cpu['cpu']} ({cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}), {threads} "
          f"threads; model d{params.pretrain.arch.d_model} {params.pretrain.arch.encoder_layers}+"
          f"{params.pretrain.arch.decoder_layers}, {args.updates} timed updates, {batch_size} sentences/update")
    print(f"matmul peak: fp32 {peaks[False] / 1e9:.0f} GFLOP/s" + (f", bf16 {peaks[True] / 1e9:.0f} GFLOP/s"
                                                                    if bf16 else ""))
    print("| loop | target tokens/s | padding | GFLOP/s | share of peak |")
    print("|---|---|---|---|---|")
    for name, (r, precision) in results.items():
        print(f"| {name} | {r['tokens_per_s']:.0f} | {r['padding']:.1%} | {r['flops_per_s'] / 1e9:.1f} | "
              f"{r['flops_per_s'] / peaks[precision]:.1%} |")
    first = next(iter(results.values()))[0]["tokens_per_s"]
    for name, (r, _) in list(results.items())[1:]:
        print(f"ratio vocabridge / {name}: {first / r['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
