"""The report's figures: each row's difference from its reference marked by verdict, forgetting, learning
curves, the BERTs' curves and the AB-Net family's upstream trainings (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from vocabridge.report.conditions import DEV_SET


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



def upstream_curves_plot(curves: pd.DataFrame, summary: pd.DataFrame, path: Path) -> None:
    """Dev BLEU (solid) and dev loss (dashed, right axis) of each AB-Net-family model against its upstream
    training updates, the kept update circled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=120)
    loss_ax = ax.twinx()
    kept = summary.set_index("model")["best_update"].to_dict() if len(summary) else {}
    for name, curve in curves.groupby("model", sort=False):
        curve = curve.sort_values("step")
        (line,) = ax.plot(curve["step"], curve["dev_bleu"], marker="o", markersize=3, label=f"{name} dev BLEU")
        loss_ax.plot(curve["step"], curve["dev_loss"], linestyle="--", color=line.get_color(), alpha=0.6,
                     label=f"{name} dev loss")
        best = curve[curve["step"] == kept.get(name)]
        ax.scatter(best["step"], best["dev_bleu"], s=80, facecolors="none", edgecolors=line.get_color(), zorder=3)
    ax.set_xlabel("upstream training updates")
    ax.set_ylabel("upstream dev BLEU")
    loss_ax.set_ylabel("upstream dev loss")
    ax.set_title("Upstream trainings (abnet@NAME), the kept update circled")
    handles = [h for a in (ax, loss_ax) for h in a.get_legend_handles_labels()[0]]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="center right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
