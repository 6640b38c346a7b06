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


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(flows.record.time, "time", clock)
    return clock


def test_a_sitting_cut_off_leaves_its_cost_and_the_next_one_adds_to_it(tmp_path, clock):
    path = tmp_path / "flow_run.json"
    estimate = SimpleNamespace(flow={"prepare": (0.0, 25.0, 1), "pretrain": (25.0, 925.0, 2)}, flow_seconds=925.0)
    first = RunRecord(path, estimate, jobs=2, cores=2)
    first.start("prepare")
    clock.now += 30
    first.finish(StageRun("prepare", "ran", 30.0, clock.now - 30))
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
    second.start("prepare")
    clock.now += 2
    second.finish(StageRun("prepare", "up-to-date", 2.0, clock.now - 2))
    second.start("pretrain")
    clock.now += 400
    second.finish(StageRun("pretrain", "ran", 400.0, clock.now - 400))  # resumed from its checkpoint
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
    for stage, seconds in (("spm", 20.0), ("finetune", 50.0)):
        first.start(stage)
        clock.now += seconds
        first.finish(StageRun(stage, "ran", seconds, clock.now - seconds))
    second = RunRecord(path, None, jobs=1, cores=2)  # params changed: spm runs again, finetune fails
    second.start("spm")
    clock.now += 25
    second.finish(StageRun("spm", "ran", 25.0, clock.now - 25))
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
