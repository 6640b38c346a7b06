"""Where the stages read and write (one place, so that dvc.yaml and the code agree), and their command line."""

from pathlib import Path

CORPORA = Path("data/corpora")
BACKTRANSLATED = CORPORA / "backtranslated"  # pseudo-parallel downstream pairs (the backtranslate stage)
SPM = Path("data/spm")
UPSTREAMS = Path("data/models/upstream")  # the upstream models: `base` (the pretrain stage) and `upstreams`
PRETRAINED = UPSTREAMS / "base"
CBOW = Path("data/cbow")
PLMS = Path("data/models/plm")  # one pretrained language model (BERT) per language: the plm stage
GENERATORS = Path("data/models/generator")  # one trained embedding generator per variant
CHECKPOINTS = Path("data/checkpoints")
PLOTS = Path("data/plots")
METRICS = Path("data/metrics")
REPORTS = Path("data/reports")
DIAGNOSTICS = Path("data/diagnostics")


def upstream(name: str) -> Path:
    return UPSTREAMS / name


def plm_outputs(code: str) -> tuple[Path, Path]:
    """The plm stage's masked-LM learning curve and metrics of language `code` (the report reads both)."""
    return PLOTS / "plm" / code / "curve.csv", METRICS / "plm" / f"{code}.json"


ROWS = Path("data/rows")  # one file per row: its knobs and the hashes of what it draws on (stage row@ROW)
CELLS = Path("data/cells")  # one folder per finished cell: its record (the evaluate stage)


def stage_args(doc: str, argv: list[str]):
    """The command line of a stage: [--params FILE]; returns params."""
    import argparse

    from vocabridge.config import load_params

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--params", default="params.yaml")
    return load_params(parser.parse_args(argv).params)
