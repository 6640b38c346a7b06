"""The AB-Net family's CPU dropout (vocabridge.plm.dropout): PyTorch's dropout, drawn from fewer random bits."""

from __future__ import annotations

import torch
from torch import nn

from vocabridge.plm.dropout import BitsDropout, bits_dropout, use_bits_dropout


def test_each_element_is_dropped_with_probability_p_and_the_rest_scaled():
    torch.manual_seed(0)
    x = torch.ones(400_001)  # odd: the last int32 draw masks one element
    for p in (0.1, 0.3):
        y = bits_dropout(x, p)
        dropped = y == 0
        # both halves of each 32-bit draw (even and odd elements) drop at p: 200,000 Bernoulli draws each, 5 sigma
        for half in (dropped[0::2], dropped[1::2]):
            assert abs(half.float().mean().item() - p) < 5 * (p * (1 - p) / len(half)) ** 0.5
        assert torch.allclose(y[~dropped], torch.full_like(y[~dropped], 1 / (1 - p)))
        # neighbours are independent: no pair of halves drops together more often than chance
        pairs = (dropped[0:-1:2] & dropped[1::2]).float().mean().item()
        assert abs(pairs - p * p) < 5 * (p * p * (1 - p * p) / 200_000) ** 0.5


def test_the_draw_follows_torch_s_generator_and_the_gradient_is_the_mask():
    x = torch.randn(3, 7, 16, requires_grad=True)
    torch.manual_seed(5)
    first = bits_dropout(x, 0.1)
    torch.manual_seed(5)
    assert torch.equal(bits_dropout(x, 0.1), first)  # a checkpoint's RNG state replays a run's masks
    assert not torch.equal(bits_dropout(x, 0.1), first)
    first.sum().backward()
    assert torch.equal(x.grad, (first != 0).float() / 0.9)
    y = bits_dropout(torch.randn(4, 64, dtype=torch.bfloat16), 0.1)
    assert y.dtype == torch.bfloat16


def test_a_model_s_dropout_modules_are_swapped_on_a_cpu_only():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.2), nn.Sequential(nn.Dropout(0.1)))
    use_bits_dropout(model, "cuda")
    assert not any(isinstance(m, BitsDropout) for m in model.modules())
    use_bits_dropout(model, "cpu")
    swapped = [m for m in model.modules() if isinstance(m, BitsDropout)]
    assert [m.p for m in swapped] == [0.2, 0.1]
    x = torch.randn(2, 4)
    assert torch.equal(model.eval()(x), model[0](x))  # evaluation: no dropout
    assert (model.train()(torch.ones(1000, 4)) == 0).any()
