"""The expected wall time of a profile on this machine, before running it: `vocabridge estimate`.

vocabridge.estimate measures the machine and prices pieces of work (a training run, decoding); here each stage
of dvc.yaml is priced from them (`stage_seconds`: a cell's transfer, finetune and evaluate by its row's method)
and the stages are laid over the DAG two ways: one after another with every core (`dvc repro`), and as the
Prefect flow schedules them (`jobs` stages at once, the cores shared out by `Dag.launch`, pretrain and
generator on every free core, never more threads than cores). A stage it has no price for is an error, never a
silent zero.

The short stages (downloads, SentencePiece, CBOW, a row's hashes, report) are not timed: they take fixed figures
measured on the default profile (a few minutes in all), scaled by the sizes in params.yaml.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from flows.dag import ROW_GROUP, Dag, load_dag, share_cores
from flows.dag import cores as machine_cores
from vocabridge.config import Params, Training, profile_params
from vocabridge.errors import ConfigError
from vocabridge.estimate import (
    LATENCY_COST,
    TYPICAL_PIECES,
    UPSTREAM_LINES,
    Machine,
    abnet_kind,
    abnet_training_seconds,
    at,
    cached_measure,
    cbow_seconds,
    count_lines,
    distill_seconds,
    training_seconds,
)
from vocabridge.evaluate import heldout_verses
from vocabridge.families import ABNET, family
from vocabridge.grid import Cell, cells
from vocabridge.transfer import finetune_training, get_method, knobs_for
from vocabridge.workspace import CORPORA

DVC_OVERHEAD = 2.5  # seconds `dvc repro --single-item` adds around a stage's command (hashing, lock)
CELL_GROUPS = ("transfer", "finetune", "evaluate")  # DVC matrix stages over rows x seeds: GROUP@ROW-SEED


@dataclass
class Estimate:
    machine: Machine
    sequential: dict[str, float]  # stage -> seconds with every core (dvc repro)
    flow: dict[str, tuple[float, float, int]]  # stage -> (start, end, threads) in the flow
    cores: int
    jobs: int
    cells: list[Cell] = field(default_factory=list)  # the grid's cells among the stages priced
    from_cells: dict[str, tuple[int, int]] = field(default_factory=dict)  # row -> (updates, cells): fine-tunes
    #                                                                         priced from committed cells

    @property
    def grid(self) -> str:
        """`18 cells (6 rows x 3 seeds)`: what the cell stages add up to."""
        rows = list(dict.fromkeys(c.row for c in self.cells))
        seeds = sorted({c.seed for c in self.cells})
        plural = "" if len(self.cells) == 1 else "s"
        return (f"{len(self.cells)} cell{plural} ({len(rows)} row{'' if len(rows) == 1 else 's'} x {len(seeds)} "
                f"seed{'' if len(seeds) == 1 else 's'})")

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
        for name, threads in dag.launch(pending, done, {n: out[n][2] for n in running}, cores, jobs):
            end = now + seconds[name][threads]
            running[name], out[name] = end, (now, end, threads)
            pending.remove(name)
        if not running:
            break
        name = min(running, key=running.get)
        now = running.pop(name)
        done.add(name)
    return out


def dag_for(workspace: Path, data: dict) -> Dag:
    """dvc.yaml's DAG with these params (a profile's rows and seeds make other cells)."""
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
    grid = list(dict.fromkeys(dag.cells().values()))
    return Estimate(machine, {n: seconds[n][cores] for n in dag.order}, simulate_flow(dag, seconds, cores, jobs),
                    cores, jobs, grid, priced_from_cells(workspace, params, grid))


def stage_seconds(stage: str, params: Params, machine: Machine, threads: int, root: Path = Path(".")) -> float:
    """Expected wall time of one DVC stage (`pretrain`, `finetune@va-llm-3`) at `threads` torch threads.

    Fewer threads than cores means the stage shares the machine (the flow's layout): its work then takes
    `machine.beside` times as long."""
    start = machine.startup + DVC_OVERHEAD
    alone = _stage_alone(stage, params, machine, threads, root, start)
    if threads < machine.cpu.get("cores", threads):
        return start + (alone - start) * machine.beside
    return alone


def _cell_row(stage: str, item: str, params: Params) -> str:
    try:
        row = Cell.from_name(item).row
    except ValueError:
        raise ConfigError(f"dvc.yaml: stage '{stage}': a cell's stage is named GROUP@ROW-SEED") from None
    if row not in params.rows:
        raise ConfigError(f"dvc.yaml: stage '{stage}': no row '{row}' in params' rows ({', '.join(params.rows)})")
    return row


def _stage_alone(stage: str, params: Params, machine: Machine, threads: int, root: Path, start: float) -> float:
    group, _, item = stage.partition("@")
    corpora = root / CORPORA
    down_dev = count_lines(corpora / "downstream" / f"dev.{params.lang.src}", params.prepare.downstream.dev_size)
    up_dev = count_lines(corpora / "upstream" / f"dev.{params.lang.src}", params.prepare.upstream.dev_size)
    bible = params.prepare.downstream.bible
    mono = bible.mono_size or 40000  # all of the Bible's other translations: about 40k lines per language
    size = (bible.train_size or 30000) + mono  # CBOW and SentencePiece text, against 10k + 40k in the default
    if group in CELL_GROUPS:
        return _cell_stage(group, _cell_row(stage, item, params), params, machine, threads, root, start, down_dev)
    if group == "prepare":
        if item == "upstream":
            debian = params.prepare.upstream.debian
            return start + 3 + 0.25 * len(debian.packages) + (25 if debian.libreoffice_help else 0)
        return start + 6
    if group == "spm":
        return start + 3 + 10 * size / 50000
    if group == "mismatch":
        return start + 1
    if group == "cbow":
        return start + 2 + cbow_seconds(size * TYPICAL_PIECES["downstream"][1], params.cbow.epochs)
    if group in ("pretrain", "upstream"):  # upstream@NAME: the same recipe (a joint vocabulary: + its spm training)
        if params.pretrain.external_model:
            return start + 5
        cfg = params.pretrain.train
        init = 0.0
        spec = params.upstreams.get(item or "")
        if spec is not None and spec.vocab == "joint":
            init += 2 * (3 + 10 * UPSTREAM_LINES / 50000)
        if params.pretrain.init == "cbow":  # CBOW on the upstream text first, both languages
            lines = count_lines(corpora / "upstream" / f"train.{params.lang.src}", UPSTREAM_LINES)
            init = cbow_seconds(lines * sum(TYPICAL_PIECES["upstream"]) / 2, params.pretrain.cbow.epochs)
        return start + 10 + init + training_seconds(machine, "pretrain", "upstream", cfg, cfg.threads or threads,
                                                    up_dev)
    if group == "abnet":  # conditional masked-LM updates, Mask-Predict dev BLEU at each evaluation
        spec = params.abnets[item]
        if not spec.upstream:
            return start + 10
        return start + 10 + abnet_training_seconds(machine, abnet_kind(spec), params.abnet.train, threads, up_dev,
                                                   params.abnet.finetune.batch_tokens)
    if group == "generator":  # each of params' generators: frozen-model updates
        per = params.generator.train.steps * at(machine.train.get("generator", {0: 0.0}), threads)
        return start + len(params.generators) * (10 + per)
    if group == ROW_GROUP:  # hashes the resources a row's cells draw on (its upstream model, CBOW, generator)
        return start + 3
    if group == "backtranslate":  # the monolingual text through the backward model, when `upstreams` has it
        if params.backtranslation.upstream not in params.upstreams:
            return start + 2
        lines = count_lines(corpora / "downstream" / f"mono.{params.lang.tgt}", mono)
        lines = min(lines, params.backtranslation.sentences or lines)
        return start + 4 + lines * at(machine.beam, threads)
    if group == "plm":  # a unigram vocabulary, then masked-LM updates; a held-out pass (a third of an update per
        #                  batch) at every evaluation
        spec = params.plms[item]
        if spec.model:
            return start + 5
        cfg = params.plm.train
        lines = count_lines(corpora / "upstream" / f"train.{item}", UPSTREAM_LINES) + size
        held_out = min(cfg.held_out_sentences, down_dev)
        evals = cfg.max_updates // max(cfg.eval_every, 1) + 1
        update = at(machine.train["plm"], threads)
        return (start + 5 + 10 * lines / 50000 + cfg.max_updates * update
                + evals * held_out / max(cfg.batch_sentences, 1) * update / 3)
    if group == "report":  # reads every cell's record and hypotheses; paired tests per row and seed
        return start + 5 + 2 * len(cells(params.rows, params.seeds))
    raise ConfigError(f"dvc.yaml: stage '{stage}': the estimator has no price for a '{group}' stage (add one to "
                      f"flows/estimate.py)")


def _cell_stage(group: str, row: str, params: Params, machine: Machine, threads: int, root: Path, start: float,
                down_dev: int) -> float:
    """One cell's transfer, finetune or evaluate, priced by its row's method."""
    corpora = root / CORPORA
    method = get_method(row, params.rows)
    test = count_lines(corpora / "downstream" / f"test.{params.lang.src}", params.prepare.downstream.test_size)
    up_test = count_lines(corpora / "upstream" / f"test.{params.lang.src}", params.prepare.upstream.test_size)
    upstream = min(params.evaluate.upstream_sentences, up_test)  # forgetting: the upstream test set's first lines
    latency = LATENCY_COST * min(params.evaluate.latency_sentences, test)
    if group == "evaluate":  # the held-out dev books are decoded beside the test set
        selection = finetune_training(row, params).dev_sentences
        test += heldout_sentences(params, corpora / "downstream", down_dev, selection)
    if family(method.family) is ABNET:  # priced by its kind of model on two BERTs
        kind = abnet_kind(params.abnets.get(knobs_for(row, params.rows).upstream))
        if group == "transfer":
            return start + 8 + params.diagnostics.dev_sentences * at(machine.greedy[kind], threads)
        if group == "finetune":
            cfg = expected_budget(root, row, params, params.abnet.finetune)
            return start + 5 + abnet_training_seconds(machine, kind, cfg, cfg.threads or threads, down_dev,
                                                      params.abnet.finetune.batch_tokens)
        return start + 4 + (test + upstream + latency) * at(machine.greedy.get(f"{kind}-test", machine.greedy[kind]),
                                                           threads)
    if group == "transfer":
        seconds = start + 8 + params.diagnostics.dev_sentences * 2 * at(machine.greedy["downstream"], threads)
        if method.distills:  # token distillation over the downstream training pairs
            knobs = knobs_for(row, params.rows)
            pairs = count_lines(corpora / "downstream" / f"train.{params.lang.src}",
                                params.prepare.downstream.bible.train_size or 30000)
            seconds += distill_seconds(machine, min(pairs, knobs.distill_pairs or pairs), knobs.distill_epochs,
                                       threads, params.finetune.train.batch_tokens)
        return seconds
    if group == "finetune":
        if not method.finetune:
            return start + 1
        kind = "finetune-upstream" if method.vocabulary == "upstream" else "finetune-downstream"
        cfg = expected_budget(root, row, params, params.finetune.train)
        return start + 5 + training_seconds(machine, kind, "downstream", cfg, cfg.threads or threads, down_dev)
    return start + 4 + (test + upstream + latency) * at(machine.beam, threads)  # evaluate: beam search


BUDGET = ("max_updates", "patience", "eval_every")  # what decides where an early-stopped fine-tune ends


@cache
def committed_updates(root: Path) -> dict[tuple, list[int]]:
    """Updates run by every committed cell (results/*/cells/ROW/sSEED/record.json), by row and by method, each with
    its fine-tune budget."""
    found: dict[tuple, list[int]] = {}
    for path in sorted(root.glob("results/*/cells/*/s*/record.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            budget = tuple(data["params"]["finetune"][k] for k in BUDGET)
            for key in (("row", data["row"]), ("method", data["method"])):
                found.setdefault((*key, *budget), []).append(int(data["finetune"]["updates"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a cell record this estimator can read: priced at the budget instead
    return found


def committed_runs(root: Path, row: str, params: Params, cfg: Training) -> list[int]:
    """The updates that committed cells of this row (else of its method) ran under the same budget."""
    budget = tuple(getattr(cfg, k) for k in BUDGET)
    found = committed_updates(root.resolve())
    method = params.rows[row].method if row in params.rows and params.rows[row].method else row
    return found.get(("row", row, *budget)) or found.get(("method", method, *budget)) or []


def expected_budget(root: Path, row: str, params: Params, cfg: Training) -> Training:
    """A fine-tune with early stopping priced at the median updates of `committed_runs`; without such cells (or
    without early stopping), at its maximum."""
    runs = committed_runs(root, row, params, cfg) if cfg.patience else []
    return replace(cfg, max_updates=int(statistics.median(runs))) if runs else cfg


def priced_from_cells(root: Path, params: Params, cells: list[Cell]) -> dict[str, tuple[int, int]]:
    """row -> (median updates, committed cells) for the grid's fine-tunes that committed cells priced."""
    out = {}
    for row in dict.fromkeys(c.row for c in cells):
        method = get_method(row, params.rows)
        cfg = finetune_training(row, params)
        runs = committed_runs(root, row, params, cfg) if method.finetune and cfg.patience else []
        if runs:
            out[row] = (int(statistics.median(runs)), len(runs))
    return out


def heldout_sentences(params: Params, corpus: Path, dev: int, selection: int) -> int:
    """The evaluate stage's second test set (a user's second test file, or the dev verses of books no checkpoint
    selection read), decoded like the first: counted from the prepared files, or, before prepare, every dev verse
    past the selection's."""
    if not params.evaluate.heldout_dev:
        return 0
    second = corpus / f"second_test.{params.lang.src}"
    if second.is_file():
        return len(second.read_text(encoding="utf-8").splitlines())
    ids = corpus / "dev.ids"
    if ids.is_file():
        return len(heldout_verses(ids.read_text(encoding="utf-8").splitlines(), selection))
    prepared = (corpus / f"dev.{params.lang.src}").is_file()  # a user's files: no verse ids, no second test set
    return 0 if prepared or params.prepare.downstream.recipe != "bible" else max(0, dev - selection)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def format_estimate(est: Estimate, profile: str) -> str:
    """A table per stage group: how many, time each (flow), and the totals for dvc repro and the flow."""
    m = est.machine
    cpu = m.cpu
    lines = [f"vocabridge estimate: profile {profile} on {cpu['cpu']} ({cpu['capability']}, native bf16 "
             f"{'yes' if cpu['bf16_native'] else 'no'}), {est.cores} cores, device {m.device}; training in "
             f"{', '.join(sorted(set(m.precision.values()))) or 'fp32'}; measured in {m.measured_in:.0f} s",
             *([f"grid: {est.grid}"] if est.cells else []),
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
    if est.from_cells:
        lines.append("fine-tunes that stop early priced at the median updates of committed cells (results/*/cells) of "
                     "the same row or method and budget: " + ", ".join(
                         f"{row} {updates} ({n} cells)" for row, (updates, n) in est.from_cells.items())
                     + "; the others at their maximum")
    if m.device != "cpu" and est.jobs > 1:
        lines.append("note: on one GPU the stages that run at once take turns on it, and the flow's figure assumes "
                     "they do not slow each other: a flow priced at 9.2 min with 4 at once ran about 16 min on an "
                     "H100 (results/plm-gpu-attempt); plan between the two totals")
    if m.elsewhere >= 0.5:
        lines.append(f"note: other work held {m.elsewhere:.1f} of {est.cores} cores while measuring: one thread was "
                     "timed, by the CPU time it got (what the work takes on a core of its own), and stages with more "
                     "threads are priced at one thread's pace; `vocabridge estimate --fresh` on a quiet machine "
                     "prices them at their own")
    elif m.load > 0.5 * est.cores:
        lines.append(f"warning: the load average was {m.load:.1f} on {est.cores} cores while measuring: other work "
                     "shared the CPU and every figure is too high; `vocabridge estimate --fresh` on a quiet machine")
    return "\n".join(lines)
