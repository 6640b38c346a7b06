"""A study that adds up: two sets of synthetic cell records, from two machines and two upstream models, make one
report (vocabridge.report.grid_report), and committing cells adds and never deletes (vocabridge.grid)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import sacrebleu

from vocabridge.config import Report
from vocabridge.grid import commit_cells, knobs_digest, read_cells, text_digest
from vocabridge.report import grid_report, write_report

WORDS = ("and the word was with god and the word was god in the beginning the same was with god all things were "
         "made by him and without him was not any thing made that was made in him was life and the life was the "
         "light of men").split()
REFS = [" ".join(WORDS[(3 * i) % 40:(3 * i) % 40 + 6 + i % 5]) for i in range(36)]
BOOKS = [f"{43 + i // 6}.1.{i % 6 + 1}" for i in range(36)]  # six books of six verses
ROWS = ["in-domain", "ft-srcv", "va-llm", "ft-tgtv-random"]  # in-domain: no cell finished
KNOBS = {row: {"method": row, "train_pairs": None, "upstream": "base"} for row in ROWS}
AVX2 = {"cpu": "Test Xeon", "capability": "AVX2", "bf16_native": False, "threads": 2, "cores": 2, "gpu": None}
AVX512 = {"cpu": "Test Xeon Platinum", "capability": "AVX512", "bf16_native": True, "threads": 4, "cores": 4,
          "gpu": None}
UP_A, UP_B, UP_C = "a" * 64, "b" * 64, "c" * 64
QUALITY = {"ft-srcv": 4, "va-llm": 6, "ft-tgtv-random": 5}  # every N-th word damaged: higher is better


def hypotheses(row: str, seed: int) -> list[str]:
    """A system of the row's quality, a little different per seed (which sentences are damaged)."""
    every = QUALITY[row]
    return [" ".join("x" if (j + seed * (i % 3)) % every == 0 else w for j, w in enumerate(ref.split()))
            for i, ref in enumerate(REFS)]


def write_cell(folder: Path, row: str, seed: int, machine: dict, upstream: str, knobs_digest_: str | None = None,
               test_digest: str | None = None) -> Path:
    """A finished cell as stages/evaluate.py writes it: record.json, hyp.txt and curve.csv."""
    hyps = hypotheses(row, seed)
    cell = folder / row / f"s{seed}"
    cell.mkdir(parents=True)
    bleu = sacrebleu.corpus_bleu(hyps, [REFS]).score
    record = {"version": 1, "study": "test", "row": row, "seed": seed, "cell": f"{row}-{seed}", "method": row,
              "knobs": KNOBS[row], "knobs_digest": knobs_digest_ or knobs_digest(KNOBS[row]),
              "upstream": {"name": "base", "sha256": upstream},
              "test": {"sentences": len(REFS), "digest": test_digest or text_digest(REFS)}, "upstream_test": None,
              "metrics": {"bleu": round(bleu, 2), "chrf": 50.0, "ter": 60.0, "upstream": {"bleu": 20.0 + seed}},
              "finetune": {"updates": 300, "best_update": 300 if seed % 2 else 250, "seed": seed},
              "transfer": {"dev_bleu": 1.0, "dev_perplexity": 900.0}, "diagnostics": {},
              "params": {"train_pairs": 1000}, "machine": machine,
              "commit": "1234567890abcdef" + ("+" if seed > 3 else ""), "finished": "2025-01-01T00:00:00"}
    (cell / "record.json").write_text(json.dumps(record), encoding="utf-8")
    (cell / "hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (cell / "curve.csv").write_text(f"step,dev_bleu,dev_loss\n0,1.0,5.0\n150,{5 + seed},3.0\n300,{8 + seed},2.5\n")
    return cell


@pytest.fixture
def two_sessions(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Set A (a committed study: seeds 1-3, an AVX2 machine, upstream A) and set B (a later workspace: seeds 4-5,
    an AVX512 machine, upstream B); ft-tgtv-random's seed 4 started from a third upstream model, and one va-llm
    record ran other knobs."""
    a, b = tmp_path / "results" / "cells", tmp_path / "data" / "cells"
    for row in ("ft-srcv", "va-llm", "ft-tgtv-random"):
        for seed in (1, 2, 3):
            write_cell(a, row, seed, AVX2, UP_A)
    for row in ("ft-srcv", "va-llm"):
        for seed in (4, 5):
            write_cell(b, row, seed, AVX512, UP_B)
    write_cell(b, "ft-tgtv-random", 4, AVX512, UP_C)
    other = write_cell(b, "va-llm", 6, AVX512, UP_B, knobs_digest_="0" * 16)
    return a, b, other


def test_two_sets_of_cells_make_one_report(two_sessions, tmp_path):
    a, b, other = two_sessions
    gathered = read_cells([a, b], {row: knobs_digest(KNOBS[row]) for row in ROWS}, test_digest=text_digest(REFS))
    cfg = Report(baseline="ft-srcv", also_against=["ft-tgtv-random"], bootstrap_samples=200)
    built = grid_report(gathered, ROWS, REFS, cfg, seeds=[1, 2, 3, 4, 5], clusters=[b.split(".")[0] for b in BOOKS],
                        study="test")
    rows = built.tables["rows"].set_index("row")
    assert rows.loc["ft-srcv", "seeds"] == rows.loc["va-llm", "seeds"] == 5  # both sessions' seeds count
    assert rows.loc["ft-tgtv-random", "seeds"] == 4 and rows.loc["ft-srcv", "seed_list"] == "1-5"
    assert rows.loc["va-llm", "best_at_end"] == "3/5" and rows.loc["va-llm", "best_update"] == 280
    assert rows.loc["va-llm", "ci_low"] < rows.loc["va-llm", "bleu_mean"] < rows.loc["va-llm", "ci_high"]
    assert rows.loc["va-llm", "machines"] == 2 and rows.loc["va-llm", "upstream_models"] == 2
    # pairs only where the keys (seed, upstream sha256) match: ft-tgtv-random's seed 4 has upstream C
    tests = built.tables["seed_comparisons"].set_index(["row", "against"])["form"]
    assert tests["va-llm", "ft-srcv"] == "paired"
    assert tests["ft-tgtv-random", "ft-srcv"] == tests["va-llm", "ft-tgtv-random"] == "unpaired"
    assert rows.loc["va-llm", "verdict_vs_ft-srcv"] == "better"  # 5 paired seeds, one quality apart
    assert "(Welch)" in rows.loc["va-llm", "vs_ft-tgtv-random"]
    # the record with other knobs is left out with its reason; in-domain has no cell: missing, not an error
    assert [(path, "other knobs" in reason) for path, reason in built.left_out] == [(other, True)]
    assert built.missing_rows == ["in-domain"]
    cells = built.tables["cells"]
    assert len(cells) == 14 and set(cells["capability"]) == {"AVX2", "AVX512"}
    text = built.markdown
    for shown in ("Test Xeon (AVX2, bf16 no)", "Test Xeon Platinum (AVX512, bf16 yes)", UP_A[:12], UP_B[:12],
                  UP_C[:12], str(a), str(b), "in-domain: no finished cell", "ft-tgtv-random: seed(s) 5",
                  "other knobs", "1234567890ab+"):
        assert shown in text, shown
    # the answer first: the papers' tables, one line per grid row, the plots, then the appendix
    order = [text.index(h) for h in ("## The papers' tables", "## One line per grid row", "## Plots",
                                     "## Appendix: where the cells came from")]
    assert order == sorted(order)
    sato = built.tables["paper_sato2020_table3_orderings"].set_index("ordering")
    assert sato.loc["va-llm > ft-srcv", "form"] == "paired" and sato.loc["va-llm > ft-srcv", "seeds"] == "5/5"
    assert sato.loc["ft-tgtv > ft-srcv", "verdict"] == "not run"
    write_report(built, tmp_path)
    for name in ("report.md", "cells.csv", "rows.csv", "report.csv", "seed_comparisons.csv", "bleu.png",
                 "learning_curves.png", "forgetting.png", "paper_sato2020_table3.csv"):
        assert (tmp_path / name).is_file(), name
    report = pd.read_csv(tmp_path / "report.csv")
    ours = report[report["source"] == "vocabridge"].set_index("method")
    assert list(ours.index) == ["ft-srcv", "va-llm", "ft-tgtv-random"] and ours.loc["ft-srcv", "delta_bleu"] == 0


def test_records_of_another_test_set_are_left_out(tmp_path):
    folder = tmp_path / "cells"
    write_cell(folder, "ft-srcv", 1, AVX2, UP_A, test_digest="f" * 16)
    write_cell(folder, "ft-srcv", 2, AVX2, UP_A)
    gathered = read_cells([folder], {"ft-srcv": knobs_digest(KNOBS["ft-srcv"])}, test_digest=text_digest(REFS))
    built = grid_report(gathered, ["ft-srcv"], REFS, Report(bootstrap_samples=50), seeds=[1, 2])
    assert len(built.tables["cells"]) == 1 and "another test set" in built.left_out[0][1]
    assert "ft-srcv: seed(s) 1" in built.markdown


def test_no_finished_cell_is_a_report_that_says_so(tmp_path):
    built = grid_report(read_cells([tmp_path / "none"], {"ft-srcv": "x"}), ["ft-srcv"], REFS, Report())
    assert built.missing_rows == ["ft-srcv"] and "No finished cells yet" in built.markdown
    write_report(built, tmp_path)
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "bleu.png").exists()


def test_committing_cells_adds_and_never_deletes(two_sessions, tmp_path):
    a, b, _ = two_sessions
    target = tmp_path / "committed"
    first = commit_cells(a, target)
    assert len(first) == 9 and commit_cells(a, target) == []  # the same cells again: nothing to copy
    added = commit_cells(b, target)
    assert sorted(c.name for c in added) == ["ft-srcv-4", "ft-srcv-5", "ft-tgtv-random-4", "va-llm-4", "va-llm-5",
                                             "va-llm-6"]
    assert (target / "ft-srcv" / "s1" / "hyp.txt").is_file()  # set A's cells stay beside set B's
    assert len(list(target.glob("*/s*/record.json"))) == 15
    assert (target / "va-llm" / "s4" / "curve.csv").read_text() == (b / "va-llm" / "s4" / "curve.csv").read_text()
