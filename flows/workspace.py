"""The workspace's commands: what a profile costs on this machine, and a finished run's results into the ledger.

They read dvc.yaml's DAG and ask DVC what is stale, so they live on the orchestration side; `vocabridge estimate`
and `vocabridge results` run them here, in the project's root, as a process of their own (the library imports
neither flows/ nor DVC).

    python -m flows.workspace estimate [--profile NAME] [--fresh] [--jobs N]
    python -m flows.workspace results [--out DIR] [--allow-stale] [--cells]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from vocabridge.cli import add_workspace_commands
from vocabridge.config import read_yaml
from vocabridge.entry import run
from vocabridge.errors import ConfigError


def estimate_command(root: Path, profile: str | None, fresh: bool, jobs: int) -> str:
    """flows/estimate.py's stage prices over dvc.yaml's DAG (read by DVC), as a table."""
    from flows.estimate import estimate, format_estimate

    current = read_yaml(root / "params.yaml").get("profile", "default")
    return format_estimate(estimate(root, profile, fresh, jobs), profile or current)


def results_command(root: Path, out: Path | None, allow_stale: bool, cells_only: bool = False) -> str:
    """The finished run's outputs into the ledger (vocabridge.ledger), refusing outputs that `dvc status` says are
    stale; `cells_only`: only the workspace's finished cells into OUT/cells (vocabridge.grid.commit_cells), with no
    `dvc status` check, so that a run still going loses at most the cells in progress. Returns what to print."""
    profile = read_yaml(root / "params.yaml").get("profile", "default")
    out = out or root / "results" / profile
    if cells_only:
        from vocabridge.grid import commit_cells
        from vocabridge.workspace import CELLS

        added = commit_cells(root / CELLS, out / "cells")
        names = ", ".join(cell.name for cell in added)
        return (f"{out / 'cells'}: {len(added)} cell(s) added or updated" + (f" ({names})" if added else "")
                + "; commit them to keep them")
    import torch

    from vocabridge.ledger import collect
    from vocabridge.nmt.precision import describe_cpu

    if not allow_stale:
        proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=root, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise ConfigError(f"dvc status failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        stale = sorted(json.loads(proc.stdout or "{}"))
        if stale:
            raise ConfigError(f"dvc status: {len(stale)} stage(s) not up to date ({', '.join(stale[:5])}"
                              f"{', ...' if len(stale) > 5 else ''}); finish the run, or --allow-stale (or "
                              f"--cells: commit the finished cells only)")
    cpu = describe_cpu()
    if torch.cuda.is_available():
        cpu["gpu"] = torch.cuda.get_device_name()
    return f"{collect(root, out, profile, cpu)}: the run's results, ready to commit"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="vocabridge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    add_workspace_commands(sub)
    args = parser.parse_args(argv)
    root = Path.cwd()
    if not (root / "dvc.yaml").is_file():
        raise ConfigError(f"{root}: not the project's root (no dvc.yaml); run `vocabridge {args.command}` there")
    if args.command == "estimate":
        print(estimate_command(root, args.profile, args.fresh, args.jobs))
    else:
        print(results_command(root, args.out, args.allow_stale, args.cells))


if __name__ == "__main__":
    run(main)
