"""The PLM study's training updates in fp32 and in bf16 autocast, side by side on this machine.

The masked-LM pretraining of the pipeline's own BERTs (plm.bert.MlmTrainer) and a fine-tune update of every
abnets entry of a profile (AB-Net, AB-Net-Enc, Mask-Predict, the PLM-sponsored model: plm.train's trainers) are
built twice on the same random weights and batch, once with `bf16: false` and once with `bf16: true`, and take
turns over `--rounds` rounds (the fastest of each counts: other work on the machine only slows a round). Prints
seconds per update of each and the ratio fp32 / bf16 (>1: bf16 faster), and the precision `bf16: auto` picks
here, which is what the stages use. The trainers are the stages' own (their `_step`), on the batch shapes that
`vocabridge estimate` times. A peer row times the masked-LM update with transformers' own loss (every position
through BERT's output layer, where the plm stage scores the masked pieces only): its seconds over the plm row's
are what scoring the masked pieces alone saves.

    python benchmarks/plm_precision.py [--profile plm] [--threads 1] [--rounds 3] [--only plm,plm-nmt]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import types
from pathlib import Path

import torch

from vocabridge.config import Params, profile_params
from vocabridge.estimate import abnet_updater, mlm_updater, typical_pieces
from vocabridge.nmt.precision import describe_cpu, resolve_bf16
from vocabridge.plm import bert
from vocabridge.training import Loss

HERE = Path(__file__).resolve().parents[1]


def every_position_loss(trainer: bert.MlmTrainer, batch: dict[str, torch.Tensor]) -> Loss:
    """The peer of the plm stage's loss: transformers' own, every position through BERT's output layer."""
    with torch.autocast(trainer.device.type, dtype=torch.bfloat16, enabled=trainer.precision.bf16):
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    return Loss(torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), batch["labels"].flatten()))


def updaters(params: Params, name: str, bf16: bool, pieces: int, device: torch.device):
    """The update of `name` (plm: the masked-LM update; plm-every-position: its peer; else an abnets entry) with
    bf16 forced on or off, and the precision it runs in."""
    vocab = max([s.vocab_size for s in params.plms.values()] or [8000])
    if name in ("plm", "plm-every-position"):
        update, trainer = mlm_updater(params.plm.arch, vocab, dataclasses.replace(params.plm.train, bf16=bf16),
                                      pieces, device)
        if name == "plm-every-position":
            trainer.loss = types.MethodType(every_position_loss, trainer)
        return update, trainer.precision.name
    cfg = dataclasses.replace(params.abnet.finetune, bf16=bf16)
    update, trainer, _ = abnet_updater(params, vocab, pieces, device, params.abnets[name], cfg)
    return update, trainer.precision.name


def timed(update) -> float:
    started = time.perf_counter()
    update()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="plm", help="profiles/NAME.yaml over params.yaml (default plm)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the flow gives a cell's stage one)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated: plm and/or abnets entries (default: all)")
    args = ap.parse_args()
    params, _ = profile_params(HERE, args.profile)
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    auto = resolve_bf16("auto", device)
    cpu = describe_cpu()
    print(f"machine: {cpu['cpu']}, {cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}, "
          f"{args.threads} thread(s); bf16: auto picks {auto.name} ({auto.reason})")
    if not cpu["bf16_native"]:
        print("this CPU has no native bf16: bf16: true falls back to fp32, so both arms are fp32")
    names = (["plm", "plm-every-position"] if params.plms else []) + list(params.abnets)
    if args.only:
        names = [n for n in names if n in args.only.split(",")]
    pieces = typical_pieces(params, "downstream", HERE)[0]
    print("| update | fp32 s | bf16 s | fp32 / bf16 | bf16 arm ran in |\n|---|---|---|---|---|")
    best: dict[str, tuple[float, float]] = {}
    for name in names:
        fp32, _ = updaters(params, name, False, pieces, device)
        bf16, ran = updaters(params, name, True, pieces, device)
        fp32(), bf16()  # the first updates allocate and pick kernels
        times = {"fp32": [], "bf16": []}
        for _ in range(args.rounds):
            times["fp32"].append(timed(fp32))
            times["bf16"].append(timed(bf16))
        a, b = min(times["fp32"]), min(times["bf16"])
        label = {"plm": "masked-LM (plm)", "plm-every-position": "masked-LM, every position scored (peer)"}.get(
            name, name)
        print(f"| {label} | {a:.3f} | {b:.3f} | {a / b:.2f} | {ran} |", flush=True)
        best[name] = a, b
    if {"plm", "plm-every-position"} <= set(best):
        (a, b), (peer_a, peer_b) = best["plm"], best["plm-every-position"]
        print(f"scoring the masked pieces only: {peer_a / a:.2f}x faster in fp32, {peer_b / b:.2f}x in bf16; "
              f"with bf16, {peer_a / b:.2f}x faster than transformers' loss in fp32")


if __name__ == "__main__":
    main()
