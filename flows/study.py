"""A study's cells across sessions and machines: which cells of the grid its results folder holds already (the
flow's `--missing` runs only the others) and the finished cells copied into it as they come (`--collect`), so
that a session cut off keeps every cell it finished."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vocabridge.grid import Cell, CellRecord, commit_cells
from vocabridge.workspace import CELLS, CORPORA


def results_folder(workspace: Path, folder: str | None, profile: str) -> Path:
    """The study's results folder: `folder` (relative to the workspace), or the workspace's results/PROFILE."""
    return (workspace / folder).resolve() if folder else workspace / "results" / profile


@dataclass
class Committed:
    """The cells a results folder holds that pool under the workspace's params, and warnings for the cells still to
    run of a seed whose other cells ran on another upstream model than the workspace's."""

    cells: dict[Cell, CellRecord]
    warnings: list[str]


def committed(workspace: Path, results: Path, todo: Iterable[Cell]) -> Committed:
    """The cells of `results`/cells with today's knobs, condition and test set (`vocabridge.rows.gather`), and a
    warning per upstream model and seed where a cell of `todo` would run on this workspace's model while the
    seed's committed cells ran on another (they would not pair: the seed should run whole on one machine)."""
    from vocabridge.config import load_params
    from vocabridge.errors import VocabridgeError
    from vocabridge.families import family
    from vocabridge.rows import resources
    from vocabridge.transfer import get_method

    params = load_params(workspace / "params.yaml")
    found = pooling(workspace, results / "cells", params)
    theirs: dict[tuple[str, int], set[str]] = {}  # (upstream model, seed) -> the sha256s its committed cells ran on
    for r in found.values():
        theirs.setdefault(((r.data.get("upstream") or {}).get("name", ""), r.seed), set()).add(r.upstream_sha256)
    ours: dict[str, str | None] = {}  # upstream model -> this workspace's sha256 (None: not trained yet)
    split: dict[tuple[str, int], list[str]] = {}
    for cell in todo:
        if cell in found or cell.row not in params.rows:
            continue
        try:
            weights = workspace / resources(cell.row, params)["upstream"]
        except VocabridgeError:
            continue  # its row stage says what is wrong
        name = weights.parent.name
        if name not in ours:
            fam = family(get_method(cell.row, params.rows).family)
            ours[name] = fam.sha256(weights) if weights.is_file() else None
        if theirs.get((name, cell.seed)) and ours[name] not in theirs[name, cell.seed]:
            split.setdefault((name, cell.seed), []).append(cell.row)
    warnings = [f"seed {seed}: its committed cells ran on upstream model '{name}' "
                f"{', '.join(sorted(sha[:8] for sha in theirs[name, seed]))}, "
                + (f"this workspace's is {sha[:8]}" if (sha := ours[name]) else
                   "which this workspace has not trained yet")
                + f": {', '.join(rows)} will not pair with them (run a seed whole on one machine)"
                for (name, seed), rows in split.items()]
    return Committed(found, warnings)


def pooling(workspace: Path, cells: Path, params=None) -> dict[Cell, CellRecord]:
    """The records under `cells` that pool under the workspace's params: today's knobs, condition and test set
    (`vocabridge.rows.gather`)."""
    from vocabridge.config import load_params
    from vocabridge.corpora.user import read_text_lines
    from vocabridge.rows import gather

    params = params or load_params(workspace / "params.yaml")
    test = workspace / CORPORA / "downstream" / f"test.{params.lang.tgt}"
    refs = read_text_lines(test) if test.is_file() else None
    return {r.cell: r for r in gather(params, [cells], refs).records}


def collect(workspace: Path, results: Path) -> list[Cell]:
    """Copy the workspace's finished cells that pool under its params into `results`/cells (`vocabridge results
    --cells`); the cells copied. A record the workspace kept from before a change of params (other knobs or
    condition) stays out: it would replace the results folder's cell with one the report leaves out."""
    return commit_cells(workspace / CELLS, results / "cells", only=set(pooling(workspace, workspace / CELLS)))
