"""The flow's check before training: every setting the prepared corpora cannot satisfy, named in one message."""

import json

import pytest

from vocabridge.config import Params, parse, validate
from vocabridge.errors import ConfigError
from vocabridge.preflight import check, problems


def corpora(tmp_path, pairs: int = 40):
    down = tmp_path / "corpora" / "downstream"
    down.mkdir(parents=True)
    (down / "train.de").write_text("".join(f"Satz {i} über Wörter hier\n" for i in range(pairs)))
    (down / "train.en").write_text("".join(f"Sentence {i} about words here\n" for i in range(pairs)))
    (down / "stats.json").write_text(json.dumps({"dropped": {"train": {"too_long": 3, "duplicate": 0}}}))
    return tmp_path / "corpora"


def params(**over) -> Params:
    raw = {"finetune": {"train_pairs": 2000}, "rows": {"ft-srcv": {"method": "ft-srcv"},
                                                       "small": {"method": "ft-srcv", "train_pairs": 30}}}
    return validate(parse(Params, raw | over, "params"))


def test_every_problem_is_named_at_once_with_what_would_fit(tmp_path):
    found = problems(params(), corpora(tmp_path), tmp_path / "spm")
    assert len(found) == 3, found  # the fine-tune sample, and both downstream vocabularies (no upstream corpus)
    assert found[0].startswith("finetune.train_pairs: 2000 pairs asked") and "has 40" in found[0]
    assert "cleaning dropped 3 too_long" in found[0] and "set it to at most 40, or 0 for all" in found[0]
    assert all("rows.small" not in p for p in found)  # 30 of 40 fits
    for problem, code in zip(found[1:], ("de", "en"), strict=True):
        assert problem.startswith(f"spm.downstream.{code}.vocab_size: 8000 pieces do not fit")
        assert f"spm.downstream.{code}.hard_vocab_limit: false" in problem
    with pytest.raises(ConfigError, match=r"3 problems: \(1\) finetune.train_pairs.*\(2\) spm.downstream.de.*"
                                          r"\(3\) spm.downstream.en"):
        check(params(), corpora(tmp_path / "again"), tmp_path / "spm")


def test_settings_that_fit_pass_and_the_largest_size_is_the_one_to_set(tmp_path):
    root = corpora(tmp_path)
    found = problems(params(), root, tmp_path / "spm")
    most = {code: int(p.split("at most ")[1].split(")")[0]) for code, p in zip(("de", "en"), found[1:], strict=True)}
    fits = params(finetune={"train_pairs": 0}, spm={"downstream": {c: {"vocab_size": n} for c, n in most.items()}})
    assert problems(fits, root, tmp_path / "spm") == [], "the size SentencePiece named must fit"
    loose = params(finetune={"train_pairs": 40},
                   spm={"downstream": {code: {"hard_vocab_limit": False} for code in ("de", "en")}})
    check(loose, root, tmp_path / "spm")
    check(params(rows={"big": {"method": "ft-srcv", "train_pairs": 0}}, finetune={"train_pairs": 40}), root, None)
    with pytest.raises(ConfigError, match=r"1 problem: \(1\) rows.big.train_pairs: 41 pairs asked"):
        check(params(rows={"big": {"method": "ft-srcv", "train_pairs": 41}}, finetune={"train_pairs": 40}), root,
              None)
