"""The report's Markdown: the study's summary, the papers' tables with our rows beside them, speed and BERTs,
machines, split seeds and where the cells came from."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from vocabridge.grid import CellRecord
from vocabridge.papers import PaperTable
from vocabridge.report.conditions import DEV, DIFFER, HeldOut, RowCondition, seed_list, table_condition
from vocabridge.report.tables import neighbours_markdown, to_markdown
from vocabridge.report.verdicts import p_text
from vocabridge.significance import (
    MIN_SEEDS,
)


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



def study_markdown(study, rows, by_row, cells, rows_table, tests, papers, seed_tests, grouped_curves, threshold, cfg,
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
              f"verdict (`{DIFFER}`) and in no family. Each ordering's condition names both rows' settings, "
              f"how each decoded its test set among them (the NMT rows with CTranslate2, the AB-Net family and "
              f"the PLM-sponsored model with their own search), `A vs B` where they differ.")
    parts = [lead]
    if papers:
        parts.append(
            "## The papers' tables beside ours\n\nEach published row (BLEU as published, on the paper's data) with "
            "the row of ours that runs it: mean test BLEU over its seeds and their spread. Below each table, "
            "every ordering the paper reports, tested on our rows (family: the table's orderings): holds "
            "(decisive after Holm, same sign), reversed (the same, other sign), not decisive (after Holm), too "
            f"few seeds (not a finding) or not run. {method}\n\n"
            + "\n\n".join(paper_markdown(paper, layout, verdicts, rows, conditions or {})
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



def speed_and_plm_markdown(speed: pd.DataFrame, plms: pd.DataFrame, baseline: str,
                           latency: pd.DataFrame | None = None, upstreams: pd.DataFrame | None = None) -> list[str]:
    """The decoding-speed section (where cells measured latency), with Guo et al.'s speed claim as verdicts, the
    BERTs' section (where the study made or took BERTs) and the AB-Net family's upstream trainings (where an
    abnet@NAME trained on the upstream pairs)."""
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
    if latency is not None and len(latency):
        parts.append(
            "### Guo et al.'s speed claim, as verdicts\n\nEach row that Guo et al.'s Table 1 puts below the "
            "Transformer's latency decodes a sentence faster than it, on each machine: speedup, the ratio of the "
            "cells' geometric mean latencies (the Transformer's ms over the row's), with a 95% Welch t interval on "
            "log latency, Holm over the machine's claims; holds / reversed as the orderings' verdicts (the interval "
            "excludes 1, p_holm <= 0.05, 5 cells a side). Each cell was timed beside whatever else its machine ran "
            "(`latency_verdicts.csv`).\n\n" + to_markdown(latency))
    if len(plms):
        gain = next(c for c in plms.columns if c.startswith("accuracy_gain_last_"))
        parts.append(
            "## The pretrained language models\n\nThe BERT of each language (plm@LANG) that the AB-Net and "
            "PLM-sponsored rows start from: the update kept and its masked-piece accuracy on held-out downstream "
            f"dev text; {gain}, what the last {gain.rsplit('_', 1)[1]} updates added (near 0: the curve has "
            "flattened); stopped: an early stop (plm.train.patience) or the budget (plm.train.max_updates). The "
            "curves: `plm_curves.csv`, `plm_curves.png`.\n\n![The BERTs' learning curves](plm_curves.png)\n\n"
            + to_markdown(plms))
    if upstreams is not None and len(upstreams):
        parts.append(
            "## Upstream trainings of the AB-Net family\n\nThe models of abnet@NAME trained on the upstream pairs "
            "before their rows fine-tune them (`abnets.NAME.upstream: true`): dev BLEU on the upstream dev pairs "
            "(abnet.dev_decoding) at each evaluation, the update kept (best_update, by abnet.train.select_by) and "
            "the dev BLEU of the first evaluation beside it (a rise from it: the model learned); best_at_end true: "
            "the kept update is the last one, not converged where the budget stopped it; stopped_by: patience (an "
            "early stop, abnet.train.patience) or cap (the budget, abnet.train.max_updates). The curves: "
            "`upstream_curves.csv`, `upstream_curves.png`."
            "\n\n![The upstream trainings' dev curves](upstream_curves.png)\n\n" + to_markdown(upstreams))
    return parts



SHOWN_ORDERING = ["ordering", "published_delta", "delta", "ci_low", "ci_high", "p_holm", "seeds", "form", "verdict",
                  f"delta {DEV}", f"verdict {DEV}", "condition"]  # report.md; the CSV has every column



def paper_markdown(paper: PaperTable, layout: pd.DataFrame, verdicts: pd.DataFrame, rows: Sequence[str],
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
                      "seeds": seed_list(part["seed"].unique().tolist()), "fine-tunes": len(tuned),
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
                                   "seeds": seed_list(part["seed"].unique().tolist())}
                                  for key, part in cells.groupby(cells[column].fillna("unknown"), sort=True)])
            return to_markdown(table)

        out += ["### Cells folders (later folders win for the same cell)", by("cells_folder", "folder"),
                "### Machines, and what the cells cost on each", machines_table(cells),
                "### Upstream models (sha256 of the weights the cells started from)",
                by("upstream_sha256", "upstream_sha256", lambda v: v[:12]),
                "### Seeds split across upstream models", split_seeds_markdown(cells),
                "### Code commits", by("commit", "commit", lambda v: v[:12] + ("+" if v.endswith("+") else ""))]
    unfinished = [f"{row}: seed(s) {seed_list(sorted(set(seeds) - {r.seed for r in by_row[row]}))}"
                  for row in by_row if set(seeds) - {r.seed for r in by_row[row]}]
    out.append("### Not finished\n\n" + (
        "\n".join(f"- {line}" for line in [*(f"{row}: no finished cell" for row in missing_rows), *unfinished])
        or "Every cell of the grid's rows and seeds is finished."))
    out.append("### Records left out\n\n" + ("\n".join(f"- `{path}`: {reason}" for path, reason in left_out)
                                            or "None."))
    return "\n\n".join(out) + "\n"
