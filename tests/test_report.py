"""The report's summaries on hand-made numbers whose answers are known."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from vocabridge.report import (
    build_table,
    curve_summary,
    group_curves,
    learning_curves_plot,
    rank_correlations,
    vocabulary_fit_table,
)


def test_area_under_the_curve_and_updates_to_threshold():
    curve = pd.DataFrame({"step": [0, 100, 200, 400], "dev_bleu": [0.0, 4.0, 8.0, 8.0]})
    # trapezoids: 100*2 + 100*6 + 200*8 = 2400, over 400 updates
    assert curve_summary(curve, 6.0) == {"dev_bleu_auc": 6.0, "updates_to_threshold": 200}
    assert curve_summary(curve.sample(frac=1, random_state=0), 8.0)["updates_to_threshold"] == 200  # any row order
    assert curve_summary(curve, 9.0)["updates_to_threshold"] is None  # never reached
    assert curve_summary(pd.DataFrame({"step": [0], "dev_bleu": [1.0]}), 1.0) == {
        "dev_bleu_auc": None, "updates_to_threshold": None}  # a model that is not fine-tuned has no curve


def test_rank_correlations():
    rows = [{"method": m, "bleu": b, "zero_shot_dev_ppl": p, "zero_shot_dev_bleu": 0.0, "loo_cos_src": c,
             "loo_cos_tgt": None} for m, b, p, c in
            [("x", 10, 900.0, 0.1), ("y", 12, 500.0, 0.3), ("z", 15, 100.0, 0.2), ("w", 1, 1.0, 0.9)]]
    full = build_table(rows, "x")
    assert full.loc[full["method"] == "z", "delta_bleu"].item() == 5
    corr = rank_correlations(full, ["x", "y", "z"]).set_index("diagnostic")  # w uses another vocabulary
    assert corr.loc["zero_shot_dev_ppl", "spearman_with_bleu"] == pytest.approx(-1.0)
    assert corr.loc["loo_cos_src", "spearman_with_bleu"] == pytest.approx(0.5)
    assert pd.isna(corr.loc["zero_shot_dev_bleu", "spearman_with_bleu"])  # constant: undefined, not 0
    assert corr.loc["loo_cos_tgt", "methods"] == 0 and pd.isna(corr.loc["loo_cos_tgt", "spearman_with_bleu"])


def test_learning_curves_of_seeds_are_averaged_and_plotted(tmp_path):
    curves = {f"m{i}": pd.DataFrame({"step": [0, 50, 100], "dev_bleu": [0, i, 2 * i]}) for i in range(12)}
    curves |= {"s2": pd.DataFrame({"step": [0, 50, 100, 150], "dev_bleu": [0.0, 4.0, 8.0, 9.0]}),
               "flat": pd.DataFrame({"step": [0], "dev_bleu": [1.0]})}
    groups = {f"m{i}": [f"m{i}"] for i in range(1, 12)} | {"m0": ["m0", "s2"], "flat": ["flat"]}
    grouped = group_curves(curves, groups)
    seeded = grouped[grouped["group"] == "m0"]
    assert seeded["step"].tolist() == [0, 50, 100]  # the updates both seeds evaluated
    assert seeded["dev_bleu"].tolist() == [0.0, 2.0, 4.0] and seeded["dev_bleu_max"].tolist() == [0.0, 4.0, 8.0]
    assert (seeded["seeds"] == 2).all() and "flat" not in set(grouped["group"])  # one point: no curve
    learning_curves_plot(grouped, 5.0, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 5000


def test_a_rows_seeds_are_summed_up_and_compared_over_seeds():
    from vocabridge.report import seed_comparisons_table, seeds_table
    from vocabridge.significance import Comparison

    settled = Comparison(delta=2.0, ci_low=0.5, ci_high=3.5, p_value=0.01, seeds=5, reference_seeds=5,
                         std_error=0.8, seed_std=0.6, reference_seed_std=0.4, sentence_variance=0.04, form="paired")
    few = dataclasses.replace(settled, seeds=3, p_value=0.5)  # from 3 seeds: not a verdict
    lone = Comparison(delta=2.0, ci_low=0.5, ci_high=3.5, p_value=0.5, seeds=1, reference_seeds=3,
                      std_error=0.8, seed_std=None, reference_seed_std=0.4, sentence_variance=0.04)
    late = dataclasses.replace(settled, p_value=0.03)  # decisive alone; Holm over the 4: 0.03 x 3 > 0.05
    tests = {"h": {"g": settled, "k": lone, "f": few, "late": late}}
    table = seeds_table({"g": ["g-1", "g-2"], "h": ["h-1"]}, {"g-1": 10.0, "g-2": 12.0, "h-1": 9.0}, tests,
                        {"g-1": 3.0, "g-2": 4.0, "h-1": None}).set_index("group")
    assert table.loc["g", "dev_bleu_auc_mean"] == 3.5 and pd.isna(table.loc["h", "dev_bleu_auc_mean"])
    assert table.loc["g", "bleu_mean"] == 11.0 and table.loc["g", "bleu_std"] == pytest.approx(1.41, abs=0.01)
    assert table.loc["g", "seeds"] == 2 and table.loc["g", "p_vs_h"] == 0.01 and pd.isna(table.loc["h", "bleu_std"])
    verdicts = seed_comparisons_table(tests, 0.5).set_index("row")
    assert verdicts.loc["g", "verdict"] == "decisive" and verdicts.loc["k", "verdict"] == "one seed: not a finding"
    assert verdicts.loc["g", "p_holm"] == 0.04 and verdicts.loc["g", "form"] == "paired"
    assert verdicts.loc["late", "verdict"] == "not decisive after Holm" and verdicts.loc["late", "p_holm"] == 0.09
    assert verdicts.loc["f", "verdict"] == "fewer than 5 seeds a side: not a finding"
    assert verdicts.loc["g", "detectable"] == pytest.approx(2.8 * 0.8, abs=0.01)
    assert pd.isna(verdicts.loc["k", "detectable_5_seeds"])
    both = seed_comparisons_table(tests, 0.5, {"h": {"g": late}})  # the dev books: a family of their own
    dev = both[both["test_set"] == "dev books"].set_index("row")
    assert list(dev.index) == ["g"] and dev.loc["g", "p_holm"] == 0.03 and dev.loc["g", "verdict"] == "decisive"
    assert list(both["test_set"]) == ["test"] * 4 + ["dev books"]  # the test set's lines first, as before


def test_holm_corrects_the_exact_p_values_not_the_rounded_ones():
    """0.01666 x 3 = 0.04998 is decisive at 5%; the same p rounded to 0.0167 first would give 0.0501."""
    from vocabridge.report import seed_comparisons_table
    from vocabridge.significance import Comparison

    close = Comparison(delta=1.0, ci_low=0.2, ci_high=1.8, p_value=0.0167, p_exact=0.01666, seeds=5, reference_seeds=5,
                       std_error=0.4, seed_std=0.3, reference_seed_std=0.3, sentence_variance=0.01, form="paired")
    far = dataclasses.replace(close, delta=0.1, ci_low=-0.5, ci_high=0.7, p_value=0.7, p_exact=0.7)
    table = seed_comparisons_table({"r": {"a": close, "b": far, "c": far}}, 0.5).set_index("row")
    assert table.loc["a", "p_holm"] == 0.05 and table.loc["a", "verdict"] == "decisive"
    rounded = seed_comparisons_table({"r": {"a": dataclasses.replace(close, p_exact=None), "b": far, "c": far}}, 0.5)
    assert rounded.set_index("row").loc["a", "verdict"] == "not decisive after Holm"


def test_the_differences_plot_draws_what_the_verdicts_judge(tmp_path):
    from vocabridge.report import differences_plot

    frame = pd.DataFrame([
        {"row": "a", "against": "r", "delta": 1.0, "ci_low": 0.4, "ci_high": 1.6, "verdict": "decisive",
         "test_set": "test"},
        {"row": "a", "against": "r", "delta": 0.5, "ci_low": -0.1, "ci_high": 1.1, "verdict": "not decisive",
         "test_set": "dev books"},
        {"row": "b", "against": "q", "delta": -2.0, "ci_low": -3.0, "ci_high": -1.0, "verdict": "worse",
         "test_set": "test"}])
    assert differences_plot(frame, tmp_path / "d.png") and (tmp_path / "d.png").stat().st_size > 5000
    old = frame[frame["test_set"] == "test"].drop(columns="test_set")  # a committed report's older table
    assert differences_plot(old, tmp_path / "old.png")
    assert not differences_plot(frame.iloc[:0], tmp_path / "none.png") and not (tmp_path / "none.png").exists()


def test_a_cells_figures_and_a_verdict_in_one_table_cell(tmp_path):
    from vocabridge.grid import CellRecord
    from vocabridge.report import cell_line, machine_name, verdict_text
    from vocabridge.significance import Comparison

    machine = {"cpu": "Xeon", "capability": "AVX512", "bf16_native": True, "gpu": "H100"}
    assert machine_name(machine) == "Xeon (AVX512, bf16 yes, GPU H100)"
    record = CellRecord("va-llm", 3, {"method": "va-llm", "metrics": {"bleu": 12.5, "upstream": {"bleu": 20.0}},
                                      "finetune": {"updates": 400, "best_update": 400}, "machine": machine,
                                      "upstream": {"name": "base", "sha256": "ab" * 32}}, tmp_path, "data/cells")
    curve = pd.DataFrame({"step": [0, 200, 400], "dev_bleu": [0.0, 4.0, 8.0]})
    line = cell_line(record, curve, 4.0, 0.1)
    assert line["cell"] == "va-llm-3" and line["best_at_end"] and line["updates_to_threshold"] == 200
    # one rule: the best checkpoint is the last update (an older record early-stopped on a tie says so too)
    record.data["finetune"]["stopped"] = "early stop: no dev BLEU gain in 3 evaluations"
    assert cell_line(record, curve, 4.0, 0.1)["best_at_end"]
    record.data["finetune"] |= {"best_update": 200, "best_at_end": False, "stopped_by": "cap"}  # a record says both
    assert not cell_line(record, curve, 4.0, 0.1)["best_at_end"] and cell_line(record, curve, 4.0, 0.1)["budget_stop"]
    assert line["upstream_bleu"] == 20.0 and line["upstream_sha256"] == "ab" * 32 and line["chrf"] is None
    c = Comparison(delta=1.25, ci_low=0.5, ci_high=2.0, p_value=0.001, seeds=5, reference_seeds=5, std_error=0.3,
                   seed_std=0.5, reference_seed_std=0.5, sentence_variance=0.01, form="unpaired")
    assert verdict_text(c, 0.003, "ft-srcv-low", "ft-srcv") == \
        "+1.25 [0.50, 2.00] p_holm 0.003: better (vs ft-srcv-low; Welch)"


def test_the_papers_tables_sit_beside_ours_with_a_verdict_per_published_ordering():
    from vocabridge.papers import SATO_TABLE_3
    from vocabridge.report import ordering_verdicts, paper_layout
    from vocabridge.significance import Comparison

    seeds = pd.DataFrame([{"group": "va-llm", "seeds": 3, "bleu_mean": 10.2, "bleu_std": 0.6},
                          {"group": "va-linear", "seeds": 3, "bleu_mean": 9.0, "bleu_std": 0.4},
                          {"group": "ft-srcv", "seeds": 1, "bleu_mean": 8.9, "bleu_std": None}])
    group_of = {"va-llm": "va-llm", "va-linear": "va-linear", "ft-srcv": "ft-srcv"}
    layout = paper_layout(SATO_TABLE_3, seeds, group_of).set_index("paper_row")
    assert layout.loc["VA-LLM", "published_bleu"] == 26.40 and layout.loc["VA-LLM", "bleu_mean"] == 10.2
    assert layout.loc["VA-LLM", "seeds"] == 3 and pd.isna(layout.loc["FT-tgtV", "bleu_mean"])  # not run here
    assert list(layout.index)[:4] == ["Out-domain", "In-domain", "MDL", "FT-srcV"]  # the paper's order

    def comparison(delta, low, high, seeds=5, p_value=0.01):
        return Comparison(delta=delta, ci_low=low, ci_high=high, p_value=p_value, seeds=seeds, reference_seeds=5,
                          std_error=0.3, seed_std=0.5, reference_seed_std=0.5, sentence_variance=0.01)

    found = {("va-llm", "va-linear"): comparison(1.2, 0.4, 2.0),
             ("va-linear", "va-cbow"): comparison(-1.0, -1.8, -0.3),
             ("va-llm", "ft-srcv"): comparison(1.3, 0.5, 2.1, seeds=1),
             ("ft-srcv", "in-domain"): comparison(0.2, -0.5, 0.9, p_value=0.6),
             ("va-llm", "mdl"): comparison(0.6, 0.1, 1.1, p_value=0.03)}  # decisive alone, not after Holm
    verdicts = ordering_verdicts(SATO_TABLE_3, lambda a, b: found.get((a, b))).set_index("ordering")
    assert verdicts.loc["va-llm > va-linear", "verdict"] == "holds"
    assert verdicts.loc["va-llm > va-linear", "published_delta"] == 1.2
    assert verdicts.loc["va-linear > va-cbow", "verdict"] == "reversed"
    assert verdicts.loc["va-llm > ft-srcv", "verdict"] == "one seed: not a finding"
    assert verdicts.loc["ft-srcv > in-domain", "verdict"] == "not decisive"
    assert verdicts.loc["va-llm > mdl", "verdict"] == "not decisive after Holm"  # 0.03 x 2 = 0.06
    assert verdicts.loc["va-llm > va-linear", "p_holm"] == 0.05  # 0.01 x 5 tested orderings
    assert verdicts.loc["ft-tgtv > ft-srcv", "verdict"] == "not run"
    assert pd.isna(verdicts.loc["ft-tgtv > ft-srcv", "p_value"])


def test_sato_table_5_tests_back_translation_and_its_orthogonality_to_va_llm():
    from vocabridge.papers import PAPER_TABLES, SATO_TABLE_5
    from vocabridge.report import ordering_verdicts
    from vocabridge.significance import Comparison

    assert SATO_TABLE_5 in PAPER_TABLES
    published = {ours: bleu for _, ours, bleu in SATO_TABLE_5.rows}
    assert round(published["va-llm-bt"] - published["ft-srcv-bt"], 2) == 2.62  # the paper's "2.61 pt" De->En

    def comparison(delta, p_value):
        return Comparison(delta=delta, ci_low=delta - 0.4, ci_high=delta + 0.4, p_value=p_value, seeds=5,
                          reference_seeds=5, std_error=0.2, seed_std=0.4, reference_seed_std=0.4,
                          sentence_variance=0.01)

    found = {("ft-srcv-bt", "ft-srcv"): comparison(1.0, 0.001), ("va-llm-bt", "ft-srcv-bt"): comparison(-0.9, 0.004)}
    verdicts = ordering_verdicts(SATO_TABLE_5, lambda a, b: found.get((a, b))).set_index("ordering")
    assert list(verdicts["verdict"]) == ["holds", "not run", "reversed"]
    assert verdicts.loc["ft-srcv-bt > ft-srcv", "p_holm"] == 0.002  # Holm over the two tested: 0.001 x 2


def test_a_tiny_p_after_holm_reads_as_below_a_bound_not_as_zero():
    from vocabridge.papers import SATO_TABLE_5
    from vocabridge.report import ordering_verdicts, p_text, paper_layout, paper_markdown
    from vocabridge.significance import Comparison

    assert p_text(0.0) == "<0.0001" and p_text(0.02791) == "0.028" and p_text(None) is None
    tiny = Comparison(delta=-2.6, ci_low=-3.2, ci_high=-1.9, p_value=1e-7, seeds=5, reference_seeds=5, std_error=0.2,
                      seed_std=0.2, reference_seed_std=0.3, sentence_variance=0.01, form="paired")
    verdicts = ordering_verdicts(SATO_TABLE_5, lambda a, b: tiny if (a, b) == ("va-llm-bt", "va-llm") else None)
    assert verdicts.set_index("ordering").loc["va-llm-bt > va-llm", "p_holm"] == 0  # CSV: 4 places (p_value whole)
    rows = ["va-llm-bt", "va-llm"]
    seeds = pd.DataFrame([{"group": r, "seeds": 5, "bleu_mean": 9.0, "bleu_std": 0.3} for r in rows])
    text = paper_markdown(SATO_TABLE_5, paper_layout(SATO_TABLE_5, seeds, {r: r for r in rows}), verdicts, rows, {})
    line = next(x for x in text.splitlines() if x.startswith("| va-llm-bt > va-llm |"))
    assert "| <0.0001 |" in line and "| reversed |" in line and "| 0 |" not in line


def test_a_second_test_set_and_the_condition_sit_beside_each_ordering():
    from vocabridge.papers import LIU_TABLE_2
    from vocabridge.report import DIFFER, RowCondition, condition_text, ordering_verdicts, verdict_text
    from vocabridge.significance import Comparison

    def comparison(delta, p_value=0.01, seeds=5):
        return Comparison(delta=delta, ci_low=delta - 0.5, ci_high=delta + 0.5, p_value=p_value, seeds=seeds,
                          reference_seeds=5, std_error=0.3, seed_std=0.5, reference_seed_std=0.5,
                          sentence_variance=0.01, form="paired")

    random = RowCondition(("random",), ("copy",), ("decoder",), ("max 2000 updates, patience 6",), ("AVX512",),
                          (1, 2, 3, 4, 5), ("ctranslate2, beam 5",))
    conditions = {"ft-tgtv-random-dec": random, "ft-srcv": dataclasses.replace(random, sides=("both",)),
                  "avg-eg": dataclasses.replace(random, pretrain_init=("cbow",), seeds=(1, 2, 3)),
                  "in-domain": RowCondition()}  # an older record: nothing known, nothing to differ
    test = {("ft-tgtv-random-dec", "ft-srcv"): comparison(1.0), ("avg-eg", "ft-tgtv-random-dec"): comparison(0.8),
            ("in-domain", "ft-srcv"): comparison(2.0, p_value=0.02)}
    dev = {("ft-tgtv-random-dec", "ft-srcv"): comparison(-1.0, p_value=0.001)}
    verdicts = ordering_verdicts(LIU_TABLE_2, lambda a, b: test.get((a, b)), lambda a, b: dev.get((a, b)),
                                 conditions).set_index("ordering")
    first = verdicts.loc["ft-tgtv-random-dec > ft-srcv"]
    assert first["verdict"] == "holds" and first["verdict (dev books)"] == "reversed"
    assert first["p_holm"] == 0.02 and first["p_holm (dev books)"] == 0.001  # two tested a family; one on dev
    assert first["delta (dev books)"] == -1.0 and first["ci_high (dev books)"] == -0.5
    assert first["condition"] == ("pretrain.init random; shared copy; sides decoder vs both; budget max 2000 "
                                  "updates, patience 6; seeds 1-5; machines AVX512; decoding ctranslate2, beam 5")
    crossed = verdicts.loc["avg-eg > ft-tgtv-random-dec"]
    assert crossed["verdict"] == DIFFER and pd.isna(crossed["p_holm"])
    assert crossed["verdict (dev books)"] == "not measured"  # no dev figure: nothing to mark
    assert "pretrain.init cbow vs random" in crossed["condition"] and "seeds 1-3 vs 1-5" in crossed["condition"]
    assert verdicts.loc["in-domain > ft-srcv", "verdict (dev books)"] == "not measured"
    assert verdicts.loc["in-domain > ft-srcv", "condition"].startswith("pretrain.init ? vs random; shared ? vs copy")
    assert verdicts.loc["patt-eg > att-eg", "verdict (dev books)"] == "not run"
    assert condition_text(RowCondition()) == ("pretrain.init ?; shared ?; sides ?; budget ?; seeds ?; machines ?; "
                                              "decoding ?")
    assert verdict_text(comparison(1.0), None, "ft-srcv", "ft-srcv") == f"+1.00 [0.50, 1.50]: {DIFFER}"


def test_forgetting_pools_each_rows_seeds(tmp_path):
    from vocabridge.report import forgetting_plot, forgetting_table

    cells = pd.DataFrame({"row": ["a", "a", "b", "c"], "bleu": [10.0, 12.0, 8.0, 5.0],
                          "upstream_bleu": [30.0, 20.0, 35.0, None]})
    got = forgetting_table(cells)
    assert got.to_dict("records") == [{"row": "a", "seeds": 2, "bleu": 11.0, "upstream_bleu": 25.0},
                                      {"row": "b", "seeds": 1, "bleu": 8.0, "upstream_bleu": 35.0}]  # c: not measured
    forgetting_plot(got, tmp_path / "forgetting.png")
    assert (tmp_path / "forgetting.png").stat().st_size > 1000


def test_extension_rows_meet_the_replacement_row_of_their_method():
    from vocabridge.report import extension_pairs, extension_table
    from vocabridge.significance import Comparison

    keys = {"va-llm": {"method": "va-llm", "shared": "reproject", "extend": 0, "sides": "both"},
            "va-llm-copy": {"method": "va-llm", "shared": "copy", "extend": 0, "sides": "both"},
            "extend-va-llm": {"method": "va-llm", "shared": "copy", "extend": 2000, "sides": "both"},
            "extend-fwet": {"method": "fwet", "shared": "copy", "extend": 2000, "sides": "both"},  # no partner
            "fwet-decoder": {"method": "fwet", "shared": "copy", "extend": 0, "sides": "decoder"},
            "extend-random": {"method": "ft-tgtv-random", "shared": "copy", "extend": 500, "sides": "both"},
            "random": {"method": "ft-tgtv-random", "shared": "copy", "extend": 0, "sides": "both"}}
    pairs = extension_pairs(keys)
    assert pairs == [("extend-va-llm", "va-llm-copy"), ("extend-random", "random")]  # the same shared preferred
    seen = []

    def compare(a, b):
        seen.append((a, b))
        return Comparison(delta=1.5, ci_low=0.5, ci_high=2.5, p_value=0.01, seeds=5, reference_seeds=5,
                          std_error=0.5, seed_std=0.3, reference_seed_std=0.3, sentence_variance=0.1)

    forgetting = pd.DataFrame({"row": ["extend-va-llm", "va-llm-copy"], "upstream_bleu": [20.0, 12.0]})
    info = {"extend-va-llm": {"tgt_extension": {"appended": 2000, "fertility": {"before": 1.9, "after": 1.4}}}}
    got = extension_table(pairs, compare, forgetting, info)
    assert seen == pairs
    first = got.iloc[0].to_dict()
    assert first["appended_tgt"] == 2000 and first["fertility_tgt"] == "1.9 -> 1.4" and first["verdict"] == "decisive"
    assert first["upstream_bleu_extension"] == 20.0 and first["upstream_bleu_replacement"] == 12.0
    assert got.iloc[1]["upstream_bleu_extension"] is None or pd.isna(got.iloc[1]["upstream_bleu_extension"])


def test_vocabulary_fit_lists_each_plm_once_beside_the_nmt_vocabularies():
    from vocabridge.config import Lang

    def fit(old_size, fertility, unseen, unk):
        return {"vocab_size": {"old": old_size, "new": 500}, "fertility": {"old": fertility, "new": 1.5},
                "unseen_token_rate": unseen, "old_unk_rate": unk}

    mismatch = {"de": fit(800, 2.5, 0.3, 0.01), "en": fit(800, 2.0, 0.2, 0.0)}
    plm = {"vocabulary": "plm", "upstream": "abnet", "vocabulary_fit": {"src": fit(300, 1.8, 0.1, 0.0),
                                                                        "tgt": fit(310, 1.7, 0.05, 0.0)}}
    diagnostics = {"ft-srcv": {"vocabulary": "upstream"}, "abnet": plm, "abnet-2": plm}
    table = vocabulary_fit_table(mismatch, diagnostics, Lang())
    assert list(table["vocabulary"]) == ["upstream (pretrained NMT)", "downstream (adapted)"] * 2 + ["PLM (abnet)"] * 2
    assert table.iloc[-1].to_dict() == {"vocabulary": "PLM (abnet)", "lang": "en", "vocab_size": 310,
                                        "fertility": 1.7, "unseen_token_rate": 0.05, "unk_rate": 0.0}
    assert table.iloc[1]["fertility"] == 1.5 and table.iloc[0]["unseen_token_rate"] == 0.3


def test_a_budget_names_what_its_patience_watches():
    from pathlib import Path

    from vocabridge.grid import CellRecord
    from vocabridge.report import RowCondition

    def budget(**finetune) -> tuple[str, ...]:
        params = {"max_updates": 6000, "patience": 3, "select_by": "bleu", **finetune}
        return RowCondition.of([CellRecord("plm-nmt", 1, {"params": {"finetune": params}}, Path("."))]).budget

    assert budget() == ("max 6000 updates, patience 3",)
    assert budget(patience_on="both") == ("max 6000 updates, patience 3 (dev BLEU or dev loss)",)
    assert budget(patience_on="both", select_by="loss") == ("max 6000 updates, patience 3",)  # the one figure
    assert budget(patience=0) == ("max 6000 updates, no early stopping",)


def test_a_table_that_varies_the_pretrained_models_gives_verdicts_across_them():
    from vocabridge.papers import DUAN_TABLE_4, GUO_TABLE_1
    from vocabridge.report import DIFFER, RowCondition, ordering_verdicts, table_condition
    from vocabridge.significance import Comparison

    def comparison(delta):
        return Comparison(delta=delta, ci_low=delta - 0.5, ci_high=delta + 0.5, p_value=0.001, seeds=5,
                          reference_seeds=5, std_error=0.3, seed_std=0.5, reference_seed_std=0.5,
                          sentence_variance=0.01, form="welch")

    plms = RowCondition(("abnet: pretrained BERTs, no upstream training",), ("copy",), ("both",), (), (),
                        (1, 2, 3, 4, 5))
    conditions = {"plm-nmt": plms, "abnet": plms, "abnet-enc": plms,
                  "mask-predict-upstream": dataclasses.replace(plms, pretrain_init=("abnet: random",)),
                  "in-domain": dataclasses.replace(plms, pretrain_init=("random",))}
    guo = ordering_verdicts(GUO_TABLE_1, lambda a, b: comparison(2.0), None, conditions).set_index("ordering")
    assert guo.loc["abnet > mask-predict-upstream", "verdict"] == "holds"  # the BERTs are what the table varies
    assert "mask-predict" not in {row for pair in GUO_TABLE_1.orderings for row in pair}  # the baseline at zero
    assert guo.loc["abnet > in-domain", "p_holm"] == 0.005  # every ordering is in the family: 5 x 0.001
    assert "(what the table varies)" in table_condition(["abnet", "mask-predict-upstream"], conditions,
                                                        GUO_TABLE_1.varies)
    # rows that decode differently: each verdict's condition and the table's heading say how each row decoded
    decoded = {"abnet": dataclasses.replace(plms, decoding=("mask-predict, beam 5",)),
               "in-domain": dataclasses.replace(plms, pretrain_init=("random",), decoding=("ctranslate2, beam 5",))}
    mixed = ordering_verdicts(GUO_TABLE_1, lambda a, b: comparison(2.0), None, decoded).set_index("ordering")
    assert mixed.loc["abnet > in-domain", "condition"].endswith(
        "; decoding mask-predict, beam 5 vs ctranslate2, beam 5")
    assert table_condition(["abnet", "in-domain"], decoded, True).endswith(
        "decoding mask-predict, beam 5 (abnet); ctranslate2, beam 5 (in-domain)")
    assert DUAN_TABLE_4.varies
    unvaried = dataclasses.replace(GUO_TABLE_1, varies=False)
    crossed = ordering_verdicts(unvaried, lambda a, b: comparison(2.0), None, conditions).set_index("ordering")
    assert crossed.loc["abnet > mask-predict-upstream", "verdict"] == DIFFER
    assert crossed.loc["abnet > abnet-enc", "verdict"] == "holds"  # same condition: a verdict either way


def test_duan_table_3_is_one_holm_family_of_every_claim_it_makes():
    """Each ablation of Duan & Zhao's Table 3 against the full model is one of the table's orderings, so every claim
    the table makes is corrected in one family (the report's orderings file), none in the seed comparisons'."""
    from vocabridge.papers import DUAN_TABLE_3
    from vocabridge.report import ordering_verdicts
    from vocabridge.significance import Comparison

    full = DUAN_TABLE_3.rows[0][1]
    assert {(full, ours) for _, ours, _ in DUAN_TABLE_3.rows[1:]} <= set(map(tuple, DUAN_TABLE_3.orderings))
    p = {ours: 0.001 * (k + 1) for k, (_, ours, _) in enumerate(DUAN_TABLE_3.rows)}

    def compare(better, worse):
        return Comparison(delta=1.0, ci_low=0.5, ci_high=1.5, p_value=p[worse], seeds=5, reference_seeds=5,
                          std_error=0.3, seed_std=0.5, reference_seed_std=0.5, sentence_variance=0.01, form="paired")

    verdicts = ordering_verdicts(DUAN_TABLE_3, compare).set_index("ordering")
    family = len(DUAN_TABLE_3.orderings)
    assert family == 8 and verdicts["p_holm"].notna().sum() == family
    # Holm over the eight: sorted .002 .002 .003 .004 .005 .006 .006 .007, step-down maximum 0.02 from the fourth on
    assert verdicts.loc[f"{full} > plm-nmt-nmt-only", "p_holm"] == 0.02
    assert verdicts.loc[f"{full} > plm-nmt-no-mlm", "p_holm"] == 0.016


def test_guo_et_al_s_speed_claim_gets_a_verdict_per_machine():
    """A row faster than the Transformer in Guo et al.'s Table 1 is tested against it on each machine's cells:
    reversed where ours decodes slower, holds where faster, no finding below 5 cells a side, nothing where the
    machine has no Transformer cell."""
    import pandas as pd

    from vocabridge.papers import GUO_LATENCY_AGAINST, GUO_LATENCY_MS
    from vocabridge.report.verdicts import latency_verdicts

    cpu, gpu = "AMD EPYC (AVX512, bf16 yes)", "Xeon (GPU NVIDIA H200)"
    spread = [0.9, 0.95, 1.0, 1.05, 1.1]
    cells = pd.DataFrame(
        [{"row": "in-domain", "machine": cpu, "decoder": "ctranslate2", "latency_ms": 34 * s} for s in spread]
        + [{"row": "abnet", "machine": cpu, "decoder": "mask-predict", "latency_ms": 311 * s} for s in spread]
        + [{"row": "mask-predict-upstream", "machine": cpu, "decoder": "mask-predict", "latency_ms": 20 * s}
           for s in spread]
        + [{"row": "abnet-enc", "machine": cpu, "decoder": "transformers", "latency_ms": 212 * s} for s in spread[:3]]
        + [{"row": "abnet", "machine": gpu, "decoder": "mask-predict", "latency_ms": 116.0}])
    assert GUO_LATENCY_AGAINST == "in-domain"
    out = latency_verdicts(cells, GUO_LATENCY_MS, GUO_LATENCY_AGAINST).set_index("claim")
    assert set(out["machine"]) == {cpu}  # no Transformer cell on the GPU: no claim there
    abnet = out.loc["abnet faster than in-domain"]
    assert abnet["verdict"] == "reversed" and abnet["published_speedup"] == 2.38
    assert abnet["ci_low"] < round(34 / 311, 2) < abnet["ci_high"] < 1
    assert out.loc["mask-predict-upstream faster than in-domain", "verdict"] == "holds"
    assert out.loc["abnet-enc faster than in-domain", "verdict"] == "fewer than 5 seeds a side: not a finding"
    assert out.loc["abnet-enc faster than in-domain", "seeds"] == "3/5"
    assert "mask-predict faster than in-domain" not in out.index  # no cells of that row
    assert "decoding mask-predict vs ctranslate2" in abnet["condition"]


def test_a_speed_claim_against_a_row_without_a_published_latency_is_a_one_line_error(tmp_path):
    import yaml

    from vocabridge.papers import PAPERS_FILE, load_papers

    data = yaml.safe_load(PAPERS_FILE.read_text())
    data["guo2020_table1"]["latency_against"] = "ft-srcv"
    path = tmp_path / "papers.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"guo2020_table1.latency_against: 'ft-srcv' has no latency_ms"):
        load_papers(path)
