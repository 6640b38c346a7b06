"""The report's tables as DataFrames: one line per row, vocabulary fit, forgetting, learning-curve summaries,
decoding speed, the BERTs' curves, the AB-Net family's upstream trainings, rank correlations, the extension rows
and the seed comparisons."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from vocabridge.papers import GUO_LATENCY_MS, PAPER_TABLES
from vocabridge.report.conditions import DEV_SET
from vocabridge.report.verdicts import holm_verdict, verdict
from vocabridge.significance import (
    Comparison,
    holm,
)

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
              "seeds": len(part), "bleu": mean_of(part, "bleu"), "latency_ms": mean_of(part, "latency_ms", 1),
              "sentences_per_second": mean_of(part, "sentences_per_second", 1)}
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



def upstream_trainings_summary(trainings: dict[str, tuple[pd.DataFrame, dict]]) -> pd.DataFrame:
    """The upstream trainings of the study's AB-Net-family models (abnet@NAME with `upstream: true`), one line
    each: updates run, the kept update and its dev BLEU and loss, the dev BLEU at the first evaluation (a rise from
    it says the model learned), whether the kept update was the last one (training.LoopState.ending: not converged
    where the cap stopped it there), what stopped training. `trainings`: name -> (its dev curve: step, dev_bleu,
    dev_loss; its metrics JSON)."""
    lines = []
    for name, (curve, metrics) in trainings.items():
        evaluated = curve[curve["step"] > 0].sort_values("step")
        first = evaluated.iloc[0] if len(evaluated) else None
        lines.append({
            "model": name, "updates": metrics.get("updates"), "best_update": metrics.get("best_update"),
            "best_dev_bleu": metrics.get("best_dev_bleu"), "best_dev_loss": metrics.get("best_dev_loss"),
            "first_eval_update": None if first is None else int(first["step"]),
            "first_eval_dev_bleu": None if first is None else float(first["dev_bleu"]),
            "best_at_end": metrics.get("best_at_end"), "stopped_by": metrics.get("stopped_by"),
            "stopped": metrics.get("stopped"),
            "train_hours": round(metrics["train_seconds"] / 3600, 2) if metrics.get("train_seconds") else None,
            "target_tokens_per_s": metrics.get("target_tokens_per_s"), "precision": metrics.get("precision"),
            "threads": metrics.get("threads"), "device": metrics.get("device"),
            "trainable_parameters": metrics.get("trainable_parameters")})
    return pd.DataFrame(lines)



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


def mean_of(part: pd.DataFrame, column: str, digits: int = 2) -> float | None:
    values = pd.to_numeric(part[column], errors="coerce").dropna()
    return round(float(values.mean()), digits) if len(values) else None
