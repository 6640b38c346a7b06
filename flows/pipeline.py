"""The vocabridge pipeline as a Prefect flow: one task per DVC stage of dvc.yaml, in dependency order.

Prefect schedules, retries, limits concurrency (tasks that train or translate carry the `gpu` tag) and
shows what happened; DVC decides what is up to date: every task is `dvc repro --single-item STAGE`.

    python -m flows.pipeline                                  # the workspace's DAG, no server needed
    python -m flows.pipeline -S spm.downstream.de.vocab_size=4000 --experiment vocab4k
    python -m flows.pipeline --rows va-llm ft-srcv --seeds 1 2  # those cells of the grid (and no report)
    python -m flows.pipeline -S rows.va-llm.k=5 --experiment k5   # an experiment: va-llm's cells run again
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.deployments import run_deployment
from prefect.exceptions import MissingContextError
from prefect.futures import PrefectFuture, as_completed
from prefect.logging import get_logger
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.tasks import exponential_backoff

from flows import dag as graph
from flows import experiment, study
from flows.dag import Dag, Stage, load_dag
from flows.dvcrun import StageRun, dvc_ok, git, nothing_to_do, repro_stage, restore_lock
from flows.errors import FlowError, StageError
from flows.preflight import preflight
from flows.record import RunRecord
from flows.report import markdown, stages_table
from vocabridge.config import load_params
from vocabridge.grid import Cell
from vocabridge.workspace import RUN_RECORD


@task(name="dvc-stage", cache_policy=NO_CACHE, persist_result=False)
def run_stage(stage: str, workspace: str, force: bool = False, lock_timeout: float = 600.0,
              threads: int | None = None) -> StageRun:
    """One stage through DVC in this workspace (Prefect caches nothing: DVC knows what is up to date)."""
    logger = get_run_logger()
    run = repro_stage(stage, Path(workspace), log=logger.info, force=force, lock_timeout=lock_timeout,
                      threads=threads)
    logger.info("%s: %s in %.1f s", stage, run.outcome, run.seconds)
    return run


@task(name="dvc-stage-elsewhere", cache_policy=NO_CACHE, persist_result=False)
def run_stage_elsewhere(stage: str, workspace: str, upstream: list[str], deployment: str, git_url: str,
                        remote_url: str, lock_timeout: float = 600.0) -> StageRun:
    """One stage on a worker of another work pool, in its own clone; the data travels through a DVC remote.

    The worker pulls the stage's inputs, runs it, and pushes its outputs and its run-cache entry; this
    workspace then gets the outputs with `dvc repro --pull`, which restores them from the run cache.
    """
    logger = get_run_logger()
    ws = Path(workspace)
    if upstream:
        dvc_ok(["push", *upstream], ws)  # the inputs the worker will pull
    files = {name: (ws / name).read_text(encoding="utf-8") for name in ("params.yaml", "dvc.lock")
             if (ws / name).is_file()}
    rev = git(["rev-parse", "HEAD"], ws).strip()
    remote_run = run_deployment(deployment, parameters={"stage": stage, "git_url": git_url, "rev": rev,
                                                        "files": files, "remote_url": remote_url},
                                flow_run_name=f"{stage}", timeout=None, poll_interval=2)
    state = remote_run.state
    if state is None or not state.is_completed():
        message = state.message if state is not None and state.message else "no result"
        raise StageError(f"stage '{stage}' failed on a worker ({deployment}): {message}")
    run = repro_stage(stage, ws, log=logger.info, pull=True, lock_timeout=lock_timeout)
    logger.info("%s: run by %s (flow run %s), %s here", stage, deployment, remote_run.name, run.outcome)
    return run


def options(stage: Stage, retry_delay: float) -> dict:
    """Prefect settings of one stage's task: a name that says stage and cell, tags, retries with back-off."""
    return {"task_run_name": stage.name, "tags": stage.tags, "retries": stage.retries,
            "retry_delay_seconds": exponential_backoff(backoff_factor=retry_delay) if stage.retries else 0,
            "retry_jitter_factor": 0.2 if stage.retries else None}


def run_dag(dag: Dag, workspace: Path, jobs: int, forced: set[str], retry_delay: float, lock_timeout: float,
            remote: dict | None = None, record: RunRecord | None = None,
            finished: Callable[[str], None] | None = None) -> list[StageRun]:
    """Submit each stage once its upstream stages succeeded, at most `jobs` at once; fail like `dvc repro -k`.

    Branches that do not depend on a failed stage still run, so everything that can be cached is. `record`
    hears of every start and end, and is saved once a minute besides, so a run cut off still leaves its cost;
    `finished` hears of every stage that succeeded (a failure of its own is logged, and the run goes on).
    """
    logger = get_run_logger()
    pending = dict(dag.stages)
    running: dict[str, PrefectFuture] = {}
    done: dict[str, StageRun] = {}
    failed: dict[str, str] = {}
    not_run: list[str] = []
    patterns = remote["stages"] if remote and remote["stages"] else []  # checked against the whole DAG by `pipeline`
    remote_names = {n for n in dag.stages if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
    threads_of: dict[str, int] = {}  # running stage -> the torch threads it was given here (0: elsewhere)
    first = set() if remote else dag.skippable(nothing_to_do([n for n in dag.order if n not in forced], workspace))
    if first:
        logger.info("%d of %d stages have nothing to do (dvc status): they go first", len(first), len(dag.stages))
    while pending or running:
        for name, stage in list(pending.items()):
            if any(u in failed or u in not_run for u in stage.upstream if u in dag.stages):
                not_run.append(name)
                del pending[name]
        for name, threads in stage_threads(dag, jobs, list(pending), set(done), threads_of, first):
            stage, upstream = pending[name], [u for u in pending[name].upstream if u in dag.stages]
            opts = options(stage, retry_delay)
            if name in remote_names:
                assert remote is not None
                running[name] = run_stage_elsewhere.with_options(**opts).submit(
                    name, str(workspace), upstream, remote["deployment"], remote["git_url"], remote["url"],
                    lock_timeout)
            else:
                running[name] = run_stage.with_options(**opts).submit(
                    name, str(workspace), name in forced, lock_timeout, threads)
            threads_of[name] = 0 if name in remote_names or threads is None else threads
            del pending[name]
            if record:
                record.start(name)
        if not running:
            break
        try:
            future = next(as_completed(list(running.values()), timeout=60 if record else None))
        except TimeoutError:
            if record:
                record.save()
            continue
        name = next(n for n, f in running.items() if f is future)
        del running[name], threads_of[name]
        try:
            done[name] = future.result()
            if record:
                record.finish(done[name])
            for again in dag.rerun_after(name, set(done)):
                if again not in pending and again not in running:
                    logger.info("%s: %s wrote into a folder it reads; running it again", again, name)
                    pending[again] = dag.stages[again]
        except Exception as exc:  # the task's own error, after its retries
            failed[name] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            logger.error("%s", failed[name])
            if record:
                record.fail(name)
            continue
        if finished:
            try:
                finished(name)
            except Exception as exc:  # e.g. a results folder that cannot be written: the stages go on
                logger.warning("after %s: %s", name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    runs = [done[n] for n in dag.order if n in done]
    if failed:
        first = next(n for n in dag.order if n in failed)
        create_markdown_artifact(stages_table(runs, failed, not_run), key="vocabridge-stages",
                                 description="stages of a failed run")
        rest = f" ({len(failed) - 1} more failed; not run: {', '.join(not_run) or 'none'})" if len(failed) > 1 \
            or not_run else ""
        raise StageError(f"{failed[first]}{rest}")
    return runs


def held_cells(dag: Dag, workspace: Path, results: Path) -> set[Cell]:
    """The cells of `dag` that the study's results folder holds already under today's params (`--missing`); says
    in the log how many, and where a seed's committed cells ran on another upstream model than this workspace's."""
    logger = get_run_logger()
    selected = set(dag.cells().values())
    committed = study.committed(workspace, results, selected)
    for line in committed.warnings:
        logger.warning("%s", line)
    held = selected & set(committed.cells)
    logger.info("%s holds %d of the %d selected cells; the flow runs the others", results, len(held), len(selected))
    return held


def remote_settings(workspace: Path, patterns: list[str] | None, deployment: str, git_url: str | None) -> dict | None:
    """Scale-out: stages matching `patterns` go to `deployment`; data goes through the default DVC remote."""
    if not patterns:
        return None
    name = dvc_ok(["config", "core.remote"], workspace).strip() if _has_default_remote(workspace) else ""
    if not name:
        raise FlowError("remote_stages needs a default DVC remote shared with the workers "
                        "(dvc remote add -d NAME URL)")
    url = dvc_ok(["config", f"remote.{name}.url"], workspace).strip()
    if "://" not in url and not Path(url).is_absolute():
        url = str((workspace / ".dvc" / url).resolve())  # DVC resolves relative remote paths from .dvc/
    dirty = [ln for ln in git(["status", "--porcelain", "--untracked-files=no"], workspace).splitlines()
             if ln[3:] not in ("dvc.lock", "params.yaml")]
    if dirty:
        raise FlowError(f"workers clone the committed code; commit first ({dirty[0][3:]} is modified)")
    return {"stages": patterns, "deployment": deployment, "git_url": git_url or str(workspace), "url": url}


def _has_default_remote(workspace: Path) -> bool:
    try:
        dvc_ok(["config", "core.remote"], workspace)
    except FlowError:
        return False
    return True


def stage_threads(dag: Dag, jobs: int, pending: list[str], done: set[str], running: dict[str, int],
                  first: Collection[str] = ()) -> list[tuple[str, int | None]]:
    """The stages to start now and the torch threads of each ($VOCABRIDGE_THREADS of the stage; compute.threads:
    0 reads it): the cores shared out (`Dag.launch`), so that a stage alone (pretrain) gets them all, two
    fine-tunes side by side get half each, and the running stages never hold more threads than there are cores,
    nor more than other work on the machine leaves free when the stage starts (`busy_elsewhere`, said in the log).
    None when the user set $VOCABRIDGE_THREADS themselves. `first`: the stages DVC will skip (`Dag.startable`)."""
    if os.environ.get("VOCABRIDGE_THREADS"):
        return [(n, None) for n in dag.startable(pending, done, jobs - len(running), list(running), first)]
    if not dag.startable(pending, done, jobs - len(running), list(running), first):
        return []
    elsewhere = graph.busy_elsewhere()
    picked = dag.launch(pending, done, running, graph.cores(), jobs, elsewhere, first)
    if elsewhere and picked:
        given = ", ".join(f"{name} gets {threads} thread{'s' * (threads > 1)}" for name, threads in picked)
        try:
            logger = get_run_logger()
        except MissingContextError:  # called outside a flow run
            logger = get_logger("vocabridge")
        logger.info("other work keeps %d of %d cores busy: %s", elsewhere, graph.cores(), given)
    return picked


@flow(name="vocabridge", task_runner=ThreadPoolTaskRunner(max_workers=16))
def pipeline(workspace: str = ".", profile: str | None = None, rows: list[str] | None = None,
             seeds: list[int] | None = None, overrides: list[str] | None = None, targets: list[str] | None = None,
             force: bool = False, experiment_name: str | None = None, jobs: int = 0, retry_delay: float = 10.0,
             lock_timeout: float = 600.0, remote_stages: list[str] | None = None,
             stage_deployment: str = "vocabridge-stage/gpu", git_url: str | None = None, estimate: bool = True,
             missing: str | None = None, collect: str | None = None) -> str:
    """Run the DAG of dvc.yaml (or the part that `targets`, `rows` and `seeds` select) and return the report table.

    `rows` and `seeds` keep the grid's cells of those rows and seeds (`Dag.select`); a selection that leaves
    cells out leaves out the report over all cells too.

    With a `profile` other than the workspace's or with `overrides` (`key=value`, as `dvc exp run -S`), the
    run is a DVC experiment in its own clone: the workspace's params.yaml and outputs stay as they were.
    `jobs` stages run at once (0: one per core, 2 to 4); the cores are shared out among the stages that run
    (`stage_threads`), since on a CPU two one-thread trainings outrun one two-thread training. `estimate`: log
    what the run should cost first (`vocabridge estimate`; it times training updates, about half a minute on a
    busy CPU, where the figures are not cached).

    A study that adds up across sessions: `missing` (a results folder; "" for results/PROFILE) runs only the
    selected cells it does not hold yet, with today's knobs and condition (warning where a seed's committed cells
    ran on another upstream model than this workspace's: they would not pair), and `collect` (the same) copies each
    cell into it as soon as its evaluation finished (`vocabridge results --cells`), ready to commit.
    """
    logger = get_run_logger()
    jobs = graph.share_cores(jobs)
    ws = Path(workspace).resolve()
    if not (ws / "dvc.yaml").is_file():
        raise FlowError(f"{ws}: no dvc.yaml (workspace must be the project's root)")
    overrides = list(overrides or [])
    is_experiment = bool(overrides) or bool(profile and profile != experiment.current_profile(ws))
    run_ws = ws
    name = experiment.experiment_name(experiment_name or f"flow-{flow_run.name or int(time.time())}")
    if is_experiment:
        run_ws = experiment.create(ws, name, profile, overrides)
        logger.info("experiment %s in %s: profile=%s overrides=%s", name, run_ws, profile, overrides)
    try:
        restore_lock(run_ws, logger.warning)
        full = load_dag(run_ws)
        dag = full.select(targets, rows, seeds)
        profile_name = load_params(run_ws / "params.yaml").profile
        if missing is not None:
            results = study.results_folder(ws, missing, profile_name)
            held = held_cells(dag, run_ws, results)
            if held and held == set(dag.cells().values()):
                return f"nothing to run: {results} holds every selected cell"
            dag = full.select(targets, rows, seeds, skip=held)
        grid = dag.cells()
        into = study.results_folder(ws, collect, profile_name) if collect is not None else None

        def copy_cells(name: str) -> None:  # after each stage: a cell's evaluation lands in the results folder
            if into is not None and name.startswith("evaluate@") and name in grid:
                copied = study.collect(run_ws, into)
                if copied:
                    logger.info("%s: %s", into / "cells", ", ".join(c.name for c in copied))

        remote = remote_settings(run_ws, remote_stages, stage_deployment, git_url)
        if remote and remote["stages"]:
            dag.match(remote["stages"])  # a pattern that names no stage is an error (run_dag runs the DAG in parts)
        if remote and is_experiment:
            raise FlowError("remote_stages with overrides or a profile is not supported yet; run the "
                            "experiment in one workspace")
        logger.info("stages (from dvc.yaml): %s", ", ".join(dag.order))
        est = log_estimate(dag, run_ws, jobs) if estimate else None
        forced = set(dag.match(targets) if targets else dag.order) if force else set()
        record = RunRecord(run_ws / RUN_RECORD, est, jobs, graph.cores())
        first = Dag({n: s for n, s in dag.stages.items() if s.group == "prepare"})
        runs = []
        # the corpora first, then the check, then the rest (with stages sent elsewhere the DAG runs whole, as their
        # workers pull what their upstream stages pushed: the check then reads what is prepared already)
        if first.stages and len(first.stages) < len(dag.stages) and not remote:
            runs = run_dag(first, run_ws, jobs, forced, retry_delay, lock_timeout, remote, record, copy_cells)
            dag = Dag({n: s for n, s in dag.stages.items() if n not in first.stages})
        get_run_logger().info("preflight: %s", preflight(run_ws))
        runs += run_dag(dag, run_ws, jobs, forced, retry_delay, lock_timeout, remote, record, copy_cells)
        record.save()
        title = f"vocabridge experiment {name}" if is_experiment else "vocabridge"
        table = markdown(dag, run_ws, runs, title)
        if is_experiment:
            experiment.save(run_ws, name, dag.order, [p for s in dag.stages.values() for p in s.reports])
            logger.info("saved as DVC experiment %s (dvc exp show)", name)
    finally:
        if is_experiment:
            experiment.remove(run_ws)
    create_markdown_artifact(table, key="vocabridge-report", description=f"vocabridge report ({name})")
    return table


def log_estimate(dag: Dag, workspace: Path, jobs: int):
    """Print what the run should cost on this machine before it starts (`vocabridge estimate`'s table); the
    estimate, or None where it could not be made."""
    from flows.estimate import estimate_dag, format_estimate

    logger = get_run_logger()
    try:
        params = load_params(workspace / "params.yaml")
        est = estimate_dag(dag, params, workspace, jobs, progress=False)
        logger.info("%s", format_estimate(est, params.profile))
        return est
    except Exception as exc:  # an estimate is advice: the run goes on without it
        logger.warning("no estimate of this run: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None


@flow(name="vocabridge-sweep")
def sweep(key: str, values: list[str], workspace: str = ".", profile: str | None = None,
          rows: list[str] | None = None, seeds: list[int] | None = None, overrides: list[str] | None = None,
          targets: list[str] | None = None, jobs: int = 0, estimate: bool = True) -> list[str]:
    """An ablation: one DVC experiment per value of one param key (e.g. `rows.va-llm.k` in 1, 5, 10, 20: only
    va-llm's cells and the report run again in each; the rest is restored from DVC's run cache).

    The experiments run one after another: they share the DVC cache, and what does not depend on the key
    is restored from DVC's run cache instead of being computed again.
    """
    if not values:
        raise FlowError("sweep: no values given")
    tables = []
    for value in values:
        short = key.rsplit(".", 1)[-1]
        tables.append(pipeline.with_options(flow_run_name=f"{short}={value}")(
            workspace=workspace, profile=profile, rows=rows, seeds=seeds,
            overrides=[*(overrides or []), f"{key}={value}"], targets=targets,
            experiment_name=f"{short}-{value}", jobs=jobs, estimate=estimate))
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", default=".")
    parser.add_argument("--profile", help="run with profiles/PROFILE.yaml applied, as an experiment")
    parser.add_argument("--rows", nargs="+", metavar="ROW", help="only the cells of these rows (of params' rows)")
    parser.add_argument("--seeds", nargs="+", type=int, metavar="SEED", help="only the cells of these seeds")
    parser.add_argument("-S", "--set-param", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="param override, as in `dvc exp run -S`; makes the run an experiment")
    parser.add_argument("--targets", nargs="+", help="stages (shell patterns) to run, with their upstream")
    parser.add_argument("--force", action="store_true", help="rerun the target stages even if up to date")
    parser.add_argument("--experiment", dest="experiment_name")
    parser.add_argument("--jobs", type=int, default=0,
                        help="stages at once (DVC locks per output); 0: one per core, 2 to 4")
    parser.add_argument("--sweep", nargs="+", metavar=("KEY", "VALUE"), help="KEY V1 V2 ...: one experiment each")
    parser.add_argument("--missing", nargs="?", const="", metavar="RESULTS",
                        help="only the selected cells that the study's results folder (default results/PROFILE) "
                             "does not hold yet")
    parser.add_argument("--collect", nargs="?", const="", metavar="RESULTS",
                        help="copy each finished cell into the results folder (default results/PROFILE) at once")
    parser.add_argument("--no-estimate", dest="estimate", action="store_false",
                        help="start without logging what the run should cost (it times training updates first)")
    args = vars(parser.parse_args(argv))
    swept = args.pop("sweep")
    try:
        if swept:
            if len(swept) < 2:
                raise FlowError("--sweep needs a key and at least one value")
            for table in sweep(key=swept[0], values=swept[1:], workspace=args["workspace"],
                               profile=args["profile"], rows=args["rows"], seeds=args["seeds"],
                               overrides=args["overrides"], targets=args["targets"], jobs=args["jobs"],
                               estimate=args["estimate"]):
                print(table)
        else:
            print(pipeline(**args))
    except FlowError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
