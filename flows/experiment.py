"""Runs with a profile or param overrides happen in a DVC experiment, never in the workspace's own params.

`dvc exp run -S` would rewrite the workspace's params.yaml and run the whole DAG in one process; we need one
task per stage, so the flow clones the workspace's commit into `.dvc/tmp/flows/NAME` (DVC ignores
`.dvc/`), shares the workspace's DVC cache (stages whose inputs did not change are restored from DVC's
run cache, not rerun), applies the overrides with DVC's own `-S` parser, runs the stages there, and records
the result with `dvc exp save` + `dvc exp push` into the workspace's repository, where `dvc exp show` lists
it like any `dvc exp run`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from flows.dvcrun import dvc_env, dvc_ok, git
from flows.errors import FlowError


def experiment_name(text: str) -> str:
    """A name git accepts as a ref component."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return name or "flow"


def current_profile(workspace: Path) -> str | None:
    params = workspace / "params.yaml"
    if not params.is_file():
        return None
    return (yaml.safe_load(params.read_text(encoding="utf-8")) or {}).get("profile")


def apply_overrides(workspace: Path, overrides: list[str]) -> None:
    """`key=value` overrides, parsed exactly as `dvc exp run -S` parses them (`file:key=value` too).

    An ablation of the grid changes one row's knob (`rows.va-llm.k=5`: only that row's cells run again) or the
    seeds (`seeds=[1,2,3,4]`: only the new seed's cells run). A knob that a row of params.yaml leaves to its
    method's default is set all the same (`rows.va-llm.k=5` where the row is `va-llm: {}`, as in a profile's
    rows); a new row takes a `+`, as in DVC: `+rows.fvt={}`."""
    from dvc.exceptions import DvcException
    from dvc.utils.cli_parse import to_path_overrides
    from dvc.utils.hydra import apply_overrides as dvc_apply

    for path, items in to_path_overrides(overrides).items():
        target = workspace / path
        if not target.is_file():
            raise FlowError(f"override {items[0]!r}: {path} does not exist")
        for item in items:  # one at a time, so that the error names the bad one
            try:
                dvc_apply(str(target), [item])
            except DvcException as exc:
                cause = exc.__cause__ or exc
                unset, hint = _row_knob(target, item) if "Could not override" in str(cause) else (False, "")
                if unset:
                    dvc_apply(str(target), [f"++{item}"])  # add it: the row's knob, named as the method's
                    continue
                raise FlowError(f"override {item!r}: {str(cause).splitlines()[0]}{hint}") from exc


def _row_knob(params: Path, item: str) -> tuple[bool, str]:
    """Whether `item` sets a knob (a field of TransferMethod) that a row of `params` leaves out, as
    `rows.ROW.KNOB=VALUE`; else what to say of it."""
    import dataclasses

    from vocabridge.config import TransferMethod

    match = re.fullmatch(r"rows\.([^.=]+)\.([^.=]+)=.*", item, flags=re.S)
    if not match:
        return False, ""
    rows = (yaml.safe_load(params.read_text(encoding="utf-8")) or {}).get("rows") or {}
    row, knob = match.groups()
    fields = [f.name for f in dataclasses.fields(TransferMethod)]
    if not isinstance(rows.get(row), dict):
        return False, f" (no row '{row}' in {params.name}: `+rows.{row}={{}}` adds one)"
    if knob not in fields:
        return False, f" (a row has no knob '{knob}'; its knobs: {', '.join(fields)})"
    return knob not in rows[row], ""


def create(workspace: Path, name: str, profile: str | None, overrides: list[str]) -> Path:
    """A clone of the workspace's HEAD with its dvc.lock, sharing its DVC cache, with params changed."""
    exp = workspace / ".dvc" / "tmp" / "flows" / name
    if exp.exists():
        shutil.rmtree(exp)
    exp.parent.mkdir(parents=True, exist_ok=True)
    git(["clone", "--quiet", "--no-hardlinks", str(workspace), str(exp)], workspace)
    git(["checkout", "--quiet", "--detach", git(["rev-parse", "HEAD"], workspace).strip()], exp)
    for name_ in ("dvc.lock",):
        if (workspace / name_).is_file():
            shutil.copy2(workspace / name_, exp / name_)
    local = workspace / ".dvc" / "config.local"
    if local.is_file():
        shutil.copy2(local, exp / ".dvc" / "config.local")
    cache = dvc_ok(["cache", "dir"], workspace).strip()
    dvc_ok(["config", "--local", "cache.dir", str(Path(workspace, cache).resolve())], exp)
    if profile:
        proc = subprocess.run([sys.executable, "-m", "vocabridge.cli", "profile", profile], cwd=exp,
                              env=dvc_env(), capture_output=True, text=True)
        if proc.returncode:
            lines = (proc.stderr or proc.stdout).strip().splitlines() or ["failed"]
            raise FlowError(f"profile {profile!r}: {lines[-1]}")
    apply_overrides(exp, overrides)
    return exp


def save(exp: Path, name: str, stages: list[str], reports: list[str]) -> str:
    """Record the experiment (params, dvc.lock, metrics files of `stages`) in the workspace's repository."""
    include = [arg for path in reports if (exp / path).exists() for arg in ("-I", path)]
    dvc_ok(["exp", "save", "--force", "--name", name, *include, *stages], exp)
    dvc_ok(["exp", "push", "--force", "--no-cache", "origin", name], exp)
    return name


def remove(exp: Path) -> None:
    shutil.rmtree(exp, ignore_errors=True)
