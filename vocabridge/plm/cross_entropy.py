"""Cross-entropy over a vocabulary on a CPU, a chunk of rows at a time.

`F.cross_entropy(logits.float(), ...)` on bf16 logits makes the fp32 copy, a log-softmax, label smoothing's second
term and, backward, their gradients, a zero-filled tensor and the cast back to bf16: seven passes over a [tokens,
vocabulary] tensor larger than any cache, about a tenth of a PLM-sponsored update on 2 AVX512 cores. Here the
forward keeps, per row, the log-sum-exp, the gold logit and the mean logit, reading the logits a chunk of rows at a
time in fp32 (a chunk fits in the cache); the backward writes softmax minus the smoothed target straight into the
logits' dtype. The same loss as PyTorch's (`mean` over the labelled rows, labels -100 ignored, `label_smoothing` as
PyTorch defines it), to float rounding. benchmarks/plm_cpu_ops.py times it against PyTorch's, alone and in each
family's update."""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100
CHUNK_BYTES = 1 << 21  # the fp32 rows one pass holds: within a core's share of the cache


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy of `logits` ([rows, vocabulary], any float dtype) against `labels` ([rows], -100:
    ignored), computed at least in fp32: by chunks of rows (`chunked_cross_entropy`) for 16-bit logits on a CPU,
    by PyTorch's own elsewhere: off a CPU (a GPU fuses it), for fp32 logits (no copy to save: PyTorch's was as
    fast or faster at 700 rows of 8,000) and where the fp32 copy fits in one chunk (the cache holds it)."""
    chunked = (logits.device.type == "cpu" and logits.dtype in (torch.bfloat16, torch.float16)
               and logits.numel() * 4 > CHUNK_BYTES)
    if chunked:
        return chunked_cross_entropy(logits, labels, label_smoothing)
    return F.cross_entropy(logits.float(), labels, ignore_index=IGNORE, label_smoothing=label_smoothing)


def chunked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """The same loss a chunk of rows at a time in the cache, in fp32 at least (float64 stays float64), its
    gradient in the logits' dtype (0 where no row is labelled, where PyTorch's is NaN)."""
    return _ChunkedCrossEntropy.apply(logits, labels, label_smoothing)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


class _ChunkedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
        rows, vocab = logits.shape
        dtype = _compute_dtype(logits.dtype)
        chunk = max(1, CHUNK_BYTES // (vocab * dtype.itemsize))
        kept = labels != IGNORE
        gold_index = labels.masked_fill(~kept, 0)
        lse = torch.empty(rows, dtype=dtype)
        mean = torch.empty(rows, dtype=dtype) if smoothing else None
        with torch.autocast("cpu", enabled=False):
            for start in range(0, rows, chunk):
                x = logits[start : start + chunk].to(dtype)
                lse[start : start + chunk] = torch.logsumexp(x, -1)
                if mean is not None:
                    mean[start : start + chunk] = x.mean(-1)
            gold = logits.gather(1, gold_index[:, None])[:, 0].to(dtype)
            per_row = (1 - smoothing) * (lse - gold)
            if mean is not None:
                per_row += smoothing * (lse - mean)
            count = kept.sum()
            loss = (per_row * kept).sum() / count.clamp(min=1)
        ctx.save_for_backward(logits, gold_index, kept, lse)
        ctx.smoothing, ctx.chunk, ctx.count = smoothing, chunk, count
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        logits, gold_index, kept, lse = ctx.saved_tensors
        smoothing, chunk = ctx.smoothing, ctx.chunk
        vocab = logits.shape[1]
        grad = torch.empty_like(logits)
        with torch.autocast("cpu", enabled=False):
            scale = kept.to(lse.dtype) * (grad_loss.to(lse.dtype) / ctx.count.clamp(min=1))
            for start in range(0, logits.shape[0], chunk):
                end = start + chunk
                # d loss / d x = scale * (softmax(x) - (1 - s) onehot(gold) - s / V)
                p = torch.exp(logits[start:end].to(lse.dtype) - lse[start:end, None])
                if smoothing:
                    p.sub_(smoothing / vocab)
                p.scatter_add_(1, gold_index[start:end, None], p.new_full((len(p), 1), smoothing - 1))
                grad[start:end] = p.mul_(scale[start:end, None])
        return grad, None, None
