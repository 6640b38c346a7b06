"""The results table across methods (pandas), the BLEU bar plot and the learning curves, with the papers'
published rows, and the papers' own tables (Sato et al.'s Table 3, Liu et al.'s Table 2, Duan & Zhao's Table 3)
with our rows beside them and a verdict on each ordering they report (their names mapped to ours in PaperTable:
Single-Run = in-domain, Pretrain-Finetune = ft-srcv, Random Init = ft-tgtv-random-dec; ATT-EG + KD is not a row
of ours)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vocabridge.significance import ALPHA, MIN_SEEDS, Comparison, holm


@dataclass(frozen=True)
class PaperTable:
    """A published results table: each row under the paper's name with the row of ours that runs it, and the
    orderings the paper reports (better, worse), which our runs either reproduce or not."""

    key: str  # file names: paper_KEY.csv
    source: str
    rows: tuple[tuple[str, str, float], ...]  # (the paper's row, our row, published BLEU)
    orderings: tuple[tuple[str, str], ...]  # (our better row, our worse row) as the paper has them


SATO_TABLE_3 = PaperTable(
    "sato2020_table3", "published: Sato et al. 2020, Table 3, De-En IT->Law, 100k",
    (("Out-domain", "out-domain", 2.58), ("In-domain", "in-domain", 18.79), ("MDL", "mdl", 24.03),
     ("FT-srcV", "ft-srcv", 24.59), ("FT-tgtV", "ft-tgtv", 24.87), ("VA-CBoW", "va-cbow", 21.88),
     ("VA-Linear", "va-linear", 25.20), ("VA-LLM", "va-llm", 26.40)),
    (("ft-tgtv", "ft-srcv"), ("va-llm", "va-linear"), ("va-linear", "va-cbow"), ("va-llm", "ft-srcv"),
     ("va-llm", "ft-tgtv"), ("ft-srcv", "in-domain"), ("va-llm", "mdl")))
# every vocabulary transfer of Liu et al.'s Table 2 is on the decoder side only: our `-dec` rows
LIU_TABLE_2 = PaperTable(
    "liu2021_table2", "published: Liu et al. 2021, Table 2, En-Zh Thesis, decoder side",
    (("Single-Run", "in-domain", 34.51), ("Pretrain-Finetune", "ft-srcv", 30.21),
     ("Downstream Vocab", "ft-tgtv", 31.70), ("Joint Vocab", "joint-vocab", 35.01), ("BPE-Drop", "bpe-drop", 32.41),
     ("Random Init", "ft-tgtv-random-dec", 36.33), ("Word2Vec", "word2vec", 36.21),
     ("Embedding Recon", "embedding-recon", 36.25), ("Independent Encoder", "independent-encoder", 34.77),
     ("CBOW", "va-cbow-dec", 36.12), ("AVG-EG", "avg-eg", 37.03), ("ATT-EG", "att-eg", 37.40),
     ("PATT-EG", "patt-eg", 37.72), ("PATT-EG + KD", "patt-eg-kd", 37.90)),
    (("ft-tgtv-random-dec", "ft-srcv"), ("ft-tgtv-random-dec", "word2vec"), ("ft-tgtv-random-dec", "embedding-recon"),
     ("avg-eg", "ft-tgtv-random-dec"), ("att-eg", "avg-eg"), ("patt-eg", "att-eg"), ("patt-eg-kd", "patt-eg"),
     ("patt-eg-kd", "ft-tgtv-random-dec"), ("joint-vocab", "ft-tgtv"), ("in-domain", "ft-srcv")))
# Duan & Zhao's training objectives (Eq. 9): each ablation is an abnets entry with its own `sponsored` keys and a row
# of the same name (profiles/plm-sponsored.yaml); De-En, the pipeline's default direction
DUAN_TABLE_3 = PaperTable(
    "duan2023_table3", "published: Duan & Zhao 2023, Table 3, IWSLT14 De-En, PLM-sponsored model's losses",
    (("Our Model", "plm-nmt", 37.5), ("-L_MLM", "plm-nmt-no-mlm", 36.8), ("-L_T", "plm-nmt-no-lt", 36.7),
     ("-L_kd", "plm-nmt-no-kd", 36.9), ("-L_MLM & L_kd", "plm-nmt-no-mlm-kd", 36.6),
     ("-L_MLM & L_T & L_kd", "plm-nmt-nmt-only", 36.2), ("+L_fkd -L_kd", "plm-nmt-full-kd", 36.8)),
    (("plm-nmt", "plm-nmt-no-mlm"), ("plm-nmt", "plm-nmt-no-lt"), ("plm-nmt", "plm-nmt-no-kd"),
     ("plm-nmt-no-kd", "plm-nmt-no-mlm"), ("plm-nmt-no-mlm-kd", "plm-nmt-nmt-only"),
     ("plm-nmt", "plm-nmt-full-kd")))
PAPER_TABLES = (SATO_TABLE_3, LIU_TABLE_2, DUAN_TABLE_3)

# The published rows beside ours in the main table, named as ours.
PUBLISHED = pd.DataFrame([(ours, bleu, paper.source) for paper in PAPER_TABLES for _, ours, bleu in paper.rows],
                         columns=["method", "bleu", "source"])

COLUMNS = ["method", "bleu", "bleu_ci", "chrf", "ter", "upstream_bleu", "delta_bleu", "p_value", "src_vocab",
           "tgt_vocab", "unseen_token_rate", "mean_output_tokens", "sentences_per_second", "latency_ms",
           "trained_parameters", "updates", "best_update", "dev_bleu_auc", "updates_to_threshold",
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


def forgetting_table(table: pd.DataFrame, groups: dict[str, list[str]]) -> pd.DataFrame:
    """Per group of seeds: mean test BLEU on the downstream domain and on the upstream one (what adapting cost)."""
    ours = table[table["source"] == "vocabridge"].set_index("method")
    rows = [{"group": label, "seeds": len(members), "bleu": round(float(ours.loc[members, "bleu"].mean()), 2),
             "upstream_bleu": round(float(ours.loc[members, "upstream_bleu"].mean()), 2)}
            for label, members in groups.items() if ours.loc[members, "upstream_bleu"].notna().all()]
    return pd.DataFrame(rows, columns=["group", "seeds", "bleu", "upstream_bleu"])


def forgetting_plot(forgetting: pd.DataFrame, path: Path) -> None:
    """The trade-off: downstream BLEU against upstream BLEU, one point per group of seeds."""
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
        ax.annotate(row.group, (row.upstream_bleu, row.bleu), fontsize=7, xytext=(3, 3 - 9 * near),
                    textcoords="offset points")
        placed.append((row.upstream_bleu, row.bleu))
    ax.set(xlabel="upstream (original domain) test BLEU", ylabel="downstream test BLEU",
           title="What adapting gains and what it forgets (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


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


def comparisons_table(tests: dict[str, dict[str, dict]], bleu: dict[str, float]) -> pd.DataFrame:
    """One row per (method, reference): BLEU difference and paired-bootstrap p-value (`tests[ref][method]`)."""
    rows = [{"method": method, "against": ref, "delta_bleu": round(bleu[method] - bleu[ref], 2),
             "p_value": result["p_value"]}
            for ref, results in tests.items() for method, result in results.items() if method != ref]
    return pd.DataFrame(rows, columns=["method", "against", "delta_bleu", "p_value"])


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
    upstream = forgetting.set_index("group")["upstream_bleu"] if len(forgetting) else pd.Series(dtype=float)
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


def seed_groups(rows: list[str], key) -> dict[str, list[str]]:
    """Rows that differ only in their seed (`key(row)` equal), under the first one's name, in the rows' order."""
    label_of: dict = {}
    groups: dict[str, list[str]] = {}
    for row in rows:
        groups.setdefault(label_of.setdefault(key(row), row), []).append(row)
    return groups


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


def seed_comparisons_table(tests: dict[str, dict[str, Comparison]], target: float) -> pd.DataFrame:
    """One row per (group, reference group): delta with its 95% interval and p over seeds and sentences, the
    verdict, the smallest difference the design detects (80% power, 5% level) now, with 5 seeds a side, and
    the seeds a side needed to detect `target` BLEU."""
    rows = []
    for ref, results in tests.items():
        for label, c in results.items():
            at_5 = c.detectable_with(5)
            rows.append({"group": label, "against": ref, "seeds": c.seeds, "reference_seeds": c.reference_seeds,
                         "form": c.form, "delta": c.delta, "ci_low": c.ci_low, "ci_high": c.ci_high,
                         "p_value": c.p_value, "verdict": verdict(c), "detectable": round(c.detectable, 2),
                         "detectable_5_seeds": None if at_5 is None else round(at_5, 2),
                         f"seeds_for_{target:g}": c.seeds_for(target)})
    columns = ["group", "against", "seeds", "reference_seeds", "form", "delta", "ci_low", "ci_high", "p_value",
               "verdict",
               "detectable", "detectable_5_seeds", f"seeds_for_{target:g}"]
    return pd.DataFrame(rows, columns=columns)


def paper_layout(paper: PaperTable, seeds: pd.DataFrame, group_of: dict[str, str]) -> pd.DataFrame:
    """The paper's table row by row with ours beside it: our mean test BLEU over the seeds of the row's group,
    their spread and count (empty where the run has no such row)."""
    by_group = seeds.set_index("group") if len(seeds) else pd.DataFrame()
    out = []
    for name, ours, published in paper.rows:
        group = group_of.get(ours)
        found = by_group.loc[group] if group is not None and group in by_group.index else None
        out.append({"paper_row": name, "published_bleu": published, "our_row": ours,
                    "seeds": None if found is None else int(found["seeds"]),
                    "bleu_mean": None if found is None else found["bleu_mean"],
                    "bleu_std": None if found is None else found["bleu_std"]})
    return pd.DataFrame(out, columns=["paper_row", "published_bleu", "our_row", "seeds", "bleu_mean", "bleu_std"])


def ordering_verdicts(paper: PaperTable, compare: Callable[[str, str], Comparison | None]) -> pd.DataFrame:
    """One line per published ordering (better > worse): the published gap, ours with its 95% interval and p
    over seeds and sentences (`compare(better, worse)`, None when a row was not run), p after Holm's correction
    over the table's orderings (one family), and the verdict: holds (decisive and Holm's p <= 0.05, same sign),
    reversed (the same, other sign), not decisive (after Holm), too few seeds, or not run."""
    published = {ours: bleu for _, ours, bleu in paper.rows}
    found = [(better, worse, compare(better, worse)) for better, worse in paper.orderings]
    tested = [c for _, _, c in found if c is not None]
    adjusted = dict(zip(map(id, tested), holm([c.p_value for c in tested])[0], strict=True))
    out = []
    for better, worse, c in found:
        p_holm = None if c is None else round(adjusted[id(c)], 4)
        said = ("not run" if c is None else verdict(c) if not c.decisive
                else ("holds" if c.delta > 0 else "reversed") if p_holm <= ALPHA else "not decisive after Holm")
        out.append({"ordering": f"{better} > {worse}",
                    "published_delta": round(published[better] - published[worse], 2),
                    "delta": None if c is None else c.delta, "ci_low": None if c is None else c.ci_low,
                    "ci_high": None if c is None else c.ci_high, "p_value": None if c is None else c.p_value,
                    "p_holm": p_holm, "seeds": None if c is None else f"{c.seeds}/{c.reference_seeds}",
                    "form": None if c is None else c.form, "verdict": said})
    return pd.DataFrame(out, columns=["ordering", "published_delta", "delta", "ci_low", "ci_high", "p_value",
                                      "p_holm", "seeds", "form", "verdict"])


def verdict(c: Comparison) -> str:
    """A comparison's verdict: decisive only with MIN_SEEDS seeds a side and an interval that excludes 0."""
    if c.one_seed:
        return "one seed: not a finding"
    if not c.enough_seeds:
        return f"fewer than {MIN_SEEDS} seeds a side: not a finding"
    return "decisive" if c.decisive else "not decisive"
