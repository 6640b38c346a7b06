"""The command line of the per-row and per-cell stages: ROW [SEED] (DVC's matrix item ROW-SEED), checked against
params.yaml's rows and seeds."""

from __future__ import annotations

from vocabridge.grid import Cell


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


def cell_stage_args(doc: str, argv: list[str]) -> tuple[Cell, object]:
    """ROW SEED [--params FILE]: a cell of the grid (DVC's matrix item ROW-SEED); returns (cell, params)."""
    args, params = _grid_stage_args(doc, argv, with_seed=True)
    return Cell(args.row, args.seed), params
