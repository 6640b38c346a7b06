"""Resumable training checkpoints, shared by the NMT trainer and the embedding-generator trainer.

A checkpoint is the folder `last` of a run's checkpoint directory, written atomically: the module's weights
(model.safetensors), the optimizer's state and torch's RNG (optimizer.safetensors), and a JSON record that
carries the fingerprint of the configuration it belongs to. Safetensors and JSON only: nothing is unpickled.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from vocabridge.fileio import atomic_dir, recover_dir, write_json

FORMAT = 2  # the layout above; a folder of another layout is not resumed


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer's per-parameter state as flat tensors (`{param index}.{key}`)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return {f"{i}.{key}": value.detach().cpu().clone().contiguous()
            for i, param in enumerate(params) for key, value in optimizer.state[param].items()}


def restore_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], device) -> None:
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for i, param in enumerate(params):
        state = {key.split(".", 1)[1]: value.to(device) if key.endswith(("exp_avg", "exp_avg_sq")) else value
                 for key, value in tensors.items() if key.split(".", 1)[0] == str(i)}
        if state:
            optimizer.state[param] = state


def save_checkpoint(ckpt_dir: Path, module: torch.nn.Module, optimizer: torch.optim.Optimizer, record: dict) -> None:
    """Weights, optimizer state, torch's RNG state and `record` (which must hold the `fingerprint`) as
    ckpt_dir/last."""
    with atomic_dir(Path(ckpt_dir) / "last") as tmp:
        save_model(module, str(tmp / "model.safetensors"))
        save_file({"rng": torch.get_rng_state(), **optimizer_tensors(optimizer)}, str(tmp / "optimizer.safetensors"))
        write_json(tmp / "state.json", record | {"format": FORMAT})


def resumable(ckpt_dir: Path, fingerprint: dict) -> bool:
    """Whether ckpt_dir/last belongs to this configuration (what load_checkpoint would resume)."""
    recover_dir(Path(ckpt_dir) / "last")  # a kill in the middle of the last save moved it aside
    state = Path(ckpt_dir) / "last" / "state.json"
    if not state.is_file():
        return False
    record = json.loads(state.read_text(encoding="utf-8"))
    return record.get("fingerprint") == fingerprint and record.get("format") == FORMAT


def load_checkpoint(ckpt_dir: Path, fingerprint: dict, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    device) -> dict | None:
    """Restore ckpt_dir/last into `module` and `optimizer` (and torch's RNG) when it belongs to this
    configuration and return its record; None when there is none. The checkpoints of another configuration or
    layout are removed (all of ckpt_dir), so that training starts afresh instead of resuming something else."""
    folder = Path(ckpt_dir) / "last"
    recover_dir(folder)  # a kill between atomic_dir's two renames leaves the previous checkpoint set aside
    if not (folder / "state.json").is_file():
        return None
    record = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    if record.get("fingerprint") != fingerprint or record.get("format") != FORMAT:
        shutil.rmtree(ckpt_dir)
        return None
    load_model(module, str(folder / "model.safetensors"), device=str(device))
    tensors = load_file(str(folder / "optimizer.safetensors"))
    restore_optimizer(optimizer, {k: v for k, v in tensors.items() if k != "rng"}, device)
    torch.set_rng_state(tensors["rng"])
    return record
