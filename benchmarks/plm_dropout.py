"""The AB-Net family's dropout on a CPU (vocabridge.plm.dropout: 16 random bits an element) against PyTorch's own
(`torch.nn.functional.dropout`: a Bernoulli draw an element), side by side on this machine.

Two tables: the dropout alone, forward and backward, on the hidden states of a fine-tune batch ([48, 30, 256], as
the plm study's batches of 1,500 target pieces), in fp32 and bf16; and a whole training update of every abnets
entry of a profile (the trainers' own `_step` on the batch `vocabridge estimate` times, in the precision `bf16:
auto` picks), built twice on the same random weights, once with every dropout module put back to nn.Dropout (the
peer). They take turns over `--rounds` rounds and the fastest of each counts (other work on the machine only slows
a round). Ratios: peer / ours (>1: ours faster).

    python benchmarks/plm_dropout.py [--profile plm] [--threads 1] [--rounds 5] [--only plm-nmt,abnet]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

from vocabridge.config import profile_params
from vocabridge.estimate import abnet_updater, typical_pieces
from vocabridge.nmt.precision import describe_cpu
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


def op_arms(dtype: torch.dtype, p: float = 0.1) -> dict:
    x = torch.randn(48, 30, 256).to(dtype).requires_grad_()

    def run(dropout):
        def arm():
            for _ in range(20):
                dropout(x).sum().backward()
        return arm

    return {"nn.functional.dropout": run(lambda t: nn.functional.dropout(t, p, True)),
            "bits_dropout": run(lambda t: bits_dropout(t, p))}


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
    print("\n| dropout alone, 20 x forward + backward | nn.functional.dropout s | bits_dropout s | ratio |\n"
          "|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        best = best_of(args.rounds, op_arms(dtype))
        peer, ours = best["nn.functional.dropout"], best["bits_dropout"]
        print(f"| [48, 30, 256] {str(dtype).removeprefix('torch.')} | {peer:.4f} | {ours:.4f} | {peer / ours:.2f} |")
    names = [n for n in params.abnets if not args.only or n in args.only.split(",")]
    vocab = max([s.vocab_size for s in params.plms.values()] or [8000])
    pieces = typical_pieces(params, "downstream", HERE)[0]
    print("\n| update | nn.Dropout s | BitsDropout s | ratio | dropout modules | precision |\n"
          "|---|---|---|---|---|---|")
    for name in names:
        ours, trainer, _ = abnet_updater(params, vocab, pieces, device, params.abnets[name], params.abnet.finetune)
        peer, peer_trainer, _ = abnet_updater(params, vocab, pieces, device, params.abnets[name],
                                              params.abnet.finetune)
        swapped = [m for m in peer_trainer.model.modules() if type(m) is BitsDropout]
        for module in swapped:
            module.__class__ = nn.Dropout
        best = best_of(args.rounds, {"peer": peer, "ours": ours})
        print(f"| {name} | {best['peer']:.3f} | {best['ours']:.3f} | {best['peer'] / best['ours']:.2f} | "
              f"{len(swapped)} | {trainer.precision.name} |", flush=True)


if __name__ == "__main__":
    main()
