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
(`pretrain_init`) is shown but never made a verdict.

The package, by what it makes: `build` (grid_report, write_report), `conditions` (a row's condition, the second
test set), `cells` (a cell's line), `tables`, `plots`, `verdicts` (the papers' orderings, Holm), `markdown`; the
papers' published tables are data (vocabridge/data/papers.yaml, vocabridge.papers)."""

from __future__ import annotations

from vocabridge.report.build import Built, grid_report, write_report
from vocabridge.report.cells import cell_line, machine_name, read_curve, unseen_rate
from vocabridge.report.conditions import (
    DEV,
    DEV_SET,
    DIFFER,
    HeldOut,
    RowCondition,
    condition_text,
    conditions_differ,
    seed_list,
    table_condition,
)
from vocabridge.report.markdown import paper_markdown, test_sets_sentence
from vocabridge.report.plots import (
    VERDICT_COLOURS,
    differences_plot,
    forgetting_plot,
    learning_curves_plot,
    plm_curves_plot,
)
from vocabridge.report.tables import (
    build_table,
    curve_summary,
    extension_pairs,
    extension_table,
    forgetting_table,
    group_curves,
    rank_correlations,
    seed_comparisons_table,
    seeds_table,
    to_markdown,
    vocabulary_fit_table,
)
from vocabridge.report.verdicts import holm_verdict, ordering_verdicts, p_text, paper_layout, verdict, verdict_text

__all__ = [
    "Built", "DEV", "DEV_SET", "DIFFER", "HeldOut", "RowCondition", "VERDICT_COLOURS", "build_table", "cell_line",
    "condition_text", "conditions_differ", "curve_summary", "differences_plot", "extension_pairs",
    "extension_table", "forgetting_plot", "forgetting_table", "grid_report", "group_curves", "holm_verdict",
    "learning_curves_plot", "machine_name", "ordering_verdicts", "p_text", "paper_layout", "paper_markdown",
    "plm_curves_plot", "rank_correlations", "read_curve", "seed_comparisons_table", "seed_list", "seeds_table",
    "table_condition", "test_sets_sentence", "to_markdown", "unseen_rate", "verdict", "verdict_text",
    "vocabulary_fit_table", "write_report",
]
