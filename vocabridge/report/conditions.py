"""The condition a row's cells ran under (`RowCondition`) and the second test set (`HeldOut`): what a verdict
names, and when two rows' conditions differ so that their comparison is shown but never made a verdict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from vocabridge.grid import CellRecord

DEV = "(dev books)"  # the second test set's columns: `vs_REF (dev books)`, `verdict (dev books)`


DEV_SET = "dev books"  # the second test set's lines in seed_comparisons.csv (`test_set`)
DIFFER = "conditions differ: not a verdict"



@dataclass
class HeldOut:
    """A second test set: the dev verses of the books that no checkpoint selection read, in order, with each
    sentence's book (`clusters`; None: sentences drawn one by one), the digest a record's `heldout_dev_test` must
    carry for its dev_hyp.txt to count, and the books as the report names them."""

    refs: list[str]
    clusters: list[str] | None
    digest: str
    books: list[str]



@dataclass(frozen=True)
class RowCondition:
    """What a row's cells ran under, each field the sorted values over its cells (empty: not recorded): how its
    upstream model's embeddings started before pretraining (`pretrain_init`), the shared-token policy, the sides,
    the fine-tune's budget, the machines' capabilities, the seeds, and how its test set was decoded (the NMT rows
    with CTranslate2, the AB-Net family and the PLM-sponsored model with their own search: an ordering of rows
    that decode differently says so)."""

    pretrain_init: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    sides: tuple[str, ...] = ()
    budget: tuple[str, ...] = ()
    machines: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    decoding: tuple[str, ...] = ()

    @classmethod
    def of(cls, members: Sequence[CellRecord]) -> RowCondition:
        """From the records: their `condition` (written from the row stamp; absent in older records), else their
        `knobs` (shared, sides), `params.finetune` (max_updates, patience) and `machine`."""
        def values(get) -> tuple[str, ...]:
            return tuple(sorted({str(v) for v in map(get, members) if v is not None}))

        def given(record: CellRecord, key: str):
            return (record.data.get("condition") or {}).get(key) or (record.data.get("knobs") or {}).get(key)

        return cls(values(lambda r: (r.data.get("condition") or {}).get("pretrain_init")),
                   values(lambda r: given(r, "shared")), values(lambda r: given(r, "sides")),
                   values(_budget), values(_capability), tuple(sorted({r.seed for r in members})),
                   values(_decoding))



def _budget(record: CellRecord) -> str | None:
    """A cell's fine-tune budget: at most max_updates updates, early stopping after `patience` evaluations (without
    a dev BLEU or a dev loss gain, where `patience_on: both` says so)."""
    if (record.data.get("finetune") or {}).get("updates") == 0:
        return "not fine-tuned"
    training = (record.data.get("params") or {}).get("finetune") or {}
    if training.get("max_updates") is None:
        return None
    patience = training.get("patience")
    on = " (dev BLEU or dev loss)" if training.get("patience_on") == "both" and training.get("select_by") != "loss" \
        else ""
    return f"max {training['max_updates']} updates, " + (f"patience {patience}{on}" if patience else
                                                          "no early stopping")



def _decoding(record: CellRecord) -> str | None:
    """How a cell's test set was decoded, as its record says: the decoder and its beam (Mask-Predict's: the
    length candidates)."""
    metrics = record.data.get("metrics") or {}
    if not metrics.get("decoder"):
        return None
    return metrics["decoder"] + (f", beam {metrics['beam']}" if metrics.get("beam") else "")



def _capability(record: CellRecord) -> str | None:
    machine = record.data.get("machine") or {}
    if not machine:
        return None
    return (machine.get("capability") or "?") + (f" + {machine['gpu']}" if machine.get("gpu") else "")



def conditions_differ(a: RowCondition | None, b: RowCondition | None) -> bool:
    """Whether two rows' cells ran under more than one pretrain.init between them (unknown on a side: not known to
    differ)."""
    return a is not None and b is not None and len(set(a.pretrain_init) | set(b.pretrain_init)) > 1



def condition_text(a: RowCondition, b: RowCondition | None = None) -> str:
    """A condition in one line: `pretrain.init random; shared copy vs reproject; ...` (one value where both sides
    agree; `?` where not recorded)."""
    b = a if b is None else b

    def both(label: str, x: Sequence[str], y: Sequence[str]) -> str:
        sx, sy = "/".join(x) or "?", "/".join(y) or "?"
        return f"{label} {sx}" if sx == sy else f"{label} {sx} vs {sy}"

    return "; ".join([both("pretrain.init", a.pretrain_init, b.pretrain_init), both("shared", a.shared, b.shared),
                      both("sides", a.sides, b.sides), both("budget", a.budget, b.budget),
                      both("seeds", [seed_list(a.seeds)], [seed_list(b.seeds)]),
                      both("machines", a.machines, b.machines), both("decoding", a.decoding, b.decoding)])



def table_condition(rows: Sequence[str], conditions: dict[str, RowCondition], varies: bool = False) -> str:
    """The condition of a paper table's rows as run here, for its heading line: pretrain.init (with its rows where
    they differ), budget, seeds and machines; shared and sides are per row in the table. `varies`: the table's
    rows differ in pretrain.init by design (PaperTable.varies)."""
    ran = [row for row in dict.fromkeys(rows) if row in conditions]
    if not ran:
        return "no row run here"

    def over(field: str, shown=lambda v: "/".join(v) or "?") -> str:
        groups: dict[str, list[str]] = {}
        for row in ran:
            groups.setdefault(shown(getattr(conditions[row], field)), []).append(row)
        if len(groups) == 1:
            return next(iter(groups))
        return "; ".join(f"{value} ({', '.join(members)})" for value, members in groups.items())

    inits = {v for row in ran for v in conditions[row].pretrain_init}
    return (f"pretrain.init {over('pretrain_init')}"
            + (" (what the table varies)" if varies and len(inits) > 1 else
               " (orderings across them: not verdicts)" if len(inits) > 1 else "")
            + f", budget {over('budget')}, seeds {over('seeds', lambda v: seed_list(v) or '?')}, "
              f"machines {over('machines')}, decoding {over('decoding')}")


def seed_list(seeds: Sequence[int]) -> str:
    """1 2 3 5 -> '1-3, 5'."""
    out: list[str] = []
    for seed in sorted(seeds):
        if out and out[-1].split("-")[-1] == str(seed - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{seed}"
        else:
            out.append(str(seed))
    return ", ".join(out)
