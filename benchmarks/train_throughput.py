"""Training throughput: vocabridge's loop vs a plain transformers Seq2SeqTrainer, side by side.

Same model (the params' pretrain.arch), same upstream data, same number of updates, same threads. The peer
runs as a user would write it: fp32, DataCollatorForSeq2Seq padding random batches. Ours uses
length-bucketed token batches and bf16 autocast. Prints real (unpadded) target tokens per second for each,
the ratio, and the share of padded positions.

    python benchmarks/train_throughput.py [--updates 60] [--pairs 30000]

Needs data/corpora/upstream and data/spm/upstream (`dvc repro spm@upstream`) and the `bench` extra.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
from transformers import (
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
from vocabridge.nmt.train import Trainer, threads_of
from vocabridge.nmt.vocab import pair_vocabs


class StepClock(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter())


def ours(model, src, tgt, data, cfg, updates: int, warm: int) -> tuple[float, float]:
    trainer = Trainer(model, src, tgt, data, ([], []), cfg, Path("/tmp/vb-bench-ckpt"), {}, "bench")
    batches = make_batches(data, cfg.batch_tokens, cfg.seed, 0)[: updates + warm]
    model.train()
    tokens, started = 0, 0.0
    for i, idx in enumerate(batches):
        if i == warm:
            started = time.perf_counter()
        trainer._step(collate(data, idx, src.pad_id, tgt.pad_id, tgt.pad_id))
        if i >= warm:
            tokens += int(sum(len(data.tgt[j]) for j in idx))
    return tokens / (time.perf_counter() - started), padding_share(data, batches)


def peer(model_dir: Path, data, batch_size: int, updates: int, warm: int) -> tuple[float, float]:
    tok = MarianTokenizer.from_pretrained(model_dir)
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    rows = [{"input_ids": s.tolist(), "labels": t.tolist()} for s, t in zip(data.src, data.tgt, strict=True)]
    args = Seq2SeqTrainingArguments(output_dir="/tmp/vb-bench-peer", per_device_train_batch_size=batch_size,
                                    max_steps=updates + warm, learning_rate=7e-4, warmup_steps=100,
                                    label_smoothing_factor=0.1, max_grad_norm=1.0, report_to=[], save_strategy="no",
                                    logging_strategy="no", use_cpu=True, dataloader_num_workers=0, seed=1)
    clock = StepClock()
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=rows, callbacks=[clock],
                             data_collator=DataCollatorForSeq2Seq(tok, model=model))
    trainer.train()
    # The trainer shuffles with its seed; estimate its real tokens and padding on batches of the same size.
    rng = np.random.default_rng(1)
    order = rng.permutation(len(data))
    batches = [order[i * batch_size:(i + 1) * batch_size] for i in range(updates + warm)]
    tokens = sum(int(sum(len(data.tgt[j]) for j in b)) for b in batches[warm:])
    return tokens / (clock.times[-1] - clock.times[warm - 1]), padding_share(data, batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=30000)
    args = parser.parse_args()
    params = load_params()
    cfg, lang = params.pretrain.train, params.lang
    torch.set_num_threads(threads_of(params.compute.threads))
    src, tgt = pair_vocabs(Path(f"data/spm/upstream/{lang.src}.model"), Path(f"data/spm/upstream/{lang.tgt}.model"))
    corpus = Path("data/corpora/upstream")
    data = Parallel.encode(read_text_lines(corpus / f"train.{lang.src}")[: args.pairs],
                           read_text_lines(corpus / f"train.{lang.tgt}")[: args.pairs], src, tgt, cfg.max_len)
    batches = make_batches(data, cfg.batch_tokens, cfg.seed, 0)
    batch_size = round(np.mean([len(b) for b in batches]))  # the peer gets as many sentences per update
    model_dir = Path("/tmp/vb-bench-model")
    model = build_model(params.pretrain.arch, src, tgt, seed=1)
    save_model(model, src, tgt, model_dir)
    ours_tps, ours_pad = ours(model, src, tgt, data, cfg, args.updates, args.warm)
    peer_tps, peer_pad = peer(model_dir, data, batch_size, args.updates, args.warm)
    print(f"model d{params.pretrain.arch.d_model} {params.pretrain.arch.encoder_layers}+"
          f"{params.pretrain.arch.decoder_layers}, {args.updates} updates, {batch_size} sentences/update, "
          f"{torch.get_num_threads()} threads")
    print(f"vocabridge (bf16={cfg.bf16}, token buckets): {ours_tps:8.0f} target tokens/s, padding {ours_pad:.1%}")
    print(f"Seq2SeqTrainer (fp32, padding collator):     {peer_tps:8.0f} target tokens/s, padding {peer_pad:.1%}")
    print(f"ratio vocabridge / Seq2SeqTrainer: {ours_tps / peer_tps:.2f}x")


if __name__ == "__main__":
    main()
