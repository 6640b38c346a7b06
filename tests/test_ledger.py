"""The results ledger on a hand-made finished workspace."""

import json
from pathlib import Path

import pytest

from vocabridge.errors import InputError
from vocabridge.ledger import collect

CPU = {"cpu": "Test CPU", "capability": "AVX2", "bf16_native": False, "threads": 2, "cores": 2}


def finished(root: Path) -> Path:
    (root / "data/reports/results").mkdir(parents=True)
    (root / "data/reports/results/report.md").write_text("| method | bleu |\n")
    (root / "data/reports/results/seeds.csv").write_text("group,seeds\nva-llm,3\n")
    (root / "data/metrics/finetune/va-llm").mkdir(parents=True)
    (root / "data/metrics/pretrain.json").write_text(json.dumps(
        {"updates": 10, "device": "cpu", "threads": 2, "precision": "fp32", "train_seconds": 5.0}))
    (root / "data/metrics/finetune/va-llm/s1.json").write_text(json.dumps(
        {"updates": 5, "device": "cpu", "threads": 1, "precision": "fp32", "train_seconds": 2.0}))
    (root / "data/metrics/finetune/out-domain").mkdir()
    (root / "data/metrics/finetune/out-domain/s1.json").write_text(json.dumps({"updates": 0, "best_update": 0}))
    (root / "data/plots/pretrain").mkdir(parents=True)
    (root / "data/plots/pretrain/dev_bleu.csv").write_text("step,dev_bleu\n0,0.0\n")
    (root / "dvc.lock").write_text("schema: '2.0'\n")
    (root / "params.yaml").write_text("profile: default\n")
    return root


def test_the_ledger_holds_the_run_and_names_the_machine(tmp_path):
    root = finished(tmp_path / "ws")
    (root / "data/reports/flow_run.json").write_text(json.dumps(
        {"jobs": 2, "wall_seconds": 600.0, "expected_flow_seconds": 540.0}))
    out = collect(root, root / "results/default", "default", CPU)
    for name in ("report.md", "seeds.csv", "metrics/pretrain.json", "metrics/finetune/va-llm/s1.json",
                 "curves/pretrain/dev_bleu.csv", "dvc.lock", "params.yaml", "flow_run.json", "machine.json"):
        assert (out / name).is_file(), name
    machine = json.loads((out / "machine.json").read_text())
    assert machine["training"] == {"pretrain": {"device": "cpu", "threads": 2, "precision": "fp32",
                                                "train_seconds": 5.0},
                                   "finetune/va-llm/s1": {"device": "cpu", "threads": 1, "precision": "fp32",
                                                       "train_seconds": 2.0}}  # out-domain did not train
    readme = (out / "README.md").read_text()
    assert "Test CPU (AVX2, native bf16 no), 2 cores" in readme and "training threads 1/2" in readme
    assert "10.0 min wall (estimated 9.0)" in readme


def test_a_run_over_several_sittings_says_so(tmp_path):
    root = finished(tmp_path / "ws")
    (root / "data/reports/flow_run.json").write_text(json.dumps(
        {"jobs": 2, "wall_seconds": 7200.0, "expected_flow_seconds": 5400.0, "sittings": [{}, {}, {}]}))
    readme = (collect(root, root / "results/default", "default", CPU) / "README.md").read_text()
    assert "120.0 min wall over 3 sittings (estimated 90.0)" in readme


def test_a_second_collection_replaces_the_first_whole(tmp_path):
    root = finished(tmp_path / "ws")
    out = collect(root, root / "results/default", "default", CPU)
    (out / "stale.csv").write_text("from an older run\n")
    collect(root, out, "default", CPU)
    assert not (out / "stale.csv").exists() and not (out / "flow_run.json").exists()


def test_metrics_and_curves_add_up_across_workspaces(tmp_path):
    """A study's later workspace lacks the earlier one's cells: their stages' records stay, its own win."""
    root = finished(tmp_path / "ws")
    out = collect(root, root / "results/default", "default", CPU)
    (out / "metrics/finetune/va-llm/s2.json").write_text("{}")  # another workspace's cell
    (out / "curves/finetune/va-llm/s2").mkdir(parents=True)
    (out / "curves/finetune/va-llm/s2/dev_bleu.csv").write_text("step,dev_bleu\n0,1.0\n")
    (out / "metrics/pretrain.json").write_text("{}")  # replaced by the workspace's own
    collect(root, out, "default", CPU)
    assert (out / "metrics/finetune/va-llm/s2.json").read_text() == "{}"
    assert (out / "curves/finetune/va-llm/s2/dev_bleu.csv").is_file()
    assert json.loads((out / "metrics/pretrain.json").read_text())["updates"] == 10
    assert (out / "metrics/finetune/va-llm/s1.json").is_file() and (out / "curves/pretrain/dev_bleu.csv").is_file()


def test_nothing_is_written_without_a_report(tmp_path):
    root = finished(tmp_path / "ws")
    (root / "data/reports/results/report.md").unlink()
    with pytest.raises(InputError, match="report.md: missing"):
        collect(root, root / "results/default", "default", CPU)
    assert not (root / "results").exists()


def cell(folder: Path, row: str, seed: int, bleu: float = 10.0) -> None:
    """A finished cell's record as vocabridge.grid reads it."""
    (folder / row / f"s{seed}").mkdir(parents=True)
    (folder / row / f"s{seed}" / "record.json").write_text(json.dumps(
        {"row": row, "seed": seed, "metrics": {"bleu": bleu}}))
    (folder / row / f"s{seed}" / "hyp.txt").write_text("a b c\n")


def test_a_collection_keeps_the_committed_cells_and_adds_the_workspaces(tmp_path):
    root = finished(tmp_path / "ws")
    cell(root / "results/default/cells", "va-llm", 1)  # another session's cell, committed
    cell(root / "data/cells", "va-llm", 2)
    out = collect(root, root / "results/default", "default", CPU)
    assert (out / "cells/va-llm/s1/record.json").is_file() and (out / "cells/va-llm/s2/hyp.txt").is_file()
    (root / "data/cells/va-llm/s2/record.json").unlink()  # a later workspace without it: it stays committed
    collect(root, out, "default", CPU)
    assert (out / "cells/va-llm/s2/record.json").is_file() and "`cells/`" in (out / "README.md").read_text()


def test_results_cells_commits_finished_cells_while_a_run_goes_on(tmp_path, monkeypatch, capsys):
    from flows.workspace import main  # what `vocabridge results` runs in the project's root

    root = tmp_path / "ws"
    root.mkdir()
    (root / "dvc.yaml").write_text("stages: {}\n")
    (root / "params.yaml").write_text("profile: study\n")
    cell(root / "results/study/cells", "ft-srcv", 1)
    cell(root / "data/cells", "va-llm", 4)  # the only cell finished so far: no report, no dvc status
    monkeypatch.chdir(root)
    main(["results", "--cells"])
    assert "1 cell(s) added or updated (va-llm-4)" in capsys.readouterr().out
    committed = root / "results/study/cells"
    assert sorted(p.parent.relative_to(committed).as_posix() for p in committed.glob("*/s*/record.json")) == [
        "ft-srcv/s1", "va-llm/s4"]
    main(["results", "--cells"])
    assert "0 cell(s) added" in capsys.readouterr().out
