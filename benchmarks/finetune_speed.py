"""The fine-tune stage, before and after: a baseline commit's code and this tree's, side by side.

For each row, `python -m stages.finetune ROW` of the baseline commit and of this tree run at the same time (two
fine-tunes at one thread each on two cores: how the flow runs them), on the same initial model, the same
training sample and the same params, each in a scratch workspace of its own whose inputs link to the
workspace's. Then `stages.evaluate ROW` scores each result on the test set (CTranslate2 beam search, as the
pipeline does). Prints, per row and in all: the stage's wall time (process start and imports included) and its
parts (training updates, greedy dev BLEU, dev loss, checkpoints), the speed-up, the selected update, dev and
test BLEU of each, and whether the weights are identical; then whether the rows rank the same.

    python benchmarks/finetune_speed.py --baseline REV [--rows ft-srcv,ft-tgtv-random,va-llm,fwet]
                                        [--workspace .] [--out bench/finetune_speed] [--baseline-params FILE]

`--baseline-params`: the params file of the baseline arm, for a commit whose (strict) params differ from the
workspace's, e.g. `git show REV:params.yaml > base.yaml` when the fine-tune sections agree.

The workspace must have run up to the rows' transfer stages (data/models/init/ROW) and hold
data/corpora/{downstream,upstream}: e.g. after `dvc repro transfer@va-llm`.
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

from vocabridge.nmt.precision import describe_cpu

HERE = Path(__file__).resolve().parents[1]
PARTS = ("train_seconds", "dev_bleu_seconds", "dev_loss_seconds", "checkpoint_seconds")


def export_tree(rev: str, out: Path) -> Path:
    """The baseline commit's files (git archive: no worktree bookkeeping left behind)."""
    archive = subprocess.run(["git", "-C", str(HERE), "archive", rev], check=True, capture_output=True).stdout
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out


def scratch(workspace: Path, out: Path, rows: list[str], params: Path | None = None) -> Path:
    """A workspace whose inputs are links to `workspace`'s and whose outputs are its own; params.yaml the
    workspace's unless `params` names another."""
    shutil.rmtree(out, ignore_errors=True)
    (out / "data" / "models" / "init").mkdir(parents=True)
    shutil.copy2(params or workspace / "params.yaml", out / "params.yaml")
    (out / "data" / "corpora").symlink_to((workspace / "data" / "corpora").resolve())
    for row in rows:
        (out / "data" / "models" / "init" / row).symlink_to((workspace / "data" / "models" / "init" / row).resolve())
    return out


def start(tree: Path, workdir: Path, stage: str, row: str, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "VOCABRIDGE_THREADS"} | {"PYTHONPATH": str(tree)}
    return subprocess.Popen([sys.executable, "-m", f"stages.{stage}", row], cwd=workdir, env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT)


def run_side_by_side(jobs: dict[str, tuple[Path, Path]], stage: str, row: str, logs: Path) -> dict[str, float]:
    """Start `stage ROW` in every (tree, workdir) at once; the wall seconds of each."""
    started = time.perf_counter()
    procs = {label: start(tree, work, stage, row, logs / f"{label}-{stage}-{row}.log")
             for label, (tree, work) in jobs.items()}
    seconds: dict[str, float] = {}
    while len(seconds) < len(procs):  # each one's own end, not the last one's
        for label, proc in procs.items():
            if label not in seconds and proc.poll() is not None:
                if proc.returncode:
                    sys.exit(f"{stage} {row} ({label}) failed: see {logs / f'{label}-{stage}-{row}.log'}")
                seconds[label] = time.perf_counter() - started
        time.sleep(0.1)
    return seconds


def weights_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the commit whose fine-tune stage is the reference")
    parser.add_argument("--rows", default="ft-srcv,ft-tgtv-random,va-llm,fwet")
    parser.add_argument("--workspace", type=Path, default=Path("."))
    parser.add_argument("--out", type=Path, default=Path("bench/finetune_speed"))
    parser.add_argument("--baseline-params", type=Path, help="params.yaml of the baseline arm (default: the "
                        "workspace's)")
    args = parser.parse_args()
    rows = args.rows.split(",")
    missing = [r for r in rows if not (args.workspace / "data" / "models" / "init" / r).is_dir()]
    if missing:
        sys.exit(f"{args.workspace}/data/models/init: no initial model for {missing} (run their transfer stages)")
    out = args.out.resolve()
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    trees = {"baseline": export_tree(args.baseline, out / "baseline-tree"), "current": HERE}
    params = {"baseline": args.baseline_params, "current": None}
    jobs = {label: (tree, scratch(args.workspace, out / label, rows, params[label])) for label, tree in trees.items()}
    records = []
    for row in rows:
        wall = run_side_by_side(jobs, "finetune", row, logs)
        run_side_by_side(jobs, "evaluate", row, logs)
        for label, (_, work) in jobs.items():
            metrics = json.loads((work / "data" / "metrics" / "finetune" / f"{row}.json").read_text())
            test = json.loads((work / "data" / "eval" / row / "metrics.json").read_text())
            records.append({"row": row, "code": label, "stage_seconds": round(wall[label], 1),
                            **{p: metrics.get(p) for p in PARTS}, "best_update": metrics["best_update"],
                            "dev_bleu": metrics["best_dev_bleu"], "test_bleu": test["bleu"],
                            "weights": weights_hash(work / "data" / "models" / "finetuned" / row
                                                    / "model.safetensors")})
        done = pd.DataFrame(records)
        print(done[done.row == row].to_string(index=False), flush=True)
    table = pd.DataFrame(records)
    table.to_csv(out / "finetune_speed.csv", index=False)
    wide = table.pivot(index="row", columns="code")
    summary = pd.DataFrame({
        "baseline_s": wide["stage_seconds"]["baseline"], "current_s": wide["stage_seconds"]["current"],
        "speedup": (wide["stage_seconds"]["baseline"] / wide["stage_seconds"]["current"]).round(2),
        "train_speedup": (wide["train_seconds"]["baseline"] / wide["train_seconds"]["current"]).round(2),
        "test_bleu_baseline": wide["test_bleu"]["baseline"], "test_bleu_current": wide["test_bleu"]["current"],
        "identical_weights": wide["weights"]["baseline"] == wide["weights"]["current"],
    }).loc[rows]
    cpu = describe_cpu() | {"threads": 1}
    print(f"\nfine-tune stage, {args.baseline} (baseline) vs this tree, two at once at 1 thread each; CPU: "
          f"{cpu['cpu']} ({cpu['capability']}, native bf16 {'yes' if cpu['bf16_native'] else 'no'}), "
          f"{cpu['cores']} cores")
    print(summary.to_string())
    total = summary.baseline_s.sum() / summary.current_s.sum()
    same_rank = list(summary.test_bleu_baseline.rank()) == list(summary.test_bleu_current.rank())
    print(f"all rows: {summary.baseline_s.sum():.0f} s -> {summary.current_s.sum():.0f} s, {total:.2f}x; "
          f"rows ranked the same by test BLEU: {'yes' if same_rank else 'no'}")


if __name__ == "__main__":
    main()
