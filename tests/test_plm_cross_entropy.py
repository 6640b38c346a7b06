"""The AB-Net family's CPU cross-entropy (vocabridge.plm.cross_entropy): PyTorch's loss, a chunk of rows at a time."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vocabridge.plm import cross_entropy as ce
from vocabridge.plm.cross_entropy import chunked_cross_entropy, cross_entropy


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of a few rows (the last one partial), so that small inputs make several."""
    monkeypatch.setattr(ce, "CHUNK_BYTES", 7 * 300 * 4)


def torch_loss(logits: torch.Tensor, labels: torch.Tensor, smoothing: float) -> torch.Tensor:
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, label_smoothing=smoothing)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loss_and_gradient_are_pytorch_s(dtype, smoothing):
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(50, 300, generator=gen)).to(dtype)
    labels = torch.randint(0, 300, (50,), generator=gen)
    labels[::6] = -100  # padding: no loss, no gradient
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = chunked_cross_entropy(ours, labels, smoothing)
    reference = torch_loss(theirs, labels, smoothing)
    loss.backward(), reference.backward()
    assert loss.grad_fn.name() == "_ChunkedCrossEntropyBackward"
    assert loss.dtype == torch.float32 and ours.grad.dtype == dtype
    assert abs(loss.item() - reference.item()) < 1e-5 * reference.item()
    tolerance = 1e-6 if dtype == torch.float32 else 2**-8 * theirs.grad.abs().max().item()  # one bf16 rounding
    assert (ours.grad.float() - theirs.grad.float()).abs().max().item() <= tolerance
    assert ours.grad[::6].abs().max().item() == 0


def test_the_gradient_is_exact_in_float64():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(9, 150, dtype=torch.float64, generator=gen, requires_grad=True)  # 2 chunks of rows
    labels = torch.tensor([0, 3, -100, 149, 5, 5, -100, 1, 2])
    assert torch.autograd.gradcheck(lambda x: chunked_cross_entropy(x, labels, 0.1), (logits,))


def test_under_autocast_and_without_gradients_the_loss_is_the_same():
    gen = torch.Generator().manual_seed(2)
    weight = (torch.randn(64, 500, generator=gen) / 8).requires_grad_()
    states, labels = torch.randn(40, 64, generator=gen), torch.randint(0, 500, (40,), generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = states @ weight  # bf16, as a family's output layer under the trainer's autocast
        assert logits.dtype == torch.bfloat16
        inside = cross_entropy(logits, labels, 0.1)
    assert inside.grad_fn.name() == "_ChunkedCrossEntropyBackward"
    with torch.no_grad():
        outside = cross_entropy(logits, labels, 0.1)
    assert inside.item() == outside.item()
    assert abs(inside.item() - torch_loss(logits, labels, 0.1).item()) < 1e-5 * inside.item()


def test_16_bit_logits_larger_than_a_chunk_take_the_chunked_path_and_others_pytorch_s():
    labels = torch.tensor([1, 2, 3, 4, 5, -100, 7, 8])
    for rows, dtype, chunked in ((8, torch.bfloat16, True), (8, torch.float16, True), (6, torch.bfloat16, False),
                                 (8, torch.float32, False)):
        logits = torch.randn(rows, 300, dtype=dtype, requires_grad=True)
        loss = cross_entropy(logits, labels[:rows], 0.1)
        assert (loss.grad_fn.name() == "_ChunkedCrossEntropyBackward") == chunked, (rows, dtype)
        if not chunked:
            assert torch.equal(loss, torch_loss(logits, labels[:rows], 0.1))
