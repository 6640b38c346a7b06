"""`vocabridge audit`: how a model's vocabulary fits a text, on a tiny IT model and Bible text made here."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter

import pytest
import sentencepiece as spm

from tests.conftest import DE_IT, EN_IT, cli, cli_process
from vocabridge.audit import audit_side, barely_seen, detect_side, markdown, recommend, shattered_words, table_rows
from vocabridge.config import SpmModel
from vocabridge.tokenizers import train_spm

WORDS = ("And God said Let there be light In the beginning created heaven earth was saw evening morning were "
         "first day firmament waters gathered together dry land appear grass herb yielding seed fruit tree "
         "kind lights greater lesser rule night stars moving creature abundantly fowl multiply").split()
EN_BIBLE = [" ".join(WORDS[(i * 7 + j * 13) % len(WORDS)] for j in range(5 + i % 7)) for i in range(400)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, it_model):
    root = tmp_path_factory.mktemp("audit")
    shutil.copytree(it_model / "opus-mt", root / "opus-mt")
    (root / "bible.en").write_text("\n".join(EN_BIBLE) + "\n", encoding="utf-8")
    (root / "it.en").write_text("\n".join(EN_IT) + "\n", encoding="utf-8")
    return root


def target_sp(model_dir) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_file=str(model_dir / "opus-mt" / "target.spm"))


def test_fertility_and_new_rows_are_counted_as_segmented(model_dir):
    sp = target_sp(model_dir)
    result = audit_side(sp, EN_BIBLE, "tgt", sizes=(60, 120), threads=1)
    words = sum(len(line.split()) for line in EN_BIBLE)
    assert result.words == words and result.lines == len(EN_BIBLE)
    assert result.model["fertility"] == round(sum(map(len, sp.encode(EN_BIBLE))) / words, 4)
    known = {sp.id_to_piece(i) for i in range(sp.get_piece_size())}
    for row in result.sizes:  # the text's own vocabulary segments it more coarsely, partly in pieces the model lacks
        own = spm.SentencePieceProcessor(model_proto=train_spm(EN_BIBLE, SpmModel(vocab_size=row["vocab_size"],
                                                                                  hard_vocab_limit=False), 1, 1, "t"))
        pieces = [piece for line in own.encode(EN_BIBLE, out_type=str) for piece in line]
        assert row["fertility"] < result.model["fertility"] and row["fertility"] == round(len(pieces) / words, 4)
        assert row["unseen_token_rate"] == round(sum(p not in known for p in pieces) / len(pieces), 4) > 0
    assert result.sizes[0]["pieces"] <= 60 < result.sizes[1]["pieces"] <= 120
    top = result.shattered[0]
    assert top["count"] == max(c for w, c in Counter(" ".join(EN_BIBLE).split()).items()
                               if len(sp.encode(w)) >= 3)
    assert "".join(top["pieces"]).replace("▁", "") == top["word"] and len(top["pieces"]) >= 3


def test_recommendation_stops_where_doubling_gains_little():
    rows = [{"vocab_size": 2000, "pieces": 2000, "fertility": 1.60, "unseen_token_rate": 0.2},
            {"vocab_size": 4000, "pieces": 4000, "fertility": 1.40, "unseen_token_rate": 0.3},  # <= 1.35 x 1.05
            {"vocab_size": 8000, "pieces": 8000, "fertility": 1.35, "unseen_token_rate": 0.4}]
    assert recommend(2.0, rows)["vocab_size"] == 4000
    assert recommend(1.38, rows)["vocab_size"] is None  # within 5% of the best already: keep the model's
    assert "keep" not in recommend(2.0, rows)["reason"] and "30% fewer" in recommend(2.0, rows)["reason"]
    assert "8000 pieces cut less than 5% more" in recommend(2.0, rows)["reason"]
    # the text: asked for 8000, SentencePiece stopped at 7296; that vocabulary is the one to name
    capped = rows[:2] + [{"vocab_size": 8000, "pieces": 7296, "fertility": 1.10, "unseen_token_rate": 0.5}]
    rec = recommend(2.0, capped, ceiling=7296)
    assert rec["vocab_size"] == 7296 and "no more than 7296 pieces" in rec["reason"]


def test_sizes_past_the_texts_ceiling_are_one_row_named_by_the_pieces_it_reached(model_dir):
    sp = target_sp(model_dir)
    ceiling = spm.SentencePieceProcessor(model_proto=train_spm(EN_BIBLE, SpmModel(vocab_size=5000,
                                                                                  hard_vocab_limit=False), 1, 1, "t"))
    most = ceiling.get_piece_size()  # what this text gives at most (75 pieces)
    assert 40 < most < 100
    result = audit_side(sp, EN_BIBLE, "tgt", sizes=(200, 40, 100, 100), threads=1)
    assert [(r["vocab_size"], r["pieces"]) for r in result.sizes] == [(40, 40), (100, most)]
    assert result.ceiling == most and result.beyond == [200]
    rows = [r for r in table_rows([result]) if r["vocabulary"] != "model"]
    assert [r["size"] for r in rows] == [40, most]  # no row twice
    assert result.sizes[1]["fertility"] == 1.0  # every word one piece: nothing bigger to gain, the ceiling is named
    assert result.recommendation["vocab_size"] == most and "no more than" in result.recommendation["reason"]
    assert f"at most {most} pieces" in markdown([result], "m", None)


def test_barely_seen_pieces_and_the_side_of_a_text(model_dir):
    sp = target_sp(model_dir)
    corpus = ["Open file"] * 20 + ["Close window"]  # "Close window" pieces seen once, "Open file" 20 times
    seen = barely_seen(sp, ["Open file", "Close window"], corpus, rare=5)
    counts = Counter(piece for ids in sp.encode(corpus) for piece in ids)
    pieces = [piece for ids in sp.encode(["Open file", "Close window"]) for piece in ids]
    assert seen["token_share"] == round(sum(counts[p] < 5 for p in pieces) / len(pieces), 4)
    assert 0 < seen["token_share"] < 1  # pieces of "Close window" only, and not those it shares with "Open file"
    src = spm.SentencePieceProcessor(model_file=str(model_dir / "opus-mt" / "source.spm"))
    assert detect_side(src, sp, EN_IT) == "tgt" and detect_side(src, sp, DE_IT) == "src"
    whole = next(w for w in " ".join(EN_IT).split() if len(sp.encode(w)) < 3)
    assert [w["word"] for w in shattered_words(sp, Counter({whole: 9, "firmament": 2}))] == ["firmament"]


def audit_cli(*args: str) -> subprocess.CompletedProcess:
    return cli("audit", *args)


def test_audit_command_writes_json_markdown_and_plot(model_dir):
    out = model_dir / "report"
    proc = audit_cli("--model", str(model_dir / "opus-mt"), "--tgt-text", str(model_dir / "bible.en"), "--sizes", "40",
                     "70", "--model-tgt-corpus", str(model_dir / "it.en"), "--out", str(out), "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tgt: recommended vocabulary size" in proc.stdout
    report = json.loads((out / "audit.json").read_text())
    (side,) = report["sides"]
    assert side["side"] == "tgt" and [r["vocab_size"] for r in side["sizes"]] == [40, 70]
    model_sp = target_sp(model_dir)  # the model's own corpus counted as the library counts it
    assert side["barely_seen"] == barely_seen(model_sp, EN_BIBLE, EN_IT, rare=10) and side["barely_seen"]["token_share"]
    page = (out / "audit.md").read_text()
    assert "Recommended vocabulary size" in page and "![" in page and (out / "audit.png").stat().st_size > 1000


def test_audit_errors_name_the_file_and_write_nothing(model_dir):
    out = model_dir / "never"
    proc = cli_process("audit", "--model", str(model_dir / "opus-mt"), "--text", str(model_dir / "missing.en"),
                       "--out", str(out))  # the command as a process of its own: one line, nothing else
    assert proc.returncode == 2 and "missing.en" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = audit_cli("--model", str(model_dir / "nowhere"), "--text", str(model_dir / "bible.en"), "--out", str(out))
    assert proc.returncode != 0 and "nowhere" in proc.stderr
    proc = audit_cli("--model", str(model_dir / "opus-mt"), "--out", str(out))
    assert proc.returncode != 0 and "--text" in proc.stderr
    assert not out.exists()
