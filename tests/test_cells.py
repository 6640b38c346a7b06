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
from vocabridge.report import DIFFER, HeldOut, grid_report, machine_name, write_report

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
QUALITY = {"ft-srcv": 4, "va-llm": 6, "ft-tgtv-random": 5, "va-linear": 5}  # every N-th word damaged: higher is
#                                                                            better
SHARED = {"ft-srcv": "copy", "va-llm": "reproject", "ft-tgtv-random": "copy", "va-linear": "reproject"}
KNOBS |= {"va-linear": {"method": "va-linear", "train_pairs": None, "upstream": "base"}}
# the second test set: the dev verses of two books no checkpoint selection read
DEV_REFS = [" ".join(WORDS[(5 * i + 2) % 40:(5 * i + 2) % 40 + 5 + i % 4]) for i in range(24)]
DEV_BOOKS = ["44"] * 12 + ["45"] * 12
HELDOUT = HeldOut(DEV_REFS, DEV_BOOKS, text_digest(DEV_REFS), ["Acts", "Romans"])


def hypotheses(row: str, seed: int, refs: list[str] = REFS) -> list[str]:
    """A system of the row's quality, a little different per seed (which sentences are damaged)."""
    every = QUALITY[row]
    return [" ".join("x" if (j + seed * (i % 3)) % every == 0 else w for j, w in enumerate(ref.split()))
            for i, ref in enumerate(refs)]


def write_cell(folder: Path, row: str, seed: int, machine: dict, upstream: str, knobs_digest_: str | None = None,
               test_digest: str | None = None, dev: str | None = None, init: str | None = "random") -> Path:
    """A finished cell as stages/evaluate.py writes it: record.json, hyp.txt and curve.csv; with `dev` (the
    digest its held-out dev set had) dev_hyp.txt and heldout_dev_test; with `init` the row stamp's `condition`
    (None: an older record without one)."""
    hyps = hypotheses(row, seed)
    cell = folder / row / f"s{seed}"
    cell.mkdir(parents=True)
    bleu = sacrebleu.corpus_bleu(hyps, [REFS]).score
    record = {"version": 1, "study": "test", "row": row, "seed": seed, "cell": f"{row}-{seed}", "method": row,
              "knobs": KNOBS[row] | {"shared": SHARED[row], "sides": "both"},
              "knobs_digest": knobs_digest_ or knobs_digest(KNOBS[row]),
              "upstream": {"name": "base", "sha256": upstream},
              "test": {"sentences": len(REFS), "digest": test_digest or text_digest(REFS)}, "upstream_test": None,
              "metrics": {"bleu": round(bleu, 2), "chrf": 50.0, "ter": 60.0, "upstream": {"bleu": 20.0 + seed},
                          "decoder": "ctranslate2", "beam": 5},
              "finetune": {"updates": 300 if seed % 2 else 280, "best_update": 300 if seed % 2 else 250, "seed": seed,
                           "train_seconds": 600.0 + 60 * seed, "threads": 1},
              "transfer": {"dev_bleu": 1.0, "dev_perplexity": 900.0}, "diagnostics": {},
              "params": {"train_pairs": 1000, "finetune": {"max_updates": 300, "patience": 6}}, "machine": machine,
              "commit": "1234567890abcdef" + ("+" if seed > 3 else ""), "finished": "2025-01-01T00:00:00"}
    if init is not None:
        record["condition"] = {"pretrain_init": init, "upstream": "base", "upstream_recipe": None,
                               "shared": SHARED[row], "sides": "both"}
    if dev is not None:
        dev_hyps = hypotheses(row, seed, DEV_REFS)
        record["metrics"]["heldout_dev"] = {"test_sentences": len(DEV_REFS), "books": ["44", "45"],
                                            "bleu": round(sacrebleu.corpus_bleu(dev_hyps, [DEV_REFS]).score, 2)}
        record["heldout_dev_test"] = {"sentences": len(DEV_REFS), "digest": dev, "books": ["44", "45"]}
        (cell / "dev_hyp.txt").write_text("\n".join(dev_hyps) + "\n", encoding="utf-8")
    (cell / "record.json").write_text(json.dumps(record), encoding="utf-8")
    (cell / "hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (cell / "curve.csv").write_text(f"step,dev_bleu,dev_loss\n0,1.0,5.0\n150,{5 + seed},3.0\n300,{8 + seed},2.5\n")
    return cell


@pytest.fixture
def two_sessions(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Set A (a committed study: seeds 1-3, an AVX2 machine, upstream A) and set B (a later workspace: seeds 4-5,
    an AVX512 machine, upstream B); ft-tgtv-random's seed 4 started from a third upstream model and has no
    second-set figure, and one va-llm record ran other knobs."""
    a, b = tmp_path / "results" / "cells", tmp_path / "data" / "cells"
    for row in ("ft-srcv", "va-llm", "ft-tgtv-random"):
        for seed in (1, 2, 3):
            write_cell(a, row, seed, AVX2, UP_A, dev=HELDOUT.digest)
    for row in ("ft-srcv", "va-llm"):
        for seed in (4, 5):
            write_cell(b, row, seed, AVX512, UP_B, dev=HELDOUT.digest)
    write_cell(b, "ft-tgtv-random", 4, AVX512, UP_C)
    other = write_cell(b, "va-llm", 6, AVX512, UP_B, knobs_digest_="0" * 16)
    return a, b, other


def test_two_sets_of_cells_make_one_report(two_sessions, tmp_path):
    a, b, other = two_sessions
    gathered = read_cells([a, b], {row: knobs_digest(KNOBS[row]) for row in ROWS}, test_digest=text_digest(REFS))
    cfg = Report(baseline="ft-srcv", also_against=["ft-tgtv-random"], bootstrap_samples=200)
    built = grid_report(gathered, ROWS, REFS, cfg, seeds=[1, 2, 3, 4, 5], clusters=[b.split(".")[0] for b in BOOKS],
                        study="test", test_books=[f"book {n}" for n in range(43, 49)], heldout=HELDOUT)
    rows = built.tables["rows"].set_index("row")
    assert rows.loc["ft-srcv", "seeds"] == rows.loc["va-llm", "seeds"] == 5  # both sessions' seeds count
    assert rows.loc["ft-tgtv-random", "seeds"] == 4 and rows.loc["ft-srcv", "seed_list"] == "1-5"
    assert rows.loc["va-llm", "best_at_end"] == "3/5" and rows.loc["va-llm", "best_update"] == 280
    assert rows.loc["va-llm", "budget_stops"] == "3/5"  # odd seeds ran all 300 updates; even ones stopped at 280
    assert "| best_at_end | budget_stops |" in built.markdown
    assert rows.loc["va-llm", "ci_low"] < rows.loc["va-llm", "bleu_mean"] < rows.loc["va-llm", "ci_high"]
    assert rows.loc["va-llm", "machines"] == 2 and rows.loc["va-llm", "upstream_models"] == 2
    # pairs only where the keys (seed, upstream sha256) match: ft-tgtv-random's seed 4 has upstream C
    comparisons = built.tables["seed_comparisons"]
    assert set(comparisons["test_set"]) == {"test", "dev books"}  # both test sets, each its own Holm family
    tests = comparisons[comparisons["test_set"] == "test"].set_index(["row", "against"])["form"]
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
    # seed 4 is split: ft-tgtv-random's cell started from other weights of the base model than the seed's others
    assert (f"| 4 | base | {UP_B[:12]} | 2 | ft-srcv, va-llm |\n| 4 | base | {UP_C[:12]} | 1 | ft-tgtv-random |"
            in text)
    assert "| 1 | base |" not in text.split("### Seeds split across upstream models")[1]
    # what the cells cost on each machine: set A's 9 fine-tunes of 660-780 s (1.8 h, median 12 min)
    assert "| Test Xeon (AVX2, bf16 no) | 9 | 3 | 1-3 | 9 | 1.8 | 12 | 1 |" in text
    # the answer first: the papers' tables, one line per grid row, the plots, then the appendix
    order = [text.index(h) for h in ("## The papers' tables", "## One line per grid row", "## Plots",
                                     "## Appendix: where the cells came from")]
    assert order == sorted(order)
    sato = built.tables["paper_sato2020_table3_orderings"].set_index("ordering")
    assert sato.loc["va-llm > ft-srcv", "form"] == "paired" and sato.loc["va-llm > ft-srcv", "seeds"] == "5/5"
    assert sato.loc["ft-tgtv > ft-srcv", "verdict"] == "not run"
    # the second test set beside the first: the held-out dev books, paired and counted the same way
    assert rows.loc["va-llm", "heldout_dev_seeds"] == 5 and rows.loc["ft-tgtv-random", "heldout_dev_seeds"] == 3
    dev_bleu = [sacrebleu.corpus_bleu(hypotheses("va-llm", s, DEV_REFS), [DEV_REFS]).score for s in range(1, 6)]
    assert rows.loc["va-llm", "heldout_dev_bleu"] == pytest.approx(sum(dev_bleu) / 5, abs=0.01)
    assert rows.loc["va-llm", "verdict_vs_ft-srcv (dev books)"] == "better"
    assert rows.loc["va-llm", "vs_ft-srcv (dev books)"].startswith("+")
    assert rows.loc["va-llm", "form_vs_ft-srcv (dev books)"] == "paired"
    assert "<5 seeds" in rows.loc["ft-tgtv-random", "vs_ft-srcv (dev books)"]  # seed 4 has no dev_hyp.txt
    assert sato.loc["va-llm > ft-srcv", "verdict (dev books)"] == "holds"
    assert sato.loc["ft-srcv > in-domain", "verdict (dev books)"] == "not run"
    assert sato.loc["va-llm > ft-srcv", "condition"] == (
        "pretrain.init random; shared reproject vs copy; sides both; budget max 300 updates, patience 6; "
        "seeds 1-5; machines AVX2/AVX512; decoding ctranslate2, beam 5")
    assert "| vs_ft-srcv | vs_ft-srcv (dev books) |" in text and "| verdict (dev books) | condition |" in text
    assert ("The test set is the 36 test verses of 6 books (book 43, book 44, book 45, book 46, book 47 and book "
            "48); the second test set, `(dev books)`, is the 24 dev verses of 2 books (Acts and Romans), books that "
            "no checkpoint selection read (13 of the 14 cells have it") in text
    assert ("### Sato et al. 2020, Table 3, De-En IT->Law, 100k; ours under pretrain.init random, budget max 300 "
            "updates, patience 6, seeds 1-5, machines AVX2/AVX512") in text
    write_report(built, tmp_path)
    for name in ("report.md", "cells.csv", "rows.csv", "report.csv", "seed_comparisons.csv", "differences.png",
                 "learning_curves.png", "forgetting.png", "paper_sato2020_table3.csv"):
        assert (tmp_path / name).is_file(), name
    report = pd.read_csv(tmp_path / "report.csv")
    ours = report[report["source"] == "vocabridge"].set_index("method")
    assert list(ours.index) == ["ft-srcv", "va-llm", "ft-tgtv-random"] and ours.loc["ft-srcv", "delta_bleu"] == 0


def test_rows_under_different_pretraining_inits_are_compared_but_never_a_verdict(tmp_path):
    """va-linear's upstream model started from CBOW embeddings, the other rows' from random ones: its comparisons
    are shown, marked, and left out of the families; a record without `condition` (older code) is read from its
    knobs; one record scored another held-out dev set has no second-set figure."""
    folder = tmp_path / "cells"
    for seed in range(1, 6):
        write_cell(folder, "ft-srcv", seed, AVX2, UP_A, dev=HELDOUT.digest, init=None if seed == 5 else "random")
        write_cell(folder, "va-llm", seed, AVX2, UP_A, dev="f" * 16 if seed == 5 else HELDOUT.digest)
        write_cell(folder, "va-linear", seed, AVX2, UP_B, dev=HELDOUT.digest, init="cbow")
    rows = ["ft-srcv", "va-linear", "va-llm"]
    gathered = read_cells([folder], {row: knobs_digest(KNOBS[row]) for row in rows}, test_digest=text_digest(REFS))
    built = grid_report(gathered, rows, REFS, Report(baseline="ft-srcv", bootstrap_samples=200), seeds=[1, 2, 3, 4, 5],
                        clusters=[b.split(".")[0] for b in BOOKS], heldout=HELDOUT)
    sato = built.tables["paper_sato2020_table3_orderings"].set_index("ordering")
    crossed = sato.loc["va-llm > va-linear"]
    assert crossed["verdict"] == crossed["verdict (dev books)"] == DIFFER
    assert pd.isna(crossed["p_holm"]) and pd.isna(crossed["p_holm (dev books)"]) and crossed["delta"] > 0
    assert crossed["condition"].startswith("pretrain.init random vs cbow; shared reproject; sides both;")
    same = sato.loc["va-llm > ft-srcv"]  # the one ordering under one condition: a family of one
    assert same["verdict"] == "holds" and same["p_holm"] == same["p_value"]
    assert same["condition"].startswith("pretrain.init random; shared reproject vs copy;")
    table = built.tables["rows"].set_index("row")
    assert table.loc["va-linear", "verdict_vs_ft-srcv"] == DIFFER and pd.isna(table.loc["va-linear",
                                                                                        "p_holm_vs_ft-srcv"])
    assert "conditions differ: not a verdict" in table.loc["va-linear", "vs_ft-srcv (dev books)"]
    assert table.loc["va-llm", "verdict_vs_ft-srcv"] == "better" and table.loc["va-linear", "pretrain_init"] == "cbow"
    assert table.loc["va-llm", "heldout_dev_seeds"] == 4  # seed 5 scored another dev set
    assert "va-linear" not in set(built.tables["seed_comparisons"]["row"])  # no verdict, in no family
    layout = built.tables["paper_sato2020_table3"]
    ran = layout[layout["seeds"].notna()]
    assert list(ran["our_row"]) == ["ft-srcv", "va-llm", "va-linear"]  # grouped by condition
    assert list(ran["pretrain_init"]) == ["random", "random", "cbow"] and list(ran["shared"])[0] == "copy"
    assert ("ours under pretrain.init random (ft-srcv, va-llm); cbow (va-linear) (orderings across them: not "
            "verdicts)") in built.markdown


def test_the_report_stage_finds_the_held_out_dev_books(tmp_path, monkeypatch):
    from stages.report import book_names, heldout_set
    from vocabridge import workspace as paths
    from vocabridge.grid import read_record

    corpus = tmp_path / "downstream"
    corpus.mkdir()
    read_books = ["43"] * 4  # the books checkpoint selection read come first
    (corpus / "dev.ids").write_text("\n".join(f"{b}.1.{i}" for i, b in enumerate(read_books + DEV_BOOKS)) + "\n")
    (corpus / "dev.en").write_text("\n".join(["read"] * 4 + DEV_REFS) + "\n")
    monkeypatch.setattr(paths, "CORPORA", tmp_path)
    folder = tmp_path / "cells"
    records = [read_record(write_cell(folder, "ft-srcv", seed, AVX2, UP_A, dev=HELDOUT.digest)) for seed in (1, 2)]
    found = heldout_set(records, "en")
    assert found == HELDOUT and book_names(["45", "44", "44"]) == ["Acts", "Romans"]
    (corpus / "dev.en").write_text("\n".join(["read"] * 4 + DEV_REFS[::-1]) + "\n")  # the corpus changed
    assert heldout_set(records, "en") is None
    assert heldout_set([read_record(write_cell(folder, "va-llm", 1, AVX2, UP_A))], "en") is None  # no dev_hyp.txt


def test_a_users_second_test_file_is_the_second_test_set_with_its_documents(tmp_path, monkeypatch):
    from stages.report import heldout_set
    from vocabridge import workspace as paths
    from vocabridge.grid import read_record

    corpus = tmp_path / "downstream"
    corpus.mkdir()
    (corpus / "dev.ids").write_text("43.1.1\n")  # the dev set's documents are not the second test set here
    (corpus / "dev.en").write_text("read\n")
    (corpus / "second_test.en").write_text("\n".join(DEV_REFS) + "\n")
    (corpus / "second_test.ids").write_text("\n".join(f"{b}.1.{i}" for i, b in enumerate(DEV_BOOKS)) + "\n")
    monkeypatch.setattr(paths, "CORPORA", tmp_path)
    records = [read_record(write_cell(tmp_path / "cells", "ft-srcv", seed, AVX2, UP_A, dev=HELDOUT.digest))
               for seed in (1, 2)]
    found = heldout_set(records, "en", bible=False)
    assert found == HeldOut(DEV_REFS, DEV_BOOKS, HELDOUT.digest, ["44", "45"])  # a user's documents keep their ids
    from vocabridge.report import test_sets_sentence

    assert test_sets_sentence(36, ["law", "med"], found, {"ft-srcv": records}, 2, documents=True) == (
        "The test set is the 36 test sentences of 2 documents (law and med); the second test set, `(dev books)`, is "
        "the 24 sentences of 2 documents (44 and 45), a test file that no checkpoint selection read (2 of the 2 "
        "cells have it; the others have no second-set figure).")
    (corpus / "second_test.ids").unlink()  # no documents: one, drawn sentence by sentence
    (corpus / "second_test.en").write_text("\n".join(DEV_REFS) + "\n")
    assert heldout_set(records, "en", bible=False) is None  # recorded books 44, 45: not this set's


def test_a_row_evaluated_as_it_is_pools_whatever_budget_the_fine_tunes_run_under(tmp_path):
    """Out-domain has no fine-tune: its cells of a workspace with another budget are the same cells (their
    records carry a digest with that budget), while a fine-tuned row's are another condition."""
    from vocabridge.grid import condition_digest, decoding_digest

    evaluate = {"beam": 5, "length_penalty": 1.0, "upstream_sentences": 500}
    folder = tmp_path / "cells"
    for row in ("ft-srcv", "va-llm"):
        for seed, budget in ((1, 6000), (2, 16000)):
            cell = write_cell(folder, row, seed, AVX2, UP_A)
            record = json.loads((cell / "record.json").read_text())
            record["params"] |= {"evaluate": evaluate, "finetune": {"max_updates": budget}}
            record["condition_digest"] = condition_digest({"max_updates": budget}, evaluate, 1000)
            (cell / "record.json").write_text(json.dumps(record))
    expected = {row: knobs_digest(KNOBS[row]) for row in ("ft-srcv", "va-llm")}
    conditions = {"ft-srcv": decoding_digest(evaluate),
                  "va-llm": condition_digest({"max_updates": 16000}, evaluate, 1000)}
    gathered = read_cells([folder], expected, conditions=conditions, as_is={"ft-srcv"})
    assert [(r.row, r.seed) for r in gathered.records] == [("ft-srcv", 1), ("ft-srcv", 2), ("va-llm", 2)]
    assert len(gathered.left_out) == 1 and "another condition" in gathered.left_out[0][1]
    evaluate_other = evaluate | {"beam": 4}  # decoding is still its condition
    assert read_cells([folder], expected, conditions={"ft-srcv": decoding_digest(evaluate_other)},
                      as_is={"ft-srcv"}).records == []


def test_records_of_another_test_set_are_left_out(tmp_path):
    folder = tmp_path / "cells"
    write_cell(folder, "ft-srcv", 1, AVX2, UP_A, test_digest="f" * 16)
    write_cell(folder, "ft-srcv", 2, AVX2, UP_A)
    gathered = read_cells([folder], {"ft-srcv": knobs_digest(KNOBS["ft-srcv"])}, test_digest=text_digest(REFS))
    built = grid_report(gathered, ["ft-srcv"], REFS, Report(bootstrap_samples=50), seeds=[1, 2])
    assert len(built.tables["cells"]) == 1 and "another test set" in built.left_out[0][1]
    assert "ft-srcv: seed(s) 1" in built.markdown
    assert "None: each seed's cells of an upstream model started from the same weights." in built.markdown


def test_no_finished_cell_is_a_report_that_says_so(tmp_path):
    built = grid_report(read_cells([tmp_path / "none"], {"ft-srcv": "x"}), ["ft-srcv"], REFS, Report())
    assert built.missing_rows == ["ft-srcv"] and "No finished cells yet" in built.markdown
    write_report(built, tmp_path)
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "differences.png").exists()
    assert "## Decoding speed" not in built.markdown and "## The pretrained language models" not in built.markdown
    assert "## Upstream trainings" not in built.markdown and not (tmp_path / "upstream_curves.png").exists()
    assert not (tmp_path / "plm_curves.png").exists()


def test_decoding_speed_and_the_studys_berts_have_their_sections(tmp_path):
    folder = tmp_path / "cells"
    for row, ms, decoder, seeds, machine in (("ft-srcv", 40.0, "ctranslate2", (1, 2), AVX2),
                                             ("va-llm", 10.0, "mask-predict", (1, 2), AVX2),
                                             ("va-llm", 3.0, "mask-predict", (3,), AVX512)):
        for seed in seeds:
            cell = write_cell(folder, row, seed, machine, UP_A)
            record = json.loads((cell / "record.json").read_text())
            record["metrics"] |= {"latency_ms": ms + seed, "sentences_per_second": 1000 / ms, "decoder": decoder}
            (cell / "record.json").write_text(json.dumps(record))
    curve = pd.DataFrame({"step": [500, 1000, 1500, 2000, 2500], "train_loss": [6.0, 5.5, 5.2, 5.1, 5.05],
                          "held_out_loss": [6.1, 5.6, 5.3, 5.2, 5.15],
                          "held_out_accuracy": [0.10, 0.15, 0.18, 0.19, 0.195]})
    plms = {"de": (curve, {"updates": 2500, "best_update": 2500, "held_out_accuracy": 0.195, "held_out_loss": 5.15,
                           "stopped": "max_updates reached", "train_seconds": 7200.0, "precision": "bf16"})}
    rows = ["ft-srcv", "va-llm"]
    gathered = read_cells([folder], {row: knobs_digest(KNOBS[row]) for row in rows}, test_digest=text_digest(REFS))
    built = grid_report(gathered, rows, REFS, Report(baseline="ft-srcv", bootstrap_samples=50), seeds=[1, 2, 3],
                        plms=plms)
    # a speed is a machine's: one line a row and machine, each against the baseline on its own machine
    speed = built.tables["decoding_speed"].set_index(["row", "machine"])
    slow, fast = machine_name(AVX2), machine_name(AVX512)
    assert len(speed) == 3 and speed.loc[("va-llm", slow), "decoder"] == "mask-predict"
    assert speed.loc[("va-llm", slow), "latency_ms"] == 11.5 and speed.loc[("va-llm", slow), "seeds"] == 2
    assert speed.loc[("va-llm", slow), "latency_speedup_vs_ft-srcv"] == round(41.5 / 11.5, 2)
    assert speed.loc[("va-llm", fast), "latency_ms"] == 6.0 and speed.loc[("va-llm", fast), "seeds"] == 1
    assert pd.isna(speed.loc[("va-llm", fast), "latency_speedup_vs_ft-srcv"])  # no ft-srcv cell on that machine
    assert speed.loc[("ft-srcv", slow), "latency_speedup_vs_ft-srcv"] == 1.0
    (line,) = built.tables["plms"].to_dict("records")  # 0.195 at 2,500 against 0.10 at 500: still rising
    assert line["accuracy_gain_last_2000"] == 0.095 and line["train_hours"] == 2.0
    assert set(built.tables["plm_curves"]["language"]) == {"de"} and len(built.tables["plm_curves"]) == 5
    md = built.markdown
    assert md.index("## Decoding speed") < md.index("## The pretrained language models") < md.index("## Appendix")
    (tmp_path / "out").mkdir()
    write_report(built, tmp_path / "out")
    assert (tmp_path / "out" / "plm_curves.png").stat().st_size > 0
    assert len(pd.read_csv(tmp_path / "out" / "decoding_speed.csv")) == 3


def test_the_upstream_trainings_of_ab_net_models_have_their_section(tmp_path, monkeypatch):
    """The report stage reads what the abnet stage writes (write_logs, its metrics) for entries that trained on the
    upstream pairs, and the report shows each curve, its kept update and the first evaluation's dev BLEU."""
    from stages.report import study_upstreams
    from vocabridge import workspace as paths
    from vocabridge.config import AbnetModel
    from vocabridge.fileio import write_json
    from vocabridge.nmt.train import State, write_logs

    monkeypatch.setattr(paths, "PLOTS", tmp_path / "plots")
    monkeypatch.setattr(paths, "METRICS", tmp_path / "metrics")
    dev = [(0, 0.0, 14.1), (500, 0.26, 9.95), (1000, 0.2, 9.47), (1500, 3.8, 7.15), (2000, 3.5, 7.2)]
    state = State(dev_log=[{"step": s, "dev_bleu": b, "dev_loss": loss} for s, b, loss in dev])
    for name, updates in (("mp-upstream", 2000), ("mp", 0)):
        plots, metrics = paths.abnet_outputs(name)
        write_logs(state if updates else State(), plots)
        write_json(metrics, {"updates": updates, "best_update": 1500, "best_dev_bleu": 3.8, "best_dev_loss": 7.15,
                             "stopped": "early stop", "stopped_by": "patience", "best_at_end": False,
                             "train_seconds": 5400.0, "plms": False} if updates else
                   {"updates": 0, "stopped": "no upstream training (abnets.NAME.upstream: false)", "plms": False})
    abnets = {"mp-upstream": AbnetModel(plms=False), "mp": AbnetModel(plms=False, upstream=False),
              "not-run": AbnetModel(plms=False)}
    upstreams = study_upstreams(abnets)
    assert list(upstreams) == ["mp-upstream"]  # no training, or no stage run: no line
    assert list(upstreams["mp-upstream"][0].columns) == ["step", "dev_bleu", "dev_loss"]
    built = grid_report(read_cells([tmp_path / "none"], {"ft-srcv": "x"}), ["ft-srcv"], REFS, Report(),
                        upstreams=upstreams)
    (line,) = built.tables["upstream_trainings"].to_dict("records")
    assert (line["best_update"], line["first_eval_update"], line["first_eval_dev_bleu"]) == (1500, 500, 0.26)
    assert not line["best_at_end"] and line["train_hours"] == 1.5 and line["stopped_by"] == "patience"
    assert len(built.tables["upstream_curves"]) == 5 and "## Upstream trainings of the AB-Net family" in built.markdown
    (tmp_path / "out").mkdir()
    write_report(built, tmp_path / "out")
    assert (tmp_path / "out" / "upstream_curves.png").stat().st_size > 0
    assert len(pd.read_csv(tmp_path / "out" / "upstream_curves.csv")) == 5



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


def test_an_ab_net_s_identity_covers_its_berts_and_a_marian_model_s_is_its_weights_file(tmp_path):
    """What cells pair by (`vocabridge.families.ModelFamily.sha256`): two AB-Net directories with the same trained
    part on other BERTs are other upstream models (a GPU's BERTs differ from a CPU's)."""
    from vocabridge.families import family
    from vocabridge.fileio import sha256_file

    def model_sha256(weights: Path, name: str) -> str:
        return family(name).sha256(weights)

    def abnet_dir(name: str, bert: bytes) -> Path:
        folder = tmp_path / name
        (folder / "source").mkdir(parents=True)
        (folder / "adapters.safetensors").write_bytes(b"coordinator drawn from seed 1")
        (folder / "source" / "model.safetensors").write_bytes(bert)
        (folder / "abnet.json").write_text("{}")
        return folder / "adapters.safetensors"

    cpu, gpu = abnet_dir("cpu", b"BERT of a CPU"), abnet_dir("gpu", b"BERT of a GPU")
    again = abnet_dir("again", b"BERT of a CPU")
    assert sha256_file(cpu) == sha256_file(gpu)  # the trained part alone cannot tell them apart
    assert model_sha256(cpu, "abnet") != model_sha256(gpu, "abnet")
    assert model_sha256(cpu, "abnet") == model_sha256(again, "abnet")  # the same files: the same model
    (again.parent / "abnet.json").write_text('{"kind": "abnet"}')  # only weights count
    assert model_sha256(cpu, "abnet") == model_sha256(again, "abnet")
    assert model_sha256(cpu, "nmt") == sha256_file(cpu)


def test_the_committed_plm_cells_pool_under_their_ab_net_settings_and_no_other():
    """Every committed cell of results/plm pools under today's plm profile; an edit to an AB-Net model's settings
    leaves out the cells of the rows it reaches, and only those: their models learn from the downstream pairs
    alone and start from the same weights whatever the settings, so no upstream sha256 tells them apart."""
    from dataclasses import replace

    from vocabridge.config import profile_params
    from vocabridge.rows import gather

    root = Path(__file__).resolve().parents[1]
    cells = root / "results" / "plm" / "cells"
    params, _ = profile_params(root, "plm")
    records = {path.parent.parent.name: json.loads(path.read_text()) for path in cells.glob("*/s*/record.json")}
    gathered = gather(params, [cells], None)
    assert len(records) >= 16 and not gathered.left_out
    assert len(gathered.records) == len(list(cells.glob("*/s*/record.json")))

    def left_out(edited) -> dict[str, str]:
        return {path.parent.name: why for path, why in gather(edited, [cells], None).left_out}

    def of_decoder(kind: str) -> set[str]:
        return {row for row, record in records.items()
                if (record["condition"].get("upstream_recipe") or {}).get("decoder") == kind}

    cfg = params.abnet
    alpha = left_out(replace(params, abnet=replace(cfg, sponsored=replace(cfg.sponsored, alpha=0.5))))
    assert set(alpha) == of_decoder("coordinator") and len(alpha) >= 10
    assert "abnet differ from abnets.plm-nmt and abnet now" in alpha["plm-nmt"]
    dev = left_out(replace(params, abnet=replace(cfg, dev_decoding=replace(cfg.dev_decoding, iterations=10))))
    assert set(dev) == of_decoder("mask-predict") == {"abnet", "mask-predict"}
    entry = replace(params.abnets["plm-nmt-no-mlm"], sponsored={"mlm": 0.05})
    assert set(left_out(replace(params, abnets=params.abnets | {"plm-nmt-no-mlm": entry}))) == {"plm-nmt-no-mlm"}


def test_an_ab_net_row_s_condition_names_the_berts_its_model_starts_from():
    """`pretrain_init` of the plm study's rows: AB-Net-Enc has no target BERT (a decoder of its own)."""
    from vocabridge.config import profile_params
    from vocabridge.rows import row_condition as condition
    from vocabridge.transfer import knobs_for

    params, _ = profile_params(Path(__file__).resolve().parents[1], "plm")

    def label(row: str) -> str:
        return condition(params, knobs_for(row, params.rows), "abnet")["pretrain_init"]

    assert label("abnet") == label("plm-nmt") == "abnet: pretrained BERTs, no upstream training"
    assert label("abnet-enc") == "abnet: pretrained source BERT, no upstream training"
    assert label("plm-nmt-no-plm-dec") == "abnet: pretrained source BERT, random target, no upstream training"
    assert label("mask-predict") == label("plm-nmt-no-plm") == "abnet: random, no upstream training"
    assert label("mask-predict-upstream") == "abnet: random"  # Guo et al.'s baseline, trained upstream here
