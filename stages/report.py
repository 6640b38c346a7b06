"""Stage report: one table of every evaluated method (CSV + Markdown), a BLEU bar plot and the learning curves.

Paired bootstrap resampling (sacrebleu) of each method against the baseline (ft-srcv) and the other references
(`report.also_against`) happens here, where all hypotheses are at hand, and so does the comparison over seeds
and test books of each group of seed replicas (vocabridge.significance.compare: paired by seed and upstream
model where both groups have the same); so do the learning-curve summaries
(area under the dev BLEU curve, updates to a threshold), the rank correlation of the pre-fine-tuning
diagnostics with the final BLEU, and the papers' own tables (Sato et al. Table 3, Liu et al. Table 2) with our
rows beside them and each published ordering tested over seeds and sentences.
"""

from __future__ import annotations

import json

import pandas as pd

from stages import _paths as paths
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import InputError
from vocabridge.evaluate import paired_bootstrap
from vocabridge.fileio import atomic_dir
from vocabridge.report import (
    PAPER_TABLES,
    bleu_plot,
    build_table,
    comparisons_table,
    curve_summary,
    extension_pairs,
    extension_table,
    forgetting_plot,
    forgetting_table,
    group_curves,
    learning_curves_plot,
    neighbours_markdown,
    ordering_verdicts,
    paper_layout,
    rank_correlations,
    seed_comparisons_table,
    seed_groups,
    seeds_table,
    to_markdown,
    vocabulary_fit_table,
)
from vocabridge.significance import MIN_SEEDS, Comparison, clusters_from_ids, compare
from vocabridge.transfer import get_method, knobs_for, row_group


def _read(path, stage: str) -> dict:
    if not path.is_file():
        raise InputError(f"{path}: missing; run `dvc repro {stage}`")
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str]) -> None:
    params = paths.stage_args(__doc__, argv)
    lang, cfg = params.lang, params.report
    refs = read_text_lines(paths.CORPORA / "downstream" / f"test.{lang.tgt}")
    mismatch = json.loads((paths.REPORTS / "mismatch.json").read_text())
    rows, hyps, diagnostics, curves, shared_vocab = [], {}, {}, {}, []
    for method in params.methods:
        folder = paths.evaluation(method)
        if not (folder / "metrics.json").is_file():
            raise InputError(f"{folder}/metrics.json: missing; run `dvc repro evaluate@{method}`")
        metrics = json.loads((folder / "metrics.json").read_text())
        tuning = json.loads((paths.METRICS / "finetune" / f"{method}.json").read_text())
        hyps[method] = (folder / "hyp.txt").read_text(encoding="utf-8").split("\n")[:-1]  # lines may be empty
        adapted = (get_method(method, params.transfer).vocabulary == "downstream"  # new tokens on the base model
                   and knobs_for(method, params.transfer).upstream == "base")
        zero = _read(paths.METRICS / "transfer" / f"{method}.json", f"transfer@{method}")
        diagnostics[method] = _read(paths.DIAGNOSTICS / f"{method}.json", f"transfer@{method}")
        curve_file = paths.PLOTS / "finetune" / method / "dev_bleu.csv"
        curves[method] = pd.read_csv(curve_file) if curve_file.is_file() else pd.DataFrame(columns=["step", "dev_bleu"])
        if adapted and tuning.get("updates"):
            shared_vocab.append(method)
        rows.append({
            "method": method, "bleu": metrics["bleu"], "chrf": metrics["chrf"], "ter": metrics["ter"],
            "upstream_bleu": metrics.get("upstream", {}).get("bleu"),
            "src_vocab": metrics["vocab_size"]["src"], "tgt_vocab": metrics["vocab_size"]["tgt"],
            "unseen_token_rate": unseen_rate(diagnostics[method], mismatch[lang.tgt], adapted),
            "mean_output_tokens": metrics["mean_output_tokens"],
            "sentences_per_second": metrics["sentences_per_second"], "latency_ms": metrics.get("latency_ms"),
            "updates": tuning.get("updates"), "best_update": tuning.get("best_update"),
            "trained_parameters": tuning.get("trainable_parameters"),
            "zero_shot_dev_bleu": zero["dev_bleu"], "zero_shot_dev_ppl": zero["dev_perplexity"],
            "loo_cos_src": zero.get("leave_one_out_cosine_encoder"),
            "loo_cos_tgt": zero.get("leave_one_out_cosine_decoder"),
        })
    baseline = cfg.baseline if cfg.baseline in hyps else params.methods[0]
    tests = {ref: paired_bootstrap((ref, hyps[ref]), [(m, hyps[m]) for m in params.methods if m != ref], refs,
                                   cfg.bootstrap_samples, cfg.seed)
             for ref in dict.fromkeys([baseline, *cfg.also_against]) if ref in hyps}
    keys = {row: row_group(row, params.transfer) for row in params.methods}
    groups = seed_groups(params.methods, keys.__getitem__)
    clusters = book_clusters(len(refs))
    pair_key = {row: (params.finetune.train.seed if knobs.seed is None else knobs.seed, knobs.upstream)
                for row, knobs in ((row, knobs_for(row, params.transfer)) for row in params.methods)}

    def over_seeds(method: list[str], reference: list[str]) -> Comparison:
        """Two groups' rows over seeds and test books: paired where the groups have the same seeds."""
        return compare([hyps[m] for m in method], [hyps[m] for m in reference], refs,
                       method_seeds=[pair_key[m] for m in method], reference_seeds=[pair_key[m] for m in reference],
                       clusters=clusters, n_samples=cfg.bootstrap_samples, seed=cfg.seed)

    threshold = cfg.curve_threshold
    base_curves = [curves[m] for m in groups.get(baseline, [baseline]) if len(curves[m])]
    if threshold is None and base_curves:  # the baseline's best dev BLEU, averaged over its seeds
        threshold = round(sum(float(c["dev_bleu"].max()) for c in base_curves) / len(base_curves), 2)
    source = f"the best dev BLEU of {baseline}" + (f", the mean over its {len(base_curves)} seeds"
                                                   if len(base_curves) > 1 else "")
    for row in rows:
        row["bleu_ci"] = tests[baseline][row["method"]]["ci"]
        row["p_value"] = tests[baseline][row["method"]]["p_value"]
        row |= curve_summary(curves[row["method"]], threshold)
    table = build_table(rows, baseline)
    compared = comparisons_table(tests, {row["method"]: row["bleu"] for row in rows})
    correlations = rank_correlations(table, shared_vocab)
    seeds, seed_tests = seed_summary(params, keys, groups, over_seeds, {row["method"]: row["bleu"] for row in rows},
                                     list(tests), {row["method"]: row["dev_bleu_auc"] for row in rows})
    grouped_curves = group_curves(curves, groups)
    papers = paper_sections(groups, over_seeds, seeds)
    forgetting = forgetting_table(table, groups)
    extension = extension_table(
        extension_pairs({g: dict(keys[g]) for g in groups}),
        lambda a, b: over_seeds(groups[a], groups[b]), forgetting, diagnostics)
    text = "\n\n".join([
        to_markdown(table),
        f"## Paired comparisons (sacrebleu paired bootstrap, {cfg.bootstrap_samples} samples; p: of the null "
        f"hypothesis that method and reference score the same, two-sided)\n\n" + to_markdown(compared),
        "## Vocabulary fit\n\nHow each vocabulary segments the downstream test text: pieces a word (fertility), "
        "the share of the downstream vocabulary's tokens it lacks (unseen_token_rate) and of its own pieces that "
        "are unknown (unk_rate). PLM rows: the fixed vocabularies of the AB-Net rows' BERTs.\n\n"
        + to_markdown(vocabulary_fit_table(mismatch, diagnostics, lang)),
        f"## Learning curves\n\nDev BLEU (greedy) during fine-tuning: `learning_curves.png` (a row's seeds as their "
        f"mean and range; the figures in `learning_curves.csv`); dev_bleu_auc = mean "
        f"dev BLEU over the run (area under the curve / updates), updates_to_threshold = first evaluated update "
        f"with dev BLEU >= {threshold if threshold is not None else 'n/a'} "
        f"({'report.curve_threshold' if cfg.curve_threshold is not None else source})."
        f"\n\n" + to_markdown(table.loc[table["source"] == "vocabridge",
                                      ["method", "bleu", "dev_bleu_auc", "updates_to_threshold", "best_update"]]),
        f"## Do the diagnostics before fine-tuning predict the final BLEU?\n\nSpearman rank correlation over the "
        f"fine-tuned rows with the downstream vocabulary ({', '.join(shared_vocab) or 'none'}); a diagnostic that "
        f"predicts well has a correlation near +1 when higher is better, near -1 when lower is better.\n\n"
        + to_markdown(correlations),
        "## Seeds\n\nRows that differ only in their seed form a group: mean and spread of test BLEU over its "
        "seeds.\n\n" + to_markdown(seeds),
        f"## Comparisons over seeds and sentences\n\nEach group against each reference's group in the same "
        f"training regime: the difference of mean test BLEU, with a 95% t interval and p over seeds (form paired: "
        f"the per-seed differences, where both groups ran the same seeds on the same upstream model; unpaired: "
        f"Welch) with the test set's variance added ({cfg.bootstrap_samples} draws of the test "
        f"{'books' if clusters else 'sentences'} with replacement, shared by both sides). Decisive: the interval "
        f"excludes 0 with at least {MIN_SEEDS} seeds a side; with fewer, or one, it is not a finding. "
        f"detectable: the smallest true difference this "
        f"design finds with 80% power at the 5% level; detectable_5_seeds: the same with 5 seeds a side; "
        f"seeds_for_{cfg.target_difference:g}: seeds a side needed to detect {cfg.target_difference:g} BLEU "
        f"(empty: not with 100 seeds, the test set's own noise is larger, or a side has one seed).\n\n"
        + to_markdown(seed_tests),
        "## Forgetting\n\nTest BLEU on the downstream domain beside test BLEU on the first "
        f"{params.evaluate.upstream_sentences} pairs of the upstream test set (the domain the model came from), mean "
        "over each group's seeds: `forgetting.png` plots one against the other.\n\n"
        + (to_markdown(forgetting) if len(forgetting) else "Not measured (evaluate.upstream_sentences: 0)."),
        "## Extension against replacement\n\nEach row that keeps the pretrained vocabulary and appends pieces of "
        "the adapted one (`extend: N`) against the same method replacing the vocabulary: the difference of mean "
        "test BLEU over seeds and sentences (as above), and upstream BLEU of each (forgetting).\n\n"
        + (to_markdown(extension) if len(extension) else "No extension rows in this run."),
        "## The papers' tables beside ours\n\nEach published row (BLEU as published, on the paper's data) with the "
        "row of ours that runs it: mean test BLEU over its seeds and their spread. Below each table, every ordering "
        "the paper reports, tested on our rows over seeds and sentences as above, with Holm's correction over the "
        "table's orderings (p_holm): holds (decisive and p_holm <= 0.05, same sign), reversed (the same, other "
        "sign), not decisive (after Holm), too few seeds (not a finding) or not run.\n\n"
        + "\n\n".join(f"### {paper.source.removeprefix('published: ')}\n\n" + to_markdown(layout) + "\n"
                        + to_markdown(verdicts) for paper, layout, verdicts in papers),
    ])
    with atomic_dir(paths.REPORTS / "results") as tmp:
        table.to_csv(tmp / "report.csv", index=False)
        compared.to_csv(tmp / "comparisons.csv", index=False)
        correlations.to_csv(tmp / "correlations.csv", index=False)
        seeds.to_csv(tmp / "seeds.csv", index=False)
        seed_tests.to_csv(tmp / "seed_comparisons.csv", index=False)
        for paper, layout, verdicts in papers:
            layout.to_csv(tmp / f"paper_{paper.key}.csv", index=False)
            verdicts.to_csv(tmp / f"paper_{paper.key}_orderings.csv", index=False)
        (tmp / "report.md").write_text(text + neighbours_markdown(diagnostics), encoding="utf-8")
        bleu_plot(table, tmp / "bleu.png")
        grouped_curves.to_csv(tmp / "learning_curves.csv", index=False)
        learning_curves_plot(grouped_curves, threshold, tmp / "learning_curves.png")
        forgetting.to_csv(tmp / "forgetting.csv", index=False)
        extension.to_csv(tmp / "extension.csv", index=False)
        if len(forgetting):
            forgetting_plot(forgetting, tmp / "forgetting.png")
    print(text)


def unseen_rate(diagnostics: dict, mismatch: dict, adapted: bool) -> float:
    """The target side's unseen-token rate of a row's vocabulary: the adapted vocabulary's against the pretrained
    one, a PLM row's against its BERT's, 0 for rows that keep their model's vocabulary."""
    if "vocabulary_fit" in diagnostics:
        return diagnostics["vocabulary_fit"]["tgt"]["unseen_token_rate"]
    return mismatch["unseen_token_rate"] if adapted else 0.0


def book_clusters(sentences: int) -> list[str] | None:
    """Each test sentence's book, where the corpus has verse ids (the Bible recipe's test.ids); None (sentences
    one by one) where it has none, or one book only."""
    path = paths.CORPORA / "downstream" / "test.ids"
    if not path.is_file():
        return None
    ids = read_text_lines(path)
    if len(ids) != sentences:
        raise InputError(f"{path}: {len(ids)} verse ids for {sentences} test sentences; run `dvc repro prepare`")
    books = clusters_from_ids(ids)
    return books if len(set(books)) > 1 else None


def paper_sections(groups: dict[str, list[str]], over_seeds, seeds: pd.DataFrame):
    """Each paper's table with our rows beside it, and its published orderings tested over seeds and sentences."""
    group_of = {member: label for label, members in groups.items() for member in members}

    def compare_rows(better: str, worse: str):
        if better not in group_of or worse not in group_of:
            return None
        return over_seeds(groups[group_of[better]], groups[group_of[worse]])

    return [(paper, paper_layout(paper, seeds, group_of), ordering_verdicts(paper, compare_rows))
            for paper in PAPER_TABLES]


def seed_summary(params, keys: dict[str, tuple], groups: dict[str, list[str]], over_seeds, bleu: dict,
                 references: list[str], auc: dict):
    """The seeds table and the comparisons over seeds and sentences: each group against the group of each
    reference in the same regime (its knobs, `keys`, with this group's `train_pairs`)."""
    keys = {row: dict(key) for row, key in keys.items()}
    cfg, tests = params.report, {}
    for ref in references:
        tests[ref] = {}
        for label, members in groups.items():
            wanted = keys[ref] | {"train_pairs": keys[label]["train_pairs"]}
            match = next((g for g in groups if keys[g] == wanted), None)
            if match is None or match == label:
                continue
            tests[ref][label] = over_seeds(members, groups[match])
    return seeds_table(groups, bleu, tests, auc), seed_comparisons_table(tests, cfg.target_difference)


if __name__ == "__main__":
    run(main)
