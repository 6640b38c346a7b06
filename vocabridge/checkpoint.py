"""Resumable training checkpoints, shared by every trainer of the one training loop (translation, masked LM,
embedding generator).

A checkpoint is the folder `last` of a run's checkpoint directory, written atomically: the module's weights
(model.safetensors), the optimizer's state and torch's RNG (optimizer.safetensors), and a JSON record that
carries the fingerprint of the configuration it belongs to. Safetensors and JSON only: nothing is unpickled.

The update budget (`max_updates`, wherever the fingerprint holds it) is no part of what a checkpoint belongs to:
it says where a run ends, not what it does on the way (no schedule here depends on it), so a run that reached its
budget goes on when the budget is raised (`Trainer._resume` says when that is exact).
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


BUDGET = "max_updates"


def same_run(saved, fingerprint, replayed: tuple[str, ...] = ()) -> bool:
    """Whether two fingerprints name one run: equal but for their update budgets, the settings in `replayed` (the
    loop re-decides from the run's record what they decide) and settings left unset (None: a setting added to the
    code later leaves the runs before it as they were)."""
    ignored = {BUDGET, *replayed}

    def run(part):
        if isinstance(part, dict):
            return {k: run(v) for k, v in part.items() if k not in ignored and v is not None}
        return [run(v) for v in part] if isinstance(part, list | tuple) else part

    return run(saved) == run(json.loads(json.dumps(fingerprint, default=str)))


def checkpoint_record(ckpt_dir: Path) -> dict | None:
    """The record of ckpt_dir/last (a kill in the middle of its save recovered first); None when there is none."""
    recover_dir(Path(ckpt_dir) / "last")
    state = Path(ckpt_dir) / "last" / "state.json"
    return json.loads(state.read_text(encoding="utf-8")) if state.is_file() else None


def resumable(ckpt_dir: Path, fingerprint: dict) -> bool:
    """Whether ckpt_dir/last belongs to this configuration (what load_checkpoint would resume)."""
    record = checkpoint_record(ckpt_dir)
    return record is not None and same_run(record.get("fingerprint"), fingerprint) and record.get("format") == FORMAT


def load_checkpoint(ckpt_dir: Path, fingerprint: dict, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    device, replayed: tuple[str, ...] = (), record: dict | None = None) -> dict | None:
    """Restore ckpt_dir/last into `module` and `optimizer` (and torch's RNG) when it belongs to this
    configuration and return its record (`record`: checkpoint_record's, when the caller has read it); None when
    there is none. The checkpoints of another configuration or layout are removed (all of ckpt_dir), so that
    training starts afresh instead of resuming something else."""
    folder = Path(ckpt_dir) / "last"
    if record is None:
        record = checkpoint_record(ckpt_dir)  # a kill between atomic_dir's two renames set the previous one aside
    if record is None:
        return None
    if not same_run(record.get("fingerprint"), fingerprint, replayed) or record.get("format") != FORMAT:
        shutil.rmtree(ckpt_dir)
        return None
    load_model(module, str(folder / "model.safetensors"), device=str(device))
    tensors = load_file(str(folder / "optimizer.safetensors"))
    restore_optimizer(optimizer, {k: v for k, v in tensors.items() if k != "rng"}, device)
    torch.set_rng_state(tensors["rng"])
    return record
