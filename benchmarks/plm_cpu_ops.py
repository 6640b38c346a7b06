"""The AB-Net family's two CPU replacements of PyTorch ops, each against PyTorch's own side by side on this machine:
dropout from 16 random bits an element (vocabridge.plm.dropout; peer `torch.nn.functional.dropout`, a Bernoulli
draw an element) and the cross-entropy over the vocabulary a chunk of rows at a time (vocabridge.plm.cross_entropy;
peer `F.cross_entropy` on the logits made fp32).

Two tables: each op alone, forward and backward: dropout on the hidden states of a fine-tune batch ([48, 30, 256],
as the plm study's batches of 1,500 target pieces) in fp32 and bf16, the label-smoothed cross-entropy on its bf16
logits ([1344, 8000]); and a whole training update of every abnets entry of a profile (the trainers' own `_step` on
the batch `vocabridge estimate` times, in the precision `bf16: auto` picks), built three times on the same random
weights: all PyTorch (the peer), PyTorch's cross-entropy with our dropout, and ours. They take turns over `--rounds`
rounds and the fastest of each counts (other work on the machine only slows a round). Ratios: peer / ours (>1: ours
faster).

    python benchmarks/plm_cpu_ops.py [--profile plm] [--threads 1] [--rounds 5] [--only plm-nmt,abnet]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import torch
from torch import nn

from vocabridge.config import profile_params
from vocabridge.estimate import abnet_updater, typical_pieces
from vocabridge.nmt.precision import describe_cpu
from vocabridge.plm import abnet, sponsored
from vocabridge.plm.cross_entropy import cross_entropy
from vocabridge.plm.dropout import BitsDropout, bits_dropout

HERE = Path(__file__).resolve().parents[1]


def best_of(rounds: int, arms: dict) -> dict[str, float]:
    """The fastest of `rounds` turns of each arm (a callable), the arms taking turns."""
    for arm in arms.values():
        arm()  # the first call allocates and picks kernels
    best = dict.fromkeys(arms, float("inf"))
    for _ in range(rounds):
        for name, arm in arms.items():
            started = time.perf_counter()
            arm()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def dropout_arms(dtype: torch.dtype, p: float = 0.1) -> dict:
    x = torch.randn(48, 30, 256).to(dtype).requires_grad_()

    def run(dropout):
        def arm():
            for _ in range(20):
                dropout(x).sum().backward()
        return arm

    return {"peer": run(lambda t: nn.functional.dropout(t, p, True)), "ours": run(lambda t: bits_dropout(t, p))}


def torch_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.float(), labels, ignore_index=-100, label_smoothing=label_smoothing)


def cross_entropy_arms(smoothing: float = 0.1) -> dict:
    logits = (3 * torch.randn(1344, 8000)).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 8000, (1344,))

    def run(loss):
        def arm():
            for _ in range(5):
                loss(logits, labels, smoothing).backward()
        return arm

    return {"peer": run(torch_cross_entropy), "ours": run(cross_entropy)}


@contextlib.contextmanager
def pytorch_cross_entropy():
    """The family's losses on `F.cross_entropy` while inside (the peer's arm)."""
    modules = (abnet, sponsored)
    for module in modules:
        module.cross_entropy = torch_cross_entropy
    try:
        yield
    finally:
        for module in modules:
            module.cross_entropy = cross_entropy


def with_pytorch_cross_entropy(update):
    def arm():
        with pytorch_cross_entropy():
            update()
    return arm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="plm", help="profiles/NAME.yaml over params.yaml (default plm)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the flow gives a cell's stage one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated abnets entries (default: all)")
    args = ap.parse_args()
    params, _ = profile_params(HERE, args.profile)
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    cpu = describe_cpu()
    print(f"machine: {cpu['cpu']}, {cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}, "
          f"{args.threads} thread(s)")
    print("\n| op alone, forward + backward | PyTorch s | ours s | ratio |\n|---|---|---|---|")
    ops = [(f"dropout [48, 30, 256] {str(d).removeprefix('torch.')} x 20", dropout_arms(d))
           for d in (torch.float32, torch.bfloat16)]
    ops.append(("label-smoothed cross-entropy [1344, 8000] bfloat16 x 5", cross_entropy_arms()))
    for label, arms in ops:
        best = best_of(args.rounds, arms)
        print(f"| {label} | {best['peer']:.4f} | {best['ours']:.4f} | {best['peer'] / best['ours']:.2f} |")
    names = [n for n in params.abnets if not args.only or n in args.only.split(",")]
    vocab = max([s.vocab_size for s in params.plms.values()] or [8000])
    pieces = typical_pieces(params, "downstream", HERE)[0]
    print("\n| update | PyTorch s | our dropout only s | ours s | ratio | cross-entropy's ratio | dropout modules | "
          "precision |\n|---|---|---|---|---|---|---|---|")
    for name in names:
        arms, trainers = {}, {}
        for arm in ("peer", "dropout", "ours"):
            update, trainers[arm], _ = abnet_updater(params, vocab, pieces, device, params.abnets[name],
                                                     params.abnet.finetune)
            arms[arm] = update if arm == "ours" else with_pytorch_cross_entropy(update)
        swapped = [m for m in trainers["peer"].model.modules() if type(m) is BitsDropout]
        for module in swapped:
            module.__class__ = nn.Dropout
        best = best_of(args.rounds, arms)
        print(f"| {name} | {best['peer']:.3f} | {best['dropout']:.3f} | {best['ours']:.3f} | "
              f"{best['peer'] / best['ours']:.2f} | {best['dropout'] / best['ours']:.2f} | {len(swapped)} | "
              f"{trainers['ours'].precision.name} |", flush=True)


if __name__ == "__main__":
    main()
