"""`vocabridge estimate`: stage prices from measured figures (a cell's stages by its row's method), the flow's
schedule replayed, a real measurement."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flows.dag import Dag, Stage
from flows.estimate import DVC_OVERHEAD, Estimate, estimate_dag, format_estimate, simulate_flow, stage_seconds
from vocabridge.config import Params, UpstreamModel, apply_profile, parse
from vocabridge.errors import ConfigError
from vocabridge.estimate import (
    TYPICAL_PIECES,
    Machine,
    _batch,
    abnet_training_seconds,
    cbow_seconds,
    measure,
    typical_pieces,
)
from vocabridge.grid import Cell

ROOT = Path(__file__).resolve().parents[1]


def hand_made_dag() -> Dag:
    return Dag({"pretrain": Stage("pretrain", all_cores=True),
                "finetune@a": Stage("finetune@a", upstream=("pretrain",)),
                "finetune@b": Stage("finetune@b", upstream=("pretrain",)),
                "finetune@c": Stage("finetune@c", upstream=("pretrain",)),
                "report": Stage("report", upstream=("finetune@a", "finetune@b", "finetune@c"))})


def test_the_flow_schedule_is_replayed_with_the_cores_shared_out():
    # seconds by thread count: two one-thread fine-tunes side by side, pretrain alone on both cores
    seconds = {"pretrain": {1: 100, 2: 60}, "finetune@a": {1: 30, 2: 20}, "finetune@b": {1: 40, 2: 25},
               "finetune@c": {1: 30, 2: 20}, "report": {1: 5, 2: 5}}
    plan = simulate_flow(hand_made_dag(), seconds, cores=2, jobs=2)
    assert plan["pretrain"] == (0, 60, 2)
    assert plan["finetune@a"] == (60, 90, 1) and plan["finetune@b"] == (60, 100, 1)
    # c starts when a ends; b still runs, so it is one of two at once: one thread
    assert plan["finetune@c"] == (90, 120, 1)
    assert plan["report"] == (120, 125, 2)


def test_long_stages_that_run_together_share_the_cores_among_themselves():
    dag = Dag({"spm": Stage("spm"), "pretrain": Stage("pretrain", upstream=("spm",), all_cores=True),
               "upstream@a": Stage("upstream@a", upstream=("spm",), all_cores=True),
               "upstream@b": Stage("upstream@b", upstream=("spm",), all_cores=True)})
    seconds = {"spm": {1: 5, 2: 5}, "pretrain": {1: 100, 2: 60}, "upstream@a": {1: 90, 2: 55},
               "upstream@b": {1: 100, 2: 60}}
    plan = simulate_flow(dag, seconds, cores=2, jobs=2)
    assert plan["pretrain"] == (5, 105, 1) and plan["upstream@a"] == (5, 95, 1)  # not 2 + 2 threads on 2 cores
    assert plan["upstream@b"] == (95, 195, 1)  # pretrain still runs when it starts: one thread


def test_a_long_stage_ready_beside_short_ones_never_oversubscribes_the_cores():
    # generator (all cores) and cbow become ready together after pretrain: the flow once gave the generator both
    # cores and cbow one more (3 threads on 2 cores; the 2-thread stage ran at 0.37-0.43x, results/thread-layout)
    dag = Dag({"pretrain": Stage("pretrain", all_cores=True),
               "generator": Stage("generator", upstream=("pretrain",), all_cores=True),
               "cbow": Stage("cbow", upstream=("pretrain",)),
               "finetune@a": Stage("finetune@a", upstream=("generator",)),
               "finetune@b": Stage("finetune@b", upstream=("cbow",))})
    seconds = {n: {1: 40, 2: 25} for n in dag.order}
    plan = simulate_flow(dag, seconds, cores=2, jobs=2)
    moments = sorted({start for start, _, _ in plan.values()})
    for now in moments:
        assert sum(t for start, end, t in plan.values() if start <= now < end) <= 2, plan
    assert set(plan) == set(dag.order)


def machine() -> Machine:
    return Machine(cpu={"cpu": "test", "capability": "AVX2", "bf16_native": False, "threads": 2, "cores": 2},
                   device="cpu", startup=3.0,
                   train={"pretrain": {2: 0.5}, "finetune-upstream": {1: 0.4, 2: 0.3},
                          "finetune-downstream": {1: 0.4, 2: 0.3}, "generator": {2: 0.2}},
                   greedy={"upstream": {1: 0.02, 2: 0.01}, "downstream": {1: 0.05, 2: 0.03}},
                   beam={1: 0.1, 2: 0.06}, precision={"pretrain": "fp32"})


def test_training_stages_cost_updates_and_dev_evaluations(tmp_path):
    params = parse(Params, {}, "params")
    params.pretrain.train.max_updates, params.pretrain.train.eval_every = 1000, 500
    params.pretrain.train.dev_sentences = 400
    start = 3.0 + DVC_OVERHEAD
    # 1000 updates x 0.5 s + (1000 / 500 + 2) evaluations x (400 sentences x 0.01 s greedy + the dev-loss
    # forward passes: 400 x 11 target pieces / batch tokens batches at a third of an update each)
    loss_pass = 400 * 11 / params.pretrain.train.batch_tokens * 0.5 / 3
    assert stage_seconds("pretrain", params, machine(), 2, tmp_path) == pytest.approx(
        start + 10 + 500 + 4 * (4 + loss_pass))
    params.pretrain.init = "cbow"  # CBOW on the upstream text first: 283k lines of (12 + 11) / 2 pieces
    assert stage_seconds("pretrain", params, machine(), 2, tmp_path) == pytest.approx(
        start + 10 + 500 + 4 * (4 + loss_pass) + cbow_seconds(283_000 * 11.5, params.pretrain.cbow.epochs))
    params.pretrain.init = "random"
    # an upstream model of its own: the same recipe; a joint vocabulary trains its two SentencePiece models first
    params.upstreams = {"ft-tgtv": UpstreamModel(vocab="downstream"), "joint-vocab": UpstreamModel(vocab="joint")}
    pretrain = stage_seconds("pretrain", params, machine(), 2, tmp_path)
    assert stage_seconds("upstream@ft-tgtv", params, machine(), 2, tmp_path) == pytest.approx(pretrain)
    assert stage_seconds("upstream@joint-vocab", params, machine(), 2, tmp_path) == pytest.approx(
        pretrain + 2 * (3 + 10 * 283_000 / 50_000))
    params.finetune.train.max_updates, params.finetune.train.eval_every = 100, 50
    params.finetune.train.dev_sentences = 200
    params.prepare.downstream.dev_size = 150  # fewer dev pairs than dev_sentences: all of them
    expected = start + 5 + 100 * 0.4 + 4 * (150 * 0.05 + 150 * 32 / params.finetune.train.batch_tokens * 0.4 / 3)
    # a cell (DVC's matrix item ROW-SEED) is priced by its row's method, whatever its seed
    assert stage_seconds("finetune@in-domain-1", params, machine(), 1, tmp_path) == pytest.approx(expected)
    assert stage_seconds("finetune@in-domain-7", params, machine(), 1, tmp_path) == pytest.approx(expected)
    assert stage_seconds("finetune@out-domain-1", params, machine(), 1, tmp_path) == pytest.approx(start + 1)
    params.prepare.downstream.test_size = 1000
    params.evaluate.upstream_sentences = 0
    assert stage_seconds("evaluate@ft-srcv-2", params, machine(), 2, tmp_path) == pytest.approx(start + 4 + 60)
    params.evaluate.upstream_sentences = 500  # forgetting: 500 upstream sentences more, at the same price
    assert stage_seconds("evaluate@ft-srcv-2", params, machine(), 2, tmp_path) == pytest.approx(start + 4 + 90)


def test_an_abnet_training_is_priced_from_updates_timed_at_the_fine_tune_batch():
    """`time_abnet` times abnet.finetune's batch; an upstream training's bigger batch costs in proportion (an
    update timed at 1,500 tokens priced a 4,000-token one at the same price: a cell's fine-tune 2.7x too dear)."""
    from vocabridge.config import Training

    found = Machine(cpu={}, device="cpu", train={"plm-nmt": {1: 1.5}}, greedy={"plm-nmt": {1: 0.0}})
    fine = Training(max_updates=100, eval_every=1000, batch_tokens=1500, dev_sentences=0)
    assert abnet_training_seconds(found, "plm-nmt", fine, 1, 0, 1500) == pytest.approx(150)
    upstream = Training(max_updates=100, eval_every=1000, batch_tokens=4000, dev_sentences=0)
    assert abnet_training_seconds(found, "plm-nmt", upstream, 1, 0, 1500) == pytest.approx(400)


def grid_params(rows: dict, seeds: list[int], **more) -> Params:
    return parse(Params, {"rows": rows, "seeds": seeds, **more}, "params")


def test_the_grid_s_own_stages_are_priced_and_an_unknown_stage_is_an_error(tmp_path):
    params = grid_params({"ft-srcv": {}, "fast-va": {"method": "va-llm", "k": 5}}, [1, 2, 3])
    start = 3.0 + DVC_OVERHEAD
    # a row of its own is priced by the method it names: va-llm fine-tunes like ft-srcv, both on the adapted vocabulary
    assert stage_seconds("finetune@fast-va-3", params, machine(), 2, tmp_path) == pytest.approx(
        stage_seconds("finetune@ft-srcv-1", params, machine(), 2, tmp_path))
    assert stage_seconds("row@fast-va", params, machine(), 2, tmp_path) == pytest.approx(start + 3)  # hashes only
    # the generator stage trains params' generators, each at its measured update
    assert stage_seconds("generator", params, machine(), 2, tmp_path) == pytest.approx(start)
    params.generators = ["patt-kd", "patt-kd-both"]
    assert stage_seconds("generator", params, machine(), 2, tmp_path) == pytest.approx(
        start + 2 * (10 + params.generator.train.steps * 0.2))
    # the report reads every cell: 2 rows x 3 seeds
    assert stage_seconds("report", params, machine(), 2, tmp_path) == pytest.approx(start + 5 + 2 * 6)
    # back-translation runs when its upstream model is one of `upstreams` (not because of a row)
    assert stage_seconds("backtranslate", params, machine(), 2, tmp_path) == pytest.approx(start + 2)
    params.upstreams = {params.backtranslation.upstream: UpstreamModel(vocab="downstream", reverse=True)}
    params.backtranslation.sentences = 100
    assert stage_seconds("backtranslate", params, machine(), 2, tmp_path) == pytest.approx(start + 4 + 100 * 0.06)
    with pytest.raises(ConfigError, match="no price for a 'toytrain' stage"):  # never a silent zero (issue 38)
        stage_seconds("toytrain@alpha", params, machine(), 2, tmp_path)
    with pytest.raises(ConfigError, match="no row 'va-llm' in params' rows"):
        stage_seconds("transfer@va-llm-1", params, machine(), 2, tmp_path)
    with pytest.raises(ConfigError, match="GROUP@ROW-SEED"):
        stage_seconds("evaluate@ft-srcv", params, machine(), 2, tmp_path)


def test_a_distill_row_s_transfer_adds_its_passes_over_the_pairs(tmp_path):
    from vocabridge.estimate import DISTILL_BATCH_COST
    from vocabridge.transfer.distill import BATCH_TOKENS

    params = grid_params({"ft-tgtv-random": {}, "distill": {"distill_epochs": 2},
                          "distill-few": {"method": "distill", "distill_epochs": 2, "distill_pairs": 1000}}, [1])
    plain = stage_seconds("transfer@ft-tgtv-random-1", params, machine(), 1, tmp_path)
    pairs = params.prepare.downstream.bible.train_size  # no corpus prepared yet: the recipe's count
    update = machine().train["finetune-downstream"][1] * BATCH_TOKENS / params.finetune.train.batch_tokens
    batches = pairs * max(TYPICAL_PIECES["downstream"]) / (BATCH_TOKENS * 0.97)
    assert stage_seconds("transfer@distill-1", params, machine(), 1, tmp_path) - plain == pytest.approx(
        batches * update * DISTILL_BATCH_COST * (2 + 2 / 3))
    few = stage_seconds("transfer@distill-few-1", params, machine(), 1, tmp_path) - plain
    assert few == pytest.approx(batches * update * DISTILL_BATCH_COST * (2 + 2 / 3) * 1000 / pairs)


def committed_cell(root: Path, study: str, row: str, seed: int, method: str, updates: int, budget: dict) -> None:
    """A committed cell's record as the evaluate stage writes it, with the fields the estimator reads."""
    import json

    folder = root / "results" / study / "cells" / row / f"s{seed}"
    folder.mkdir(parents=True)
    record = {"row": row, "seed": seed, "method": method, "finetune": {"updates": updates},
              "params": {"finetune": budget}}
    (folder / "record.json").write_text(json.dumps(record))


def test_a_fine_tune_that_stops_early_is_priced_from_committed_cells(tmp_path):
    from flows.estimate import committed_updates

    params = grid_params({"ft-srcv": {}, "fwet": {}, "fwet-frozen": {"method": "fwet", "freeze_old_rows": True},
                          "va-llm": {}}, [1])
    cfg = params.finetune.train
    cfg.max_updates, cfg.eval_every, cfg.patience = 2000, 50, 6
    budget = {"max_updates": 2000, "patience": 6, "eval_every": 50}
    for seed, updates in ((1, 700), (2, 900), (3, 1300)):
        committed_cell(tmp_path, "study", "ft-srcv", seed, "ft-srcv", updates, budget)
        committed_cell(tmp_path, "study", "fwet", seed, "fwet", updates - 200, budget)
    committed_cell(tmp_path, "forgetting", "fwet-frozen", 1, "fwet", 1500, budget)
    committed_cell(tmp_path, "old", "va-llm", 1, "va-llm", 350, {"max_updates": 350, "patience": 0, "eval_every": 50})
    committed_updates.cache_clear()

    def price(row: str) -> float:
        return stage_seconds(f"finetune@{row}-1", params, machine(), 1, tmp_path)

    def fixed(updates: int) -> float:  # a fine-tune of exactly `updates`, where no cell was committed
        cfg.max_updates, cfg.patience = updates, 0
        seconds = stage_seconds("finetune@ft-srcv-1", params, machine(), 1, tmp_path / "elsewhere")
        cfg.max_updates, cfg.patience = 2000, 6
        return seconds

    at_most = price("va-llm")  # its only committed cell ran another budget: priced at the maximum
    assert at_most == pytest.approx(fixed(2000))
    assert price("ft-srcv") == pytest.approx(fixed(900))  # the median of its cells' 700, 900 and 1,300 updates
    assert price("fwet") < price("ft-srcv") < price("fwet-frozen") < at_most  # the row's own cells first (1,500)
    estimate = format_estimate(Estimate(machine(), {}, {}, 2, 2, [], {"ft-srcv": (900, 3)}), "study")
    assert "median updates of committed cells" in estimate and "ft-srcv 900 (3 cells)" in estimate
    cfg.patience = 0  # a fixed budget runs to its end whatever the cells did
    assert price("ft-srcv") == pytest.approx(at_most)


def test_evaluate_decodes_the_second_test_set_too(tmp_path):
    """The held-out dev books are decoded beside the test set (its sentences counted from the verse ids)."""
    params = grid_params({"ft-srcv": {}}, [1])
    params.finetune.train.dev_sentences = 2
    corpus = tmp_path / "data/corpora/downstream"
    corpus.mkdir(parents=True)
    (corpus / "dev.ids").write_text("1.1.1\n2.1.1\n1.1.2\n3.1.1\n4.1.1\n4.1.2\n")  # books 3 and 4 unseen
    for lang in (params.lang.src, params.lang.tgt):
        (corpus / f"dev.{lang}").write_text("x\n" * 6)
    with_heldout = stage_seconds("evaluate@ft-srcv-1", params, machine(), 2, tmp_path)
    params.evaluate.heldout_dev = False
    alone = stage_seconds("evaluate@ft-srcv-1", params, machine(), 2, tmp_path)
    params.evaluate.heldout_dev = True
    assert with_heldout - alone == pytest.approx(3 * 0.06)  # 3 verses at the beam's 0.06 s a sentence
    (corpus / "dev.ids").unlink()  # a user's files: no verse ids, no second test set
    assert stage_seconds("evaluate@ft-srcv-1", params, machine(), 2, tmp_path) == pytest.approx(alone)


def test_the_estimate_counts_the_grid_s_cells(tmp_path, monkeypatch):
    import flows.estimate as fe

    params = grid_params({"out-domain": {}, "ft-srcv": {}, "va-llm": {}}, [1, 2])
    stages = {"pretrain": Stage("pretrain", all_cores=True)}
    for row in params.rows:
        stages[f"row@{row}"] = Stage(f"row@{row}", upstream=("pretrain",))
        for seed in params.seeds:
            cell = Cell(row, seed).name
            stages[f"transfer@{cell}"] = Stage(f"transfer@{cell}", upstream=(f"row@{row}",))
            stages[f"finetune@{cell}"] = Stage(f"finetune@{cell}", upstream=(f"transfer@{cell}",))
            stages[f"evaluate@{cell}"] = Stage(f"evaluate@{cell}", upstream=(f"finetune@{cell}",))
    stages["report"] = Stage("report", upstream=tuple(n for n in stages if n.startswith("evaluate@")))
    monkeypatch.setattr(fe, "cached_measure", lambda *args, **kwargs: machine())
    monkeypatch.setattr(fe, "machine_cores", lambda: 2)
    est = estimate_dag(Dag(stages), params, tmp_path, jobs=2)
    assert sorted(est.cells, key=str) == sorted((Cell(r, s) for r in params.rows for s in (1, 2)), key=str)
    text = format_estimate(est, "grid")
    assert "grid: 6 cells (3 rows x 2 seeds)" in text
    assert "| transfer | 6 |" in text and "| finetune | 6 |" in text and "| row | 3 |" in text
    assert "| report | 1 |" in text
    one = estimate_dag(Dag(stages).select(rows=["va-llm"], seeds=[2]), params, tmp_path, jobs=2)
    assert "grid: 1 cell (1 row x 1 seed)" in format_estimate(one, "grid")


def test_a_stage_beside_others_takes_the_measured_slowdown(tmp_path):
    params = parse(Params, {}, "params")
    params.finetune.train.threads = 1  # one thread whatever the layout, as in params.yaml
    params.rows = grid_params({"va-llm": {}}, [1]).rows
    alone = stage_seconds("finetune@va-llm-1", params, machine(), 2, tmp_path)  # 2 of 2 cores: nothing beside it
    assert stage_seconds("finetune@va-llm-1", params, machine(), 1, tmp_path) == pytest.approx(alone)
    crowded = machine()
    crowded.beside = 1.25
    start = crowded.startup + DVC_OVERHEAD
    assert stage_seconds("finetune@va-llm-1", params, crowded, 1, tmp_path) == pytest.approx(
        start + (alone - start) * 1.25)
    assert stage_seconds("finetune@va-llm-1", params, crowded, 2, tmp_path) == pytest.approx(alone)


def test_the_timed_batch_has_the_shape_of_a_real_one():
    # 12 source and 11 target pieces on average: the longest source of a batch is about 12 / 0.87 = 14 pieces,
    # and 97% of a 3,000-token budget holds 2,910 // 14 = 207 rows
    batch = _batch(8002, 12, 11, 3000, torch.device("cpu"))
    assert batch["input_ids"].shape == (207, 14) and batch["labels"].shape == (207, 11)
    assert batch["decoder_input_ids"].shape == (207, 11) and int(batch["input_ids"].max()) < 8002
    # long targets set the budget: 97% of 1,500 over 40 pieces
    assert _batch(8002, 10, 40, 1500, torch.device("cpu"))["labels"].shape == (36, 40)


def test_segment_lengths_come_from_the_prepared_corpus(tmp_path):
    params = parse(Params, {}, "params")
    assert typical_pieces(params, "downstream", tmp_path) == TYPICAL_PIECES["downstream"]
    corpus = tmp_path / "data" / "corpora" / "downstream"
    corpus.mkdir(parents=True)
    (corpus / f"train.{params.lang.src}").write_text("ein zwei drei vier fünf\n" * 10, encoding="utf-8")
    (corpus / f"train.{params.lang.tgt}").write_text("one two three four five six seven eight nine ten\n" * 10,
                                                      encoding="utf-8")
    assert typical_pieces(params, "downstream", tmp_path) == (8, 16)  # 5 and 10 words x 1.6 pieces per word


@pytest.mark.e2e  # a real measurement of this machine: 20 s on two busy cores (startup, updates, decoding)
def test_a_real_measurement_of_the_tiny_profile(tmp_path, monkeypatch):
    import vocabridge.estimate as estimate

    monkeypatch.setenv("VOCABRIDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(estimate, "cpu_elsewhere", lambda interval: 0.0)  # timed as on a quiet machine (the next test)
    beside = []

    def timed_beside(*args):  # the real timing, its figure kept to check what measure makes of it
        beside.append(real_time_beside(*args))
        return beside[-1]

    real_time_beside = estimate.time_beside
    monkeypatch.setattr(estimate, "time_beside", timed_beside)
    data = apply_profile(ROOT / "params.yaml", ROOT / "profiles" / "tiny.yaml")
    found = measure(parse(Params, data, "params"), cores=2, progress=False)
    assert found.startup > 0 and found.cpu["capability"] and set(found.beam) == {1, 2}
    assert {"pretrain", "generator", "finetune-downstream"} <= set(found.train)
    # every training kind at both thread counts: the flow runs a pretraining on one thread beside another stage
    assert all(set(found.train[kind]) == {1, 2} for kind in ("pretrain", "generator", "finetune-downstream"))
    assert all(s > 0 for table in found.train.values() for s in table.values())
    assert set(found.precision.values()) <= {"bf16", "fp32"} and found.precision["generator"] == "fp32"
    assert found.train["plm"] and found.precision["plm"] == found.precision["finetune-downstream"]  # one probe
    # the slow-down is the timed update beside its twin over the same update alone (never below 1: a twin beside
    # it never speeds it up; a faster figure is noise)
    (seconds,) = beside
    assert seconds > 0 and found.beside == round(max(1.0, seconds / found.train["finetune-downstream"][1]), 3)


def test_a_timing_beside_other_work_is_the_cpu_time_the_work_got(monkeypatch):
    """On one core shared with a busy loop, a one-thread timing by the wall clock takes about twice its time alone;
    `measure` reads it off the CPU time the work got instead, close to its time alone."""
    import os
    import subprocess
    import sys

    import torch

    import vocabridge.estimate as estimate

    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs CPU affinity (Linux)")
    core = min(os.sched_getaffinity(0))
    saved, threads = os.sched_getaffinity(0), torch.get_num_threads()
    torch.set_num_threads(1)
    a, b = torch.randn(160, 160), torch.randn(160, 160)

    def timed() -> float:
        start = estimate._clock()
        for _ in range(1500):
            a @ b
        return estimate._clock() - start

    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(0, {core})
        os.sched_setaffinity(loop.pid, {core})
        wall = timed()  # the wall clock: the loop takes about half the core
        monkeypatch.setattr(estimate, "_CPU_TIME", True)
        cpu = timed()
        loop.kill()
        loop.wait()
        alone = timed()
    finally:
        loop.kill()
        os.sched_setaffinity(0, saved)
        torch.set_num_threads(threads)
    assert wall > 1.5 * cpu, (wall, cpu)
    assert cpu < 1.3 * alone, (cpu, alone)


@pytest.mark.e2e
def test_the_command_prints_every_stage_group_and_both_totals(tmp_path):
    env = dict(os.environ, VOCABRIDGE_CACHE=str(tmp_path))
    proc = subprocess.run([sys.executable, "-m", "vocabridge.cli", "estimate", "--profile", "tiny"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for group in ("prepare", "spm", "pretrain", "generator", "row", "transfer", "finetune", "evaluate", "report"):
        assert f"| {group} |" in proc.stdout
    params = parse(Params, apply_profile(ROOT / "params.yaml", ROOT / "profiles" / "tiny.yaml"), "params")
    rows, seeds = len(params.rows), len(params.seeds)  # every cell of the tiny grid, each stage once per cell
    assert f"grid: {rows * seeds} cells ({rows} rows x {seeds} seed{'' if seeds == 1 else 's'})" in proc.stdout
    assert f"| finetune | {rows * seeds} |" in proc.stdout and f"| row | {rows} |" in proc.stdout
    assert "Prefect flow" in proc.stdout and "`dvc repro`" in proc.stdout and "native bf16" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "vocabridge.cli", "estimate", "--profile", "nope"], cwd=ROOT,
                         env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "nope" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_prefect_imported_through_flows_keeps_the_tests_own_home():
    """This module imports prefect (through flows) before test_flows runs: its flows must still use the test
    session's Prefect home, not the user's ~/.prefect, whose database a running pipeline of theirs holds."""
    from prefect.settings import get_current_settings

    from tests.flows_helpers import quiet_prefect_home

    assert get_current_settings().home == quiet_prefect_home() != Path.home() / ".prefect"


def test_on_a_gpu_the_estimate_says_the_flows_figure_ignores_turn_taking():
    on_cpu = Estimate(machine(), {"pretrain": 60.0}, {"pretrain": (0.0, 60.0, 2)}, cores=2, jobs=2)
    assert "take turns" not in format_estimate(on_cpu, "tiny")
    on_gpu = machine()
    on_gpu.device = "cuda"
    text = format_estimate(Estimate(on_gpu, {"pretrain": 60.0}, {"pretrain": (0.0, 60.0, 2)}, cores=2, jobs=2), "t")
    assert "take turns" in text and "results/plm-gpu-attempt" in text
    alone = format_estimate(Estimate(on_gpu, {"pretrain": 60.0}, {"pretrain": (0.0, 60.0, 2)}, cores=2, jobs=1), "t")
    assert "take turns" not in alone
