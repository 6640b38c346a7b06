"""The grid's cells as the stages see them: where a cell's files live, and the command line of the per-row and
per-cell stages (ROW, or ROW SEED: DVC's matrix item ROW-SEED). Apart from stages/_paths.py so that the stages
outside the grid do not depend on vocabridge.grid."""

from pathlib import Path

from stages._paths import CELLS, ROWS
from vocabridge.grid import Cell


def row_file(row: str) -> Path:
    return ROWS / f"{row}.json"


def init_model(cell: Cell) -> Path:
    return Path("data/models/init") / cell.path


def finetuned(cell: Cell) -> Path:
    return Path("data/models/finetuned") / cell.path


def model_sha256(weights: Path, family: str) -> str:
    """A model's identity (what cells pair by, what a fine-tune's checkpoint belongs to): its weights file's
    sha256; an AB-Net directory's covers the BERTs beside it too (a model built alike on other BERTs has the
    same adapters file)."""
    from vocabridge.fileio import sha256_file, sha256_tree

    return sha256_tree(weights.parent) if family == "abnet" else sha256_file(weights)


def cell_record(cell: Cell) -> Path:
    return CELLS / cell.path


def per_cell(folder: Path, cell: Cell, suffix: str = "") -> Path:
    """A cell's file or folder under a per-stage folder: data/metrics/finetune/ROW/sSEED.json and the like."""
    return folder / cell.path.with_name(cell.path.name + suffix)


def _grid_stage_args(doc: str, argv: list[str], with_seed: bool):
    """ROW [SEED] [--params FILE], checked against params.yaml's `rows` (and `seeds`); returns (args, params)."""
    import argparse

    from vocabridge.config import load_params
    from vocabridge.errors import ConfigError

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("row", help="a row of params.yaml's `rows`")
    if with_seed:
        parser.add_argument("seed", type=int, help="one of params.yaml's `seeds`")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    if args.row not in params.rows:
        raise ConfigError(f"{args.params}: rows: no row '{args.row}' (rows: {', '.join(params.rows)})")
    if with_seed and args.seed not in params.seeds:
        raise ConfigError(f"{args.params}: seeds: no seed {args.seed} (seeds: {params.seeds})")
    return args, params


def row_stage_args(doc: str, argv: list[str]):
    """ROW [--params FILE]: a row of params.yaml's `rows`; returns (row, params)."""
    args, params = _grid_stage_args(doc, argv, with_seed=False)
    return args.row, params


def cell_stage_args(doc: str, argv: list[str]):
    """ROW SEED [--params FILE]: a cell of the grid (DVC's matrix item ROW-SEED); returns (cell, params)."""
    args, params = _grid_stage_args(doc, argv, with_seed=True)
    return Cell(args.row, args.seed), params
