"""Overhead of orchestration on an up-to-date workspace: `dvc repro` no-op vs the Prefect flow no-op.

    .venv/bin/python benchmarks/orchestration.py                       # tiny-profile copy, targets: mismatch
    .venv/bin/python benchmarks/orchestration.py --workspace PATH --targets report

Without --workspace it builds a tiny-profile copy of this project (downloads, about a minute) and
reproduces it first. The flow is timed twice: as `python -m flows.pipeline` (Prefect's ephemeral server
started and stopped on the way, what a laptop user waits for) and as the flow run itself.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import copy_project, project_env  # noqa: E402


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"error: {' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1]}")
    return seconds, proc.stdout + proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path)
    parser.add_argument("--targets", nargs="+", default=["mismatch"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="vocabridge-bench-"))
    env = project_env() | {"PREFECT_HOME": str(tmp / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                           "DO_NOT_TRACK": "1", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90"}
    env.pop("PREFECT_API_URL", None)
    ws = args.workspace or copy_project(tmp / "project", profile="tiny")
    if args.workspace is None:
        print(f"reproducing {' '.join(args.targets)} in {ws} ...", flush=True)
        timed([sys.executable, "-m", "dvc", "repro", *args.targets], ws, env)
    repro, flow, flow_run = [], [], []
    stages = 0
    for _ in range(args.repeats):
        seconds, out = timed([sys.executable, "-m", "dvc", "repro", *args.targets], ws, env)
        assert "Running stage" not in out, "workspace not up to date"
        repro.append(seconds)
        seconds, out = timed([sys.executable, "-m", "flows.pipeline", "--workspace", str(ws), "--targets",
                              *args.targets], ROOT, env)
        flow.append(seconds)
        rows = re.findall(r"^\| (\S+) \| (\S+) \| ([\d.]+) \|$", out.split("### Stages")[-1], flags=re.M)
        assert rows and all(outcome == "up-to-date" for _, outcome, _ in rows), out[-2000:]
        stages = len(rows)
        begin = re.search(r"(\d\d):(\d\d):(\d\d\.\d+) \| INFO +\| Flow run '[^']+' - Beginning flow run", out)
        end = re.search(r"(\d\d):(\d\d):(\d\d\.\d+) \| INFO +\| Flow run '[^']+' - Finished in state", out)
        if begin and end:
            h0, m0, s0 = begin.groups()
            h1, m1, s1 = end.groups()
            flow_run.append((int(h1) - int(h0)) * 3600 + (int(m1) - int(m0)) * 60 + float(s1) - float(s0))
    best = min(repro)
    print(f"\nworkspace {ws}, targets {' '.join(args.targets)}, {stages} stages, best of {args.repeats}, "
          f"{os.cpu_count()} cores")
    print(f"{'':34}{'seconds':>9}{'ratio':>8}{'extra/stage':>13}")
    print(f"{'dvc repro (no-op)':34}{best:9.2f}{1:8.1f}{'':>13}")
    for label, values in (("flow, python -m flows.pipeline", flow), ("flow run only (no server start)", flow_run)):
        if values:
            v = min(values)
            print(f"{label:34}{v:9.2f}{v / best:8.1f}{(v - best) / max(stages, 1):13.2f}")


if __name__ == "__main__":
    main()
