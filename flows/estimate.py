"""The expected wall time of a profile on this machine, before running it: `vocabridge estimate`.

vocabridge.estimate measures the machine and prices one stage; here the stages are laid over dvc.yaml's DAG
two ways: one after another with every core (`dvc repro`), and as the Prefect flow schedules them (`jobs`
stages at once, the cores shared out by `Dag.core_shares`, pretrain and generator on every core).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flows.dag import Dag, load_dag
from flows.pipeline import cores as machine_cores
from flows.pipeline import share_cores
from vocabridge.config import Params, apply_profile, parse, read_yaml, validate
from vocabridge.estimate import Machine, cached_measure, stage_seconds


@dataclass
class Estimate:
    machine: Machine
    sequential: dict[str, float]  # stage -> seconds with every core (dvc repro)
    flow: dict[str, tuple[float, float, int]]  # stage -> (start, end, threads) in the flow
    cores: int
    jobs: int

    @property
    def repro_seconds(self) -> float:
        return sum(self.sequential.values())

    @property
    def flow_seconds(self) -> float:
        return max((end for _, end, _ in self.flow.values()), default=0.0)


def simulate_flow(dag: Dag, seconds: dict[str, dict[int, float]], cores: int, jobs: int
                  ) -> dict[str, tuple[float, float, int]]:
    """Replay flows.pipeline.run_dag's scheduling with known stage durations (per thread count)."""
    pending = list(dag.order)
    running: dict[str, float] = {}  # stage -> end time
    done: set[str] = set()
    out: dict[str, tuple[float, float, int]] = {}
    now = 0.0
    while pending or running:
        ready = [n for n in pending if all(u in done for u in dag.stages[n].upstream if u in dag.stages)]
        shared, heavy_threads = dag.core_shares(cores, jobs, [*running, *ready])
        for name in ready:
            if len(running) >= jobs:
                break
            threads = heavy_threads if dag.stages[name].all_cores else shared
            end = now + seconds[name][threads]
            running[name], out[name] = end, (now, end, threads)
            pending.remove(name)
        if not running:
            break
        name = min(running, key=running.get)
        now = running.pop(name)
        done.add(name)
    return out


def profile_params(workspace: Path, profile: str | None) -> tuple[Params, dict]:
    data = read_yaml(workspace / "params.yaml")
    if profile:
        data = apply_profile(workspace / "params.yaml", workspace / "profiles" / f"{profile}.yaml")
    return validate(parse(Params, data, "params")), data


def dag_for(workspace: Path, data: dict) -> Dag:
    """dvc.yaml's DAG with these params (a profile's methods make other foreach items)."""
    import logging

    import yaml
    from dvc.repo import Repo

    with tempfile.TemporaryDirectory(prefix="vocabridge-estimate-") as tmp:
        shutil.copy2(workspace / "dvc.yaml", Path(tmp) / "dvc.yaml")
        (Path(tmp) / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        dvc_log = logging.getLogger("dvc")
        level, dvc_log.level = dvc_log.level, logging.WARNING  # not "Initialized DVC repository" in a scratch dir
        try:
            Repo.init(tmp, no_scm=True).close()
        finally:
            dvc_log.setLevel(level)
        return load_dag(Path(tmp))


def estimate(workspace: Path = Path("."), profile: str | None = None, fresh: bool = False, jobs: int = 0,
             progress: bool = True) -> Estimate:
    workspace = Path(workspace)
    params, data = profile_params(workspace, profile)
    return estimate_dag(dag_for(workspace, data), params, workspace, jobs, fresh, progress)


def estimate_dag(dag: Dag, params: Params, workspace: Path, jobs: int = 0, fresh: bool = False,
                 progress: bool = True) -> Estimate:
    """Price the stages of `dag` with `params` on this machine (measured once per machine and profile)."""
    cores, jobs = machine_cores(), share_cores(jobs)
    machine = cached_measure(params, cores, fresh=fresh, progress=progress)
    seconds = {name: {t: stage_seconds(name, params, machine, t, workspace) for t in range(1, cores + 1)}
               for name in dag.order}
    return Estimate(machine, {n: seconds[n][cores] for n in dag.order}, simulate_flow(dag, seconds, cores, jobs),
                    cores, jobs)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def format_estimate(est: Estimate, profile: str) -> str:
    """A table per stage group: how many, time each (flow), and the totals for dvc repro and the flow."""
    m = est.machine
    cpu = m.cpu
    lines = [f"vocabridge estimate: profile {profile} on {cpu['cpu']} ({cpu['capability']}, native bf16 "
             f"{'yes' if cpu['bf16_native'] else 'no'}), {est.cores} cores, device {m.device}; training in "
             f"{', '.join(sorted(set(m.precision.values()))) or 'fp32'}; measured in {m.measured_in:.0f} s",
             "", "| stage | count | each (flow) | threads | each (dvc repro) |", "|---|---|---|---|---|"]
    groups: dict[str, list[str]] = {}
    for name in est.sequential:
        groups.setdefault(name.split("@", 1)[0], []).append(name)
    for group, names in groups.items():
        flow = [est.flow[n][1] - est.flow[n][0] for n in names]
        threads = sorted({est.flow[n][2] for n in names})
        seq = [est.sequential[n] for n in names]

        def span(values: list[float]) -> str:
            lo, hi = min(values), max(values)
            return _minutes(lo) if abs(hi - lo) < 1 else f"{_minutes(lo)}-{_minutes(hi)}"

        lines.append(f"| {group} | {len(names)} | {span(flow)} | {'/'.join(map(str, threads))} | {span(seq)} |")
    lines += ["", f"expected wall time: Prefect flow (`python -m flows.pipeline`, {est.jobs} stages at once) "
                  f"{_minutes(est.flow_seconds)}; `dvc repro` (one stage at a time) {_minutes(est.repro_seconds)}",
              "(for a quiet machine; installs are not included)"]
    if m.device != "cpu" and est.jobs > 1:
        lines.append("note: on one GPU the stages that run at once take turns on it, and the flow's figure assumes "
                     "they do not slow each other: a flow priced at 9.2 min with 4 at once ran about 16 min on an "
                     "H100 (results/plm-gpu-attempt); plan between the two totals")
    if m.load > 0.5 * est.cores:
        lines.append(f"warning: the load average was {m.load:.1f} on {est.cores} cores while measuring: other work "
                     "shared the CPU and every figure is too high; `vocabridge estimate --fresh` on a quiet machine")
    return "\n".join(lines)
