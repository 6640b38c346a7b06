"""The results table across methods (pandas) and the BLEU bar plot, with the papers' published rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

# Sato et al. 2020, Table 3, De->En (IT -> Law), 100k in-domain pairs; BLEU as published.
PUBLISHED = pd.DataFrame([
    ("out-domain", 2.58), ("in-domain", 18.79), ("ft-srcv", 24.59), ("ft-tgtv", 24.87),
    ("va-cbow", 21.88), ("va-linear", 25.20), ("va-llm", 26.40),
], columns=["method", "bleu"]).assign(source="published: Sato et al. 2020, Table 3, De-En IT->Law, 100k")

COLUMNS = ["method", "bleu", "bleu_ci", "chrf", "ter", "delta_bleu", "p_value", "src_vocab", "tgt_vocab",
           "unseen_token_rate", "mean_output_tokens", "sentences_per_second", "updates", "best_update",
           "zero_shot_dev_bleu", "zero_shot_dev_ppl", "loo_cos_src", "loo_cos_tgt", "source"]


def build_table(rows: list[dict], baseline: str) -> pd.DataFrame:
    """Our rows (one per evaluated method), deltas against the baseline, then the published rows."""
    ours = pd.DataFrame(rows)
    if baseline in set(ours["method"]):
        base = float(ours.loc[ours["method"] == baseline, "bleu"].iloc[0])
        ours["delta_bleu"] = (ours["bleu"] - base).round(2)
    ours["source"] = "vocabridge"
    table = pd.concat([ours, PUBLISHED], ignore_index=True)
    return table.reindex(columns=COLUMNS)


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


def bleu_plot(table: pd.DataFrame, path: Path) -> None:
    """Bars of test BLEU per method with 95% bootstrap intervals; published rows hatched."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ours = table[table["source"] == "vocabridge"]
    fig, ax = plt.subplots(figsize=(max(5, 0.8 * len(ours) + 2), 3.6), dpi=120)
    ax.bar(ours["method"], ours["bleu"], yerr=ours["bleu_ci"].fillna(0), capsize=4, color="#4878a8")
    ax.set_ylabel("test BLEU (sacrebleu)")
    ax.set_title("BLEU per method, 95% bootstrap interval")
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
