"""Where the stages read and write: one place, so that dvc.yaml and the code agree."""

from pathlib import Path

CORPORA = Path("data/corpora")
SPM = Path("data/spm")
PRETRAINED = Path("data/models/pretrained")
CHECKPOINTS = Path("data/checkpoints")
PLOTS = Path("data/plots")
METRICS = Path("data/metrics")
REPORTS = Path("data/reports")


def init_model(method: str) -> Path:
    return Path("data/models/init") / method


def finetuned(method: str) -> Path:
    return Path("data/models/finetuned") / method


def evaluation(method: str) -> Path:
    return Path("data/eval") / method
