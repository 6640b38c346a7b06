"""Stage report: the study's report from its cell records (vocabridge.report.grid_report).

It reads the cells committed under results/PROFILE/cells (other sessions' and machines') and the workspace's own
data/cells (which win for the same cell), keeps those that ran the grid's rows with today's knobs on today's test
set, and writes data/reports/results: report.md (the papers' tables with their verdicts, one line per grid row,
the plots, where the cells came from), the CSVs (cells.csv: one line per cell) and the plots. The second test set
is the dev verses of the books the records' `heldout_dev_test` names (data/corpora/downstream/dev.ids), checked
against its digest. The logic lives in vocabridge/report.py; this entry point only finds the files.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from stages._args import stage_args
from vocabridge import workspace as paths
from vocabridge.corpora.bible import BOOKS
from vocabridge.corpora.user import read_text_lines
from vocabridge.entry import run
from vocabridge.errors import InputError
from vocabridge.fileio import atomic_dir
from vocabridge.grid import text_digest
from vocabridge.report import HeldOut, grid_report, write_report
from vocabridge.rows import gather
from vocabridge.significance import clusters_from_ids
from vocabridge.transfer import get_method, knobs_for

RESULTS = Path("results")


def main(argv: list[str]) -> None:
    params = stage_args(__doc__, argv)
    lang, rows = params.lang, params.rows
    refs = read_text_lines(paths.CORPORA / "downstream" / f"test.{lang.tgt}")
    mismatch = json.loads((paths.REPORTS / "mismatch.json").read_text(encoding="utf-8"))
    gathered = gather(params, [RESULTS / params.profile / "cells", paths.CELLS], refs)
    adapted = {row for row in rows  # new tokens on the base model: their zero-shot figures compare
               if get_method(row, rows).vocabulary == "downstream" and knobs_for(row, rows).upstream == "base"}
    test_ids = paths.CORPORA / "downstream" / "test.ids"
    bible = params.prepare.downstream.recipe != "files"
    test_books = book_names(clusters_from_ids(read_text_lines(test_ids)), bible) if test_ids.is_file() else None
    built = grid_report(gathered, list(rows), refs, params.report, seeds=params.seeds,
                        clusters=book_clusters(len(refs)), adapted=adapted, mismatch=mismatch, lang=lang,
                        upstream_sentences=params.evaluate.upstream_sentences, study=params.profile,
                        test_books=test_books, heldout=heldout_set(gathered.records, lang.tgt, bible),
                        plms=study_plms(params.plms), documents=not bible,
                        upstreams=study_upstreams(params.abnets))
    with atomic_dir(paths.REPORTS / "results") as tmp:
        write_report(built, tmp)
    print(built.markdown)


def study_plms(languages) -> dict[str, tuple[pd.DataFrame, dict]]:
    """Each `plms` language's BERT as the plm stage left it: its learning curve and metrics (languages whose
    stage has not run are left out). Not a dependency of its own in dvc.yaml: every row's stage depends on
    data/models/plm, so new BERTs mean new cells (data/cells), and a new report."""
    found = {}
    for code in languages:
        curve, metrics = paths.plm_outputs(code)
        if curve.is_file() and metrics.is_file():
            found[code] = (pd.read_csv(curve), json.loads(metrics.read_text(encoding="utf-8")))
    return found


def study_upstreams(abnets) -> dict[str, tuple[pd.DataFrame, dict]]:
    """Each `abnets` entry's upstream training as the abnet stage left it: its dev curve (step, dev_bleu,
    dev_loss) and metrics (entries without an upstream training, or whose stage has not run, left out). Not a
    dependency of its own in dvc.yaml, as the BERTs are not: the rows' stages depend on data/models/upstream."""
    found = {}
    for name, spec in abnets.items():
        plots, metrics = paths.abnet_outputs(name)
        if not (spec.upstream and metrics.is_file() and (plots / "dev_bleu.csv").is_file()):
            continue
        summary = json.loads(metrics.read_text(encoding="utf-8"))
        if summary.get("updates"):
            curve = pd.read_csv(plots / "dev_bleu.csv")
            if (plots / "dev_loss.csv").is_file():
                curve = curve.merge(pd.read_csv(plots / "dev_loss.csv"), on="step", how="left")
            found[name] = (curve, summary)
    return found


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


def heldout_set(records, tgt: str, bible: bool = True) -> HeldOut | None:
    """The second test set the records were scored on: a user's second_test.TGT (its documents from
    second_test.ids), else the dev.TGT lines of the books their `heldout_dev_test` names, in corpus order, each
    with its book; the (digest, books) most records have, where its references still have that digest. None where
    no record has dev_hyp.txt, or the corpus has neither file or changed."""
    found = Counter((test["digest"], tuple(test["books"])) for r in records
                    if r.dev_hyps and isinstance(test := r.data.get("heldout_dev_test"), dict)
                    and "digest" in test and test.get("books"))
    corpus = paths.CORPORA / "downstream"
    name = "second_test" if (corpus / f"second_test.{tgt}").is_file() else "dev"
    ids_file, refs_file = corpus / f"{name}.ids", corpus / f"{name}.{tgt}"
    if not found or not (refs_file.is_file() and (ids_file.is_file() or name == "second_test")):
        return None
    dev = read_text_lines(refs_file)
    ids = read_text_lines(ids_file) if ids_file.is_file() else [f"second_test.1.{i}" for i in range(1, len(dev) + 1)]
    if len(ids) != len(dev):
        raise InputError(f"{ids_file}: {len(ids)} ids for {len(dev)} sentences of {refs_file}; run `dvc repro "
                         "prepare`")
    books = clusters_from_ids(ids)
    for (digest, held), cells in found.most_common():
        keep = [i for i, book in enumerate(books) if book in held]
        refs = [dev[i] for i in keep]
        if text_digest(refs) == digest:
            clusters = [books[i] for i in keep]
            return HeldOut(refs, clusters if len(set(clusters)) > 1 else None, digest, book_names(held, bible))
        print(f"report: {cells} record(s) were scored on the second test set of {', '.join(held)}, which "
              f"{refs_file} no longer has as it was ({digest} != {text_digest(refs)}): no second test set from "
              "them", file=sys.stderr)
    return None


def book_names(books, bible: bool = True) -> list[str]:
    """Book numbers (the Bible recipe's ids) as names, in order: '43' -> 'John'; other ids (and a user's
    documents, `bible` false) as they are."""
    distinct = sorted(set(books), key=lambda b: (not b.isdigit(), int(b) if b.isdigit() else 0, b))
    return [BOOKS[int(b) - 1] if bible and b.isdigit() and 0 < int(b) <= len(BOOKS) else b for b in distinct]


if __name__ == "__main__":
    run(main)
