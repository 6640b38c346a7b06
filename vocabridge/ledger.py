"""The results ledger: what one profile run produced, kept in the repository under results/<profile>/.

A reader sees the report, the seeds table, the learning curves and every stage's metrics without a two-hour run,
and which code and machine made them: the `dvc.lock` and `params.yaml` of the run, the commit, the CPU (torch's
ISA level, native bf16 yes/no) or GPU, and the thread layout each training used. README and issue notes link
these files instead of copying numbers by hand.

The study's cell records (results/<profile>/cells, vocabridge.grid) are the one part that is never replaced: other
sessions' cells add up there, so a collection keeps them and adds the workspace's finished cells.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from vocabridge.errors import InputError
from vocabridge.fileio import atomic_dir, write_json
from vocabridge.grid import commit_cells
from vocabridge.workspace import CELLS, METRICS, RUN_RECORD
from vocabridge.workspace import PLOTS as CURVES
from vocabridge.workspace import RESULTS_REPORT as REPORT


def _git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def training_layout(metrics: Path) -> dict[str, dict]:
    """Device, threads and precision of every training stage, from its metrics (a cell's fine-tune under
    finetune/ROW/sSEED)."""
    layout = {}
    for path in [metrics / "pretrain.json", *sorted((metrics / "finetune").rglob("*.json"))]:
        if not path.is_file():
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("updates"):
            layout[path.relative_to(metrics).with_suffix("").as_posix()] = {
                key: data.get(key) for key in ("device", "threads", "precision", "train_seconds")}
    return layout


def machine_line(cpu: dict, layout: dict[str, dict], run: dict | None) -> str:
    """One line naming the hardware and thread layout (and the wall time, when the flow recorded it)."""
    threads = sorted({str(entry["threads"]) for entry in layout.values() if entry.get("threads") is not None})
    devices = sorted({str(entry["device"]) for entry in layout.values() if entry.get("device")}) or ["cpu"]
    precisions = sorted({str(entry["precision"]) for entry in layout.values() if entry.get("precision")})
    line = (f"{cpu['cpu']} ({cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}), "
            f"{cpu.get('cores', '?')} cores; device {'/'.join(devices)}; training threads {'/'.join(threads) or '?'}"
            f"; precision {'/'.join(precisions) or '?'}")
    if run:
        sittings = len(run.get("sittings") or [None])
        line += (f"; Prefect flow, {run['jobs']} stages at once, {run['wall_seconds'] / 60:.1f} min wall"
                 + (f" over {sittings} sittings" if sittings > 1 else "")
                 + (f" (estimated {run['expected_flow_seconds'] / 60:.1f})" if run.get("expected_flow_seconds")
                    else ""))
    return line


def collect(root: Path, out: Path, profile: str, cpu: dict) -> Path:
    """Copy the run's report, metrics, curves, dvc.lock and params.yaml from `root` into `out` (replaced whole,
    atomically, except what adds up across workspaces: `out/cells`, whose committed cells stay and gain the
    workspace's finished ones, and `metrics/` and `curves/`, whose committed files stay unless the workspace has
    its own of the same name: a study's earlier cells and upstream models keep their stages' records), with
    machine.json and a README.md saying what made them."""
    report = root / REPORT
    if not (report / "report.md").is_file():
        raise InputError(f"{report}/report.md: missing; run the pipeline (`dvc repro` or the flow) first")
    for name in ("dvc.lock", "params.yaml"):
        if not (root / name).is_file():
            raise InputError(f"{root / name}: missing; `vocabridge results` runs in the project's root")
    run = json.loads((root / RUN_RECORD).read_text(encoding="utf-8")) if (root / RUN_RECORD).is_file() else None
    layout = training_layout(root / METRICS)
    commit = _git(root, "rev-parse", "HEAD")
    dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    line = machine_line(cpu, layout, run)
    with atomic_dir(out) as tmp:
        if (out / "cells").is_dir():
            shutil.copytree(out / "cells", tmp / "cells")
        commit_cells(root / CELLS, tmp / "cells")
        shutil.copytree(report, tmp, dirs_exist_ok=True)
        for part, source in (("metrics", root / METRICS), ("curves", root / CURVES)):
            if (out / part).is_dir():  # earlier workspaces' stages (their cells, their upstream models) stay
                shutil.copytree(out / part, tmp / part)
            if source.is_dir():
                shutil.copytree(source, tmp / part, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.png"))
        for name in ("dvc.lock", "params.yaml"):
            shutil.copy2(root / name, tmp / name)
        if run:
            shutil.copy2(root / RUN_RECORD, tmp / "flow_run.json")
        write_json(tmp / "machine.json", {"cpu": cpu, "training": layout, "commit": commit,
                                          "uncommitted_changes": dirty, "collected": time.strftime("%Y-%m-%d")})
        (tmp / "README.md").write_text(
            f"# Profile `{profile}`\n\nThe outputs of the `{profile}` profile: `report.md` (the papers' tables, "
            f"one line per grid row, where the cells came from), the CSV tables beside it (`cells.csv`: one "
            f"line per cell), the plots, every stage's `metrics/` and `curves/` (kept and added to by each "
            f"collection, the last workspace's winning for a file both have), the `dvc.lock` and `params.yaml` "
            f"of the last run, and `cells/`: every finished cell's record and hypotheses, kept and added to by "
            f"each collection and `vocabridge results --cells`, which the report reads back.\n\n"
            f"- code: commit `{commit or 'unknown'}`{' with uncommitted changes' if dirty else ''}\n"
            f"- machine: {line}\n", encoding="utf-8")
    return out
