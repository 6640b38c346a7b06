"""Across in-domain sizes: the same rows' verdicts read from several studies' results folders, one per size.

Each folder is a study's report (`seed_comparisons.csv`: every row against each reference, on the test set and on
the second test set, Holm within the folder, that is within a size and reference) with its committed cells (their
records give the number of training pairs the fine-tunes read). This puts the verdicts side by side by size and
draws the two questions a practitioner asks: does initialising the new rows still pay at my size (each method's
gain over random new rows), and does the pretrained model still pay (Single-Run minus Pretrain-Finetune, that is
`in-domain` minus `ft-srcv`) and the new vocabulary (`ft-tgtv-random` minus `ft-srcv`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from statistics import median

import pandas as pd

from vocabridge.errors import InputError

REFERENCE = "ft-tgtv-random"  # the gains of initialising: against random new rows
BASE = "ft-srcv"  # Pretrain-Finetune with the upstream vocabulary
SCRATCH = "in-domain"  # Single-Run: the same model trained on the in-domain pairs alone
TEST_SETS = ("test", "dev books")
COLUMNS = ["size", "folder", "row", "against", "test_set", "seeds", "reference_seeds", "delta", "ci_low", "ci_high",
           "p_holm", "verdict"]
COST_COLUMNS = ["size", "row", "cells", "unconverged", "updates", "finetune_min", "finetune_min_range",
                "expected_finetune_min", "distill_min", "decode_s", "tok_s", "tok_s_range", "machine"]


@dataclass
class Sizes:
    table: pd.DataFrame  # COLUMNS: one line per folder, row, reference and test set
    sizes: dict[str, int]  # folder -> training pairs


def training_pairs(folder: Path) -> int:
    """The training pairs the folder's fine-tunes read (the most any committed cell's record names)."""
    counts = []
    for path in sorted((folder / "cells").glob("*/s*/record.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        pairs = (data.get("finetune") or {}).get("train_pairs")
        if pairs:
            counts.append(int(pairs))
    if not counts:
        raise InputError(f"{folder}/cells: no cell record names its training pairs (finetune.train_pairs)")
    return max(counts)


def gather(folders: list[Path]) -> Sizes:
    """Every folder's comparisons, with the folder's size; sizes must differ."""
    frames, sizes = [], {}
    for folder in folders:
        path = folder / "seed_comparisons.csv"
        if not path.is_file():
            raise InputError(f"{path}: no such file (a study's report: `vocabridge results`)")
        frame = pd.read_csv(path)
        missing = {"row", "against", "delta", "ci_low", "ci_high", "verdict"} - set(frame.columns)
        if missing:
            raise InputError(f"{path}: not a comparisons table (missing {sorted(missing)})")
        if "test_set" not in frame:  # written before the second test set had lines of its own
            frame["test_set"] = "test"
        size = training_pairs(folder)
        if size in sizes.values():
            other = next(k for k, v in sizes.items() if v == size)
            raise InputError(f"{folder}: {size} training pairs, as {other}: one folder a size")
        sizes[str(folder)] = size
        frames.append(frame.assign(size=size, folder=str(folder)))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    table = table.reindex(columns=COLUMNS).sort_values(["size", "against", "row", "test_set"], kind="stable")
    return Sizes(table.reset_index(drop=True), sizes)


def _machine(record: dict) -> str:
    """The machine and the precision its fine-tune computed in: two CPUs that a record names alike (an Intel Xeon
    with AMX and one without) differ in both, and a row whose seeds ran on several gets a cost line for each."""
    m = record.get("machine") or {}
    threads = m.get("threads", "?")
    precision = (record.get("finetune") or {}).get("precision")
    return (f"{m.get('cpu', '?')} {m.get('capability', '?')}, bf16 {'yes' if m.get('bf16_native') else 'no'}, "
            f"{threads} thread{'s' * (threads != 1)}" + (f", {m['gpu']}" if m.get("gpu") else "")
            + (f", {precision}" if precision else ""))


def _expected(folder: Path) -> dict[tuple[str, str], float]:
    """Each fine-tune's expected seconds by (row, seed), from the flow's record of its run kept in the folder
    (flow_run.json: every stage's estimate, `vocabridge estimate`'s model, on the machine that ran it); empty
    without one. Cells that other runs made (another machine's flow, whose record was not kept) have none."""
    path = folder / "flow_run.json"
    if not path.is_file():
        return {}
    stages = json.loads(path.read_text(encoding="utf-8")).get("stages") or {}
    out: dict[tuple[str, str], float] = {}
    for name, stage in stages.items():
        group, _, item = name.partition("@")
        if group == "finetune" and stage.get("expected_seconds") is not None \
                and stage.get("outcome") != "up-to-date":
            row, _, seed = item.rpartition("-")
            out[(row, seed)] = float(stage["expected_seconds"])
    return out


def unconverged(tune: dict) -> bool:
    """A fine-tune stopped by its cap, or whose best checkpoint is its last evaluation (records written before
    `stopped_by` and `best_at_end` say it in `stopped` and `best_update`)."""
    if not tune.get("updates"):
        return False  # no fine-tune (a row evaluated as it is)
    by = tune.get("stopped_by") or ("cap" if str(tune.get("stopped", "")).startswith("max_updates") else None)
    at_end = tune.get("best_at_end")
    if at_end is None:
        at_end = tune.get("best_update") is not None and tune.get("best_update") == tune.get("updates")
    return by == "cap" or bool(at_end)


def costs(sizes: Sizes) -> pd.DataFrame:
    """What a cell cost at each size, from the committed records: its fine-tune's updates and wall minutes (the
    median over seeds, which a cell paused or run beside other work moves least, and the range), the token
    distillation's minutes where the row has one, the test set's decoding, the fine-tunes' target tokens per second
    (machines that a record names alike can differ: 1,401 against 3,772 for the same row at 8,000 pairs on two AMD
    EPYC AVX512 machines), a line per row and machine (with the precision it computed in); against the flow's
    estimate of the same fine-tunes where the folder keeps the record of the run that made them (flow_run.json)."""
    lines = []
    for folder, size in sorted(sizes.sizes.items(), key=lambda kv: kv[1]):
        expected = _expected(Path(folder))
        by_line: dict[tuple[str, str], list[tuple[str, dict]]] = {}
        for path in sorted(Path(folder, "cells").glob("*/s*/record.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            by_line.setdefault((path.parent.parent.name, _machine(record)), []).append(
                (path.parent.name.removeprefix("s"), record))
        for (row, machine), cells in sorted(by_line.items()):
            records = [record for _, record in cells]
            estimates = [expected[(row, seed)] for seed, _ in cells if (row, seed) in expected]
            tuned = [r["finetune"] for r in records if (r.get("finetune") or {}).get("train_seconds") is not None]
            minutes = [t["train_seconds"] / 60 for t in tuned]
            speed = [t["target_tokens_per_s"] for t in tuned if t.get("target_tokens_per_s")]
            distill = [d["seconds"] / 60 for r in records
                       if (d := ((r.get("diagnostics") or {}).get("distill") or {})).get("seconds") is not None]
            decode = [r["metrics"]["seconds"] for r in records if (r.get("metrics") or {}).get("seconds") is not None]
            lines.append({
                "size": size, "row": row, "cells": len(records),
                "unconverged": sum(unconverged(r.get("finetune") or {}) for r in records),
                "updates": round(median([t["updates"] for t in tuned])) if tuned else None,
                "finetune_min": round(median(minutes), 1) if minutes else None,
                "finetune_min_range": f"{min(minutes):.1f}-{max(minutes):.1f}" if minutes else None,
                "expected_finetune_min": round(sum(estimates) / len(estimates) / 60, 1) if estimates else None,
                "distill_min": round(median(distill), 1) if distill else None,
                "decode_s": round(median(decode), 1) if decode else None,
                "tok_s": round(median(speed)) if speed else None,
                "tok_s_range": f"{min(speed):.0f}-{max(speed):.0f}" if speed else None,
                "machine": machine})
    return pd.DataFrame(lines, columns=COST_COLUMNS)


def differences(sizes: Sizes, row: str, against: str) -> pd.DataFrame:
    """One row's difference from a reference at every size and test set (the row's own line, or the reference's
    against it with the sign turned)."""
    t = sizes.table
    own = t[(t["row"] == row) & (t["against"] == against)]
    turned = t[(t["row"] == against) & (t["against"] == row)]
    turned = turned.assign(row=row, against=against, delta=-turned["delta"], ci_low=-turned["ci_high"],
                           ci_high=-turned["ci_low"])
    both = pd.concat([own, turned[~turned.set_index(["size", "test_set"]).index.isin(
        own.set_index(["size", "test_set"]).index)]], ignore_index=True)
    return both.sort_values(["test_set", "size"]).reset_index(drop=True)


def _panel(ax, frame: pd.DataFrame, label: str, colour: str, offset: float) -> None:
    from vocabridge.report import VERDICT_COLOURS

    ax.plot(frame["size"] * (1 + offset), frame["delta"], "-", color=colour, lw=1, alpha=0.7, label=label)
    for _, line in frame.iterrows():
        decisive = line["verdict"] in ("decisive", "better", "worse")
        edge = VERDICT_COLOURS["better" if line["delta"] > 0 else "worse"] if decisive else colour
        x = line["size"] * (1 + offset)
        ax.plot([x, x], [line["ci_low"], line["ci_high"]], color=colour, lw=1.5)
        ax.plot(x, line["delta"], "o", color=colour, mec=edge, mew=2 if decisive else 1,
                mfc=colour if decisive else "white", ms=6)


def plot(sizes: Sizes, series: list[tuple[str, str]], path: Path, title: str) -> bool:
    """Differences against size (log scale), one panel per test set, one line per (row, reference) of `series`,
    95% intervals; a filled marker ringed green or red is decisive after Holm within its size. False when none of
    the series has a figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = [(row, ref, d) for row, ref in series if len(d := differences(sizes, row, ref))]
    if not found:
        return False
    legend_rows = -(-len(found) // 3)  # below the panels, three series a line: a legend inside hides intervals
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8 + 0.22 * legend_rows), dpi=120, sharey=True)
    colours = plt.get_cmap("tab10")
    for ax, test_set in zip(axes, TEST_SETS, strict=True):
        for k, (row, ref, frame) in enumerate(found):
            part = frame[frame["test_set"] == test_set]
            if len(part):
                _panel(ax, part, f"{row} - {ref}", colours(k), 0.03 * (k - (len(found) - 1) / 2))
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xscale("log")
        present = sorted(sizes.sizes.values())
        ax.set_xticks(present, [f"{s:,}" for s in present])
        ax.minorticks_off()
        ax.set_xlabel("in-domain training pairs")
        ax.set_title(test_set if test_set == "test" else "second test set (dev books)", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("BLEU difference")
    legend = {label: handle for ax in axes for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=min(3, len(found)), fontsize=7, frameon=False)
    fig.suptitle(f"{title}\n95% intervals over seeds and test books; filled, ringed green/red: decisive after Holm",
                 fontsize=8)
    fig.tight_layout(rect=(0, 0.055 * legend_rows / (1 + 0.06 * legend_rows), 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return True


def markdown(sizes: Sizes, methods: list[str]) -> str:
    """The verdicts side by side: each method against random new rows, and the two regime questions, by size."""
    def cell(frame: pd.DataFrame, size: int, test_set: str) -> str:
        hit = frame[(frame["size"] == size) & (frame["test_set"] == test_set)]
        if not len(hit):
            return ""
        line = hit.iloc[0]
        seeds, against = line.get("seeds"), line.get("reference_seeds")
        count = "" if pd.isna(seeds) else (
            f" ({int(seeds)} seed{'s' * (int(seeds) != 1)})" if pd.isna(against) or int(against) == int(seeds)
            else f" ({int(seeds)} seeds against {int(against)})")
        return f"{line['delta']:+.2f} [{line['ci_low']:.2f}, {line['ci_high']:.2f}] {line['verdict']}{count}"

    order = sorted(sizes.sizes.items(), key=lambda kv: kv[1])
    head = "| difference | " + " | ".join(f"{size:,} pairs ({Path(f).name})" for f, size in order) + " |"
    lines = [head, "|---|" + "---|" * len(order)]
    series = [(m, REFERENCE) for m in methods] + [(SCRATCH, BASE), (REFERENCE, BASE)]
    for row, ref in series:
        frame = differences(sizes, row, ref)
        for test_set in TEST_SETS:
            if frame[frame["test_set"] == test_set].empty:
                continue
            lines.append(f"| {row} - {ref}, {test_set} | "
                         + " | ".join(cell(frame, size, test_set) for _, size in order) + " |")
    return "\n".join(lines)


def _gains(frame: pd.DataFrame, size: int) -> dict[str, pd.Series]:
    """A comparison's line at `size`, by test set."""
    return {line["test_set"]: line for _, line in frame[frame["size"] == size].iterrows()}


def _decisive(line: pd.Series | None, sign: int) -> bool:
    return line is not None and line["verdict"] in ("decisive", "holds") and line["delta"] * sign > 0


RULE = ("The rules, fixed before the cells came in: initialising the new rows *matters* at a size where some "
        "method's gain over random new rows is decisive on both test sets; it *matters on one test set* where a "
        "gain is decisive on one only; *matters as a loss* where no method gains and some lose decisively on both; "
        "*no finding yet* while a side has fewer than 5 seeds; it is *negligible* "
        "where every method's difference from random new rows has a 95% interval within +-{negligible} BLEU on both "
        "test sets (no gain and no loss worth having); otherwise it is *not settled* (intervals too wide to tell). "
        "Single-Run against Pretrain-Finetune and the new vocabulary against the old: the sign of a difference "
        "decisive on both test sets, else no decisive difference.")


def _initialising(sizes: Sizes, methods: list[str], size: int, negligible: float) -> tuple[str, str]:
    """Whether initialising the new rows matters at `size` (RULE): the status and the sentence that says it."""
    gains = {m: g for m in methods if (g := _gains(differences(sizes, m, REFERENCE), size))}
    both = [m for m, g in gains.items() if all(_decisive(g.get(s), 1) for s in TEST_SETS)]
    some = [m for m, g in gains.items() if any(_decisive(g.get(s), 1) for s in TEST_SETS)]
    losses = [m for m, g in gains.items() if all(_decisive(g.get(s), -1) for s in TEST_SETS)]
    lose = f"; {', '.join(losses)} lose decisively on both" if losses else ""
    if both:
        best = max(both, key=lambda m: gains[m]["test"]["delta"])
        return "matters", (f"matters: {', '.join(both)} gain decisively on both test sets (best: {best} "
                           f"{_figure(gains[best]['test'])} on test){lose}")
    if some:
        return "matters on one test set", (f"matters on one test set: {', '.join(some)} gain decisively on one "
                                           f"test set only{lose}")
    if losses:
        return "matters as a loss", f"matters as a loss only: no method gains decisively{lose}"
    lines = [g.get(s) for g in gains.values() for s in TEST_SETS]
    if any(line is not None and _few(line) for line in lines):
        return "no finding yet", "no finding yet: a side has fewer than 5 seeds"
    if gains and all(line is not None and -negligible < line["ci_low"] and line["ci_high"] < negligible
                     for line in lines):
        return "negligible", (f"negligible: every method's difference from random new rows is within +-{negligible} "
                              "BLEU at 95% on both test sets")
    return "not settled", ("not settled: no method gains decisively, and the intervals do not rule out "
                           f"{negligible} BLEU")


def _few(line: pd.Series) -> bool:
    return "seed" in str(line["verdict"])  # one seed / fewer than 5 seeds a side: not a finding


def _figure(line: pd.Series) -> str:
    return f"{line['delta']:+.2f} [{line['ci_low']:.2f}, {line['ci_high']:.2f}]"


def answers(sizes: Sizes, methods: list[str], negligible: float = 0.5) -> list[str]:
    """The questions the sizes answer, by RULE: from which size on initialising stops mattering, then per size
    whether it matters, and where Single-Run and the new vocabulary stand against Pretrain-Finetune."""
    order = sorted(sizes.sizes.values())
    status = {size: _initialising(sizes, methods, size, negligible) for size in order}
    stops = next((size for i, size in enumerate(order) if all(status[s][0] == "negligible" for s in order[i:])), None)
    lines = [f"- Initialising the new rows stops mattering from {stops:,} pairs on (negligible there and at every "
             "larger size)" if stops is not None else
             "- Initialising the new rows is negligible at no size measured (at the largest, "
             f"{order[-1]:,} pairs: {status[order[-1]][0]})"]
    for size in order:
        lines.append(f"- {size:,} pairs, initialising the new rows: {status[size][1]}")
        for row, label in ((SCRATCH, "Single-Run (in-domain) against Pretrain-Finetune (ft-srcv)"),
                           (REFERENCE, "the new vocabulary (ft-tgtv-random) against the old (ft-srcv)")):
            g = _gains(differences(sizes, row, BASE), size)
            if not g:
                continue
            word = ("ahead, decisively on both test sets" if all(_decisive(g.get(s), 1) for s in TEST_SETS) else
                    "behind, decisively on both test sets" if all(_decisive(g.get(s), -1) for s in TEST_SETS) else
                    "no finding yet (fewer than 5 seeds a side)" if any(_few(line) for line in g.values()) else
                    "no difference decisive on both test sets")
            test = f" ({_figure(g['test'])} on test)" if "test" in g else ""
            lines.append(f"- {size:,} pairs, {label}: {word}{test}")
    return lines


def convergence(cost: pd.DataFrame) -> str:
    """Per size, the share of cells whose fine-tune stopped by its cap or was best at its last evaluation (the
    study's rule: fewer than 10%)."""
    if not len(cost):
        return "No cells."
    lines = []
    for size, part in cost[cost["updates"].notna()].groupby("size"):  # rows that fine-tune
        cells, bad = int(part["cells"].sum()), int(part["unconverged"].sum())
        lines.append(f"- {size:,} pairs: {bad} of {cells} fine-tuned cells stopped by their cap or best at their last "
                     f"evaluation ({100 * bad / cells:.0f}%; the rule: fewer than 10%)")
    return "\n".join(lines)


def write(sizes: Sizes, methods: list[str], out: Path, negligible: float = 0.5) -> list[str]:
    """sizes.csv, costs.csv, sizes.md and the two figures into `out` (use inside fileio.atomic_dir); returns the
    files."""
    from vocabridge.report import to_markdown

    out.mkdir(parents=True, exist_ok=True)
    sizes.table.to_csv(out / "sizes.csv", index=False)
    cost = costs(sizes)
    cost.to_csv(out / "costs.csv", index=False)
    written = ["sizes.csv", "costs.csv", "sizes.md"]
    if plot(sizes, [(m, REFERENCE) for m in methods], out / "gains.png", f"Each method's gain over {REFERENCE}"):
        written.append("gains.png")
    if plot(sizes, [(SCRATCH, BASE), (REFERENCE, BASE)], out / "regimes.png",
            f"Single-Run ({SCRATCH}) and the new vocabulary ({REFERENCE}) against Pretrain-Finetune ({BASE})"):
        written.append("regimes.png")
    figures = "".join(f"\n\n![{name}]({name})" for name in written if name.endswith(".png"))
    folders = ", ".join(f"`{f}` ({size:,} pairs)" for f, size in sorted(sizes.sizes.items(), key=lambda kv: kv[1]))
    (out / "sizes.md").write_text(
        f"# Across in-domain sizes\n\nFrom {folders}: each folder's verdicts (5 seeds a side, paired where cells pair, "
        f"Holm within its size and reference), side by side.\n\n## What the sizes say\n\n"
        + "\n".join(answers(sizes, methods, negligible)) + "\n\n" + RULE.format(negligible=negligible) + "\n\n"
        f"## The verdicts by size\n\n{markdown(sizes, methods)}{figures}\n\n"
        f"## Convergence\n\n{convergence(cost)}\n\n"
        f"## Cost per cell\n\nFrom the cells' records: unconverged, the cells stopped by their cap or best at their "
        f"last evaluation; the fine-tune's updates and wall minutes (median over seeds; "
        f"the range: a cell that ran beside other work or was paused reads longer), the token distillation's "
        f"minutes, the test set's decoding, the fine-tunes' target tokens per second (median and range: records "
        f"that name the same machine can differ in speed), the machine and the precision the fine-tunes computed in "
        f"(a line each where a row's seeds ran on several); expected: the flow's estimate of the same fine-tunes at "
        f"their update cap, on the machine that ran them, where the folder keeps that run's record (flow_run.json)."
        f"\n\n{to_markdown(cost)}\n",
        encoding="utf-8")
    return written
