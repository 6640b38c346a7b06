"""Start-up of every DVC stage: seconds of `python -c "import stages.X"` in a fresh process, beside
`python -c "import torch"` and `python -c "pass"` measured in the same run.

    .venv/bin/python benchmarks/startup.py                      # every module in stages/, median of 3
    .venv/bin/python benchmarks/startup.py --runs 5 --params    # also import + reading params.yaml
    .venv/bin/python benchmarks/startup.py --stages evaluate transfer --budget 2.5

A stage pays its start-up on every `dvc repro` and every Prefect task, before its first useful work; torch's own
import is the floor for a stage that needs it. The stages are found in stages/ (every module but the package's
private helpers). Commands run round-robin, one of each per round, so that background load falls on all of them
alike; the median of the rounds counts. Printed per stage: seconds, ratio to `import torch`, whether it is within
the budget, the CPU seconds of the process (which move less than wall seconds on a busy machine) and which of
the slow-to-import libraries the import loaded (transformers, gensim, pandas, ...: each should wait until a
function needs it). With --params a further column times the import followed by `load_params` of the params
file (the parameter reading every stage does before its work).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# libraries that take a noticeable share of a second or more to import; ctranslate2 and matplotlib only if installed
HEAVY = ("torch", "transformers", "gensim", "pandas", "scipy", "sacrebleu", "ctranslate2", "matplotlib")
# appended to each timed command: which of them the import loaded (a dictionary look-up each, not timed apart)
REPORT_LOADED = f"; import sys; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"


def stage_names() -> list[str]:
    """Every stage module in stages/, found from the folder so that a new stage is timed without an edit here."""
    return sorted(p.stem for p in (ROOT / "stages").glob("*.py") if not p.stem.startswith("_"))


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(code: str) -> tuple[float, float, str]:
    """Wall and CPU seconds of a fresh interpreter running `code` in the repository root (what `python -m`
    pays), and what it printed; CPU seconds move less than wall seconds when other processes share the cores."""
    cpu, start = cpu_of_children(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"`python -c {code!r}` failed:\n{done.stderr[-2000:]}")
    return seconds, cpu_of_children() - cpu, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per command; the median counts")
    parser.add_argument("--stages", nargs="+", help="stage modules to time (default: every one in stages/)")
    parser.add_argument("--budget", type=float, default=2.5, help="seconds a stage may take to start")
    parser.add_argument("--params", nargs="?", const="params.yaml", metavar="FILE",
                        help="also time the import followed by reading FILE (default params.yaml)")
    args = parser.parse_args()
    stages = args.stages or stage_names()
    unknown = sorted(set(stages) - set(stage_names()))
    if unknown:
        parser.error(f"not in stages/: {', '.join(unknown)}")
    rounds = max(1, args.runs)
    commands = {"pass": "pass", "torch": "import torch"}
    for stage in stages:
        commands[stage] = f"import stages.{stage}{REPORT_LOADED}"
        if args.params:
            commands[f"{stage}+params"] = (f"import stages.{stage}; from vocabridge.config import load_params; "
                                           f"load_params({args.params!r})")
    runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, code in commands.items():
            runs[name].append(timed(code))
    wall = {name: statistics.median(r[0] for r in got) for name, got in runs.items()}
    cpu = {name: statistics.median(r[1] for r in got) for name, got in runs.items()}
    torch = wall["torch"]
    print(f"python: {wall['pass']:.2f} s   import torch: {torch:.2f} s (CPU {cpu['torch']:.2f} s)   "
          f"median of {rounds} fresh processes each")
    within = f"<= {args.budget:g} s"
    header = f"{'stage':<14} {'seconds':>8} {'x torch':>8} {within:>8} {'CPU s':>8}"
    if args.params:
        header += f" {'+params':>8} {within:>8}"
    print(f"{header}  loaded")
    for stage in stages:
        seconds = wall[stage]
        line = (f"{stage:<14} {seconds:>8.2f} {seconds / torch:>8.2f} {'yes' if seconds <= args.budget else 'NO':>8} "
                f"{cpu[stage]:>8.2f}")
        if args.params:
            both = wall[f"{stage}+params"]
            line += f" {both:>8.2f} {'yes' if both <= args.budget else 'NO':>8}"
        print(f"{line}  {runs[stage][-1][2] or '-'}")
    slowest = max(stages, key=wall.__getitem__)
    print(f"slowest: {slowest} {wall[slowest]:.2f} s; within {args.budget:g} s: "
          f"{sum(wall[s] <= args.budget for s in stages)} of {len(stages)}")


if __name__ == "__main__":
    main()
