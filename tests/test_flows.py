"""The Prefect flows on real DVC workspaces (tiny profile) and a real Prefect server.

In-process flows use Prefect's ephemeral mode (a temporary local server, as on a laptop); the deployment
test starts `prefect server start` on 127.0.0.1, process work pools and workers, and stops them after. All of
these are marked e2e; the stage graph and the core sharing need no flow run and are in the fast lane.
"""

from tests.flows_helpers import quiet_prefect_home

PREFECT_HOME = quiet_prefect_home()  # before prefect is imported

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import yaml  # noqa: E402
from prefect.client.schemas.filters import (  # noqa: E402
    ArtifactFilter,
    ArtifactFilterKey,
    FlowFilter,
    FlowFilterName,
)
from prefect.client.schemas.sorting import ArtifactSort  # noqa: E402

from flows.dag import Dag, Stage, load_dag  # noqa: E402
from flows.errors import FlowError, StageError  # noqa: E402
from flows.pipeline import pipeline, sweep  # noqa: E402
from tests.conftest import ROOT, copy_project, copy_workspace, run  # noqa: E402
from tests.flows_helpers import (  # noqa: E402
    add_flows,
    free_port,
    prefect_cli,
    prefect_env,
    stage_table,
    start,
    stop,
    wait_healthy,
)
from vocabridge.grid import Cell  # noqa: E402
from vocabridge.grid import cells as grid_cells  # noqa: E402

e2e = pytest.mark.e2e
FIRST = ["prepare@upstream", "prepare@downstream", "spm@upstream", "spm@downstream", "mismatch"]
REPORT_ARTIFACT = ArtifactFilter(key=ArtifactFilterKey(any_=["vocabridge-report"]))


def outputs(project: Path) -> dict[str, float]:
    """The stages' files (not the downloads, not the flow's own record of its last run)."""
    return {str(p.relative_to(project)): p.stat().st_mtime for p in sorted((project / "data").rglob("*"))
            if p.is_file() and "downloads" not in p.parts and p.name != "flow_run.json"}


# The stage graph.

def test_cores_are_shared_among_the_stages_that_run_at_once(monkeypatch):
    import flows.dag as fd
    import flows.pipeline as fp

    dag = Dag({"pretrain": Stage("pretrain", all_cores=True), "upstream@a": Stage("upstream@a", all_cores=True),
               **{f"finetune@{m}": Stage(f"finetune@{m}") for m in "abcd"}})
    monkeypatch.delenv("VOCABRIDGE_THREADS", raising=False)
    monkeypatch.setattr(fd, "cores", lambda: 2)
    monkeypatch.setattr(fd, "busy_elsewhere", lambda: 0)  # a quiet machine (busy: the next test)
    assert fd.share_cores(0) == 2 and fd.share_cores(3) == 3

    def start(pending, running=None, jobs=2):
        return dict(fp.stage_threads(dag, jobs, pending, set(), running or {}))

    # alone: every core; side by side: half each
    assert start(["pretrain"]) == {"pretrain": 2} and start(["finetune@a"]) == {"finetune@a": 2}
    assert start(["finetune@a", "finetune@b"]) == {"finetune@a": 1, "finetune@b": 1}
    assert start(["finetune@c", "finetune@d"], {"finetune@a": 1}) == {"finetune@c": 1}  # one job slot left
    # a long stage shares only with the other long stages, and never takes a core that a running stage holds
    assert start(["pretrain", "upstream@a"]) == {"pretrain": 1, "upstream@a": 1}
    assert start(["pretrain"], {"finetune@a": 1}) == {"pretrain": 1}
    assert start(["finetune@a"], {"pretrain": 2}) == {}  # it waits for a free core
    # a long and a short stage ready together: never more threads than cores
    started = start(["pretrain", "finetune@a", "finetune@b"])
    assert sum(started.values()) == 2 and started.get("pretrain") in (1, 2)
    monkeypatch.setattr(fd, "cores", lambda: 16)
    started = start(list(dag.stages)[2:], jobs=fd.share_cores(0))
    assert fd.share_cores(0) == 4 and started == {f"finetune@{m}": 4 for m in "abcd"}
    monkeypatch.setenv("VOCABRIDGE_THREADS", "3")
    assert start(["pretrain"], {"finetune@a": 0}) == {"pretrain": None}  # the user's own setting wins


def test_a_stage_started_beside_other_work_takes_only_the_free_cores(monkeypatch):
    """Pretraining with both threads beside a process holding a core ran about 5 times slower than with one
    (benchmarks/thread_layout.py --busy): a stage whose threads are the flow's to choose leaves other work's cores
    alone; one whose params fix its threads keeps them."""
    import flows.dag as fd
    import flows.pipeline as fp

    dag = Dag({"pretrain": Stage("pretrain", all_cores=True), "finetune@a": Stage("finetune@a", threads=1),
               "evaluate@b": Stage("evaluate@b")})
    monkeypatch.delenv("VOCABRIDGE_THREADS", raising=False)
    monkeypatch.setattr(fd, "cores", lambda: 4)
    monkeypatch.setattr(fd, "busy_elsewhere", lambda: 3)
    assert dict(fp.stage_threads(dag, 2, ["pretrain"], set(), {})) == {"pretrain": 1}
    assert dict(fp.stage_threads(dag, 2, ["finetune@a", "evaluate@b"], set(), {})) == {"finetune@a": 1,
                                                                                        "evaluate@b": 1}
    monkeypatch.setattr(fd, "busy_elsewhere", lambda: 1)
    assert dict(fp.stage_threads(dag, 2, ["pretrain"], set(), {})) == {"pretrain": 3}
    monkeypatch.setattr(fd, "busy_elsewhere", lambda: 0)
    assert dict(fp.stage_threads(dag, 2, ["pretrain"], set(), {})) == {"pretrain": 4}


@pytest.mark.slow
def test_other_work_is_measured_and_the_flow_s_own_stages_are_not(tmp_path):
    """A busy process outside the flow's process tree counts; the same loop as the flow's own child does not."""
    import subprocess

    from vocabridge.nmt.precision import cpu_elsewhere

    loop = "import time\nend = time.time() + 5\nwhile time.time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", loop])
    try:
        time.sleep(0.5)
        with_child = cpu_elsewhere(3.0)
    finally:
        child.wait()
    # the shell exits at once: its busy loop is nobody's child here, as another user's job is
    subprocess.run(["sh", "-c", f'{sys.executable} -c "$0" >/dev/null 2>&1 &', loop], check=True)
    time.sleep(0.5)
    detached = cpu_elsewhere(3.0)
    # on a quiet machine about 1 apart; with every core busy (other tests, other jobs) the loop's share of a core
    assert detached > with_child + 0.15, (detached, with_child)


def test_a_fine_tune_holds_the_threads_its_params_fix(monkeypatch):
    """A cell's fine-tune runs finetune.train.threads (1: the same weights however many stages run beside it): a
    lone one once held both cores in the flow's count and the next ready stage waited for it, a core idle."""
    import flows.dag as fd
    import flows.pipeline as fp

    dag = Dag({"finetune@a": Stage("finetune@a", threads=1), "upstream@b": Stage("upstream@b", all_cores=True),
               "finetune@c": Stage("finetune@c", threads=4), "evaluate@a": Stage("evaluate@a")})
    monkeypatch.delenv("VOCABRIDGE_THREADS", raising=False)
    monkeypatch.setattr(fd, "cores", lambda: 2)
    monkeypatch.setattr(fd, "busy_elsewhere", lambda: 0)

    def start(pending, running=None):
        return dict(fp.stage_threads(dag, 2, pending, set(), running or {}))

    assert start(["finetune@a"]) == {"finetune@a": 1}
    assert start(["upstream@b"], {"finetune@a": 1}) == {"upstream@b": 1}
    assert start(["evaluate@a"], {"finetune@a": 1}) == {"evaluate@a": 1}
    assert start(["finetune@c"]) == {"finetune@c": 2}  # more threads than cores: it waits for all of them
    assert start(["finetune@c"], {"finetune@a": 1}) == {}


def test_the_flow_reads_each_fine_tune_s_threads_from_params(tmp_path):
    dag = load_dag(copy_project(tmp_path / "project", profile="sato"))
    fine_tunes = [n for n in dag.cells() if n.startswith("finetune@")]
    assert fine_tunes and all(dag.stages[n].threads == 1 for n in fine_tunes)  # finetune.train.threads: 1
    assert all(s.threads == 0 for n, s in dag.stages.items() if n not in fine_tunes)


def test_stage_graph_is_dvc_s_graph_and_follows_new_stages(tmp_path):
    project = copy_project(tmp_path / "project", profile="tiny")
    dot = run(["dvc", "dag", "--dot"], project).stdout
    edges = {tuple(part.strip().strip('";').split('" -> "')) for part in dot.splitlines() if "->" in part}
    dag = load_dag(project)  # DVC's edges; those to stages a row does not draw on are the flow's `after`
    assert {(up, name) for name, s in dag.stages.items() for up in (*s.upstream, *s.after)} == edges
    assert dag.stages["row@ft-tgtv-random"].after == ("generator",) and not dag.stages["row@patt-eg-kd"].after
    assert set(FIRST) <= set(dag.order)
    for name, stage in dag.stages.items():  # topological
        assert all(dag.order.index(up) < dag.order.index(name) for up in stage.upstream)

    spec = yaml.safe_load((project / "dvc.yaml").read_text())
    spec["stages"]["toytrain"] = {"foreach": ["alpha", "beta"], "do": {
        "cmd": "python -c 'print(1)' > data/toy-${item}.txt", "deps": ["data/reports/mismatch.json"],
        "outs": ["data/toy-${item}.txt"]}}
    spec["stages"]["toyreport"] = {"cmd": "cat data/toy-alpha.txt data/toy-beta.txt > data/toy.txt",
                                   "deps": ["data/toy-alpha.txt", "data/toy-beta.txt"], "outs": ["data/toy.txt"],
                                   "meta": {"prefect": {"gpu": True, "retries": 2}}}
    (project / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    dag = load_dag(project)
    assert dag.stages["toytrain@alpha"].upstream == ("mismatch",)
    assert dag.stages["pretrain"].all_cores and dag.stages["generator"].all_cores  # the critical path: every core
    assert not dag.stages["toytrain@alpha"].all_cores
    assert dag.stages["toyreport"].upstream == ("toytrain@alpha", "toytrain@beta")
    assert "gpu" in dag.stages["toyreport"].tags and dag.stages["toyreport"].retries == 2
    assert "item:alpha" in dag.stages["toytrain@alpha"].tags and "gpu" not in dag.stages["toytrain@alpha"].tags
    # the grid: a row@ROW per row of params, and each cell stage GROUP@ROW-SEED of DVC's matrix over rows x seeds
    params = yaml.safe_load((project / "params.yaml").read_text())
    assert dag.rows == sorted(params["rows"])
    cells = set(dag.cells().values())
    assert cells == set(grid_cells(params["rows"], params["seeds"]))
    for group in ("transfer", "finetune", "evaluate"):
        assert {f"{group}@{c.name}" for c in cells} <= set(dag.order)
    with pytest.raises(FlowError, match="no stage in dvc.yaml matches 'nosuch'"):
        dag.select(targets=["nosuch"])


def grid_dag(rows: list[str], seeds: list[int]) -> Dag:
    """A hand-made DAG of the grid's shape: resources, row@ROW, each cell's transfer/finetune/evaluate, report."""
    stages = {"prepare@upstream": Stage("prepare@upstream"), "pretrain": Stage("pretrain", ("prepare@upstream",)),
              "upstream@joint-2": Stage("upstream@joint-2", ("prepare@upstream",)),  # not a row: never a cell
              "generator": Stage("generator", ("pretrain",))}
    for row in rows:
        stages[f"row@{row}"] = Stage(f"row@{row}", ("generator", "pretrain", "upstream@joint-2"))
        for seed in seeds:
            cell = Cell(row, seed).name
            stages[f"transfer@{cell}"] = Stage(f"transfer@{cell}", (f"row@{row}",))
            stages[f"finetune@{cell}"] = Stage(f"finetune@{cell}", (f"transfer@{cell}",))
            stages[f"evaluate@{cell}"] = Stage(f"evaluate@{cell}", (f"finetune@{cell}",))
    stages["report"] = Stage("report", tuple(n for n in stages if n.startswith("evaluate@")))
    return Dag(stages)


def test_rows_and_seeds_select_the_grid_s_cells():
    dag = grid_dag(["ft-tgtv-random", "va-llm", "ft-srcv"], [1, 2, 3])
    assert dag.rows == ["ft-srcv", "ft-tgtv-random", "va-llm"] and len(dag.cells()) == 27
    assert dag.cells()["finetune@ft-tgtv-random-3"] == Cell("ft-tgtv-random", 3)  # the seed follows the last '-'
    shared = {"prepare@upstream", "pretrain", "upstream@joint-2", "generator"}

    def cells_of(selected: Dag) -> set[str]:
        return {n.split("@", 1)[1] for n in selected.order if n.startswith(("transfer@", "finetune@", "evaluate@"))}

    two_rows = dag.select(rows=["va-llm", "ft-srcv"])
    assert cells_of(two_rows) == {f"{r}-{s}" for r in ("va-llm", "ft-srcv") for s in (1, 2, 3)}
    assert set(two_rows.order) - set(dag.stages) == set() and shared <= set(two_rows.order)
    assert {"row@va-llm", "row@ft-srcv"} <= set(two_rows.order) and "row@ft-tgtv-random" not in two_rows.order
    assert "report" not in two_rows.order  # it needs the dropped cells
    two_seeds = dag.select(seeds=[1, 2])
    assert cells_of(two_seeds) == {f"{r}-{s}" for r in dag.rows for s in (1, 2)}
    assert {f"row@{r}" for r in dag.rows} <= set(two_seeds.order) and "report" not in two_seeds.order
    both = dag.select(rows=["va-llm"], seeds=[3])
    assert cells_of(both) == {"va-llm-3"} and set(both.order) == shared | {
        "row@va-llm", "transfer@va-llm-3", "finetune@va-llm-3", "evaluate@va-llm-3"}
    assert dag.select(rows=list(dag.rows), seeds=[1, 2, 3]).order == dag.order  # everything: the report stays
    targeted = dag.select(targets=["transfer@*"], rows=["ft-srcv"])
    assert cells_of(targeted) == {"ft-srcv-1", "ft-srcv-2", "ft-srcv-3"}
    assert not any(n.startswith(("finetune@", "evaluate@")) for n in targeted.order)
    with pytest.raises(FlowError, match=r"unknown row 'fvt' \(rows in dvc.yaml: ft-srcv, ft-tgtv-random, va-llm\)"):
        dag.select(rows=["fvt"])
    with pytest.raises(FlowError, match=r"unknown seed 4 \(seeds in dvc.yaml: 1, 2, 3\)"):
        dag.select(seeds=[4])


def test_cells_a_study_holds_already_are_skipped_with_what_only_they_need(tmp_path):
    """`--missing`: the cells a results folder holds leave the DAG; a row with none left goes, and so does an
    upstream model that only its cells drew on, while a row with a cell left keeps its row stage."""
    dag = grid_dag(["ft-srcv", "va-llm"], [1, 2])
    left = dag.select(skip={Cell("ft-srcv", 1), Cell("ft-srcv", 2), Cell("va-llm", 1)})
    assert set(left.cells().values()) == {Cell("va-llm", 2)} and "row@ft-srcv" not in left.order
    assert {"row@va-llm", "pretrain", "generator"} <= set(left.order) and "report" not in left.order
    assert set(dag.select(seeds=[1], skip={Cell("va-llm", 2)}).cells().values()) == {
        Cell("ft-srcv", 1), Cell("va-llm", 1)}
    sato = load_dag(copy_project(tmp_path / "project", profile="sato"))
    done = {Cell(row, seed) for row in ("ft-tgtv", "mdl") for seed in (1, 2, 3, 4, 5)}
    rest = sato.select(skip=done)
    assert not {"row@ft-tgtv", "row@mdl", "upstream@ft-tgtv", "upstream@mdl"} & set(rest.order)
    assert {"pretrain", "upstream@backward", "row@va-llm", "evaluate@va-llm-5"} <= set(rest.order)
    assert {"upstream@mdl", "evaluate@mdl-5"} <= set(sato.select(skip=done - {Cell("mdl", 5)}).order)


def test_a_study_s_committed_cells_count_under_today_s_knobs_and_a_split_seed_is_named(tmp_path):
    """`flows.study.committed`: a committed record with today's knobs and condition counts (one of other knobs does
    not), and a cell still to run of a seed whose cells ran on another base model than this workspace's is named:
    it would not pair with them."""
    from flows.study import committed
    from vocabridge import workspace as paths
    from vocabridge.config import load_params
    from vocabridge.fileio import sha256_file
    from vocabridge.grid import knobs_digest
    from vocabridge.rows import cell_condition as condition
    from vocabridge.rows import resources
    from vocabridge.transfer import resolved_knobs

    project = copy_project(tmp_path / "project", profile="sato")
    params = load_params(project / "params.yaml")
    results = tmp_path / "results"

    def record(row: str, seed: int, sha: str, knobs: str | None = None) -> None:
        folder = results / "cells" / Cell(row, seed).path
        folder.mkdir(parents=True)
        (folder / "record.json").write_text(json.dumps({
            "row": row, "seed": seed, "metrics": {"bleu": 10.0}, "upstream": {"name": "base", "sha256": sha},
            "knobs_digest": knobs or knobs_digest(resolved_knobs(row, params.rows)),
            "condition_digest": condition(params, row)}))

    record("ft-srcv", 4, "a" * 64)
    record("va-llm", 4, "a" * 64, knobs="other")
    held = committed(project, results, [Cell("ft-srcv", 4), Cell("va-llm", 4), Cell("in-domain", 5)])
    assert set(held.cells) == {Cell("ft-srcv", 4)}  # va-llm-4 ran other knobs: to run again
    assert held.warnings == ["seed 4: its committed cells ran on upstream model 'base' aaaaaaaa, which this "
                             "workspace has not trained yet: va-llm will not pair with them (run a seed whole on "
                             "one machine)"]
    weights = project / resources("va-llm", params)["upstream"]
    assert weights == project / paths.PRETRAINED / "model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"this machine's base model")
    ours = sha256_file(weights)
    (warning,) = committed(project, results, [Cell("va-llm", 4)]).warnings
    assert f"'base' aaaaaaaa, this workspace's is {ours[:8]}: va-llm will not pair" in warning
    shutil.rmtree(results / "cells" / "ft-srcv")
    record("ft-srcv", 4, ours)  # the seed's cells on this machine's model: they pair, nothing to say
    assert committed(project, results, [Cell("va-llm", 4), Cell("mdl", 4)]).warnings == []


def test_collect_copies_the_workspace_s_cells_that_pool_under_its_params_only(tmp_path):
    """`flows.study.collect`: a workspace record of today's knobs and condition is copied into the results folder; one
    left from before a change of params is not, and the results folder's own cell of that name stays as it was."""
    from flows.study import collect
    from vocabridge.config import load_params
    from vocabridge.grid import knobs_digest
    from vocabridge.rows import cell_condition as condition
    from vocabridge.transfer import resolved_knobs

    project = copy_project(tmp_path / "project", profile="sato")
    params = load_params(project / "params.yaml")

    def record(root: Path, row: str, seed: int, condition_digest: str, bleu: float) -> None:
        folder = root / Cell(row, seed).path
        folder.mkdir(parents=True)
        (folder / "record.json").write_text(json.dumps({
            "row": row, "seed": seed, "metrics": {"bleu": bleu}, "upstream": {"name": "base", "sha256": "a" * 64},
            "knobs_digest": knobs_digest(resolved_knobs(row, params.rows)), "condition_digest": condition_digest}))

    cells, results = project / "data" / "cells", tmp_path / "results"
    record(cells, "ft-srcv", 1, condition(params, "ft-srcv"), 10.0)
    record(cells, "va-llm", 1, "another condition", 1.0)
    record(results / "cells", "va-llm", 1, condition(params, "va-llm"), 12.0)
    assert collect(project, results) == [Cell("ft-srcv", 1)]
    kept = json.loads((results / "cells" / Cell("va-llm", 1).path / "record.json").read_text())
    assert kept["metrics"]["bleu"] == 12.0 and (results / "cells" / Cell("ft-srcv", 1).path / "record.json").is_file()


def test_the_deepest_ready_stage_starts_first_so_cells_finish_one_by_one():
    dag = grid_dag(["ft-srcv", "va-llm"], [1, 2])
    order, done, pending = [], set(), list(dag.order)
    while pending:  # one job: start, finish, repeat
        (name,) = dag.startable(pending, done, 1)
        order.append(name)
        done.add(name)
        pending.remove(name)
    assert order[-1] == "report" and set(order) == set(dag.order)
    first_cell = [n for n in order if n.endswith("@ft-srcv-1")]
    assert first_cell == ["transfer@ft-srcv-1", "finetune@ft-srcv-1", "evaluate@ft-srcv-1"]
    assert order.index("evaluate@ft-srcv-1") < min(order.index(f"finetune@{c}") for c in ("ft-srcv-2", "va-llm-1"))
    for name in order:  # never before its upstream stages
        assert all(order.index(u) < order.index(name) for u in dag.stages[name].upstream)
    assert dag.startable(["finetune@va-llm-2", "evaluate@ft-srcv-1"], set(dag.order) - {
        "finetune@va-llm-2", "evaluate@ft-srcv-1"}, 1) == ["evaluate@ft-srcv-1"]
    assert dag.startable(["report"], set(), 2) == [] and dag.startable(list(dag.order), set(), 0) == []


def restart(dag: Dag, first: set[str], jobs: int = 2) -> list[str]:
    """The fine-tunes in the order a run starts them, `jobs` at once: a stage DVC skips takes 1 tick, a fine-tune
    100, any other stage 10 (a transfer that distils, a row that hashes)."""
    pending, done, running, started, clock = list(dag.order), set(), {}, [], 0
    while pending or running:
        for name in dag.startable(pending, done, jobs - len(running), list(running), first):
            cost = 1 if name in first else 100 if name.startswith("finetune@") else 10
            running[name] = clock + cost
            pending.remove(name)
            started += [name] if name.startswith("finetune@") else []
        clock = min(running.values())
        for name in [n for n, end in running.items() if end == clock]:
            done.add(name)
            del running[name]
    return started


def test_a_restarted_grid_resumes_the_cells_it_had_started_before_new_ones():
    """va-llm's two cells stopped midway through their fine-tunes (checkpoints on disk): every stage up to them has
    nothing to do. Deepest first alone starts ft-srcv's cells first (DVC's order, and their stages are ready first
    while va-llm's wait behind cheap up-to-date ones); the stages DVC will skip going first reach va-llm's."""
    dag = grid_dag(["ft-srcv", "va-llm"], [1, 2])
    nothing = {"prepare@upstream", "pretrain", "upstream@joint-2", "generator", "row@ft-srcv", "row@va-llm",
               "transfer@va-llm-1", "transfer@va-llm-2", "evaluate@ft-srcv-1"}
    first = dag.skippable(nothing)
    assert first == nothing - {"evaluate@ft-srcv-1"}  # its fine-tune has work: it will run again after it
    assert restart(dag, first)[:2] == ["finetune@va-llm-1", "finetune@va-llm-2"]
    assert restart(dag, set())[:2] == ["finetune@ft-srcv-1", "finetune@ft-srcv-2"]
    assert dag.skippable(set()) == set() and dag.skippable(nothing - {"pretrain"}) == {"prepare@upstream",
                                                                                      "upstream@joint-2"}


@pytest.mark.slow
def test_nothing_to_do_asks_dvc_once_for_every_stage(tmp_path):
    from flows.dvcrun import nothing_to_do, repro_stage

    run(["dvc", "init", "--no-scm", "-q"], tmp_path)
    stages = {"a": {"cmd": "echo one > a.txt", "outs": ["a.txt"]},
              "b": {"foreach": [1, 2], "do": {"cmd": "echo ${item} > b${item}.txt", "deps": ["a.txt"],
                                              "outs": ["b${item}.txt"]}}}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    assert nothing_to_do(["a", "b@1", "b@2"], tmp_path) == set()
    repro_stage("a", tmp_path, lock_timeout=10)
    repro_stage("b@2", tmp_path, lock_timeout=10)
    assert nothing_to_do(["a", "b@1", "b@2"], tmp_path) == {"a", "b@2"}
    assert nothing_to_do(["a", "no-such-stage"], tmp_path) == set()  # DVC cannot say: nothing is skipped early
    assert nothing_to_do([], tmp_path) == set()


def test_a_row_waits_for_what_it_draws_on_not_for_every_upstream_model(tmp_path):
    """dvc.yaml's row@ROW reads the whole data/models/upstream folder; the flow starts a row once its own upstream
    model (and CBOW vectors, generator) exist, so that on a fresh machine the base model's rows need not wait for
    the FT-tgtV, MDL and backward pretrainings; `--rows` leaves out the pretrainings only other rows need."""
    dag = load_dag(copy_project(tmp_path / "project", profile="sato"))
    assert dag.stages["row@ft-srcv"].upstream == ("cbow", "pretrain")  # sato trains no generator
    assert dag.stages["row@va-llm-bt"].upstream == ("cbow", "pretrain")
    assert dag.stages["row@ft-tgtv"].upstream == ("cbow", "upstream@ft-tgtv")
    assert dag.stages["row@mdl"].upstream == ("cbow", "upstream@mdl")
    assert "upstream@backward" in dag.stages["backtranslate"].upstream
    assert not {"upstream@ft-tgtv", "upstream@mdl", "pretrain"} & set(dag.stages["backtranslate"].upstream)
    base_rows = dag.select(rows=["ft-srcv", "va-llm"], seeds=[2])
    assert {"pretrain", "upstream@backward", "backtranslate", "finetune@va-llm-2"} <= set(base_rows.order)
    assert not {"upstream@ft-tgtv", "upstream@mdl"} & set(base_rows.order)  # only row@ft-tgtv, row@mdl need them
    assert {"upstream@ft-tgtv", "upstream@mdl"} <= set(dag.select(rows=["ft-tgtv", "mdl"]).order)
    assert {"upstream@ft-tgtv", "upstream@mdl", "mismatch"} <= set(dag.select(seeds=[2]).order)

    # a row reads the folder the other pretrainings write into: DVC's lock refuses it while one of them runs
    assert dag.conflict("upstream@mdl", "row@ft-srcv") and dag.conflict("row@ft-srcv", "upstream@mdl")
    assert not dag.conflict("upstream@mdl", "cbow") and not dag.conflict("upstream@mdl", "upstream@ft-tgtv")
    pending = ["row@ft-srcv", "row@va-llm", "upstream@ft-tgtv"]
    done = set(dag.order) - set(pending) - {"upstream@mdl"}
    assert dag.startable(pending, done, 2, running=["upstream@mdl"]) == ["upstream@ft-tgtv"]
    assert set(dag.startable(pending, done | {"upstream@mdl"}, 2)) == {"row@ft-srcv", "row@va-llm"}
    # a row that ran before another upstream model was trained runs again after it (DVC sees the folder changed)
    assert dag.stages["row@ft-srcv"].after == ("generator", "upstream@backward", "upstream@ft-tgtv", "upstream@mdl")
    assert dag.rerun_after("upstream@mdl", {"row@ft-srcv", "row@mdl", "cbow"}) == ["row@ft-srcv"]
    assert dag.rerun_after("upstream@mdl", {"cbow"}) == [] and dag.rerun_after("pretrain", {"row@ft-srcv"}) == []
    # two stages picked together must not conflict either
    assert dag.startable(["upstream@ft-tgtv", "row@ft-srcv"], done | {"upstream@mdl"}, 2) == ["row@ft-srcv"]
    # a stage that writes into the folder waits for the row stages about to run (those that wait for CBOW at most:
    # seconds), so that their cells run beside it; not for a row whose own upstream model is still to train
    trained = dag.ancestors("cbow") | {"cbow"}
    pending = ["generator", "upstream@mdl", "row@ft-srcv", "row@mdl"]
    assert dag.held("generator", set(pending), trained) and dag.held("upstream@mdl", set(pending), trained)
    assert dag.held("generator", set(pending) | {"cbow"}, trained - {"cbow"})  # CBOW is quick
    assert dag.startable(pending, trained, 4) == ["row@ft-srcv"]
    assert dag.ready(pending[:2] + ["row@mdl"], trained) == ["generator", "upstream@mdl"]  # row@mdl needs MDL
    assert dag.ready(pending, trained - {"cbow"}, running=["cbow"]) == []  # the rows wait for CBOW, the rest for them
    # a row that another pretraining locks out holds back nothing
    ready = dag.ready(pending, trained, running=["upstream@ft-tgtv"])
    assert set(ready) == {"generator", "upstream@mdl", "row@ft-srcv"}


def test_a_row_with_a_wrong_config_keeps_dvc_s_edges_and_its_stage_says_why(tmp_path):
    project = copy_project(tmp_path / "project", profile="sato")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["rows"]["ft-srcv"] = {"upstream": "nosuch"}
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    dag = load_dag(project)
    assert dag.stages["row@ft-srcv"].upstream == (
        "cbow", "generator", "pretrain", "upstream@backward", "upstream@ft-tgtv", "upstream@mdl")
    assert dag.stages["row@va-llm"].upstream == ("cbow", "pretrain")
    proc = run([sys.executable, "-m", "stages.row", "ft-srcv"], project)
    assert proc.returncode != 0
    assert "rows.ft-srcv.upstream: 'nosuch' is not an upstream model" in proc.stderr


TOY_GRID = {"stages": {
    "row": {"foreach": "${rows}", "do": {"cmd": "echo ${key} > data/rows/${key}.txt",
                                         "outs": ["data/rows/${key}.txt"]}},
    "toycell": {"matrix": {"row": "${rows}", "seed": "${seeds}"},
                "cmd": "echo ${item.row} ${item.seed} > data/cells/${item.row}-${item.seed}.txt",
                "deps": ["data/rows/${item.row}.txt"], "params": ["rows.${item.row}"],
                "outs": ["data/cells/${item.row}-${item.seed}.txt"]},
    "toyreport": {"cmd": "cat data/cells/* > data/report.txt", "deps": ["data/cells"], "outs": ["data/report.txt"]}}}


def test_dvc_s_matrix_over_rows_and_seeds_names_each_cell_row_dash_seed(tmp_path):
    """dvc.yaml's matrix over params' `rows` (a mapping: its keys) and `seeds` makes stages GROUP@ROW-SEED, the
    names Cell.name gives and Dag.select reads."""
    run(["dvc", "init", "--no-scm", "-q"], tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"rows": {"in-domain": {}, "va-llm": {"k": 5}},
                                                           "seeds": [1, 3]}))
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(TOY_GRID, sort_keys=False))
    dag = load_dag(tmp_path)
    assert dag.rows == ["in-domain", "va-llm"]
    assert sorted(dag.cells()) == ["toycell@in-domain-1", "toycell@in-domain-3", "toycell@va-llm-1",
                                   "toycell@va-llm-3"]
    assert dag.stages["toycell@va-llm-3"].upstream == ("row@va-llm",)
    assert set(dag.stages["toyreport"].upstream) == set(dag.cells())  # the report reads the cells folder
    only = dag.select(rows=["va-llm"], seeds=[3])
    assert only.order == ["row@va-llm", "toycell@va-llm-3"]


def test_overrides_change_one_row_s_knob_or_the_seeds(tmp_path):
    """`-S rows.ROW.KNOB=V` sets that row's knob, written out or not (a profile's `va-llm: {}`), and nothing else;
    `-S seeds=[...]` the seeds; a row or knob that does not exist is an error that says so."""
    from flows.experiment import apply_overrides

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"rows": {"ft-srcv": {}, "va-llm": {}, "va-llm-low": {"method": "va-llm",
                                      "k": 10}}, "seeds": [1, 2], "spm": {"vocab_size": 8000}}, sort_keys=False))
    apply_overrides(tmp_path, ["rows.va-llm.k=5", "rows.va-llm-low.k=20", "seeds=[1,2,3]"])
    data = yaml.safe_load(params.read_text())
    assert data["rows"] == {"ft-srcv": {}, "va-llm": {"k": 5}, "va-llm-low": {"method": "va-llm", "k": 20}}
    assert data["seeds"] == [1, 2, 3] and data["spm"] == {"vocab_size": 8000}
    with pytest.raises(FlowError, match=r"override 'rows.fvt.k=3'.*no row 'fvt' in params.yaml: `\+rows.fvt=\{\}`"):
        apply_overrides(tmp_path, ["rows.fvt.k=3"])
    with pytest.raises(FlowError, match=r"override 'rows.va-llm.kk=3'.*a row has no knob 'kk'"):
        apply_overrides(tmp_path, ["rows.va-llm.kk=3"])
    apply_overrides(tmp_path, ["+rows.fvt={}"])  # a new row, as DVC adds a key
    assert yaml.safe_load(params.read_text())["rows"]["fvt"] == {}


def test_the_cli_and_the_deployments_select_by_rows_and_seeds(monkeypatch):
    """`--rows`/`--seeds` reach the flow as `rows`/`seeds`, and every parameter a deployment of prefect.yaml sets
    is one its flow takes (no `methods` left over)."""
    import inspect

    import flows.pipeline as fp
    from vocabridge.config import flatten

    calls = []
    monkeypatch.setattr(fp, "pipeline", lambda **kwargs: calls.append(("pipeline", kwargs)) or "table")
    monkeypatch.setattr(fp, "sweep", lambda **kwargs: calls.append(("sweep", kwargs)) or ["t1"])
    assert fp.main(["--rows", "va-llm", "ft-srcv", "--seeds", "1", "2", "--no-estimate"]) == 0
    assert fp.main(["--sweep", "rows.va-llm.k", "1", "5", "--rows", "va-llm", "--seeds", "1"]) == 0
    assert fp.main(["--seeds", "4", "--missing", "--collect", "../main/results/sato"]) == 0
    (_, run_args), (_, sweep_args), (_, study_args) = calls
    assert run_args["rows"] == ["va-llm", "ft-srcv"] and run_args["seeds"] == [1, 2] and not run_args["estimate"]
    assert run_args["missing"] is None and run_args["collect"] is None
    assert study_args["missing"] == "" and study_args["collect"] == "../main/results/sato"  # "": results/PROFILE
    assert sweep_args["key"] == "rows.va-llm.k" and sweep_args["values"] == ["1", "5"]
    assert sweep_args["rows"] == ["va-llm"] and sweep_args["seeds"] == [1]
    flows = {"flows/pipeline.py:pipeline": pipeline, "flows/pipeline.py:sweep": sweep}
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    for deployment in spec["deployments"]:
        flow_fn = flows.get(deployment["entrypoint"])
        if flow_fn is not None:
            assert set(deployment.get("parameters", {})) <= set(inspect.signature(flow_fn.fn).parameters), deployment
    deployments = {d["name"]: d for d in spec["deployments"]}
    assert deployments["one-row"]["parameters"]["rows"] == ["ft-srcv"]
    assert deployments["ablation"]["parameters"]["key"] in flatten(yaml.safe_load((ROOT / "params.yaml").read_text()))


# The flow on the tiny profile's workspace (Prefect's ephemeral mode): the session's run of the whole DAG.

@pytest.fixture
def flow_copy(tiny_project, tmp_path) -> Path:
    """This test's own copy of the flow's finished workspace (its git state committed)."""
    return copy_workspace(tiny_project, tmp_path / "project")


def overlapping(tasks: dict) -> list[tuple[str, str]]:
    """The pairs of task runs whose run times overlapped."""
    spans = sorted((t.start_time, t.end_time, name) for name, t in tasks.items())
    return [(a, b) for i, (_, end_a, a) in enumerate(spans) for start_b, _, b in spans[i + 1:] if start_b < end_a]


@e2e
def test_flow_runs_every_stage_through_dvc_in_dependency_order(tiny_flow):
    project, table, tasks = tiny_flow.project, tiny_flow.table, tiny_flow.tasks
    dag = load_dag(project)
    assert stage_table(table) == {name: "ran" for name in dag.order}
    assert run(["dvc", "status"], project).stdout.strip() == "Data and pipelines are up to date."
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert set(lock) == set(dag.order)
    report = (project / "data/reports/results/report.md").read_text().strip()
    assert table.startswith(f"## vocabridge\n\n{report}\n\n### Stages")  # the report stage's table leads
    record = json.loads((project / "data/reports/flow_run.json").read_text())
    assert record["expected_flow_seconds"] > 0  # the estimate was logged before the stages started
    assert set(tasks) == set(dag.order) and all(t.state_type == "COMPLETED" for t in tasks.values())
    for name, stage in dag.stages.items():
        assert "stage:" + name.split("@")[0] in tasks[name].tags
        for up in stage.upstream:
            assert tasks[up].end_time <= tasks[name].start_time, (up, name)
    # a row that uses no generator hashed its files before the generator started (and again after it: seconds)
    assert tasks["row@ft-tgtv-random"].end_time <= tasks["generator"].start_time
    up, down = tasks["prepare@upstream"], tasks["prepare@downstream"]
    # Independent stages are submitted together: each was queued before the other finished. (Whether their
    # DVC processes overlap as well depends on Prefect's thread start-up on a loaded machine: the tiny
    # prepare stages last about 2 s.)
    assert up.expected_start_time < down.end_time and down.expected_start_time < up.end_time
    # two at a time on two cores: over the tiny grid's stages, some ran side by side (one at a time, none would)
    assert overlapping(tasks), "no two stages ran at once"


@e2e
def test_flow_result_is_published_as_markdown_artifact(tiny_flow):
    # read from the Prefect server the run used, when the run ended (tests.flows_helpers.flow_artifacts)
    reports = [a for a in tiny_flow.artifacts if a[0] == "vocabridge-report"]
    assert reports == [("vocabridge-report", "markdown", tiny_flow.table)]


@e2e
def test_rerun_on_an_up_to_date_workspace_runs_no_stage(flow_copy):
    project = flow_copy
    before, lock = outputs(project), (project / "dvc.lock").read_text()
    table = pipeline(workspace=str(project), targets=["mismatch"], estimate=False)
    assert stage_table(table) == {name: "up-to-date" for name in FIRST}
    report = json.loads((project / "data/reports/mismatch.json").read_text())  # no report stage: the metrics
    assert f"| data/reports/mismatch.json | de.fertility.new | {report['de']['fertility']['new']} |" in table
    assert outputs(project) == before and (project / "dvc.lock").read_text() == lock
    record = json.loads((project / "data/reports/flow_run.json").read_text())  # what the sittings did and cost
    assert record["sittings"][-1]["stages"] == {n: "up-to-date" for n in FIRST}  # this sitting looked them up
    everything = load_dag(project).order  # the first sitting ran the whole DAG
    assert {name: stage["outcome"] for name, stage in record["stages"].items()} == {n: "ran" for n in everything}
    assert len(record["sittings"]) == 2 and all(record["stages"][n]["seconds"] > 0 for n in everything)


@e2e
@pytest.mark.long
def test_a_study_runs_only_the_cells_its_results_folder_lacks_and_collects_each_as_it_lands(flow_copy):
    """`--collect` copies each cell into results/PROFILE/cells as its evaluation finishes; `--missing` then finds
    nothing to run, and after a cell is lost from the folder runs that cell's stages only and collects it again."""
    from vocabridge.config import load_params

    project = flow_copy
    results = project / "results" / load_params(project / "params.yaml").profile
    grid = load_dag(project).cells()
    every = set(grid.values())
    pipeline(workspace=str(project), collect="", estimate=False)  # up to date: each evaluation is looked up
    assert {Cell(p.parent.parent.name, int(p.parent.name[1:])) for p in results.glob("cells/*/s*/record.json")} == every
    assert pipeline(workspace=str(project), missing="", estimate=False) == \
        f"nothing to run: {results} holds every selected cell"
    lost = sorted(every, key=lambda c: c.name)[0]
    shutil.rmtree(results / "cells" / lost.path)
    table = pipeline(workspace=str(project), missing="", collect="", estimate=False)
    assert {grid[n] for n in stage_table(table) if n in grid} == {lost}  # no other cell's stage
    assert (results / "cells" / lost.path / "record.json").is_file()


@e2e
@pytest.mark.long
def test_a_new_upstream_model_leaves_the_other_rows_cells_alone_and_dvc_lock_current(flow_copy):
    """A row added on a new upstream model (FT-tgtV) trains it; ft-srcv's row stage, which reads the folder that
    model lands in, runs again after it (DVC sees the folder changed), rewrites the same file, and its cell is up
    to date: at the end `dvc status` finds nothing to run for either row."""
    project = flow_copy
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["upstreams"] = {"ft-tgtv": {"vocab": "downstream"}}
    params["rows"]["ft-tgtv"] = {}
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(["git", "commit", "-qam", "ft-tgtv"], project)
    row_file = (project / "data/rows/ft-srcv.json").read_bytes()
    table = pipeline(workspace=str(project), rows=["ft-srcv", "ft-tgtv"], estimate=False)
    outcomes = stage_table(table)
    assert outcomes["upstream@ft-tgtv"] == "ran" and outcomes["evaluate@ft-tgtv-1"] == "ran"
    assert outcomes["row@ft-srcv"] == "ran" and outcomes["finetune@ft-srcv-1"] == "up-to-date"
    assert (project / "data/rows/ft-srcv.json").read_bytes() == row_file
    status = run(["dvc", "status", "row@ft-srcv", "row@ft-tgtv", "evaluate@ft-srcv-1", "evaluate@ft-tgtv-1"],
                 project)
    assert status.returncode == 0 and "changed" not in status.stdout, status.stdout


@e2e
def test_overrides_run_as_experiments_and_leave_the_workspace_alone(flow_copy):
    project = flow_copy  # committed: experiments need a commit to start from
    params, lock, before = (project / "params.yaml").read_text(), (project / "dvc.lock").read_text(), outputs(project)
    tables = sweep(key="spm.downstream.de.vocab_size", values=["900", "1000"], workspace=str(project), estimate=False,
                   targets=["mismatch"])
    assert stage_table(tables[0])["spm@downstream"] == "ran" and stage_table(tables[0])["mismatch"] == "ran"
    assert stage_table(tables[0])["spm@upstream"] == "restored"  # from DVC's run cache, not rerun
    assert set(stage_table(tables[1]).values()) == {"restored"}  # 1000 is the workspace's own value
    assert "| de.vocab_size.new | 900 |" in tables[0]
    assert (project / "params.yaml").read_text() == params and (project / "dvc.lock").read_text() == lock
    assert outputs(project) == before
    assert not list((project / ".dvc/tmp/flows").iterdir())
    shown = json.loads(run(["dvc", "exp", "show", "--json"], project).stdout)
    exps = {e["name"]: e for commit in shown for e in (commit.get("experiments") or [])}
    assert set(exps) == {"vocab_size-900", "vocab_size-1000"}
    data = exps["vocab_size-900"]["revs"][0]["data"]
    assert data["params"]["params.yaml"]["data"]["spm"]["downstream"]["de"]["vocab_size"] == 900
    assert data["metrics"]["data/reports/mismatch.json"]["data"]["de"]["vocab_size"]["new"] == 900
    with pytest.raises(FlowError, match="override 'spm.nosuchkey=3'"):
        pipeline(workspace=str(project), overrides=["spm.nosuchkey=3"], targets=["mismatch"], estimate=False)


@e2e
def test_two_flows_at_once_on_one_workspace(flow_copy, tmp_path):
    """Both force spm@downstream while a third DVC process writes it: both wait, then run one after the other.

    The test holds DVC's own lock on the stage's outputs (as `dvc repro` does while a stage runs) until both flows
    have reported waiting, so that they meet the lock whatever their start-up times.
    """
    from dvc.repo import Repo
    from dvc.rwlock import rwlock

    project = flow_copy
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    logs = [tmp_path / f"flow{i}.log" for i in range(2)]
    with Repo(str(project)) as repo:
        stage = next(s for s in repo.index.stages if s.name == "spm@downstream")
        outs = [out.fs_path for out in stage.outs]
        with rwlock(repo.tmp_dir, repo.fs, "a test holding spm@downstream", [], outs, False):
            procs = []
            for i, log in enumerate(logs):
                cmd = [sys.executable, "-m", "flows.pipeline", "--workspace", str(project), "--targets",
                       "spm@downstream", "--force", "--no-estimate"]
                with log.open("w") as out:
                    procs.append(subprocess.Popen(cmd, cwd=Path(__file__).parents[1],
                                                  env=prefect_env(tmp_path / f"home{i}"), stdout=out,
                                                  stderr=subprocess.STDOUT, text=True))
            deadline = time.time() + 180
            while not all("waiting" in log.read_text() for log in logs):
                assert time.time() < deadline and all(p.poll() is None for p in procs), \
                    "\n".join(log.read_text()[-3000:] for log in logs)
                time.sleep(1)
    codes = [p.wait(timeout=240) for p in procs]
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n".join(text[-3000:] for text in texts)
    assert all(stage_table(text)["spm@downstream"] == "ran" for text in texts)
    assert run(["dvc", "status", "mismatch"], project).stdout.strip() == "Data and pipelines are up to date."
    after = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert after["spm@downstream"]["outs"] == lock["spm@downstream"]["outs"]  # same bytes as before
    proc = run(["dvc", "checkout", "--relink", "--with-deps", "mismatch"], project)
    assert proc.returncode == 0, proc.stderr


# Reliability: toy stages appended to a test copy's dvc.yaml (tmp only), run by the real flow and DVC.

FLAKY = """import pathlib, sys
count = pathlib.Path("data/attempts-" + sys.argv[1])
count.parent.mkdir(exist_ok=True)
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
if sys.argv[1] == "broken" or n == 1:
    sys.exit(f"error: simulated {'permanent' if sys.argv[1] == 'broken' else 'transient'} failure ({n})")
pathlib.Path(f"data/{sys.argv[1]}.txt").write_text(f"{sys.argv[1]}\\n")
"""


@pytest.fixture
def toy_project(tmp_path):
    project = copy_project(tmp_path / "project", profile=None)
    (project / "flaky.py").write_text(FLAKY)
    spec = yaml.safe_load((project / "dvc.yaml").read_text())
    for name, deps, retries in (("flaky", [], 2), ("sibling", [], 0), ("broken", ["data/sibling.txt"], 1),
                                ("after", ["data/broken.txt"], 0)):
        spec["stages"][name] = {"cmd": f"python flaky.py {name}", "deps": ["flaky.py", *deps],
                                "outs": [f"data/{name}.txt"], "meta": {"prefect": {"retries": retries}}}
    # sibling runs beside flaky, so it makes data/ itself rather than race flaky's mkdir
    spec["stages"]["sibling"]["cmd"] = ("python -c \"import os; os.makedirs('data', exist_ok=True); "
                                        "open('data/sibling.txt', 'w').write('ok')\"")
    (project / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return project


@e2e
def test_a_transient_failure_is_retried_and_the_flow_completes(toy_project):
    table = pipeline(workspace=str(toy_project), targets=["flaky"], retry_delay=0.2, estimate=False)
    assert stage_table(table) == {"flaky": "ran"}
    assert (toy_project / "data/attempts-flaky").read_text() == "2"
    assert run(["dvc", "status", "flaky"], toy_project).stdout.strip() == "Data and pipelines are up to date."


@e2e
def test_a_lasting_failure_fails_the_flow_with_the_stage_s_error_and_keeps_what_succeeded(toy_project):
    state = pipeline(workspace=str(toy_project), targets=["after", "flaky"], retry_delay=0.2, return_state=True,
                     estimate=False)
    assert state.is_failed()
    with pytest.raises(StageError) as err:
        state.result()
    assert str(err.value).startswith("stage 'broken' failed: error: simulated permanent failure (2)")
    assert "not run: after" in str(err.value) and "\n" not in str(err.value)
    assert (toy_project / "data/attempts-broken").read_text() == "2"  # retried once
    assert not (toy_project / "data/attempts-after").exists()
    record = json.loads((toy_project / "data/reports/flow_run.json").read_text())  # the cost, failure included
    assert {name: stage["outcome"] for name, stage in record["stages"].items()} == {
        "flaky": "ran", "sibling": "ran", "broken": "failed"}
    for ok in ("sibling", "flaky"):  # succeeded in the failed run: in dvc.lock and DVC's cache
        assert run(["dvc", "status", ok], toy_project).stdout.strip() == "Data and pipelines are up to date."
    (toy_project / "data/sibling.txt").unlink()
    assert run(["dvc", "checkout", "sibling"], toy_project).returncode == 0
    assert (toy_project / "data/sibling.txt").read_text() == "ok"


# Deployments on a real Prefect server, with the spm stages scaled out to a second work pool.

@e2e
@pytest.mark.long
def test_deployment_on_a_real_server_scales_stages_out_through_a_dvc_remote(tmp_path, download_cache, tiny_project):
    """`prefect deploy` from prefect.yaml; the `full` deployment runs on a cpu pool and sends spm@* to the
    `gpu` pool, whose worker runs each in its own clone with data through a local-folder DVC remote; then the
    `ablation` deployment sweeps va-llm's k over 1 and 20 on the tiny profile (up to transfer@va-llm-SEED of its
    first seed), one DVC experiment each, restoring what k does not change (the pretrained model, CBOW) from DVC's
    run cache, which holds the session's tiny run."""
    import shutil

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    project = add_flows(copy_project(tmp_path / "project", profile="tiny", downloads=download_cache))
    store = tmp_path / "store"
    store.mkdir()
    assert run(["dvc", "remote", "add", "--local", "-d", "shared", str(store)], project).returncode == 0
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = prefect_env(tmp_path / "prefect", api)
    procs = []
    try:
        server_log = tmp_path / "server.log"
        procs.append(start([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                            str(port)], project, prefect_env(tmp_path / "prefect"), server_log))
        wait_healthy(api, procs[0], server_log)
        for pool in ("vocabridge-cpu", "vocabridge-gpu"):
            proc = prefect_cli(["work-pool", "create", pool, "--type", "process"], project, env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        proc = prefect_cli(["--no-prompt", "deploy", "--all"], project, env, timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        for pool in ("vocabridge-cpu", "vocabridge-gpu"):
            procs.append(start([sys.executable, "-m", "prefect", "worker", "start", "--pool", pool, "--type",
                                "process"], project, env, tmp_path / f"{pool}.log"))
        params = {"targets": ["mismatch"], "remote_stages": ["spm@*"], "estimate": False}
        proc = prefect_cli(["deployment", "run", "vocabridge/full", "--params", json.dumps(params), "--watch",
                            "--watch-interval", "2", "--watch-timeout", "300"], project, env, timeout=330)
        logs = "\n".join(p.read_text()[-3000:] for p in tmp_path.glob("*.log"))
        assert proc.returncode == 0 and "Completed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:] + logs
        with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            report = client.read_artifacts(artifact_filter=REPORT_ARTIFACT, sort=ArtifactSort.CREATED_DESC,
                                           limit=1)[0].data
            stage_runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["vocabridge-stage"])),
                                               limit=10)
            deployments = {d.name for d in client.read_deployments(limit=20)}
        # the ablation deployment: Sato et al.'s k sweep of va-llm, one DVC experiment per value, up to the stage
        # that k changes (fine-tuning and evaluating each initial model would add nothing to what is tested here)
        assert run(["git", "add", "-A"], project).returncode == 0
        assert run(["git", "commit", "-qm", "before the sweep"], project).returncode == 0
        # DVC's cache and run cache as a machine that ran the tiny DAG before has them: nothing is pretrained again
        shutil.copytree(tiny_project / ".dvc/cache", project / ".dvc/cache", dirs_exist_ok=True)
        seed = yaml.safe_load((project / "params.yaml").read_text())["seeds"][0]
        sweep_params = {"rows": ["va-llm"], "seeds": [seed], "values": ["1", "20"],
                        "targets": [f"transfer@va-llm-{seed}"], "estimate": False}
        proc = prefect_cli(["deployment", "run", "vocabridge-sweep/ablation", "--params", json.dumps(sweep_params),
                            "--watch", "--watch-interval", "2", "--watch-timeout", "1800"], project, env, timeout=1830)
        logs = "\n".join(p.read_text()[-3000:] for p in tmp_path.glob("*.log"))
        assert proc.returncode == 0 and "Completed" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:] + logs
        with temporary_settings({PREFECT_API_URL: api}), get_client(sync_client=True) as client:
            swept = [a.data for a in client.read_artifacts(artifact_filter=REPORT_ARTIFACT,
                                                           sort=ArtifactSort.CREATED_DESC, limit=2)]
    finally:
        for proc in reversed(procs):
            stop(proc)
    assert deployments == {"full", "one-row", "ablation", "gpu"}
    assert sorted(r.name for r in stage_runs) == ["spm@downstream", "spm@upstream"]
    assert all(r.state_type == "COMPLETED" for r in stage_runs)
    outcomes = stage_table(report)
    assert outcomes["spm@upstream"] == outcomes["spm@downstream"] == "restored"  # run by the gpu worker
    assert outcomes["prepare@upstream"] == outcomes["mismatch"] == "ran"
    assert run(["dvc", "status", "mismatch"], project).stdout.strip() == "Data and pipelines are up to date."
    assert list((store / "runs").rglob("*")), "the worker pushed no run-cache entry"
    shown = json.loads(run(["dvc", "exp", "show", "--json"], project).stdout)
    experiments = {e["name"]: e for base in shown for e in (base.get("experiments") or [])}
    assert {"k-1", "k-20"} <= set(experiments), sorted(experiments)
    ks = {name: exp["revs"][0]["data"]["params"]["params.yaml"]["data"]["rows"]["va-llm"]["k"]
          for name, exp in experiments.items() if name.startswith("k-")}
    assert ks == {"k-1": 1, "k-20": 20}
    for table in swept:  # each experiment computed only what k changes: va-llm's row and its cell
        outcomes = stage_table(table)
        assert outcomes[f"transfer@va-llm-{seed}"] == outcomes["row@va-llm"] == "ran"
        assert outcomes["pretrain"] == outcomes["cbow"] == "restored"
        assert set(outcomes) == {*load_dag(project).select([f"transfer@va-llm-{seed}"], ["va-llm"], [seed]).order}


def test_a_dvc_lock_emptied_by_a_killed_run_is_restored_from_the_last_readable_copy(tmp_path):
    from flows.dvcrun import LOCK_BACKUP, keep_lock, restore_lock

    lock = tmp_path / "dvc.lock"
    lock.write_text("schema: '2.0'\nstages:\n  pretrain:\n    cmd: python -m stages.pretrain\n")
    good = lock.read_bytes()
    assert not restore_lock(tmp_path)  # readable: left alone
    keep_lock(tmp_path)
    assert (tmp_path / LOCK_BACKUP).read_bytes() == good
    lock.write_text("")  # killed while DVC rewrote it
    keep_lock(tmp_path)  # an unreadable lock never replaces the copy
    logged = []
    assert restore_lock(tmp_path, logged.append) and lock.read_bytes() == good
    assert (tmp_path / "dvc.lock.unreadable").read_text() == "" and "restored" in logged[0]
    (tmp_path / LOCK_BACKUP).unlink()
    lock.write_text("stages: [half")
    with pytest.raises(FlowError, match=r"dvc.lock: empty or unreadable .* `dvc commit -f STAGE`"):
        restore_lock(tmp_path)


@pytest.mark.slow
def test_stages_finishing_at_once_each_keep_the_lock_without_racing(tmp_path):
    """The flow's threads call keep_lock together when two stages finish at the same moment."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from flows.dvcrun import LOCK_BACKUP, keep_lock, readable_lock

    stages = "".join(f"  s{i}:\n    cmd: python -m stages.s{i}\n" for i in range(200))
    (tmp_path / "dvc.lock").write_text(f"schema: '2.0'\nstages:\n{stages}")
    barrier = Barrier(8)

    def keep(_: int) -> None:
        barrier.wait()
        for _ in range(100):
            keep_lock(tmp_path)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(keep, range(8)))  # re-raises a thread's FileNotFoundError
    assert readable_lock(tmp_path / LOCK_BACKUP)
    assert sorted(p.name for p in (tmp_path / LOCK_BACKUP).parent.iterdir()) == [LOCK_BACKUP.name]


STAGE_WHOSE_LOCK_IS_TAKEN = """\
import pathlib, subprocess, sys, time
runs = pathlib.Path("runs.txt")
n = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(n))
if n == 1:  # another DVC process takes the repository lock as this command ends, for longer than DVC's 3 s
    subprocess.Popen([sys.executable, "-c", "import pathlib, time, zc.lockfile; l = zc.lockfile.LockFile("
                      "'.dvc/tmp/lock'); pathlib.Path('held').touch(); time.sleep(5); l.close()"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while not pathlib.Path("held").exists():
        time.sleep(0.05)
pathlib.Path("out.txt").write_text("done")
"""


@pytest.mark.slow
def test_a_finished_stage_waits_for_the_repository_lock_instead_of_running_again(tmp_path):
    from flows.dvcrun import repro_stage

    run(["dvc", "init", "--no-scm", "-q"], tmp_path)
    (tmp_path / "stage.py").write_text(STAGE_WHOSE_LOCK_IS_TAKEN)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"s": {
        "cmd": f"{sys.executable} stage.py", "deps": ["stage.py"], "outs": ["out.txt"]}}}))
    done = repro_stage("s", tmp_path, lock_timeout=60)
    assert done.outcome == "ran" and (tmp_path / "out.txt").read_text() == "done"
    assert (tmp_path / "runs.txt").read_text() == "1"  # DVC waited to record it; it was not run a second time
    assert run(["dvc", "status", "s"], tmp_path).stdout.strip() == "Data and pipelines are up to date."


@pytest.mark.slow
def test_an_up_to_date_stage_whose_outputs_another_stage_reads_does_not_wait_for_it(tmp_path):
    """A long stage downstream (run by another flow or `dvc repro`) holds a read lock on what it reads for hours;
    `repro` of the stage that wrote it meets that lock even when there is nothing to do, and status decides."""
    from dvc.repo import Repo
    from dvc.rwlock import rwlock

    from flows.dvcrun import repro_stage

    run(["dvc", "init", "--no-scm", "-q"], tmp_path)
    stages = {"a": {"cmd": "echo one > a.txt", "outs": ["a.txt"]},
              "b": {"cmd": "echo two > b.txt", "deps": ["a.txt"], "outs": ["b.txt"]}}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    assert repro_stage("a", tmp_path, lock_timeout=10).outcome == "ran"
    with Repo(str(tmp_path)) as repo:
        with rwlock(repo.tmp_dir, repo.fs, "a test reading a.txt", [str(tmp_path / "a.txt")], [], False):
            started = time.time()
            done = repro_stage("a", tmp_path, lock_timeout=10)
            assert done.outcome == "up-to-date" and time.time() - started < 10
            stages["a"]["cmd"] = "echo changed > a.txt"  # now it has something to do: it waits, then says why
            (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
            with pytest.raises(StageError, match="stage 'a' failed: workspace busy for 3 s"):
                repro_stage("a", tmp_path, lock_timeout=3)
    assert (tmp_path / "a.txt").read_text() == "one\n"
