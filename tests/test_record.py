"""The flow's cost record over sittings: a run cut off and started again keeps what each sitting paid."""

import json
from types import SimpleNamespace

import pytest

import flows.record
from flows.dvcrun import StageRun
from flows.record import RunRecord


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def ran(record: RunRecord, clock: Clock, stage: str, seconds: float, outcome: str = "ran") -> None:
    """`stage` starts, takes `seconds` of the clock and ends with `outcome`."""
    record.start(stage)
    clock.now += seconds
    record.finish(StageRun(stage, outcome, seconds, clock.now - seconds))


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(flows.record.time, "time", clock)
    return clock


def test_a_sitting_cut_off_leaves_its_cost_and_the_next_one_adds_to_it(tmp_path, clock):
    path = tmp_path / "flow_run.json"
    estimate = SimpleNamespace(flow={"prepare": (0.0, 25.0, 1), "pretrain": (25.0, 925.0, 2)}, flow_seconds=925.0)
    first = RunRecord(path, estimate, jobs=2, cores=2)
    ran(first, clock, "prepare", 30.0)
    first.start("pretrain")
    clock.now += 600
    first.save()  # the minute tick; then the sitting is cut off, nothing more is written
    saved = json.loads(path.read_text())
    assert saved["stages"]["pretrain"] == {"outcome": "running", "seconds": 600.0, "sittings": 1,
                                           "expected_seconds": 900.0}
    assert saved["expected_flow_seconds"] == 925.0
    assert saved["sittings"][0]["running"] == ["pretrain"] and saved["wall_seconds"] == 630.0

    clock.now += 3600  # the machine is idle until the next sitting
    second = RunRecord(path, None, jobs=2, cores=2)
    ran(second, clock, "prepare", 2.0, "up-to-date")
    ran(second, clock, "pretrain", 400.0)  # resumed from its checkpoint
    second.save()
    record = json.loads(path.read_text())
    assert record["stages"]["prepare"]["outcome"] == "ran" and record["stages"]["prepare"]["seconds"] == 30.0
    assert record["stages"]["pretrain"] == {"outcome": "ran", "seconds": 1000.0, "sittings": 2,
                                            "expected_seconds": None}  # the second sitting had no estimate
    assert record["expected_flow_seconds"] == 925.0  # the first sitting's estimate of the whole run
    assert [s["stages"] for s in record["sittings"]] == [{"prepare": "ran"},
                                                         {"prepare": "up-to-date", "pretrain": "ran"}]
    assert record["wall_seconds"] == 630.0 + 402.0  # the idle hour between sittings is not a cost


def test_a_stage_run_again_replaces_its_old_cost_and_a_failure_is_kept(tmp_path, clock):
    path = tmp_path / "flow_run.json"
    first = RunRecord(path, None, jobs=1, cores=2)
    ran(first, clock, "spm", 20.0)
    ran(first, clock, "finetune", 50.0)
    second = RunRecord(path, None, jobs=1, cores=2)  # params changed: spm runs again, finetune fails
    ran(second, clock, "spm", 25.0)
    second.start("finetune")
    clock.now += 5
    second.fail("finetune")
    record = json.loads(path.read_text())
    assert record["stages"]["spm"]["seconds"] == 25.0 and record["stages"]["spm"]["sittings"] == 1
    assert record["stages"]["finetune"]["outcome"] == "failed" and record["stages"]["finetune"]["seconds"] == 5.0


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]"])
def test_an_unreadable_record_starts_a_new_one(tmp_path, clock, text):
    path = tmp_path / "flow_run.json"
    path.write_text(text)
    record = RunRecord(path, None, jobs=2, cores=2)
    record.save()
    assert len(json.loads(path.read_text())["sittings"]) == 1
