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


def init_model(method: str) -> Path:
    return Path("data/models/init") / method


def finetuned(method: str) -> Path:
    return Path("data/models/finetuned") / method


def evaluation(method: str) -> Path:
    return Path("data/eval") / method


def stage_args(doc: str, argv: list[str], per_method: bool = False):
    """The command line of a stage: [METHOD] [--params FILE]; returns params, or (method, params)."""
    import argparse

    from vocabridge.config import load_params

    parser = argparse.ArgumentParser(description=doc)
    if per_method:
        parser.add_argument("method", help="a method name from params.yaml's `methods`")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    return (args.method, params) if per_method else params


def method_stage_args(doc: str, argv: list[str]):
    """The command line of a per-method stage: METHOD [--params FILE]; returns (method, params)."""
    return stage_args(doc, argv, per_method=True)
