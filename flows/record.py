"""What a workspace's flow runs cost, stage by stage, over every sitting that worked on it.

A long profile runs over several sittings: the flow is cut off (a session ends, a machine reboots) and started
again, and DVC and the stages resume. So the record is rewritten whenever a stage starts or ends and once a
minute, and a new sitting carries the earlier ones on: a stage that a sitting left running is marked `cut off`,
and its seconds are added to that stage's next run. `vocabridge results` puts the record in the ledger.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from flows.dvcrun import StageRun
from vocabridge.fileio import write_json


def _stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(seconds))


def load(path: Path) -> dict:
    """The earlier sittings' record; {} when there is none or it cannot be read (it is advice, not data)."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(old, dict):
        return {}
    if "sittings" not in old and "stages" in old:  # a record of one sitting, written before sittings were kept
        old["sittings"] = [{key: old.get(key) for key in ("started", "wall_seconds", "jobs")}]
    return old


class RunRecord:
    """The cost record of one flow run, continuing the record a cut-off or earlier run left in `path`."""

    def __init__(self, path: Path, est, jobs: int, cores: int):
        from vocabridge.nmt.precision import describe_cpu  # torch: imported only when a flow runs

        self.path, self.jobs, self.cores, self.cpu = path, jobs, cores, describe_cpu()
        self.started = time.time()
        old = load(path)
        self.sittings: list[dict] = list(old.get("sittings", []))
        self.stages: dict[str, dict] = {}
        for name, entry in old.get("stages", {}).items():
            self.stages[name] = {**entry, "outcome": "cut off"} if entry.get("outcome") == "running" else entry
        first = old.get("expected_flow_seconds") if self.sittings else None
        self.expected = first if first is not None else round(est.flow_seconds, 1) if est else None
        self.est = est
        self.here: dict[str, str] = {}  # this sitting's outcome of each stage it finished
        self.running: dict[str, tuple[float, dict]] = {}  # stage -> (started, its entry before this sitting)

    def expected_seconds(self, stage: str) -> float | None:
        if self.est and stage in self.est.flow:
            start, end, _threads = self.est.flow[stage]
            return round(end - start, 1)
        return None

    def start(self, stage: str) -> None:
        self.running[stage] = (time.time(), self.stages.get(stage, {}))
        self.save()

    def finish(self, run: StageRun) -> None:
        _, prior = self.running.pop(run.stage, (run.started, self.stages.get(run.stage, {})))
        self.here[run.stage] = run.outcome
        if run.outcome == "ran":
            self.stages[run.stage] = self._entry(run.stage, "ran", run.seconds, prior)
        elif prior.get("outcome") != "ran":  # a lookup never hides what an earlier sitting paid for the stage
            self.stages[run.stage] = {"outcome": run.outcome, "seconds": round(run.seconds, 1),
                                      "expected_seconds": self.expected_seconds(run.stage)}
        self.save()

    def fail(self, stage: str) -> None:
        started, prior = self.running.pop(stage, (time.time(), self.stages.get(stage, {})))
        self.here[stage] = "failed"
        self.stages[stage] = self._entry(stage, "failed", time.time() - started, prior)
        self.save()

    def _entry(self, stage: str, outcome: str, seconds: float, prior: dict) -> dict:
        """Seconds of this sitting plus those of the sittings that were cut off (or failed) running the stage."""
        carried = prior.get("outcome") in ("cut off", "failed")
        return {"outcome": outcome, "seconds": round(seconds + (prior.get("seconds", 0.0) if carried else 0.0), 1),
                "sittings": prior.get("sittings", 1) + 1 if carried else 1,
                "expected_seconds": self.expected_seconds(stage)}

    def as_dict(self) -> dict:
        now = time.time()
        stages = dict(self.stages)
        for name, (started, prior) in self.running.items():
            stages[name] = self._entry(name, "running", now - started, prior)
        sitting = {"started": _stamp(self.started), "wall_seconds": round(now - self.started, 1), "jobs": self.jobs,
                   "load_average": round(os.getloadavg()[0], 2), "stages": dict(self.here),
                   "running": sorted(self.running)}
        sittings = [*self.sittings, sitting]
        return {"started": sittings[0].get("started") or sitting["started"],
                "wall_seconds": round(sum(s.get("wall_seconds") or 0.0 for s in sittings), 1),
                "sittings": sittings, "jobs": self.jobs, "cores": self.cores, "cpu": self.cpu,
                "load_average_at_end": sitting["load_average"], "expected_flow_seconds": self.expected,
                "stages": stages}

    def save(self) -> None:
        write_json(self.path, self.as_dict())
