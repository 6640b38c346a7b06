"""The experiment grid: rows (a method and its knobs) times seeds make the cells, and a finished cell leaves a
record that can be committed.

A study is read from its cells, not from one run: `cells()` is the one place rows and seeds combine, and a cell's
record (`record.json` with its hypotheses and learning curve) carries everything the report needs, so that the
records of several sessions, on several machines, add up to one study. `read_cells` gathers them; a record whose
row knobs or test set differ from the grid's own is kept out and said so (it belongs to another experiment).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import shutil
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from vocabridge.errors import InputError
from vocabridge.fileio import atomic_dir

RECORD = "record.json"
VERSION = 1
FILES = ("hyp.txt", "upstream_hyp.txt", "dev_hyp.txt", "curve.csv")  # a cell's text beside its record


@dataclass(frozen=True)
class Cell:
    """One row run with one seed: DVC's matrix item `ROW-SEED` (stages transfer@, finetune@, evaluate@)."""

    row: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.row}-{self.seed}"

    @classmethod
    def from_name(cls, name: str) -> Cell:
        """`va-llm-3` -> Cell('va-llm', 3): the seed is what follows the last '-'."""
        row, _, seed = name.rpartition("-")
        if not row or not seed.isdigit():
            raise ValueError(f"not a cell name (ROW-SEED): {name!r}")
        return cls(row, int(seed))

    @property
    def path(self) -> Path:
        """Its folder under any cells folder (the workspace's data/cells, a study's results/STUDY/cells)."""
        return Path(self.row) / f"s{self.seed}"


def cells(rows: dict | list, seeds: list[int]) -> list[Cell]:
    """Every row with every seed, rows in their order."""
    return [Cell(row, seed) for row in rows for seed in seeds]


def knobs_digest(knobs: dict) -> str:
    """A short content hash of a row's resolved knobs: records with the same digest ran the same row. Knobs left
    unset (None) do not count, so a knob added to the code later leaves the committed cells' digests as they were."""
    text = json.dumps(_set(knobs), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


COMPUTE_ONLY = ("seed", "threads")  # training settings that do not define the experiment (a cell has its own seed;
#                                   threads change the last bits only)


def _set(value):
    return {k: _set(v) for k, v in value.items() if v is not None} if isinstance(value, dict) else value


def condition_digest(training: dict, evaluate: dict, train_pairs: int) -> str:
    """A short hash of the regime a cell ran under (its fine-tune's budget and schedule, its sample of training
    pairs, its decoding): cells of one row pool only under the same condition."""
    return knobs_digest({"finetune": {k: v for k, v in training.items() if k not in COMPUTE_ONLY},
                         "evaluate": {k: evaluate.get(k) for k in ("beam", "length_penalty", "upstream_sentences")},
                         "train_pairs": train_pairs})


def decoding_digest(evaluate: dict) -> str:
    """The condition of a row evaluated as it is (out-domain; no fine-tune): its decoding alone, so that its cells
    pool whatever fine-tune budget or sample the other rows run under."""
    return condition_digest({}, evaluate, 0)


def text_digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


def machine() -> dict:
    """The hardware a cell ran on: CPU capability and native bf16, GPU, threads, and the library versions."""
    import torch

    from vocabridge.nmt.precision import describe_cpu

    cpu = describe_cpu()
    return {**cpu, "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "torch": torch.__version__, "python": platform.python_version()}


def code_commit(root: Path = Path(".")) -> str | None:
    """The commit of the code that ran the cell (None outside a git checkout), '+' when the tree has changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


@dataclass
class CellRecord:
    """A finished cell as the report reads it."""

    row: str
    seed: int
    data: dict  # record.json
    folder: Path
    source: str = ""  # which cells folder it came from
    hyps: list[str] = field(default_factory=list)
    upstream_hyps: list[str] = field(default_factory=list)
    dev_hyps: list[str] = field(default_factory=list)  # the held-out dev books: a second test set

    @property
    def cell(self) -> Cell:
        return Cell(self.row, self.seed)

    @property
    def upstream_sha256(self) -> str:
        return (self.data.get("upstream") or {}).get("sha256", "")

    @property
    def pair_key(self) -> tuple:
        """Cells that share seed and upstream model pair (a per-seed difference is taken between them)."""
        return self.seed, self.upstream_sha256

    @property
    def bleu(self) -> float:
        return self.data["metrics"]["bleu"]


def read_record(folder: Path, source: str = "") -> CellRecord:
    path = folder / RECORD
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        row, seed = data["row"], int(data["seed"])
        _ = data["metrics"]["bleu"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise InputError(f"{path}: not a cell record ({err})") from None
    hyp = folder / "hyp.txt"
    up = folder / "upstream_hyp.txt"
    return CellRecord(row, seed, data, folder, source, _lines(hyp), _lines(up), _lines(folder / "dev_hyp.txt"))


def _lines(path: Path) -> list[str]:
    """One hypothesis a line, split on '\n' only (str.splitlines also splits on '\r', '\x85', U+2028, which a
    hypothesis may hold); [] when the file is absent."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []


def find_records(root: Path) -> list[Path]:
    """The cell folders under a cells folder (ROW/sSEED/record.json)."""
    return sorted(p.parent for p in root.glob(f"*/s*/{RECORD}")) if root.is_dir() else []


@dataclass
class Gathered:
    """The cells of a grid found in several cells folders, and the records left out with the reason."""

    records: list[CellRecord]
    left_out: list[tuple[Path, str]]
    missing: list[Cell]


def read_cells(folders: list[Path], expected: dict[str, str], seeds_of: dict[str, list[int]] | None = None,
               test_digest: str | None = None, conditions: dict[str, str] | None = None,
               stamped: dict[str, dict] | None = None, as_is: Collection[str] = ()) -> Gathered:
    """The records of the grid's rows found in `folders`, later folders winning for the same cell.

    `expected` maps each row to its knobs digest: a record of another digest ran other knobs and is left out, as is
    one scored on another test set (`test_digest`), run under another condition (`conditions`: row -> its
    condition_digest; a fine-tune's other budget, sample or decoding) or stamped with another condition than
    `stamped` gives its row (row -> the `condition` its records carry; the AB-Net rows', whose model settings no
    digest covers: a model that learns from the downstream pairs alone starts from the same weights whatever they
    say). A row of `as_is` is evaluated without a fine-tune: its records' condition is their decoding's
    (`decoding_digest` of the params they ran with; older records carry a digest with a budget they never used).
    Records of rows not in the grid are ignored;
    so are extra seeds beyond `seeds_of` when it is given (None: every seed found counts, so later sessions' seeds
    add up)."""
    found: dict[Cell, CellRecord] = {}
    left_out: list[tuple[Path, str]] = []
    for folder in folders:
        for cell_dir in find_records(folder):
            record = read_record(cell_dir, str(folder))
            if record.row not in expected:
                continue
            digest = record.data.get("knobs_digest")
            if digest != expected[record.row]:
                left_out.append((cell_dir, f"other knobs than rows.{record.row} now ({digest} != "
                                           f"{expected[record.row]})"))
                continue
            test = (record.data.get("test") or {}).get("digest")
            if test_digest is not None and test != test_digest:
                left_out.append((cell_dir, f"scored on another test set ({test} != {test_digest})"))
                continue
            condition = record.data.get("condition_digest")
            if record.row in as_is and isinstance(ran := (record.data.get("params") or {}).get("evaluate"), dict):
                condition = decoding_digest(ran)
            if conditions is not None and condition != conditions.get(record.row):
                left_out.append((cell_dir, f"another condition (fine-tune, sample or decoding: {condition} != "
                                           f"{conditions.get(record.row)})"))
                continue
            want = (stamped or {}).get(record.row)
            if want is not None and (have := record.data.get("condition") or {}) != json.loads(json.dumps(want)):
                keys = sorted(key for key in {*have, *want} if have.get(key) != want.get(key))
                left_out.append((cell_dir, f"another AB-Net model or setting ({', '.join(keys)} differ from "
                                           f"abnets.{want.get('upstream')} and abnet now)"))
                continue
            found[record.cell] = record
    missing = []
    if seeds_of is not None:
        missing = [Cell(row, seed) for row, seeds in seeds_of.items() for seed in seeds
                   if Cell(row, seed) not in found]
    order = {row: i for i, row in enumerate(expected)}
    records = sorted(found.values(), key=lambda r: (order[r.row], r.seed))
    return Gathered(records, left_out, missing)


def commit_cells(source: Path, target: Path, only: set[Cell] | None = None) -> list[Cell]:
    """Copy the finished cells of `source` (a workspace's data/cells; `only` those given) into `target` (a study's
    results folder), each cell replaced whole and atomically; returns the cells copied. Cells in `target` that
    `source` lacks stay: that is how sessions add up."""
    copied = []
    for cell_dir in find_records(source):
        record = read_record(cell_dir)
        if only is not None and record.cell not in only:
            continue
        dest = target / record.cell.path
        if dest.is_dir() and all(_same(cell_dir / name, dest / name) for name in (RECORD, *FILES)):
            continue
        with atomic_dir(dest) as tmp:
            for name in (RECORD, *FILES):
                if (cell_dir / name).is_file():
                    shutil.copy2(cell_dir / name, tmp / name)
        copied.append(record.cell)
    return copied


def _same(a: Path, b: Path) -> bool:
    if a.is_file() != b.is_file():
        return False
    return not a.is_file() or a.read_bytes() == b.read_bytes()


def asdict_clean(obj) -> dict:
    """A dataclass as a dict without None values (a row's knobs as written)."""
    return {k: v for k, v in dataclasses.asdict(obj).items() if v is not None}
