"""Parallel data as token ids, and token-based batches from length buckets (little padding)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from vocabridge.nmt.vocab import Vocab


@dataclass
class Parallel:
    src: list[np.ndarray]
    tgt: list[np.ndarray]

    @classmethod
    def encode(cls, src_lines: list[str], tgt_lines: list[str], src: Vocab, tgt: Vocab, max_len: int,
               alpha: float = 0.0, seed: int = 0, tgt_prefix: int | None = None) -> Parallel:
        """Encode both sides (alpha > 0: sampled segmentations, see Vocab.encode); pairs with a side longer than
        `max_len` tokens are skipped. `tgt_prefix`: a token id put before every target (a domain tag)."""
        s, t = src.encode(src_lines, alpha, seed), tgt.encode(tgt_lines, alpha, seed + 1)
        if tgt_prefix is not None:
            t = [np.insert(ids, 0, tgt_prefix) for ids in t]
        keep = [i for i in range(len(s)) if len(s[i]) <= max_len and len(t[i]) <= max_len]
        return cls([s[i] for i in keep], [t[i] for i in keep])

    def __len__(self) -> int:
        return len(self.src)

    def __add__(self, other: Parallel) -> Parallel:
        return Parallel(self.src + other.src, self.tgt + other.tgt)

    def target_tokens(self) -> int:
        return int(sum(len(t) for t in self.tgt))


def make_batches(data: Parallel, batch_tokens: int, seed: int, epoch: int, pool: int = 100_000) -> list[np.ndarray]:
    """Indices per batch: shuffle, sort pools by length, cut so that padded tokens stay under budget.

    The budget counts the padded size of the longer side (rows x longest sequence), so one batch costs
    about the same whatever its lengths. Batches come out in random order; the same (seed, epoch) gives the
    same batches, which is what makes resuming exact.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(data))
    src_len = np.fromiter((len(x) for x in data.src), dtype=np.int64, count=len(data))
    tgt_len = np.fromiter((len(x) for x in data.tgt), dtype=np.int64, count=len(data))
    batches = []
    for start in range(0, len(order), pool):
        chunk = order[start : start + pool]
        chunk = chunk[np.lexsort((src_len[chunk], tgt_len[chunk]))]
        batch: list[int] = []
        longest = 0
        for i in chunk:
            need = max(longest, src_len[i], tgt_len[i])
            if batch and need * (len(batch) + 1) > batch_tokens:
                batches.append(np.array(batch))
                batch, need = [], max(src_len[i], tgt_len[i])
            batch.append(i)
            longest = need
        if batch:
            batches.append(np.array(batch))
    rng.shuffle(batches)
    return batches


def collate(data: Parallel, idx: np.ndarray, src_pad: int, tgt_pad: int, start_id: int) -> dict[str, torch.Tensor]:
    """Padded tensors for one batch: encoder input, decoder input (shifted right), labels (-100 on pad)."""
    src = [data.src[i] for i in idx]
    tgt = [data.tgt[i] for i in idx]
    n, ls, lt = len(idx), max(map(len, src)), max(map(len, tgt))
    input_ids = np.full((n, ls), src_pad, dtype=np.int64)
    labels = np.full((n, lt), -100, dtype=np.int64)
    decoder_input_ids = np.full((n, lt), tgt_pad, dtype=np.int64)
    for row, (s, t) in enumerate(zip(src, tgt, strict=True)):
        input_ids[row, : len(s)] = s
        labels[row, : len(t)] = t
        decoder_input_ids[row, 0] = start_id
        decoder_input_ids[row, 1 : len(t)] = t[:-1]
    input_ids = torch.from_numpy(input_ids)
    return {"input_ids": input_ids, "attention_mask": (input_ids != src_pad).long(),
            "decoder_input_ids": torch.from_numpy(decoder_input_ids), "labels": torch.from_numpy(labels)}


def padding_share(data: Parallel, batches: list[np.ndarray]) -> float:
    """Share of padded positions over both sides of all batches."""
    real = padded = 0
    for idx in batches:
        s = [len(data.src[i]) for i in idx]
        t = [len(data.tgt[i]) for i in idx]
        real += sum(s) + sum(t)
        padded += len(idx) * (max(s) + max(t))
    return 1 - real / max(padded, 1)
