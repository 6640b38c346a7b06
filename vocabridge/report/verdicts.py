"""Verdicts: the papers' orderings checked against our rows (Holm within a paper's table) and the words each
comparison is reported in."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from vocabridge.papers import PaperTable
from vocabridge.report.conditions import DEV, DIFFER, RowCondition, condition_text, conditions_differ
from vocabridge.significance import (
    ALPHA,
    MIN_SEEDS,
    Comparison,
    holm,
    t_interval,
)


def paper_layout(paper: PaperTable, seeds: pd.DataFrame, group_of: dict[str, str],
                 conditions: dict[str, RowCondition] | None = None) -> pd.DataFrame:
    """The paper's table row by row with ours beside it: our mean test BLEU over the seeds of the row's group,
    their spread and count (empty where the run has no such row), and the condition it ran under (pretrain_init,
    shared, sides); rows are grouped by pretrain_init (in the paper's order within a group) where the table's rows
    ran under more than one."""
    by_group = seeds.set_index("group") if len(seeds) else pd.DataFrame()
    conditions = conditions or {}
    out = []
    for name, ours, published in paper.rows:
        group = group_of.get(ours)
        found = by_group.loc[group] if group is not None and group in by_group.index else None
        cond = conditions.get(ours)
        out.append({"paper_row": name, "published_bleu": published, "our_row": ours,
                    "seeds": None if found is None else int(found["seeds"]),
                    "bleu_mean": None if found is None else found["bleu_mean"],
                    "bleu_std": None if found is None else found["bleu_std"],
                    **{key: "/".join(getattr(cond, key)) or None if cond else None
                       for key in ("pretrain_init", "shared", "sides")}})
    table = pd.DataFrame(out, columns=["paper_row", "published_bleu", "our_row", "seeds", "bleu_mean", "bleu_std",
                                       "pretrain_init", "shared", "sides"])
    inits = list(dict.fromkeys(table["pretrain_init"].dropna()))
    if len(inits) > 1:  # one block per condition, rows not run (or not recorded) last
        rank = table["pretrain_init"].map(lambda v: inits.index(v) if v in inits else len(inits))
        table = table.iloc[rank.argsort(kind="stable")].reset_index(drop=True)
    return table



ORDERING_COLUMNS = ["ordering", "published_delta", "delta", "ci_low", "ci_high", "p_value", "p_holm", "seeds", "form",
                    "verdict", f"delta {DEV}", f"ci_low {DEV}", f"ci_high {DEV}", f"p_holm {DEV}", f"verdict {DEV}",
                    "condition"]



def ordering_verdicts(paper: PaperTable, compare: Callable[[str, str], Comparison | None],
                      dev_compare: Callable[[str, str], Comparison | None] | None = None,
                      conditions: dict[str, RowCondition] | None = None) -> pd.DataFrame:
    """One line per published ordering (better > worse): the published gap, ours with its 95% interval and p
    over seeds and sentences (`compare(better, worse)`, None when a row was not run), p after Holm's correction
    over the table's orderings (one family), and the verdict: holds (decisive and Holm's p <= 0.05, same sign),
    reversed (the same, other sign), not decisive (after Holm), too few seeds, or not run. The same on the second
    test set (`dev_compare`, its own family; `not measured` where the cells have no second-set figure), and the
    condition both rows ran under (`conditions`): an ordering of rows under different pretrain.init is marked
    `conditions differ: not a verdict` on both sets and left out of both families, unless that is what the table
    varies (`paper.varies`)."""
    published = {ours: bleu for _, ours, bleu in paper.rows}
    conditions = conditions or {}
    found = [(better, worse, compare(better, worse), dev_compare(better, worse) if dev_compare else None,
              not paper.varies and conditions_differ(conditions.get(better), conditions.get(worse)))
             for better, worse in paper.orderings]

    def family(index: int) -> dict[int, float]:
        tested = [(i, line[index]) for i, line in enumerate(found) if line[index] is not None and not line[4]]
        adjusted = holm([c.p for _, c in tested])[0]
        return {i: round(p, 4) for (i, _), p in zip(tested, adjusted, strict=True)}

    def said(c: Comparison | None, p_holm: float | None, differ: bool, missing: str) -> str:
        if c is None:
            return missing
        return DIFFER if differ else holm_verdict(c, p_holm, ("holds", "reversed"))

    p_test, p_dev = family(2), family(3)
    out = []
    for i, (better, worse, c, d, differ) in enumerate(found):
        a, b = conditions.get(better), conditions.get(worse)
        out.append({"ordering": f"{better} > {worse}",
                    "published_delta": round(published[better] - published[worse], 2),
                    "delta": None if c is None else c.delta, "ci_low": None if c is None else c.ci_low,
                    "ci_high": None if c is None else c.ci_high, "p_value": None if c is None else c.p_value,
                    "p_holm": p_test.get(i), "seeds": None if c is None else f"{c.seeds}/{c.reference_seeds}",
                    "form": None if c is None else c.form, "verdict": said(c, p_test.get(i), differ, "not run"),
                    f"delta {DEV}": None if d is None else d.delta, f"ci_low {DEV}": None if d is None else d.ci_low,
                    f"ci_high {DEV}": None if d is None else d.ci_high, f"p_holm {DEV}": p_dev.get(i),
                    f"verdict {DEV}": said(d, p_dev.get(i), differ, "not run" if c is None else "not measured"),
                    "condition": condition_text(a, b) if a is not None and b is not None else None})
    return pd.DataFrame(out, columns=ORDERING_COLUMNS)



def verdict(c: Comparison) -> str:
    """A comparison's verdict: decisive only with MIN_SEEDS seeds a side and an interval that excludes 0."""
    if c.one_seed:
        return "one seed: not a finding"
    if not c.enough_seeds:
        return f"fewer than {MIN_SEEDS} seeds a side: not a finding"
    return "decisive" if c.decisive else "not decisive"



def holm_verdict(c: Comparison, p_holm: float, words: tuple[str, str] = ("decisive", "decisive")) -> str:
    """`verdict` within a family: a decisive comparison whose Holm-adjusted p exceeds ALPHA is not decisive after
    Holm; `words` name a decisive one by its sign (better, worse)."""
    if not c.decisive:
        return verdict(c)
    if p_holm > ALPHA:
        return "not decisive after Holm"
    return words[0] if c.delta > 0 else words[1]



SHORT = {"one seed: not a finding": "1 seed", f"fewer than {MIN_SEEDS} seeds a side: not a finding":
         f"<{MIN_SEEDS} seeds"}



def p_text(p: float | None) -> str | None:
    """A p-value as the report prints it: two significant digits, `<0.0001` below that (a rounded 0 would read as
    certainty)."""
    if p is None or pd.isna(p):
        return None
    return "<0.0001" if p < 0.0001 else f"{p:.2g}"



def verdict_text(c: Comparison, p_holm: float | None, against: str, reference: str) -> str:
    """A comparison in one table cell: delta [95% interval], Holm's p, the verdict, and Welch where unpaired;
    `p_holm` None: the rows ran under different conditions (no p, no verdict)."""
    notes = [n for n in (f"vs {against}" if against != reference else "", "Welch" if c.form == "unpaired" else "")
             if n]
    if p_holm is None:
        said = DIFFER
    else:
        said = SHORT.get(v := holm_verdict(c, p_holm, ("better", "worse")), v)
        said = f"p_holm {p_text(p_holm)}: {said}"
    return (f"{c.delta:+.2f} [{c.ci_low:.2f}, {c.ci_high:.2f}]{' ' if p_holm is not None else ': '}{said}"
            + (f" ({'; '.join(notes)})" if notes else ""))


LATENCY_COLUMNS = ["claim", "machine", "published_speedup", "speedup", "ci_low", "ci_high", "p_value", "p_holm",
                   "seeds", "verdict", "condition"]


def latency_verdicts(cells: pd.DataFrame, published: dict[str, float], against: str) -> pd.DataFrame:
    """Guo et al.'s speed claim as verdicts: each row whose published latency is below `against`'s decodes a
    sentence faster than it. Per machine (a latency is a machine's), over its cells' latency_ms: the speed-up as
    the ratio of geometric means (against's ms / the row's) with a 95% Welch t interval on log latency, p, Holm's
    correction over the machine's claims (one family), and the verdict by the BLEU orderings' rule (holds /
    reversed: the interval excludes 1 and p_holm <= 0.05, 5 cells a side). Each cell measured beside whatever
    else its machine ran: the spread that adds widens the interval."""
    if not len(cells) or "latency_ms" not in cells:
        return pd.DataFrame(columns=LATENCY_COLUMNS)
    timed = cells.assign(latency_ms=pd.to_numeric(cells["latency_ms"], errors="coerce")).dropna(subset=["latency_ms"])
    timed = timed[timed["latency_ms"] > 0]
    machines = timed["machine"].fillna("unknown")
    claims = [row for row, ms in published.items() if row != against and ms < published[against]]
    out = []
    for machine in dict.fromkeys(machines):
        here = timed[machines == machine]
        base = here.loc[here["row"] == against, "latency_ms"].to_numpy()
        found = []
        for row in claims:
            own = here.loc[here["row"] == row, "latency_ms"].to_numpy()
            if len(base) and len(own):
                i = t_interval(np.log(base), np.log(own), paired=False)
                c = Comparison(delta=i.delta, ci_low=i.low, ci_high=i.high, p_value=i.p_value, seeds=len(base),
                               reference_seeds=len(own), std_error=i.std_error, seed_std=None,
                               reference_seed_std=None, sentence_variance=0.0, form="unpaired", df=i.df)
                found.append((row, c))
        adjusted = holm([c.p for _, c in found])[0]
        for (row, c), p_holm in zip(found, adjusted, strict=True):
            decoders = [", ".join(sorted({str(d) for d in here.loc[here["row"] == r, "decoder"].dropna()}))
                        for r in (row, against)]
            out.append({"claim": f"{row} faster than {against}", "machine": machine,
                        "published_speedup": round(published[against] / published[row], 2),
                        "speedup": round(math.exp(c.delta), 2), "ci_low": round(math.exp(c.ci_low), 2),
                        "ci_high": round(math.exp(c.ci_high), 2), "p_value": float(f"{c.p_value:.2g}"),
                        "p_holm": float(f"{p_holm:.2g}"),
                        "seeds": f"{c.reference_seeds}/{c.seeds}",
                        "verdict": holm_verdict(c, p_holm, ("holds", "reversed")),
                        "condition": f"decoding {decoders[0]} vs {decoders[1]}; one sentence at a time"})
    return pd.DataFrame(out, columns=LATENCY_COLUMNS)
