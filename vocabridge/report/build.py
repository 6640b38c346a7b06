"""`grid_report`: the whole report of a study from its cell records, and `write_report`, which writes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from vocabridge.grid import CellRecord, Gathered
from vocabridge.papers import GUO_LATENCY_AGAINST, GUO_LATENCY_MS, PAPER_TABLES
from vocabridge.report.cells import cell_line, read_curve, unseen_rate
from vocabridge.report.conditions import (
    DEV,
    DIFFER,
    HeldOut,
    RowCondition,
    condition_text,
    conditions_differ,
    seed_list,
)
from vocabridge.report.markdown import speed_and_plm_markdown, study_markdown, test_sets_sentence
from vocabridge.report.plots import (
    differences_plot,
    forgetting_plot,
    learning_curves_plot,
    plm_curves_plot,
    upstream_curves_plot,
)
from vocabridge.report.tables import (
    COLUMNS,
    build_table,
    decoding_speed_table,
    extension_pairs,
    extension_table,
    forgetting_table,
    group_curves,
    mean_of,
    plm_summary,
    rank_correlations,
    seed_comparisons_table,
    seeds_table,
    upstream_trainings_summary,
    vocabulary_fit_table,
)
from vocabridge.report.verdicts import (
    holm_verdict,
    latency_verdicts,
    ordering_verdicts,
    paper_layout,
    verdict_text,
)
from vocabridge.significance import (
    Comparison,
    compare_statistics,
    corpus_bleu,
    holm,
    mean_interval_statistics,
    sentence_statistics,
)


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
                plms: dict[str, tuple[pd.DataFrame, dict]] | None = None, documents: bool = False,
                upstreams: dict[str, tuple[pd.DataFrame, dict]] | None = None) -> Built:
    """The report of a grid from its cell records: `rows` the grid's rows in order, `refs` the test references the
    records' hypotheses were scored against, `cfg` the report settings (vocabridge.config.Report: baseline and
    also_against are row names), `seeds` the grid's seeds (cells not found are listed as not finished),
    `clusters` each test sentence's book, `adapted` the rows that put the downstream vocabulary on the base model
    (their zero-shot figures compare), `mismatch` the mismatch stage's figures per language and `lang` the
    direction (vocabulary fit), `upstream_sentences` how many upstream test pairs forgetting is measured on,
    `test_books` the test set's books as the report names them (None: the distinct `clusters`), `heldout` the
    second test set (None: none; a record counts on it when its dev_hyp.txt has a line per sentence and its
    `heldout_dev_test.digest` is the set's), `plms` the study's own BERTs (language -> their curve.csv and metrics;
    None: none), `documents` whether the clusters are a user's documents (else the Bible's books), `upstreams` the
    upstream trainings of its AB-Net-family models (abnet@NAME -> their dev curve and metrics; None: none)."""
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
                "seed_list": seed_list([r.seed for r in members]), "bleu_mean": mean_of(part, "bleu"),
                "ci_low": round(interval.low, 2), "ci_high": round(interval.high, 2),
                "bleu_std": round(float(scores.std(ddof=1)), 2) if len(scores) > 1 else None,
                "chrf": mean_of(part, "chrf"), "ter": mean_of(part, "ter"), "updates": mean_of(part, "updates", 0),
                "best_update": mean_of(part, "best_update", 0),
                "best_at_end": f"{int(part['best_at_end'].sum())}/{len(part)}",
                "budget_stops": f"{int(part['budget_stop'].sum())}/{len(part)}",
                "upstream_bleu": mean_of(part, "upstream_bleu"), "machines": part["machine"].nunique(),
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
                      **{k: mean_of(part, k, 4) for k in ("src_vocab", "tgt_vocab", "unseen_token_rate",
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
    shared_vocab = [row for row in by_row if row in adapted and (mean_of(cells[cells["row"] == row], "updates") or 0)]
    correlations = rank_correlations(table, shared_vocab)
    seed_tests = seed_comparisons_table(tests, cfg.target_difference, dev_tests)
    fit = vocabulary_fit_table(mismatch, diagnostics, lang) if mismatch_tgt is not None else None

    speed = decoding_speed_table(cells, baseline)
    latency = latency_verdicts(cells, GUO_LATENCY_MS, GUO_LATENCY_AGAINST)
    plm_lines = plm_summary(plms or {})
    plm_curves = pd.concat([curve.assign(language=lang) for lang, (curve, _) in (plms or {}).items()],
                           ignore_index=True) if plms else pd.DataFrame(columns=["language", "step"])
    upstream_lines = upstream_trainings_summary(upstreams or {})
    upstream_curves = pd.concat([curve.assign(model=name)[["model", *curve.columns]]
                                 for name, (curve, _) in (upstreams or {}).items()],
                                ignore_index=True) if upstreams else pd.DataFrame(columns=["model", "step"])
    tables = {"report": table, "rows": rows_table, "cells": cells, "seeds": seeds_frame,
              "seed_comparisons": seed_tests, "correlations": correlations, "learning_curves": grouped_curves,
              "forgetting": forgetting, "extension": extension, "decoding_speed": speed,
              "latency_verdicts": latency, "plms": plm_lines,
              "plm_curves": plm_curves, "upstream_trainings": upstream_lines, "upstream_curves": upstream_curves}
    for paper, layout, verdicts in papers:
        tables[f"paper_{paper.key}"], tables[f"paper_{paper.key}_orderings"] = layout, verdicts
    sets = test_sets_sentence(len(refs), test_books if test_books is not None else
                              sorted(set(clusters)) if clusters else None, heldout, dev_by_row, len(records),
                              documents)
    markdown = study_markdown(study, rows, by_row, cells, rows_table, tests, papers, seed_tests, grouped_curves,
                         threshold, cfg, clusters, forgetting, extension, correlations, shared_vocab, fit,
                         upstream_sentences, diagnostics, missing_rows, left_out, seeds, baseline, sets, conditions,
                         more=speed_and_plm_markdown(speed, plm_lines, baseline, latency, upstream_lines),
                         documents=documents)
    return Built(markdown, tables, grouped_curves, threshold, missing_rows, left_out)



def _on_heldout(record: CellRecord, heldout: HeldOut | None) -> bool:
    """Whether a cell has a figure on the second test set: its dev_hyp.txt, one line per sentence, of this set."""
    return (heldout is not None and len(record.dev_hyps) == len(heldout.refs) > 0
            and (record.data.get("heldout_dev_test") or {}).get("digest") == heldout.digest)



def _heldout_bleu(record: CellRecord, stats: np.ndarray) -> float:
    """A cell's BLEU on the second test set: its record's (evaluate's sacrebleu), else from its statistics."""
    bleu = ((record.data.get("metrics") or {}).get("heldout_dev") or {}).get("bleu")
    return float(bleu) if bleu is not None else float(corpus_bleu(stats.sum(0)))



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
    if len(built.tables["upstream_curves"]):
        upstream_curves_plot(built.tables["upstream_curves"], built.tables["upstream_trainings"],
                             folder / "upstream_curves.png")
