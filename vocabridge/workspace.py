"""Where a workspace's files live: the one home of the data/ layout, which dvc.yaml's stages, the flows, the report
and the ledger all read (dvc.yaml names the same paths; tests/test_dvc_deps.py keeps them in step).

Paths are relative to the workspace's root (the folder that holds dvc.yaml); callers in another folder join them
to it. A cell's files sit under per-stage folders by row and seed (`Cell.path`: ROW/sSEED).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vocabridge.grid import Cell

DOWNLOADS = Path("data/downloads")  # the prepare stage's default cache of downloads (params' download_dir)
CORPORA = Path("data/corpora")
BACKTRANSLATED = CORPORA / "backtranslated"  # pseudo-parallel downstream pairs (back-translation)
SPM = Path("data/spm")
UPSTREAMS = Path("data/models/upstream")  # the upstream models: `base` (pretraining) and params' `upstreams`
PRETRAINED = UPSTREAMS / "base"
CBOW = Path("data/cbow")
PLMS = Path("data/models/plm")  # one pretrained language model (BERT) per language
GENERATORS = UPSTREAMS / "generators"  # one embedding generator per variant, trained on the frozen base model
CHECKPOINTS = Path("data/checkpoints")
PLOTS = Path("data/plots")
METRICS = Path("data/metrics")
REPORTS = Path("data/reports")
DIAGNOSTICS = Path("data/diagnostics")
RESULTS_REPORT = REPORTS / "results"  # the study's report, tables and plots
RUN_RECORD = REPORTS / "flow_run.json"  # the flow's record of a run: every stage's real and estimated seconds
ROWS = Path("data/rows")  # one file per row: its knobs and the hashes of what it draws on
CELLS = Path("data/cells")  # one folder per finished cell: its record


# Folders of UPSTREAMS that no `upstreams` or `abnets` entry may take as its name
RESERVED_UPSTREAMS = (PRETRAINED.name, GENERATORS.name)


def upstream(name: str) -> Path:
    return UPSTREAMS / name


def plm_outputs(code: str) -> tuple[Path, Path]:
    """The masked-LM learning curve and metrics of language `code`'s BERT (the report reads both)."""
    return PLOTS / "plm" / code / "curve.csv", METRICS / "plm" / f"{code}.json"


def abnet_outputs(name: str) -> tuple[Path, Path]:
    """The plots folder (train_loss.csv, dev_bleu.csv, dev_loss.csv) and metrics of abnet@NAME's upstream training
    (the report reads both)."""
    return PLOTS / "abnet" / name, METRICS / "abnet" / f"{name}.json"


def row_file(row: str) -> Path:
    return ROWS / f"{row}.json"


def init_model(cell: Cell) -> Path:
    return Path("data/models/init") / cell.path


def finetuned(cell: Cell) -> Path:
    return Path("data/models/finetuned") / cell.path


def cell_record(cell: Cell) -> Path:
    return CELLS / cell.path


def per_cell(folder: Path, cell: Cell, suffix: str = "") -> Path:
    """A cell's file or folder under a per-stage folder: data/metrics/finetune/ROW/sSEED.json and the like."""
    return folder / cell.path.with_name(cell.path.name + suffix)
