"""The report of a study, built from its cell records (vocabridge.grid): the papers' own tables (Sato et al.'s
Table 3, Liu et al.'s Table 2, Duan & Zhao's Table 3) with our rows beside them and a verdict on each ordering they
report (their names mapped to ours in PaperTable: Single-Run = in-domain, Pretrain-Finetune = ft-srcv, Random Init
= ft-tgtv-random-dec; ATT-EG + KD is not a row of ours), one line per grid row, the plots, and where the cells came
from.

`grid_report` takes records, not paths: the cells of several sessions and machines add up to one report, and a
test builds one from synthetic records. Rows are the groups (a row's seeds are its cells); two rows' cells pair
where they share seed and upstream model (`CellRecord.pair_key`), and each comparison says whether it paired.

Every headline comparison is made twice: on the test set and on a second one (`HeldOut`: the dev verses of the
books no checkpoint selection read, the cells' dev_hyp.txt), reported side by side as `(dev books)`. Every verdict
carries the condition its rows ran under (`RowCondition`: pretrain.init, shared policy, sides, fine-tune budget,
seeds, machines), and a comparison of rows whose upstream models started from differently initialised embeddings
(`pretrain_init`) is shown but never made a verdict."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from vocabridge.grid import CellRecord, Gathered
from vocabridge.papers import GUO_LATENCY_MS, PAPER_TABLES, PaperTable
from vocabridge.significance import (
    ALPHA,
    MIN_SEEDS,
    Comparison,
    compare_statistics,
    corpus_bleu,
    holm,
    mean_interval_statistics,
    sentence_statistics,
)

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
    the fine-tune's budget, the machines' capabilities and the seeds."""

    pretrain_init: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    sides: tuple[str, ...] = ()
    budget: tuple[str, ...] = ()
    machines: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

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
                   values(_budget), values(_capability), tuple(sorted({r.seed for r in members})))


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
                      both("seeds", [_seed_list(a.seeds)], [_seed_list(b.seeds)]),
                      both("machines", a.machines, b.machines)])


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
            + f", budget {over('budget')}, seeds {over('seeds', lambda v: _seed_list(v) or '?')}, "
              f"machines {over('machines')}")


# The published rows beside ours in the main table, named as ours.
PUBLISHED = pd.DataFrame([(ours, bleu, paper.source) for paper in PAPER_TABLES for _, ours, bleu in paper.rows],
                         columns=["method", "bleu", "source"])

COLUMNS = ["method", "seeds", "bleu", "bleu_ci", "chrf", "ter", "upstream_bleu", "delta_bleu", "p_value", "src_vocab",
           "tgt_vocab", "unseen_token_rate", "mean_output_tokens", "sentences_per_second", "latency_ms",
           "trained_parameters", "updates", "best_update", "dev_bleu_auc", "updates_to_threshold",
           "zero_shot_dev_bleu", "zero_shot_dev_ppl", "loo_cos_src", "loo_cos_tgt", "source"]


def build_table(rows: list[dict], baseline: str) -> pd.DataFrame:
    """Our rows (one per grid row: means over its seeds), deltas against the baseline, then the published rows
    (report.csv, which flows/collect reads per experiment)."""
    ours = pd.DataFrame(rows)
    if baseline in set(ours["method"]):
        base = float(ours.loc[ours["method"] == baseline, "bleu"].iloc[0])
        ours["delta_bleu"] = (ours["bleu"] - base).round(2)
    ours["source"] = "vocabridge"
    table = pd.concat([ours, PUBLISHED], ignore_index=True)
    return table.reindex(columns=COLUMNS)


def vocabulary_fit_table(mismatch: dict, diagnostics: dict[str, dict], lang) -> pd.DataFrame:
    """Fertility, unseen-token rate and unknown-piece rate on the downstream test text: the upstream and
    downstream SentencePiece vocabularies (the mismatch stage), and the PLM vocabularies of AB-Net rows."""
    rows = []
    for code in (lang.src, lang.tgt):
        fit = mismatch[code]
        rows.append({"vocabulary": "upstream (pretrained NMT)", "lang": code, "vocab_size": fit["vocab_size"]["old"],
                     "fertility": fit["fertility"]["old"], "unseen_token_rate": fit["unseen_token_rate"],
                     "unk_rate": fit["old_unk_rate"]})
        rows.append({"vocabulary": "downstream (adapted)", "lang": code, "vocab_size": fit["vocab_size"]["new"],
                     "fertility": fit["fertility"]["new"], "unseen_token_rate": 0.0, "unk_rate": None})
    seen = set()
    for diag in diagnostics.values():
        if diag.get("vocabulary") != "plm" or diag.get("upstream") in seen or "vocabulary_fit" not in diag:
            continue
        seen.add(diag["upstream"])
        for side, code in (("src", lang.src), ("tgt", lang.tgt)):
            fit = diag["vocabulary_fit"][side]
            rows.append({"vocabulary": f"PLM ({diag['upstream']})", "lang": code,
                         "vocab_size": fit["vocab_size"]["old"], "fertility": fit["fertility"]["old"],
                         "unseen_token_rate": fit["unseen_token_rate"], "unk_rate": fit["old_unk_rate"]})
    return pd.DataFrame(rows, columns=["vocabulary", "lang", "vocab_size", "fertility", "unseen_token_rate",
                                       "unk_rate"])


def to_markdown(table: pd.DataFrame) -> str:
    """A Markdown table (no extra dependency): empty cells for missing values."""
    cols = list(table.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, row in table.iterrows():
        cells = ["" if pd.isna(v) else (f"{v:.4g}" if isinstance(v, float) else str(v)) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def neighbours_markdown(diagnostics: dict[str, dict]) -> str:
    """Nearest neighbours of probe tokens in CBOW space and, after mapping, among the pretrained rows."""
    lines = []
    for method, diag in diagnostics.items():
        for side in ("encoder", "decoder"):
            probes = (diag.get(side) or {}).get("neighbours") or {}
            if not probes:
                continue
            if not lines:
                lines += ["", "## Nearest neighbours of new tokens (before: CBOW space; after: pretrained rows)", ""]
            lines += [f"**{method}, {side}**", "", "| token | kind | CBOW | pretrained, after mapping |",
                      "|---|---|---|---|"]
            for token, nb in probes.items():
                lines.append(f"| {token} | {nb['kind']} | {' '.join(nb['cbow'])} | {' '.join(nb['pretrained'])} |")
            lines.append("")
    return "\n".join(lines)


def forgetting_table(cells: pd.DataFrame) -> pd.DataFrame:
    """Per row: mean test BLEU over its cells on the downstream domain and on the upstream one (what adapting
    cost); rows with a cell that was not scored upstream are left out."""
    rows = [{"row": row, "seeds": len(part), "bleu": round(float(part["bleu"].mean()), 2),
             "upstream_bleu": round(float(part["upstream_bleu"].mean()), 2)}
            for row, part in cells.groupby("row", sort=False) if part["upstream_bleu"].notna().all()]
    return pd.DataFrame(rows, columns=["row", "seeds", "bleu", "upstream_bleu"])


def forgetting_plot(forgetting: pd.DataFrame, path: Path) -> None:
    """The trade-off: downstream BLEU against upstream BLEU, one point per row (mean over its seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5), dpi=120)
    ax.scatter(forgetting["upstream_bleu"], forgetting["bleu"], color="#4878a8")
    x_span = max(float(forgetting["upstream_bleu"].max() - forgetting["upstream_bleu"].min()), 1.0)
    y_span = max(float(forgetting["bleu"].max() - forgetting["bleu"].min()), 1.0)
    placed: list[tuple[float, float]] = []
    for row in forgetting.itertuples():
        # a label the width of a few words overlaps a neighbour's at about the same height: stack it below
        near = sum(abs(x - row.upstream_bleu) < 0.25 * x_span and abs(y - row.bleu) < 0.04 * y_span for x, y in placed)
        ax.annotate(row.row, (row.upstream_bleu, row.bleu), fontsize=7, xytext=(3, 3 - 9 * near),
                    textcoords="offset points")
        placed.append((row.upstream_bleu, row.bleu))
    ax.set(xlabel="upstream (original domain) test BLEU", ylabel="downstream test BLEU",
           title="What adapting gains and what it forgets (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


VERDICT_COLOURS = {"better": "#2e7d32", "worse": "#c62828"}  # decisive after Holm; anything else grey


def differences_plot(comparisons: pd.DataFrame, path: Path) -> bool:
    """Each row's difference from each reference (seed_comparisons.csv): the paired or Welch 95% interval over
    seeds and test books, on the test set (filled) and the second test set (open), coloured by the verdict after
    Holm (green better, red worse, grey not decisive). One panel per reference. Per-row bars with their own
    intervals overlap where paired differences are decisive; this draws what the verdicts judge. False when
    there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if comparisons is None or not len(comparisons):
        return False
    frame = comparisons.rename(columns={"group": "row"})  # reports before the grid called a row a group
    if "test_set" not in frame:  # a report written before the second test set's lines were added
        frame["test_set"] = "test"
    refs = list(dict.fromkeys(frame["against"]))
    height = max(2.2, 0.32 * max(frame.groupby("against")["row"].nunique()) + 1.2)
    columns = min(3, len(refs))
    lines = -(-len(refs) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.4 * columns, height * lines), dpi=120, squeeze=False)
    for ax in axes.flat[len(refs):]:
        ax.set_visible(False)
    for ax, ref in zip(axes.flat, refs, strict=False):
        part = frame[frame["against"] == ref]
        rows = list(dict.fromkeys(part["row"]))
        for offset, (test_set, filled) in zip((-0.15, 0.15), (("test", True), (DEV_SET, False)), strict=True):
            sub = part[part["test_set"] == test_set].set_index("row")
            for y, row in enumerate(rows):
                if row not in sub.index:
                    continue
                line = sub.loc[row]
                word = str(line["verdict"])
                sign = "better" if float(line["delta"]) > 0 else "worse"
                colour = VERDICT_COLOURS[sign] if word in ("decisive", "better", "worse") else "#8a8a8a"
                ax.plot([line["ci_low"], line["ci_high"]], [y + offset] * 2, color=colour, lw=2)
                ax.plot(line["delta"], y + offset, "o", color=colour, mfc=colour if filled else "white", ms=5)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(range(len(rows)), rows)
        ax.invert_yaxis()
        ax.set_xlabel(f"BLEU difference from {ref}")
        ax.set_title(f"against {ref}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("Differences, 95% interval over seeds and test books (filled: test, open: dev books; "
                 "green/red: decisive after Holm)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def curve_summary(curve: pd.DataFrame, threshold: float | None) -> dict:
    """Area under a dev BLEU learning curve (trapezoids over updates, divided by the last update: the mean dev
    BLEU of the run) and the first evaluated update at which dev BLEU reached `threshold`."""
    curve = curve.sort_values("step")
    if len(curve) < 2 or curve["step"].iloc[-1] <= 0:
        return {"dev_bleu_auc": None, "updates_to_threshold": None}
    steps, bleu = curve["step"].to_numpy(float), curve["dev_bleu"].to_numpy(float)
    auc = float(((bleu[1:] + bleu[:-1]) / 2 * (steps[1:] - steps[:-1])).sum() / steps[-1])
    reached = curve.loc[curve["dev_bleu"] >= threshold, "step"] if threshold is not None else pd.Series([])
    return {"dev_bleu_auc": round(auc, 2), "updates_to_threshold": int(reached.iloc[0]) if len(reached) else None}


def group_curves(curves: dict[str, pd.DataFrame], groups: dict[str, list[str]]) -> pd.DataFrame:
    """One learning curve per group of seeds: mean, min and max dev BLEU at the updates every member evaluated
    (columns group, seeds, step, dev_bleu, dev_bleu_min, dev_bleu_max); groups without a curve are left out."""
    frames = []
    for label, members in groups.items():
        runs = [curves[m].set_index("step")["dev_bleu"].rename(m) for m in members if len(curves[m]) >= 2]
        if len(runs) != len(members):
            continue
        joined = pd.concat(runs, axis=1, join="inner").sort_index()
        frames.append(pd.DataFrame({"group": label, "seeds": len(members), "step": joined.index.astype(int),
                                    "dev_bleu": joined.mean(axis=1).round(2).to_numpy(),
                                    "dev_bleu_min": joined.min(axis=1).to_numpy(),
                                    "dev_bleu_max": joined.max(axis=1).to_numpy()}))
    columns = ["group", "seeds", "step", "dev_bleu", "dev_bleu_min", "dev_bleu_max"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def learning_curves_plot(curves: pd.DataFrame, threshold: float | None, path: Path) -> None:
    """Dev BLEU against updates, every fine-tuned group on one chart (`group_curves`): the mean over its seeds,
    and the band between the lowest and highest seed where it has several."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for i, (label, curve) in enumerate(curves.groupby("group", sort=False)):
        seeds = int(curve["seeds"].iloc[0])
        line, = ax.plot(curve["step"], curve["dev_bleu"], marker="o", markersize=3,
                        label=f"{label} (mean of {seeds} seeds)" if seeds > 1 else label,
                        linestyle="-" if i < 10 else "--")
        if seeds > 1:
            ax.fill_between(curve["step"], curve["dev_bleu_min"], curve["dev_bleu_max"], color=line.get_color(),
                            alpha=0.15, linewidth=0)
    if threshold is not None:
        ax.axhline(threshold, color="grey", linewidth=0.8, linestyle=":", label="threshold")
    ax.set_xlabel("fine-tuning updates")
    ax.set_ylabel("dev BLEU (greedy)")
    ax.set_title("Learning curves")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def decoding_speed_table(cells: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Guo et al.'s speed claim on our cells: per row and machine its decoder, mean test BLEU, latency (ms a sentence
    decoded one at a time) and batched throughput (sentences/s), means over the seeds that machine ran, the speed-up
    of its latency over `baseline`'s on the same machine (the baseline's ms / the row's; empty where the baseline has
    no cell there), and the latency Guo et al. published for the row's model (GUO_LATENCY_MS). One line a machine,
    since a speed is a machine's. Empty where no cell measured latency."""
    columns = ["row", "machine", "decoder", "seeds", "bleu", "latency_ms", "sentences_per_second",
               f"latency_speedup_vs_{baseline}", "published_latency_ms"]
    if not len(cells) or "latency_ms" not in cells or pd.to_numeric(cells["latency_ms"], errors="coerce").isna().all():
        return pd.DataFrame(columns=columns)
    machines = cells["machine"].fillna("unknown")
    lines = [{"row": row, "machine": machine,
              "decoder": "/".join(sorted({str(d) for d in part["decoder"].dropna()})) or None,
              "seeds": len(part), "bleu": _mean(part, "bleu"), "latency_ms": _mean(part, "latency_ms", 1),
              "sentences_per_second": _mean(part, "sentences_per_second", 1)}
             for (row, machine), part in cells.groupby([cells["row"], machines], sort=False)]
    base = {line["machine"]: line["latency_ms"] for line in lines if line["row"] == baseline}
    for line in lines:
        ms, own = base.get(line["machine"]), line["latency_ms"]
        line[f"latency_speedup_vs_{baseline}"] = round(ms / own, 2) if ms and own else None
        line["published_latency_ms"] = GUO_LATENCY_MS.get(line["row"])
    return pd.DataFrame(lines, columns=columns)


def plm_summary(plms: dict[str, tuple[pd.DataFrame, dict]], window: int = 2000) -> pd.DataFrame:
    """The study's pretrained language models (plm@LANG), one line each: updates run, the kept update and its
    held-out masked-piece accuracy, the accuracy gained over the last `window` updates (still rising or flat) and
    why training stopped. `plms`: language -> (its curve.csv, its metrics JSON)."""
    lines = []
    for lang, (curve, metrics) in plms.items():
        curve = curve.sort_values("step")
        last = curve.iloc[-1] if len(curve) else None
        earlier = curve[curve["step"] <= last["step"] - window] if last is not None else curve
        lines.append({
            "language": lang, "updates": metrics.get("updates"), "best_update": metrics.get("best_update"),
            "held_out_accuracy": metrics.get("held_out_accuracy"), "held_out_loss": metrics.get("held_out_loss"),
            f"accuracy_gain_last_{window}": round(float(last["held_out_accuracy"]
                                                        - earlier.iloc[-1]["held_out_accuracy"]), 4)
            if last is not None and len(earlier) else None,
            "stopped": metrics.get("stopped", "external model" if metrics.get("external_model") else None),
            "train_hours": round(metrics["train_seconds"] / 3600, 2) if metrics.get("train_seconds") else None,
            "precision": metrics.get("precision"), "threads": metrics.get("threads"),
            "parameters": metrics.get("parameters"), "vocab_size": metrics.get("vocab_size")})
    return pd.DataFrame(lines)


def plm_curves_plot(curves: pd.DataFrame, path: Path) -> None:
    """Held-out masked-piece accuracy of each language's BERT against its pretraining updates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    for lang, curve in curves.groupby("language", sort=False):
        ax.plot(curve["step"], curve["held_out_accuracy"], marker="o", markersize=3, label=lang)
    ax.set_xlabel("masked-LM updates")
    ax.set_ylabel("held-out masked-piece accuracy")
    ax.set_title("The BERTs' learning curves (plm@LANG)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def rank_correlations(table: pd.DataFrame, rows: list[str]) -> pd.DataFrame:
    """Spearman rank correlation of each pre-fine-tuning diagnostic with the final test BLEU, over `rows`
    (methods that share one vocabulary, so that per-token perplexities compare)."""
    ours = table[(table["source"] == "vocabridge") & table["method"].isin(rows)]
    out = []
    for column, better in (("zero_shot_dev_ppl", "lower"), ("zero_shot_dev_bleu", "higher"),
                           ("loo_cos_src", "higher"), ("loo_cos_tgt", "higher")):
        pair = ours[["bleu", column]].dropna()
        rho = pair["bleu"].rank().corr(pair[column].rank()) if len(pair) >= 3 else None
        out.append({"diagnostic": column, "better": better, "methods": len(pair),
                    "spearman_with_bleu": None if rho is None or pd.isna(rho) else round(float(rho), 3)})
    return pd.DataFrame(out)


def extension_pairs(keys: dict[str, dict]) -> list[tuple[str, str]]:
    """(extension group, replacement group) pairs: a group with `extend` > 0 and the group whose knobs are the
    same with `extend` 0 (its `shared` may differ: extension always copies the pretrained rows); one with the
    same `shared` is preferred."""
    pairs = []
    for label, key in keys.items():
        if not key.get("extend"):
            continue
        same = {k: v for k, v in key.items() if k not in ("extend", "shared")}
        found = [g for g, other in keys.items() if not other.get("extend")
                 and {k: v for k, v in other.items() if k not in ("extend", "shared")} == same]
        found.sort(key=lambda g: keys[g].get("shared") != key.get("shared"))
        if found:
            pairs.append((label, found[0]))
    return pairs


def extension_table(pairs: list[tuple[str, str]], compare: Callable[[str, str], Comparison],
                    forgetting: pd.DataFrame, diagnostics: dict[str, dict]) -> pd.DataFrame:
    """Each extension row against its replacement row: test BLEU (over seeds and sentences), upstream BLEU (what
    each forgets), and the pieces appended with the target side's pieces per word before and after."""
    upstream = forgetting.set_index("row")["upstream_bleu"] if len(forgetting) else pd.Series(dtype=float)
    rows = []
    for extension, replacement in pairs:
        c = compare(extension, replacement)
        info = diagnostics.get(extension, {}).get("tgt_extension") or {}
        fertility = f"{info['fertility']['before']} -> {info['fertility']['after']}" if info else None
        rows.append({"extension": extension, "replacement": replacement, "appended_tgt": info.get("appended"),
                     "fertility_tgt": fertility,
                     "delta_bleu": c.delta, "ci_low": c.ci_low, "ci_high": c.ci_high, "p_value": c.p_value,
                     "verdict": verdict(c),
                     "upstream_bleu_extension": upstream.get(extension), "upstream_bleu_replacement":
                     upstream.get(replacement)})
    return pd.DataFrame(rows, columns=["extension", "replacement", "appended_tgt", "fertility_tgt", "delta_bleu",
                                       "ci_low", "ci_high", "p_value", "verdict", "upstream_bleu_extension",
                                       "upstream_bleu_replacement"])


def seeds_table(groups: dict[str, list[str]], bleu: dict[str, float], tests: dict[str, dict[str, Comparison]],
                auc: dict[str, float | None] | None = None):
    """Mean and spread of test BLEU over each group's seeds, the mean area under their learning curves (`auc`
    per row), with the delta and p-value over seeds and sentences against each reference
    (`tests[reference][group]`, from `significance.compare`)."""
    import numpy as np

    rows = []
    for label, members in groups.items():
        scores = np.array([bleu[m] for m in members])
        row = {"group": label, "rows": " ".join(members), "seeds": len(members),
               "bleu_mean": round(float(scores.mean()), 2),
               "bleu_std": round(float(scores.std(ddof=1)), 2) if len(scores) > 1 else None,
               "bleu_min": float(scores.min()), "bleu_max": float(scores.max())}
        aucs = [auc.get(m) for m in members] if auc else [None]
        row["dev_bleu_auc_mean"] = round(float(np.mean(aucs)), 2) if None not in aucs else None
        for ref, results in tests.items():
            result = results.get(label)
            row[f"delta_vs_{ref}"] = result.delta if result else None
            row[f"p_vs_{ref}"] = result.p_value if result else None
        rows.append(row)
    return pd.DataFrame(rows)


def seed_comparisons_table(tests: dict[str, dict[str, Comparison]], target: float,
                           dev_tests: dict[str, dict[str, Comparison]] | None = None) -> pd.DataFrame:
    """One row per (row, reference, test set): delta with its 95% interval and p over seeds and sentences, p after
    Holm's correction over the reference's comparisons on that test set (one family per reference and test set),
    the verdict, the smallest difference the design detects (80% power, 5% level) now and with 5 seeds a side,
    and the seeds a side needed to detect `target` BLEU. The test set's lines come first, then the second test
    set's (`dev_tests`: the held-out dev books)."""
    rows = []
    for test_set, family in (("test", tests), (DEV_SET, dev_tests or {})):
        for ref, results in family.items():
            adjusted = holm([c.p for c in results.values()])[0]
            for (label, c), p_holm in zip(results.items(), adjusted, strict=True):
                at_5 = c.detectable_with(5)
                rows.append({"row": label, "against": ref, "seeds": c.seeds, "reference_seeds": c.reference_seeds,
                             "form": c.form, "delta": c.delta, "ci_low": c.ci_low, "ci_high": c.ci_high,
                             "p_value": c.p_value, "p_holm": round(p_holm, 4), "verdict": holm_verdict(c, p_holm),
                             "detectable": round(c.detectable, 2),
                             "detectable_5_seeds": None if at_5 is None else round(at_5, 2),
                             f"seeds_for_{target:g}": c.seeds_for(target), "test_set": test_set})
    columns = ["row", "against", "seeds", "reference_seeds", "form", "delta", "ci_low", "ci_high", "p_value",
               "p_holm", "verdict", "detectable", "detectable_5_seeds", f"seeds_for_{target:g}", "test_set"]
    return pd.DataFrame(rows, columns=columns)


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


def unseen_rate(diagnostics: dict, mismatch: dict | None, adapted: bool) -> float | None:
    """The target side's unseen-token rate of a row's vocabulary: the adapted vocabulary's against the pretrained
    one, a PLM row's against its BERT's, 0 for rows that keep their model's vocabulary (None: not measured)."""
    if "vocabulary_fit" in diagnostics:
        return diagnostics["vocabulary_fit"]["tgt"]["unseen_token_rate"]
    if mismatch is None:
        return None
    return mismatch["unseen_token_rate"] if adapted else 0.0


def machine_name(machine: dict) -> str:
    """A machine as the report names it: CPU, its capability and native bf16, and the GPU where there was one."""
    bf16 = {True: "bf16 yes", False: "bf16 no"}.get(machine.get("bf16_native"), "bf16 ?")
    gpu = f", GPU {machine['gpu']}" if machine.get("gpu") else ""
    return f"{machine.get('cpu') or '?'} ({machine.get('capability') or '?'}, {bf16}{gpu})"


def read_curve(record: CellRecord) -> pd.DataFrame:
    """A cell's learning curve (curve.csv: step, dev_bleu, dev_loss); empty for a cell that was not fine-tuned."""
    path = record.folder / "curve.csv"
    return pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=["step", "dev_bleu"])


def cell_line(record: CellRecord, curve: pd.DataFrame, threshold: float | None, unseen: float | None) -> dict:
    """One cell's figures (a line of cells.csv): scores, fine-tuning, zero-shot diagnostics, and where it ran."""
    data = record.data
    metrics, tuning = data.get("metrics") or {}, data.get("finetune") or {}
    zero, machine, upstream = data.get("transfer") or {}, data.get("machine") or {}, data.get("upstream") or {}
    vocab = metrics.get("vocab_size") or {}
    updates, best = tuning.get("updates"), tuning.get("best_update")
    budget = ((data.get("params") or {}).get("finetune") or {}).get("max_updates") or 0  # the row's budget
    # training.LoopState.ending's figures; an older record's from its updates (the same definitions)
    best_at_end = tuning.get("best_at_end", bool(updates) and best == updates)
    stopped_by = tuning.get("stopped_by", "cap" if updates and updates >= budget else None)
    return {"row": record.row, "seed": record.seed, "cell": record.cell.name, "method": data.get("method"),
            "bleu": metrics.get("bleu"), "chrf": metrics.get("chrf"), "ter": metrics.get("ter"),
            "upstream_bleu": (metrics.get("upstream") or {}).get("bleu"), "updates": updates, "best_update": best,
            "best_at_end": bool(best_at_end), "budget_stop": stopped_by == "cap",
            "trained_parameters": tuning.get("trainable_parameters"), "train_seconds": tuning.get("train_seconds"),
            "device": tuning.get("device"), "threads": tuning.get("threads"), "precision": tuning.get("precision"),
            **curve_summary(curve, threshold),
            "zero_shot_dev_bleu": zero.get("dev_bleu"), "zero_shot_dev_ppl": zero.get("dev_perplexity"),
            "loo_cos_src": zero.get("leave_one_out_cosine_encoder"),
            "loo_cos_tgt": zero.get("leave_one_out_cosine_decoder"),
            "src_vocab": vocab.get("src"), "tgt_vocab": vocab.get("tgt"), "unseen_token_rate": unseen,
            "mean_output_tokens": metrics.get("mean_output_tokens"),
            "sentences_per_second": metrics.get("sentences_per_second"), "latency_ms": metrics.get("latency_ms"),
            "decoder": metrics.get("decoder"), "upstream": upstream.get("name"),
            "upstream_sha256": upstream.get("sha256"),
            "machine": machine_name(machine), "capability": machine.get("capability"),
            "bf16_native": machine.get("bf16_native"), "gpu": machine.get("gpu"), "commit": data.get("commit"),
            "finished": data.get("finished"), "cells_folder": record.source}


def _mean(part: pd.DataFrame, column: str, digits: int = 2) -> float | None:
    values = pd.to_numeric(part[column], errors="coerce").dropna()
    return round(float(values.mean()), digits) if len(values) else None


def _seed_list(seeds: Sequence[int]) -> str:
    """1 2 3 5 -> '1-3, 5'."""
    out: list[str] = []
    for seed in sorted(seeds):
        if out and out[-1].split("-")[-1] == str(seed - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{seed}"
        else:
            out.append(str(seed))
    return ", ".join(out)


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


@dataclass
class Built:
    """A report ready to write: its Markdown, its tables (written as NAME.csv) and the learning curves it plots."""

    markdown: str
    tables: dict[str, pd.DataFrame]
    curves: pd.DataFrame
    threshold: float | None
    missing_rows: list[str] = field(default_factory=list)
    left_out: list[tuple[Path, str]] = field(default_factory=list)


class _Comparer:
    """Rows compared over their cells, each pair once: paired where both rows' cells have the same pair keys."""

    def __init__(self, by_row: dict[str, list[CellRecord]], stats: dict, clusters, n_samples: int, seed: int):
        self.by_row, self.stats, self.clusters = by_row, stats, clusters
        self.n_samples, self.seed, self.done = n_samples, seed, {}

    def __call__(self, method: str, reference: str) -> Comparison | None:
        if method not in self.by_row or reference not in self.by_row:
            return None
        if (method, reference) not in self.done:
            a, b = self.by_row[method], self.by_row[reference]
            self.done[method, reference] = compare_statistics(
                np.stack([self.stats[r.cell] for r in a]), np.stack([self.stats[r.cell] for r in b]),
                method_seeds=[r.pair_key for r in a], reference_seeds=[r.pair_key for r in b],
                clusters=self.clusters, n_samples=self.n_samples, seed=self.seed)
        return self.done[method, reference]


def grid_report(gathered: Gathered, rows: Sequence[str], refs: list[str], cfg, *, seeds: Sequence[int] = (),
                clusters: Sequence[str] | None = None, adapted: frozenset[str] | set[str] = frozenset(),
                mismatch: dict | None = None, lang=None, upstream_sentences: int | None = None,
                study: str = "", test_books: Sequence[str] | None = None, heldout: HeldOut | None = None,
                plms: dict[str, tuple[pd.DataFrame, dict]] | None = None, documents: bool = False) -> Built:
    """The report of a grid from its cell records: `rows` the grid's rows in order, `refs` the test references the
    records' hypotheses were scored against, `cfg` the report settings (vocabridge.config.Report: baseline and
    also_against are row names), `seeds` the grid's seeds (cells not found are listed as not finished),
    `clusters` each test sentence's book, `adapted` the rows that put the downstream vocabulary on the base model
    (their zero-shot figures compare), `mismatch` the mismatch stage's figures per language and `lang` the
    direction (vocabulary fit), `upstream_sentences` how many upstream test pairs forgetting is measured on,
    `test_books` the test set's books as the report names them (None: the distinct `clusters`), `heldout` the
    second test set (None: none; a record counts on it when its dev_hyp.txt has a line per sentence and its
    `heldout_dev_test.digest` is the set's), `plms` the study's own BERTs (language -> their curve.csv and metrics;
    None: none), `documents` whether the clusters are a user's documents (else the Bible's books)."""
    left_out = list(gathered.left_out)
    records = []
    for record in gathered.records:
        if len(record.hyps) != len(refs):
            left_out.append((record.folder, f"hyp.txt has {len(record.hyps)} lines for {len(refs)} test sentences"))
        else:
            records.append(record)
    by_row: dict[str, list[CellRecord]] = {}
    for record in sorted(records, key=lambda r: (list(rows).index(r.row) if r.row in rows else len(rows), r.seed)):
        by_row.setdefault(record.row, []).append(record)
    missing_rows = [row for row in rows if row not in by_row]
    stats = {r.cell: sentence_statistics(r.hyps, refs) for r in records}
    over = _Comparer(by_row, stats, clusters, cfg.bootstrap_samples, cfg.seed)
    conditions = {row: RowCondition.of(members) for row, members in by_row.items()}
    # the second test set: the cells whose dev_hyp.txt holds the held-out dev books' translations
    dev_by_row = {row: [r for r in members if _on_heldout(r, heldout)] for row, members in by_row.items()}
    dev_by_row = {row: members for row, members in dev_by_row.items() if members}
    dev_stats = {r.cell: sentence_statistics(r.dev_hyps, heldout.refs)
                 for members in dev_by_row.values() for r in members}
    dev_over = _Comparer(dev_by_row, dev_stats, heldout.clusters if heldout else None, cfg.bootstrap_samples,
                         cfg.seed)
    knobs = {row: dict(cells[0].data.get("knobs") or {}) for row, cells in by_row.items()}
    diagnostics = {row: cells[0].data.get("diagnostics") or {} for row, cells in by_row.items()}
    baseline = cfg.baseline if cfg.baseline in by_row else next(iter(by_row), cfg.baseline)

    curves = {r.cell.name: read_curve(r) for r in records}
    threshold, base_curves = cfg.curve_threshold, [curves[r.cell.name] for r in by_row.get(baseline, [])
                                                   if len(curves[r.cell.name])]
    if threshold is None and base_curves:  # the baseline's best dev BLEU, averaged over its seeds
        threshold = round(sum(float(c["dev_bleu"].max()) for c in base_curves) / len(base_curves), 2)
    mismatch_tgt = mismatch[lang.tgt] if mismatch is not None and lang is not None else None
    cells = pd.DataFrame([cell_line(r, curves[r.cell.name], threshold,
                                    unseen_rate(diagnostics[r.row], mismatch_tgt, r.row in adapted))
                          for r in records])

    # each row against each reference (row names), in the reference's regime: its knobs with this row's train_pairs
    tests: dict[str, dict[str, Comparison]] = {}
    against: dict[str, dict[str, str]] = {}
    for ref in dict.fromkeys([baseline, *cfg.also_against]):
        if ref not in by_row:
            continue
        tests[ref], against[ref] = {}, {}
        for row in by_row:
            pairs = knobs[row].get("train_pairs")
            match = ref if knobs[ref].get("train_pairs") == pairs else next(
                (r for r in by_row if knobs[r] == knobs[ref] | {"train_pairs": pairs}), None)
            if match is not None and match != row:
                against[ref][row] = match
                if not conditions_differ(conditions[row], conditions[match]):
                    tests[ref][row] = over(row, match)
    # the same on the second test set; rows under different conditions: shown, in no family and no verdict
    dev_tests = {ref: {row: c for row in found if (c := dev_over(row, against[ref][row])) is not None}
                 for ref, found in tests.items()}
    crossed = {ref: {row: (over(row, match), dev_over(row, match)) for row, match in matched.items()
                     if row not in tests[ref]} for ref, matched in against.items()}
    p_holm, p_holm_dev = ({ref: dict(zip(found, holm([c.p for c in found.values()])[0], strict=True))
                           for ref, found in family.items()} for family in (tests, dev_tests))

    summary, lines = [], []
    for row, members in by_row.items():
        part = cells[cells["row"] == row]
        interval = mean_interval_statistics(np.stack([stats[r.cell] for r in members]), clusters,
                                            cfg.bootstrap_samples, cfg.seed)
        scores = part["bleu"].astype(float)
        line = {"row": row, "method": members[0].data.get("method"), "seeds": len(members),
                "seed_list": _seed_list([r.seed for r in members]), "bleu_mean": _mean(part, "bleu"),
                "ci_low": round(interval.low, 2), "ci_high": round(interval.high, 2),
                "bleu_std": round(float(scores.std(ddof=1)), 2) if len(scores) > 1 else None,
                "chrf": _mean(part, "chrf"), "ter": _mean(part, "ter"), "updates": _mean(part, "updates", 0),
                "best_update": _mean(part, "best_update", 0),
                "best_at_end": f"{int(part['best_at_end'].sum())}/{len(part)}",
                "budget_stops": f"{int(part['budget_stop'].sum())}/{len(part)}",
                "upstream_bleu": _mean(part, "upstream_bleu"), "machines": part["machine"].nunique(),
                "upstream_models": part["upstream_sha256"].nunique()}
        dev_members = dev_by_row.get(row, [])
        line |= {"heldout_dev_seeds": len(dev_members), "heldout_dev_bleu": round(float(np.mean(
            [_heldout_bleu(r, dev_stats[r.cell]) for r in dev_members])), 2) if dev_members else None,
                 "pretrain_init": "/".join(conditions[row].pretrain_init) or None,
                 "condition": condition_text(conditions[row])}
        for ref in tests:
            for suffix, found, adjusted, pick in (("", tests[ref], p_holm[ref], 0),
                                                  (f" {DEV}", dev_tests[ref], p_holm_dev[ref], 1)):
                c, p = found.get(row), adjusted.get(row)
                if c is None and row in crossed[ref]:
                    c = crossed[ref][row][pick]
                line |= {f"delta_vs_{ref}{suffix}": c and c.delta,
                         f"p_holm_vs_{ref}{suffix}": None if p is None else round(p, 4),
                         f"verdict_vs_{ref}{suffix}": c and (DIFFER if p is None else
                                                             holm_verdict(c, p, ("better", "worse"))),
                         f"form_vs_{ref}{suffix}": c and c.form,
                         f"vs_{ref}{suffix}": c and verdict_text(c, p, against[ref][row], ref)}
        summary.append(line)
        base_test = tests.get(baseline, {}).get(row)
        lines.append({"method": row, "seeds": len(members), "bleu": line["bleu_mean"],
                      "bleu_ci": round((interval.high - interval.low) / 2, 2), "chrf": line["chrf"],
                      "ter": line["ter"], "upstream_bleu": line["upstream_bleu"],
                      "p_value": base_test.p_value if base_test else None,
                      **{k: _mean(part, k, 4) for k in ("src_vocab", "tgt_vocab", "unseen_token_rate",
                                                        "mean_output_tokens", "sentences_per_second", "latency_ms",
                                                        "trained_parameters", "updates", "best_update",
                                                        "dev_bleu_auc", "updates_to_threshold",
                                                        "zero_shot_dev_bleu", "zero_shot_dev_ppl", "loo_cos_src",
                                                        "loo_cos_tgt")}})
    rows_table = pd.DataFrame(summary)
    table = build_table(lines, baseline) if lines else pd.DataFrame(columns=COLUMNS)
    groups = {row: [r.cell.name for r in members] for row, members in by_row.items()}
    auc = {cell: None if pd.isna(v) else float(v) for cell, v in zip(cells.get("cell", []),
                                                                       cells.get("dev_bleu_auc", []), strict=True)}
    seeds_frame = seeds_table(groups, {r.cell.name: r.bleu for r in records}, tests, auc) if records \
        else pd.DataFrame(columns=["group", "seeds", "bleu_mean", "bleu_std"])
    papers = [(paper, paper_layout(paper, seeds_frame, {row: row for row in by_row}, conditions),
               ordering_verdicts(paper, over, dev_over if heldout else None, conditions)) for paper in PAPER_TABLES
              if any(ours in rows for _, ours, _ in paper.rows)]
    grouped_curves = group_curves(curves, groups)
    forgetting = forgetting_table(cells) if records else pd.DataFrame(columns=["row", "seeds", "bleu",
                                                                               "upstream_bleu"])
    extension = extension_table(extension_pairs(knobs), over, forgetting, diagnostics)
    shared_vocab = [row for row in by_row if row in adapted and (_mean(cells[cells["row"] == row], "updates") or 0)]
    correlations = rank_correlations(table, shared_vocab)
    seed_tests = seed_comparisons_table(tests, cfg.target_difference, dev_tests)
    fit = vocabulary_fit_table(mismatch, diagnostics, lang) if mismatch_tgt is not None else None

    speed = decoding_speed_table(cells, baseline)
    plm_lines = plm_summary(plms or {})
    plm_curves = pd.concat([curve.assign(language=lang) for lang, (curve, _) in (plms or {}).items()],
                           ignore_index=True) if plms else pd.DataFrame(columns=["language", "step"])
    tables = {"report": table, "rows": rows_table, "cells": cells, "seeds": seeds_frame,
              "seed_comparisons": seed_tests, "correlations": correlations, "learning_curves": grouped_curves,
              "forgetting": forgetting, "extension": extension, "decoding_speed": speed, "plms": plm_lines,
              "plm_curves": plm_curves}
    for paper, layout, verdicts in papers:
        tables[f"paper_{paper.key}"], tables[f"paper_{paper.key}_orderings"] = layout, verdicts
    sets = test_sets_sentence(len(refs), test_books if test_books is not None else
                              sorted(set(clusters)) if clusters else None, heldout, dev_by_row, len(records),
                              documents)
    markdown = _markdown(study, rows, by_row, cells, rows_table, tests, papers, seed_tests, grouped_curves,
                         threshold, cfg, clusters, forgetting, extension, correlations, shared_vocab, fit,
                         upstream_sentences, diagnostics, missing_rows, left_out, seeds, baseline, sets, conditions,
                         more=_speed_and_plm_markdown(speed, plm_lines, baseline), documents=documents)
    return Built(markdown, tables, grouped_curves, threshold, missing_rows, left_out)


def _on_heldout(record: CellRecord, heldout: HeldOut | None) -> bool:
    """Whether a cell has a figure on the second test set: its dev_hyp.txt, one line per sentence, of this set."""
    return (heldout is not None and len(record.dev_hyps) == len(heldout.refs) > 0
            and (record.data.get("heldout_dev_test") or {}).get("digest") == heldout.digest)


def _heldout_bleu(record: CellRecord, stats: np.ndarray) -> float:
    """A cell's BLEU on the second test set: its record's (evaluate's sacrebleu), else from its statistics."""
    bleu = ((record.data.get("metrics") or {}).get("heldout_dev") or {}).get("bleu")
    return float(bleu) if bleu is not None else float(corpus_bleu(stats.sum(0)))


def test_sets_sentence(sentences: int, test_books: Sequence[str] | None, heldout: HeldOut | None,
                       dev_by_row: dict[str, list[CellRecord]], cells: int, documents: bool = False) -> str:
    """Which books (a user's documents) each test set has, in one sentence."""
    verses, book = ("sentences", "document") if documents else ("verses", "book")
    first = (f"The test set is the {sentences} test {verses} of {_books(test_books, book)}" if test_books
             else f"The test set is {sentences} test sentences (no ids: {book}s not known)")
    if heldout is None:
        return first + "; there is no second test set (no cell has its translations)."
    have = sum(len(members) for members in dev_by_row.values())
    what = (f"the {len(heldout.refs)} sentences of {_books(heldout.books, book)}, a test file that no checkpoint "
            "selection read" if documents else f"the {len(heldout.refs)} dev verses of {_books(heldout.books)}, "
            "books that no checkpoint selection read")
    return (first + f"; the second test set, `{DEV}`, is {what} ({have} of the {cells} cells have it; the others "
            "have no second-set figure).")


def _books(books: Sequence[str], noun: str = "book") -> str:
    books = list(books)
    return f"{noun} {books[0]}" if len(books) == 1 else \
        f"{len(books)} {noun}s ({', '.join(books[:-1])} and {books[-1]})"


def _markdown(study, rows, by_row, cells, rows_table, tests, papers, seed_tests, grouped_curves, threshold, cfg,
              clusters, forgetting, extension, correlations, shared_vocab, fit, upstream_sentences, diagnostics,
              missing_rows, left_out, seeds, baseline, sets="", conditions=None, more: Sequence[str] = (),
              documents: bool = False) -> str:
    """report.md: the answer first (the papers' tables, one line per grid row), then the plots and the other
    sections (`more` last of them), then where the cells came from."""
    machines = cells["machine"].nunique() if len(cells) else 0
    upstreams = cells["upstream_sha256"].nunique() if len(cells) else 0
    lead = (f"{f'Study `{study}`: ' if study else ''}{len(cells)} finished cells of {len(by_row)} of the grid's "
            f"{len(rows)} rows, from {machines} machine(s) and {upstreams} upstream model(s)"
            + (f"; rows with no finished cell: {', '.join(missing_rows)}" if missing_rows else "")
            + (f"; {len(left_out)} record(s) left out" if left_out else "")
            + ". Where each cell came from: the appendix; every cell's figures: `cells.csv`."
            + (f"\n\n{sets}" if sets else ""))
    units = f"test {'documents' if documents else 'books'}" if clusters else "test sentences"
    method = (f"Intervals and p are over seeds and {units} ({cfg.bootstrap_samples} draws of the {units} with "
              f"replacement, shared by both sides; a t interval over seeds, vocabridge.significance): paired "
              f"(per-seed differences) where both rows' cells have the same seeds on the same upstream model, "
              f"Welch where they do not (said so). Decisive needs at least {MIN_SEEDS} seeds a side and an "
              f"interval that excludes 0; p_holm is Holm's correction over one family. `{DEV}`: the same "
              f"comparison on the second test set (its books drawn as clusters; its own family). A comparison of "
              f"rows whose upstream models started from different embeddings (pretrain.init) is shown but is no "
              f"verdict (`{DIFFER}`) and in no family.")
    parts = [lead]
    if papers:
        parts.append(
            "## The papers' tables beside ours\n\nEach published row (BLEU as published, on the paper's data) with "
            "the row of ours that runs it: mean test BLEU over its seeds and their spread. Below each table, "
            "every ordering the paper reports, tested on our rows (family: the table's orderings): holds "
            "(decisive after Holm, same sign), reversed (the same, other sign), not decisive (after Holm), too "
            f"few seeds (not a finding) or not run. {method}\n\n"
            + "\n\n".join(_paper_markdown(paper, layout, verdicts, rows, conditions or {})
                          for paper, layout, verdicts in papers))
    refs = list(tests)
    shown = ["row", "seeds", "bleu_mean", "ci_low", "ci_high", "bleu_std", "best_update", "best_at_end",
             "budget_stops", "updates", "upstream_bleu", "heldout_dev_bleu", "pretrain_init",
             *[column for ref in refs for column in (f"vs_{ref}", f"vs_{ref} {DEV}")]]
    parts.append(
        "## One line per grid row\n\nMean test BLEU over the row's seeds with its 95% interval; best_update: "
        "updates to the best checkpoint (mean over seeds), best_at_end: cells whose best checkpoint is their last "
        "update (the fine-tune may not have converged; a tie counts as a gain, so an early stop never ends on its "
        "best), budget_stops: cells that ran all of their row's max_updates (early stopping did not end them: "
        "whether they converged is not known), updates: "
        "updates run (mean); "
        "upstream_bleu: test BLEU on the "
        "upstream domain (forgetting); heldout_dev_bleu: mean BLEU on the second test set (over the cells that "
        "have it); pretrain_init: how the row's upstream model's embeddings started (`rows.csv` has each row's "
        f"whole condition); vs REF: the row minus the reference (family: the rows against that reference; `vs` "
        f"names the reference's row in this row's regime of train_pairs), and `{DEV}` the same on the second test "
        "set. "
        + ("Intervals, pairing and verdicts as above." if papers else method) + "\n\n"
        + (to_markdown(rows_table.reindex(columns=shown)) if len(rows_table) else "No finished cells yet.\n"))
    if len(cells):
        curve_rows = rows_table[["row", "bleu_mean", "best_update"]].merge(
            cells.groupby("row", sort=False)[["dev_bleu_auc", "updates_to_threshold"]].mean().round(1).reset_index(),
            on="row")
        source = "report.curve_threshold" if cfg.curve_threshold is not None else \
            f"the best dev BLEU of {baseline}, mean over its seeds"
        parts.append(
            "## Plots\n\n![Differences from the references](differences.png)\n\n"
            "![Learning curves](learning_curves.png)"
            + ("\n\n![Forgetting](forgetting.png)" if len(forgetting) else "")
            + "\n\n### Learning curves\n\nDev BLEU (greedy) during fine-tuning, a row's seeds as their mean and "
            "range (`learning_curves.csv`); dev_bleu_auc: mean dev BLEU over the run (area under the curve / "
            f"updates), updates_to_threshold: first evaluated update with dev BLEU >= "
            f"{threshold if threshold is not None else 'n/a'} ({source}); means over seeds.\n\n"
            + to_markdown(curve_rows))
        parts.append(
            "## Comparisons over seeds and sentences\n\nEvery row against every reference, with the design's "
            "reach: detectable, the smallest true difference it finds with 80% power at the 5% level; "
            f"detectable_5_seeds, the same with 5 seeds a side; seeds_for_{cfg.target_difference:g}, seeds a side "
            f"to detect {cfg.target_difference:g} BLEU (empty: not with 100 seeds, or a side has one seed).\n\n"
            + to_markdown(seed_tests))
        parts.append(
            "## Forgetting\n\nTest BLEU on the downstream domain beside test BLEU on the first "
            f"{upstream_sentences if upstream_sentences is not None else 'N'} pairs of the upstream test set (the "
            "domain the model came from), mean over each row's seeds: `forgetting.png`.\n\n"
            + (to_markdown(forgetting) if len(forgetting) else "Not measured (evaluate.upstream_sentences: 0)."))
        parts.append(
            "## Extension against replacement\n\nEach row that keeps the pretrained vocabulary and appends pieces of "
            "the adapted one (`extend: N`) against the same method replacing the vocabulary, over seeds and "
            "sentences, with upstream BLEU of each.\n\n"
            + (to_markdown(extension) if len(extension) else "No extension rows in this grid."))
        if fit is not None:
            parts.append(
                "## Vocabulary fit\n\nHow each vocabulary segments the downstream test text: pieces a word "
                "(fertility), the share of the downstream vocabulary's tokens it lacks (unseen_token_rate) and of "
                "its own pieces that are unknown (unk_rate). PLM rows: the fixed vocabularies of the AB-Net rows' "
                "BERTs.\n\n" + to_markdown(fit))
        if shared_vocab:
            parts.append(
                "## Do the diagnostics before fine-tuning predict the final BLEU?\n\nSpearman rank correlation over "
                f"the fine-tuned rows with the downstream vocabulary ({', '.join(shared_vocab)}), row means; a "
                "diagnostic that predicts well is near +1 when higher is better, near -1 when lower is better.\n\n"
                + to_markdown(correlations))
    parts.extend(more)
    neighbours = neighbours_markdown(diagnostics).strip()
    return "\n\n".join([*parts, *([neighbours] if neighbours else []),
                        provenance_markdown(cells, rows, by_row, missing_rows, left_out, seeds)])


def _speed_and_plm_markdown(speed: pd.DataFrame, plms: pd.DataFrame, baseline: str) -> list[str]:
    """The decoding-speed section (where cells measured latency) and the BERTs' section (where the study made or
    took BERTs)."""
    parts = []
    if len(speed):
        parts.append(
            "## Decoding speed\n\nGuo et al.'s claim for Mask-Predict (AB-Net's decoder) against autoregressive "
            "decoding, on our cells: latency_ms, milliseconds a sentence decoded one at a time over the first "
            "`evaluate.latency_sentences` test sentences; sentences_per_second, the whole test set batched; means "
            f"over the machine's seeds; latency_speedup_vs_{baseline}, {baseline}'s latency on the same machine "
            "over the row's; published_latency_ms, Guo et al.'s Table 1 (WMT14 En-De, one sentence at a time on a "
            "1080Ti GPU; Transformer-Base: our in-domain). One line a row and machine: figures of different "
            "machines do not compare; benchmarks/mask_predict_latency.py times the decoders side by side on one "
            "machine.\n\n"
            + to_markdown(speed))
    if len(plms):
        gain = next(c for c in plms.columns if c.startswith("accuracy_gain_last_"))
        parts.append(
            "## The pretrained language models\n\nThe BERT of each language (plm@LANG) that the AB-Net and "
            "PLM-sponsored rows start from: the update kept and its masked-piece accuracy on held-out downstream "
            f"dev text; {gain}, what the last {gain.rsplit('_', 1)[1]} updates added (near 0: the curve has "
            "flattened); stopped: an early stop (plm.train.patience) or the budget (plm.train.max_updates). The "
            "curves: `plm_curves.csv`, `plm_curves.png`.\n\n![The BERTs' learning curves](plm_curves.png)\n\n"
            + to_markdown(plms))
    return parts


SHOWN_ORDERING = ["ordering", "published_delta", "delta", "ci_low", "ci_high", "p_holm", "seeds", "form", "verdict",
                  f"delta {DEV}", f"verdict {DEV}", "condition"]  # report.md; the CSV has every column


def _paper_markdown(paper: PaperTable, layout: pd.DataFrame, verdicts: pd.DataFrame, rows: Sequence[str],
                    conditions: dict[str, RowCondition]) -> str:
    """A paper's table and its orderings, cut to the rows of this grid (the CSVs keep them all), the condition our
    rows ran under in its heading line."""
    ours = layout[layout["our_row"].isin(rows)]
    inside = verdicts["ordering"].map(lambda o: all(side in rows for side in o.split(" > ")))
    left = len(layout) - len(ours), int((~inside).sum())
    note = (f"\n{left[0]} of the paper's rows and {left[1]} of its orderings are not rows of this grid "
            f"(`paper_{paper.key}.csv`, `paper_{paper.key}_orderings.csv`).\n" if any(left) else "")
    heading = (f"### {paper.source.removeprefix('published: ')}; ours under "
               f"{table_condition(list(ours['our_row']), conditions, paper.varies)}")
    return (f"{heading}\n\n" + to_markdown(ours) + "\n"
            + (to_markdown(verdicts.loc[inside, SHOWN_ORDERING].assign(p_holm=lambda t: t["p_holm"].map(p_text)))
               if inside.any()
               else "No ordering of this table has both rows here.\n")
            + note)


def machines_table(cells: pd.DataFrame) -> str:
    """Cells per machine with their fine-tunes' cost there (training seconds of the cells that fine-tuned, at the
    torch threads each had): what a study costs on a machine class, from the cells themselves."""
    lines = []
    for key, part in cells.groupby(cells["machine"].fillna("unknown"), sort=True):
        tuned = pd.to_numeric(part["train_seconds"], errors="coerce").dropna()
        tuned = tuned[tuned > 0]
        threads = sorted({int(t) for t in pd.to_numeric(part["threads"], errors="coerce").dropna()})
        lines.append({"machine": key, "cells": len(part), "rows": part["row"].nunique(),
                      "seeds": _seed_list(part["seed"].unique().tolist()), "fine-tunes": len(tuned),
                      "fine-tune hours (sum)": round(float(tuned.sum()) / 3600, 2) if len(tuned) else None,
                      "fine-tune minutes (median)": round(float(tuned.median()) / 60, 1) if len(tuned) else None,
                      "threads": ", ".join(map(str, threads)) or None})
    return to_markdown(pd.DataFrame(lines))


def split_seeds_markdown(cells: pd.DataFrame) -> str:
    """The seeds whose cells of one upstream model (by name) started from different weights: a machine trains its
    own, so a workspace lost in the middle of a seed leaves its cells on the old weights and the rest of the seed on
    the new. Those cells do not pair with the others (a comparison of their rows is Welch over every seed); the
    table names them, to run again beside the rest of the seed."""
    lines = []
    for (seed, name), part in cells.groupby(["seed", cells["upstream"].fillna("unknown")], sort=True):
        if part["upstream_sha256"].nunique() > 1:
            lines += [{"seed": seed, "upstream": name, "upstream_sha256": str(sha)[:12], "cells": len(group),
                       "rows": ", ".join(sorted(group["row"]))}
                      for sha, group in part.groupby(part["upstream_sha256"].fillna("unknown"), sort=True)]
    if not lines:
        return "None: each seed's cells of an upstream model started from the same weights."
    return ("Cells of one seed on different weights of the same upstream model do not pair; a comparison of their "
            "rows is unpaired (Welch) over every seed. Run the fewer again beside the rest of the seed "
            "(docs/profiles.md, \"The papers' studies\").\n\n" + to_markdown(pd.DataFrame(lines)))


def provenance_markdown(cells: pd.DataFrame, rows: Sequence[str], by_row: dict[str, list[CellRecord]],
                        missing_rows: list[str], left_out: list[tuple[Path, str]], seeds: Sequence[int]) -> str:
    """The appendix: which cells folders, machines, upstream models (sha256 prefixes) and commits the cells came
    from, the grid's cells not finished yet, and the records left out with the reason."""
    out = ["## Appendix: where the cells came from"]
    if len(cells):
        def by(column: str, label: str, shown=lambda v: v) -> str:
            table = pd.DataFrame([{label: shown(key), "cells": len(part), "rows": part["row"].nunique(),
                                   "seeds": _seed_list(part["seed"].unique().tolist())}
                                  for key, part in cells.groupby(cells[column].fillna("unknown"), sort=True)])
            return to_markdown(table)

        out += ["### Cells folders (later folders win for the same cell)", by("cells_folder", "folder"),
                "### Machines, and what the cells cost on each", machines_table(cells),
                "### Upstream models (sha256 of the weights the cells started from)",
                by("upstream_sha256", "upstream_sha256", lambda v: v[:12]),
                "### Seeds split across upstream models", split_seeds_markdown(cells),
                "### Code commits", by("commit", "commit", lambda v: v[:12] + ("+" if v.endswith("+") else ""))]
    unfinished = [f"{row}: seed(s) {_seed_list(sorted(set(seeds) - {r.seed for r in by_row[row]}))}"
                  for row in by_row if set(seeds) - {r.seed for r in by_row[row]}]
    out.append("### Not finished\n\n" + (
        "\n".join(f"- {line}" for line in [*(f"{row}: no finished cell" for row in missing_rows), *unfinished])
        or "Every cell of the grid's rows and seeds is finished."))
    out.append("### Records left out\n\n" + ("\n".join(f"- `{path}`: {reason}" for path, reason in left_out)
                                            or "None."))
    return "\n\n".join(out) + "\n"


def write_report(built: Built, folder: Path) -> None:
    """The report's files into `folder`: report.md, every table as NAME.csv (cells.csv: one line per cell), and
    the plots."""
    for name, table in built.tables.items():
        table.to_csv(folder / f"{name}.csv", index=False)
    (folder / "report.md").write_text(built.markdown, encoding="utf-8")
    table = built.tables["report"]
    if (table["source"] == "vocabridge").any():
        differences_plot(built.tables["seed_comparisons"], folder / "differences.png")
        learning_curves_plot(built.curves, built.threshold, folder / "learning_curves.png")
    if len(built.tables["forgetting"]):
        forgetting_plot(built.tables["forgetting"], folder / "forgetting.png")
    if len(built.tables["plm_curves"]):
        plm_curves_plot(built.tables["plm_curves"], folder / "plm_curves.png")
