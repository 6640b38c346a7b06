"""Dropout on a CPU from 16 random bits an element.

PyTorch's CPU dropout draws a Bernoulli variable per element (`bernoulli_`), about 12% of a PLM-sponsored update on
2 AVX512 cores, more than most of its matrix products. Here one 32-bit draw of torch's generator (the same one, so a
checkpoint's RNG state still resumes a run exactly) masks two elements: its low 16 bits are uniform over the int16
range and its high 16 bits over [0, 2^15) (`random_` on int32 draws 31 bits), each compared with its own threshold,
so an element is dropped with probability p rounded to 1/32768. benchmarks/plm_dropout.py times it against
`torch.nn.functional.dropout`, forward and backward."""

from __future__ import annotations

import sys

import torch
from torch import nn


def thresholds(p: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """Per half of an int32 draw (in memory order), the smallest value that keeps its element."""
    low, high = round(p * 65536) - 32768, round(p * 32768)
    pair = (low, high) if sys.byteorder == "little" else (high, low)
    return torch.tensor(pair, dtype=torch.int16, device=device)


def bits_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """`x` with each element zeroed with probability p and the rest scaled by 1 / (1 - p) (inverted dropout)."""
    n = x.numel()
    halves = torch.empty((n + 1) // 2, dtype=torch.int32, device=x.device).random_().view(torch.int16).view(-1, 2)
    keep = (halves >= thresholds(p, x.device)).view(-1)[:n].view(x.shape)
    return x * keep.to(x.dtype).mul_(1 / (1 - p))


class BitsDropout(nn.Dropout):
    """nn.Dropout drawn by `bits_dropout`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        if self.p == 1:
            return x * 0
        return bits_dropout(x, self.p)


def use_bits_dropout(module: nn.Module, device: torch.device | str) -> nn.Module:
    """On a CPU, every nn.Dropout of `module` becomes a BitsDropout (same p, same place); elsewhere (a GPU's
    dropout is one fused kernel) nothing changes."""
    if torch.device(device).type == "cpu":
        for child in module.modules():
            if type(child) is nn.Dropout:
                child.__class__ = BitsDropout
    return module
