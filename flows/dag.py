"""The stage graph, read from dvc.yaml through DVC's own index at run time (never a second copy of the DAG)."""

from __future__ import annotations

import fnmatch
import warnings
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from flows.errors import FlowError
from vocabridge.config import Params, load_params
from vocabridge.grid import Cell

# Stage groups that train or translate: their tasks carry the `gpu` tag unless dvc.yaml says otherwise
# (`meta: {prefect: {gpu: false}}`). Downloads fail transiently, so `prepare` is retried by default.
GPU_GROUPS = frozenset({"pretrain", "upstream", "plm", "abnet", "generator", "finetune", "evaluate"})
RETRY_GROUPS = {"prepare": 3}
# Long stages on the critical path that every later stage waits for: they get all the free cores however many
# short stages are ready beside them, shared only with the long stages that start at the same time; no stage
# takes a core that a running stage holds (`Dag.launch`); `meta: {prefect: {all_cores: false}}` to share with
# every stage instead.
ALL_CORE_GROUPS = frozenset({"pretrain", "upstream", "generator"})
# The grid (vocabridge.grid): `row@ROW` hashes what a row's cells draw on; the cells' own stages are DVC matrix
# items `GROUP@ROW-SEED` (Cell.name).
ROW_GROUP = "row"
# Stages of seconds to a minute that a row stage may wait for: a stage that writes into a folder the rows read
# waits for the rows that need only these (`Dag.held`).
QUICK_GROUPS = frozenset({ROW_GROUP, "cbow"})



def cores() -> int:
    """The cores this process may run on: what the flow shares out among the stages it runs at once."""
    from vocabridge.nmt.precision import usable_cores

    return usable_cores()


def busy_elsewhere(interval: float = 0.5) -> int:
    """Whole cores that other work on the machine keeps busy (`cpu_elsewhere`, rounded): cores a stage's torch
    threads should not fight for."""
    from vocabridge.nmt.precision import cpu_elsewhere

    return max(0, min(cores(), round(cpu_elsewhere(interval))))


def share_cores(jobs: int) -> int:
    """The number of stages to run at once: `jobs`, or 0 for one per core (2 to 4)."""
    return jobs if jobs > 0 else max(2, min(4, cores()))

@dataclass(frozen=True)
class Stage:
    """One DVC stage as the flow needs it: its address, what it waits for, and how Prefect should treat it."""

    name: str  # DVC's address: `mismatch`, `finetune@va-llm-3`
    upstream: tuple[str, ...] = ()
    gpu: bool = False
    retries: int = 0
    all_cores: bool = False  # torch threads = every core, not the share of the stages running beside it
    threads: int = 0  # torch threads its own params fix (a fine-tune's `threads`, `fixed_threads`); 0: the flow's share
    reports: tuple[str, ...] = ()  # metrics files and Markdown/CSV tables it declares (paths in the workspace)
    outs: tuple[str, ...] = ()
    deps: tuple[str, ...] = ()  # the files and folders it reads (not its params)
    # stages DVC runs first that write into a folder it reads but not what it draws on (`Dag.narrow`): the flow
    # does not wait for them, and runs it again (seconds) when one of them finishes after it, so dvc.lock is current
    after: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        return self.name.split("@", 1)[0]

    @property
    def item(self) -> str | None:
        return self.name.split("@", 1)[1] if "@" in self.name else None

    @property
    def tags(self) -> list[str]:
        return ["dvc", f"stage:{self.group}", *([f"item:{self.item}"] if self.item else []),
                *(["gpu"] if self.gpu else [])]


@dataclass
class Dag:
    """Stages in a topological order (DVC's graph), with the upstream stages of each."""

    stages: dict[str, Stage] = field(default_factory=dict)

    @property
    def order(self) -> list[str]:
        return list(self.stages)

    def depth(self) -> dict[str, int]:
        """How many stages lie on the longest path from a root to each stage (a root is 0)."""
        depth: dict[str, int] = {}
        for name in self.order:  # topological
            ups = [depth[u] for u in self.stages[name].upstream if u in depth]
            depth[name] = 1 + max(ups) if ups else 0
        return depth

    def startable(self, pending: list[str], done: set[str], slots: int, running: Sequence[str] = (),
                  first: Collection[str] = ()) -> list[str]:
        """The `slots` pending stages to start now: those whose upstream stages are done, deepest first, and that
        read or write nothing a `running` stage writes (DVC would refuse them: its locks are per path).

        Deepest first finishes what was started: a cell's evaluation runs before the next cell's fine-tune, so
        finished cells accumulate while a long grid runs and a run cut off loses the least. Ties keep DVC's order.
        `first` (`skippable`: DVC will skip them in seconds) go ahead of the rest, so that a run restarted after a
        stop reaches the cells it had started (their fine-tunes resume from checkpoints) before it starts new
        ones, rather than leaving a cheap up-to-date stage that gates them behind hours of other fine-tunes.
        """
        depth = self.depth()
        ready = self.ready(pending, done, running)
        picked: list[str] = []
        for name in sorted(ready, key=lambda n: (n not in first, -depth[n])):
            if len(picked) >= slots:
                break
            if not any(self.conflict(busy, name) for busy in [*running, *picked]):
                picked.append(name)
        return picked

    def skippable(self, nothing_to_do: Collection[str]) -> set[str]:
        """The stages DVC will skip: nothing to do for themselves (`dvc status`) nor for any upstream stage of this
        DAG (a stage whose upstream stage runs again may have work once it has)."""
        out: set[str] = set()
        for name in self.order:  # topological
            if name in nothing_to_do and all(u in out for u in self.stages[name].upstream if u in self.stages):
                out.add(name)
        return out

    def ready(self, pending: Collection[str], done: Collection[str], running: Collection[str] = ()) -> list[str]:
        """The pending stages whose upstream stages are done and that no row stage holds back (`held`)."""
        waiting, finished = set(pending), set(done)
        return [n for n in self.order if n in waiting and not self.held(n, waiting, finished, running)
                and all(u in finished for u in self.stages[n].upstream if u in self.stages)]

    def held(self, name: str, pending: set[str], done: set[str], running: Collection[str] = ()) -> bool:
        """Whether `name` waits for a row stage that reads a folder it writes into without drawing on it (the
        row's `after`), so that DVC's lock would keep the row out while it runs: a generator or an upstream
        pretraining of an hour would hold back the rows that use neither. A row stage only hashes (seconds), so
        the writer waits for those that can start within moments: the rows whose remaining upstream stages are
        row stages or quick ones (`QUICK_GROUPS`) and that no running stage but those locks out; the rows' cells
        then run beside it."""
        for row in pending:
            stage = self.stages[row]
            if stage.group != ROW_GROUP or name not in stage.after:
                continue
            left = self.ancestors(row) - done
            if name in left or any(self.stages[u].group not in QUICK_GROUPS for u in left if u in self.stages):
                continue
            if not any(self.conflict(busy, row) for busy in running if busy in self.stages and busy not in left):
                return True
        return False

    def conflict(self, a: str, b: str) -> bool:
        """Whether two stages cannot run at once: one writes a path the other reads or writes (DVC's locks)."""
        sa, sb = self.stages[a], self.stages[b]
        return any(overlaps(out, path) for out in sa.outs for path in (*sb.deps, *sb.outs)) or \
            any(overlaps(out, path) for out in sb.outs for path in sa.deps)

    def narrow(self, needs: dict[str, list[str]]) -> Dag:
        """Each stage of `needs` (stage -> the files it reads from a folder that several stages write into: a
        row's upstream model, CBOW vectors and generator) waits only for the stages that write those files or its
        other deps, not for every stage that writes into the folder. On a fresh machine the rows on the base
        model then start before the other upstream models are trained (`select` with `rows` leaves out what only
        the other rows need)."""
        stages = dict(self.stages)
        for name, files in needs.items():
            stage = stages.get(name)
            if stage is None:
                continue
            kept = tuple(u for u in stage.upstream
                         if u not in self.stages or _needed(self.stages[u].outs, stage.deps, files))
            stages[name] = replace(stage, upstream=kept,
                                   after=tuple(u for u in stage.upstream if u not in kept))
        return Dag(stages)

    def fix_threads(self, fixed: dict[str, int]) -> Dag:
        """The stages of `fixed` (stage -> torch threads its params set) hold that many threads when they run."""
        return Dag({n: replace(s, threads=fixed.get(n, s.threads)) for n, s in self.stages.items()})

    def rerun_after(self, finished: str, done: set[str]) -> list[str]:
        """The stages in `done` to run again now that `finished` did: it wrote into a folder they read (their
        `after`), so DVC sees them changed; they rehash and rewrite the same file, and their cells stay as they are."""
        return [n for n in self.order if n in done and finished in self.stages[n].after]

    def ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        todo = [name]
        while todo:
            stage = self.stages.get(todo.pop())
            for up in stage.upstream if stage else ():
                if up not in seen:
                    seen.add(up)
                    todo.append(up)
        return seen

    def core_shares(self, cores: int, jobs: int, busy: list[str]) -> tuple[int, int]:
        """Torch threads for a short and for a long (`all_cores`) stage started while the stages in `busy`
        (running or ready) compete: short stages share the cores with every busy stage, long stages only with
        the other long ones (two pretrainings with every core each would run twice as many threads as cores)."""
        long_ = sum(self.stages[n].all_cores for n in busy)
        return max(1, cores // max(1, min(jobs, len(busy)))), max(1, cores // max(1, min(jobs, long_)))

    def launch(self, pending: Sequence[str], done: Collection[str], running: dict[str, int], cores: int,
               jobs: int, elsewhere: int = 0, first: Collection[str] = ()) -> list[tuple[str, int]]:
        """The stages to start now (`startable`'s picks) with each one's torch threads: its share of the cores
        (`core_shares`), but never more than the cores that the `running` stages' threads (stage -> threads) leave
        free; with none free a ready stage waits. Threads are fixed when a stage starts, and a stage with every
        core beside another ran at 0.37-0.43x its speed alone (results/thread-layout, layout D). A stage whose
        params fix its threads (`Stage.threads`) holds that many, so a lone one-thread fine-tune leaves a core to
        the next ready stage. `elsewhere`: cores that other work on the machine keeps busy (`busy_elsewhere`); a
        stage whose threads are the flow's to choose gets no more than the cores left beside it and the running
        stages (pretraining with two threads beside a busy core ran about 5 times slower than with one)."""
        ready = self.ready(pending, done, running)
        shared, heavy = self.core_shares(cores, jobs, [*running, *ready])
        free, picked = cores - sum(running.values()), []
        for name in self.startable(list(pending), set(done), jobs - len(running), list(running), first):
            if free < 1:
                break
            fixed = min(self.stages[name].threads, cores)  # more than the cores: it waits for all of them
            if fixed > free:
                continue
            spare = max(1, cores - elsewhere - sum(running.values()) - sum(t for _, t in picked))
            threads = fixed or min(heavy if self.stages[name].all_cores else shared, free, spare)
            picked.append((name, threads))
            free -= threads
        return picked

    def match(self, patterns: list[str]) -> list[str]:
        """Stage names matching shell-style patterns (`finetune@*`); an unmatched pattern is an error."""
        found: list[str] = []
        for pattern in patterns:
            hits = [n for n in self.stages if fnmatch.fnmatchcase(n, pattern)]
            if not hits:
                raise FlowError(f"no stage in dvc.yaml matches {pattern!r} (stages: {', '.join(self.stages)})")
            found += [h for h in hits if h not in found]
        return found

    @property
    def rows(self) -> list[str]:
        """The grid's rows, sorted: the items of the `row@ROW` stages (dvc.yaml's foreach over params' `rows`)."""
        return sorted(s.item for s in self.stages.values() if s.group == ROW_GROUP and s.item is not None)

    def cells(self) -> dict[str, Cell]:
        """The stages that run one cell of the grid (`finetune@va-llm-3`, DVC's matrix over rows x seeds): an item
        `ROW-SEED` of a row of `rows`; stage name -> cell."""
        rows = set(self.rows)
        found = {}
        for name, stage in self.stages.items():
            if stage.item is None or stage.group == ROW_GROUP:
                continue
            try:
                cell = Cell.from_name(stage.item)
            except ValueError:
                continue
            if cell.row in rows:
                found[name] = cell
        return found

    def select(self, targets: list[str] | None = None, rows: list[str] | None = None,
               seeds: list[int] | None = None, skip: Collection[Cell] = ()) -> Dag:
        """The sub-DAG for `targets` (with their ancestors) restricted to the cells of `rows` and `seeds`, less the
        cells of `skip` (those a study has committed already).

        A cell's stages (`transfer@va-llm-3`) are kept when its row is among `rows` and its seed among `seeds`
        (either None: all) and it is not skipped; a dropped row's `row@ROW` goes too (so does a row whose cells are
        all skipped), and so does every stage that needs a dropped stage (the report over every cell), and so do
        the stages that only the dropped rows draw on (an upstream model no kept row starts from). Other stages that
        are not a cell's (`prepare@upstream`, `generator`, `mismatch`) are untouched.
        """
        keep = set(self.stages)
        if targets:
            keep = set()
            for name in self.match(targets):
                keep |= {name} | self.ancestors(name)
        if rows or seeds or skip:
            cells = self.cells()
            known_rows = self.rows
            known_seeds = sorted({c.seed for c in cells.values()})
            unknown_rows = [r for r in rows or [] if r not in known_rows]
            if unknown_rows:
                raise FlowError(f"unknown row {unknown_rows[0]!r} (rows in dvc.yaml: "
                                f"{', '.join(known_rows) or 'none'})")
            unknown_seeds = [s for s in seeds or [] if s not in known_seeds]
            if unknown_seeds:
                raise FlowError(f"unknown seed {unknown_seeds[0]!r} (seeds in dvc.yaml: "
                                f"{', '.join(map(str, known_seeds)) or 'none'})")
            dropped = {name for name, cell in cells.items()
                       if (rows and cell.row not in rows) or (seeds and cell.seed not in seeds) or cell in skip}
            left = {cell.row for name, cell in cells.items() if name not in dropped}
            dropped |= {f"{ROW_GROUP}@{row}" for row in known_rows
                        if (rows and row not in rows) or (skip and row not in left)}
            for name in self.order:  # topological: a stage whose upstream was dropped is dropped
                if name in dropped or set(self.stages[name].upstream) & dropped:
                    dropped.add(name)
            resources = set().union(*(self.ancestors(n) for n in dropped if n.startswith(f"{ROW_GROUP}@")))
            for name in reversed(self.order):  # and what only the dropped rows draw on (another upstream model)
                users = [n for n, s in self.stages.items() if name in s.upstream and n in keep]
                if name in resources and users and all(u in dropped for u in users):
                    dropped.add(name)
            keep -= dropped
        return Dag({n: s for n, s in self.stages.items() if n in keep})


def overlaps(a: str, b: str) -> bool:
    """Whether one of two workspace paths is the other or lies inside it (DVC's lock conflict)."""
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return pa == pb or pa in pb.parents or pb in pa.parents


def _needed(outs: tuple[str, ...], deps: tuple[str, ...], files: list[str]) -> bool:
    """Whether a stage that writes `outs` must finish before a stage that reads `deps`, of which it draws on
    `files` only: it writes one of those files, or a dep of the reader that is not just a part of a folder the
    reader reads (outs the reader does not read at all, such as metrics, do not count)."""
    for out in outs:
        if any(overlaps(out, f) for f in files):
            return True
        read = [d for d in deps if overlaps(out, d)]
        if read and not all(PurePosixPath(d) in PurePosixPath(out).parents for d in read):
            return True
    return False


def stage_needs(params: Params) -> dict[str, list[str]]:
    """What each row stage and the backtranslate stage draw on from the shared model folders (vocabridge.rows'
    `resources`), from the workspace's params. A row whose config is wrong is left as DVC has it (its stage says
    what is wrong)."""
    from vocabridge import workspace as paths
    from vocabridge.errors import VocabridgeError
    from vocabridge.rows import resources

    needs: dict[str, list[str]] = {}
    for row in params.rows:
        try:
            needs[f"{ROW_GROUP}@{row}"] = [p.as_posix() for p in resources(row, params).values()]
        except VocabridgeError:
            continue
    backward = params.backtranslation.upstream
    # without a backward model it writes an empty corpus; it still reads the folder, which the base model makes
    needs["backtranslate"] = [(paths.upstream(backward) if backward in params.upstreams
                               else paths.PRETRAINED).as_posix()]
    return needs


def fixed_threads(params: Params, dag: Dag) -> dict[str, int]:
    """The torch threads that each cell's fine-tune takes from its own params (`finetune.train.threads` or its
    family's, `vocabridge.transfer.finetune_training`) whatever the flow's share: one thread gives the same weights
    however many stages run beside it. A row whose config is wrong is left to the flow's share."""
    from vocabridge.errors import VocabridgeError
    from vocabridge.transfer import finetune_training

    fixed: dict[str, int] = {}
    for name, cell in dag.cells().items():
        if dag.stages[name].group != "finetune":
            continue
        try:
            threads = finetune_training(cell.row, params).threads
        except VocabridgeError:
            continue
        if threads > 0:
            fixed[name] = threads
    return fixed


def load_dag(workspace: Path) -> Dag:
    """Read dvc.yaml (and any other pipeline files) of `workspace` with DVC's Repo API; a row waits for what it
    draws on (`Dag.narrow`)."""
    import networkx as nx
    from dvc.dependency.param import ParamsDependency
    from dvc.exceptions import DvcException
    from dvc.repo import Repo

    try:
        with warnings.catch_warnings(), Repo(str(workspace)) as repo:
            warnings.simplefilter("ignore", DeprecationWarning)  # DVC's own, from pygtrie
            graph = repo.index.graph  # edges point from a stage to the stages it depends on
            pipeline = [s for s in graph.nodes if getattr(s, "cmd", None)]  # skip `dvc add`ed data sources
            order = [s for s in reversed(list(nx.topological_sort(graph))) if s in pipeline]
            root = Path(repo.root_dir)

            def address(stage) -> str:  # what `dvc repro` accepts from the workspace root
                dvcfile = Path(stage.path).relative_to(root).as_posix()
                return stage.name if dvcfile == "dvc.yaml" else f"{dvcfile}:{stage.name}"

            stages = {}
            for stage in order:
                meta = (stage.meta or {}).get("prefect", {}) if isinstance(stage.meta, dict) else {}
                name = address(stage)
                group = stage.name.split("@", 1)[0]
                reports = tuple(str(o.def_path) for o in stage.outs
                                if o.metric or (not o.use_cache and str(o.def_path).endswith((".md", ".csv"))))
                stages[name] = Stage(
                    name=name,
                    upstream=tuple(sorted(address(u) for u in graph.successors(stage) if u in pipeline)),
                    gpu=bool(meta.get("gpu", group in GPU_GROUPS)),
                    retries=int(meta.get("retries", RETRY_GROUPS.get(group, 0))),
                    all_cores=bool(meta.get("all_cores", group in ALL_CORE_GROUPS)),
                    reports=reports,
                    outs=tuple(str(o.def_path) for o in stage.outs),
                    deps=tuple(str(d.def_path) for d in stage.deps if not isinstance(d, ParamsDependency)),
                )
    except DvcException as exc:
        raise FlowError(f"{workspace}: cannot read the DVC pipeline: {exc}") from exc
    params = load_params(workspace / "params.yaml")  # read once for both
    dag = Dag(stages).narrow(stage_needs(params))
    return dag.fix_threads(fixed_threads(params, dag))
