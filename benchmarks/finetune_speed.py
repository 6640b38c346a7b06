"""The fine-tune stage, before and after: a baseline commit's code and this tree's, side by side.

For each cell (ROW-SEED, a row of the grid with one of its seeds), `python -m stages.finetune ROW SEED` of the
baseline commit and of this tree run at the same time (two fine-tunes at one thread each on two cores: how the
flow runs them), on the same initial model, the same training sample and the same params, each in a scratch
workspace of its own whose inputs link to the workspace's. Then `stages.evaluate ROW SEED` scores each result on
the test set (CTranslate2 beam search, as the pipeline does) and writes the cell's record. Prints, per cell and
in all: the stage's wall time (process start and imports included) and its parts (training updates, greedy dev
BLEU, dev loss, checkpoints), the speed-up, the selected update, dev and test BLEU of each, and whether the
weights are identical; then whether the cells rank the same.

    python benchmarks/finetune_speed.py --baseline REV [--cells ft-srcv-1,ft-tgtv-random-1,va-llm-1,fwet-1]
                                        [--workspace .] [--out bench/finetune_speed] [--baseline-params FILE]

Both commits must run the grid's stages (ROW SEED on the command line, per-cell folders). `--baseline-params`:
the params file of the baseline arm, for a commit whose (strict) params differ from the workspace's, e.g.
`git show REV:params.yaml > base.yaml` when the fine-tune sections agree.

The workspace must have run up to the cells' transfer stages (data/models/init/ROW/sSEED, with data/rows,
data/metrics/transfer and data/diagnostics, which the cell record takes in) and hold
data/corpora/{downstream,upstream}: e.g. after `dvc repro transfer@va-llm-1`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path

import pandas as pd

from vocabridge.grid import Cell
from vocabridge.nmt.precision import describe_cpu

HERE = Path(__file__).resolve().parents[1]
PARTS = ("train_seconds", "dev_bleu_seconds", "dev_loss_seconds", "checkpoint_seconds")
LINKED = ("data/corpora", "data/rows", "data/metrics/transfer", "data/diagnostics")  # the stages' inputs, shared


def export_tree(rev: str, out: Path) -> Path:
    """The baseline commit's files (git archive: no worktree bookkeeping left behind)."""
    archive = subprocess.run(["git", "-C", str(HERE), "archive", rev], check=True, capture_output=True).stdout
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out


def init_model(workspace: Path, cell: Cell) -> Path:
    return workspace / "data" / "models" / "init" / cell.path


def scratch(workspace: Path, out: Path, cells: list[Cell], params: Path | None = None) -> Path:
    """A workspace whose inputs are links to `workspace`'s and whose outputs are its own; params.yaml the
    workspace's unless `params` names another."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copy2(params or workspace / "params.yaml", out / "params.yaml")
    for folder in LINKED:
        if (workspace / folder).exists():
            (out / folder).parent.mkdir(parents=True, exist_ok=True)
            (out / folder).symlink_to((workspace / folder).resolve())
    for cell in cells:
        init_model(out, cell).parent.mkdir(parents=True, exist_ok=True)
        init_model(out, cell).symlink_to(init_model(workspace, cell).resolve())
    return out


def start(tree: Path, workdir: Path, stage: str, cell: Cell, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "VOCABRIDGE_THREADS"} | {"PYTHONPATH": str(tree)}
    return subprocess.Popen([sys.executable, "-m", f"stages.{stage}", cell.row, str(cell.seed)], cwd=workdir,
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def run_side_by_side(jobs: dict[str, tuple[Path, Path]], stage: str, cell: Cell, logs: Path) -> dict[str, float]:
    """Start `stage ROW SEED` in every (tree, workdir) at once; the wall seconds of each."""
    started = time.perf_counter()
    procs = {label: start(tree, work, stage, cell, logs / f"{label}-{stage}-{cell.name}.log")
             for label, (tree, work) in jobs.items()}
    seconds: dict[str, float] = {}
    while len(seconds) < len(procs):  # each one's own end, not the last one's
        for label, proc in procs.items():
            if label not in seconds and proc.poll() is not None:
                if proc.returncode:
                    sys.exit(f"{stage} {cell.name} ({label}) failed: see "
                             f"{logs / f'{label}-{stage}-{cell.name}.log'}")
                seconds[label] = time.perf_counter() - started
        time.sleep(0.1)
    return seconds


def weights_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the commit whose fine-tune stage is the reference")
    parser.add_argument("--cells", default="ft-srcv-1,ft-tgtv-random-1,va-llm-1,fwet-1",
                        help="cells ROW-SEED, comma-separated")
    parser.add_argument("--workspace", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=Path("bench/finetune_speed"))
    parser.add_argument("--baseline-params", type=Path, help="params.yaml of the baseline arm (default: the "
                        "workspace's)")
    args = parser.parse_args()
    try:
        cells = [Cell.from_name(name) for name in args.cells.split(",")]
    except ValueError as err:
        parser.error(f"--cells: {err}")
    missing = [c.name for c in cells if not init_model(args.workspace, c).is_dir()]
    if missing:
        sys.exit(f"{args.workspace}/data/models/init: no initial model for {missing} (run their transfer stages)")
    out = args.out.resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    trees = {"baseline": export_tree(args.baseline, out / "baseline-tree"), "current": HERE}
    params = {"baseline": args.baseline_params, "current": None}
    jobs = {label: (tree, scratch(args.workspace, out / label, cells, params[label]))
            for label, tree in trees.items()}
    records = []
    for cell in cells:
        wall = run_side_by_side(jobs, "finetune", cell, logs)
        run_side_by_side(jobs, "evaluate", cell, logs)
        for label, (_, work) in jobs.items():
            record = json.loads((work / "data" / "cells" / cell.path / "record.json").read_text())
            metrics = record["finetune"]
            records.append({"cell": cell.name, "code": label, "stage_seconds": round(wall[label], 1),
                            **{p: metrics.get(p) for p in PARTS}, "best_update": metrics["best_update"],
                            "dev_bleu": metrics["best_dev_bleu"], "test_bleu": record["metrics"]["bleu"],
                            "weights": weights_hash(work / "data" / "models" / "finetuned" / cell.path
                                                    / "model.safetensors")})
        done = pd.DataFrame(records)
        print(done[done.cell == cell.name].to_string(index=False), flush=True)
    table = pd.DataFrame(records)
    table.to_csv(out / "finetune_speed.csv", index=False)
    wide = table.pivot(index="cell", columns="code")
    summary = pd.DataFrame({
        "baseline_s": wide["stage_seconds"]["baseline"], "current_s": wide["stage_seconds"]["current"],
        "speedup": (wide["stage_seconds"]["baseline"] / wide["stage_seconds"]["current"]).round(2),
        "train_speedup": (wide["train_seconds"]["baseline"] / wide["train_seconds"]["current"]).round(2),
        "test_bleu_baseline": wide["test_bleu"]["baseline"], "test_bleu_current": wide["test_bleu"]["current"],
        "identical_weights": wide["weights"]["baseline"] == wide["weights"]["current"],
    }).loc[[c.name for c in cells]]
    cpu = describe_cpu() | {"threads": 1}
    print(f"\nfine-tune stage, {args.baseline} (baseline) vs this tree, two at once at 1 thread each; CPU: "
          f"{cpu['cpu']} ({cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}), "
          f"{cpu['cores']} cores")
    print(summary.to_string())
    total = summary.baseline_s.sum() / summary.current_s.sum()
    same_rank = list(summary.test_bleu_baseline.rank()) == list(summary.test_bleu_current.rank())
    print(f"all cells: {summary.baseline_s.sum():.0f} s -> {summary.current_s.sum():.0f} s, {total:.2f}x; "
          f"cells ranked the same by test BLEU: {'yes' if same_rank else 'no'}")


if __name__ == "__main__":
    main()
