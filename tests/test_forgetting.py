"""Fine-tuning that keeps the pretrained rows: frozen old rows, new rows first, and the record of which rows are old."""

import json
from dataclasses import replace

import pytest
import torch

from tests.test_nmt import ARCH, DE, EN
from vocabridge.config import SpmModel, Training
from vocabridge.errors import InputError
from vocabridge.nmt.data import Parallel
from vocabridge.nmt.forgetting import Keep, read_old_rows, write_old_rows
from vocabridge.nmt.model import build_model, save_model
from vocabridge.nmt.train import Trainer
from vocabridge.nmt.vocab import pair_vocabs
from vocabridge.tokenizers import train_spm

TRAIN = Training(max_updates=6, batch_tokens=400, lr=3e-3, warmup=2, eval_every=3, dev_sentences=8,
                 checkpoint_every=3, log_every=3, patience=0, bf16=False)


@pytest.fixture(scope="module")
def vocabs():
    cfg = SpmModel(vocab_size=100, hard_vocab_limit=False)
    return pair_vocabs(train_spm(DE, cfg, 1, 1, "de"), train_spm(EN, cfg, 1, 1, "en"))


def run(tmp_path, vocabs, keep, cfg=TRAIN, name="run"):
    model = build_model(ARCH, *vocabs, seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = Parallel.encode(DE, EN, *vocabs, max_len=64)
    Trainer(model, *vocabs, data, (DE[:8], EN[:8]), cfg, tmp_path / name, {"run": name}, name, keep=keep).train()
    return before, model.state_dict()


def test_frozen_old_rows_never_change_and_the_new_rows_do(tmp_path, vocabs):
    src, tgt = vocabs
    old = {"source": list(range(0, len(src), 2)), "target": list(range(0, len(tgt), 3))}
    before, after = run(tmp_path, vocabs, Keep(old, frozen=True))
    enc, dec = "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"
    assert torch.equal(before[enc][old["source"]], after[enc][old["source"]])
    assert torch.equal(before[dec][old["target"]], after[dec][old["target"]])
    assert torch.equal(before["lm_head.weight"][old["target"]], after["lm_head.weight"][old["target"]])
    new_target = sorted(set(range(len(tgt))) - set(old["target"]))
    assert not torch.equal(before[dec][new_target], after[dec][new_target])  # what the data uses moves
    assert not torch.equal(before["model.encoder.layers.0.fc1.weight"], after["model.encoder.layers.0.fc1.weight"])


def test_new_rows_first_holds_everything_else_then_trains_it(tmp_path, vocabs):
    src, tgt = vocabs
    old = {"source": list(range(len(src) // 2)), "target": list(range(len(tgt) // 2))}
    layer = "model.encoder.layers.0.fc1.weight"
    before, staged = run(tmp_path, vocabs, Keep(old, new_rows_first=6), name="staged")
    assert torch.equal(before[layer], staged[layer])  # six updates, all of them the new rows' alone
    dec = "model.decoder.embed_tokens.weight"
    assert torch.equal(before[dec][old["target"]], staged[dec][old["target"]])
    assert not torch.equal(before[dec], staged[dec])
    _, later = run(tmp_path, vocabs, Keep(old, new_rows_first=3), name="then-all")
    assert not torch.equal(before[layer], later[layer])  # updates 4-6 train everything
    assert not torch.equal(before[dec][old["target"]], later[dec][old["target"]])


def test_a_killed_staged_fine_tune_resumes_exactly(tmp_path, vocabs):
    src, tgt = vocabs
    old = {"source": list(range(len(src) // 2)), "target": list(range(len(tgt) // 2))}
    keep = Keep(old, frozen=True, new_rows_first=3)
    _, straight = run(tmp_path, vocabs, keep, name="straight")
    run(tmp_path, vocabs, keep, cfg=replace(TRAIN, max_updates=3), name="cut")
    _, resumed = run(tmp_path, vocabs, keep, name="cut")  # goes on from the checkpoint at update 3
    for name, value in straight.items():
        assert torch.equal(value, resumed[name]), name


def test_an_adapted_directory_names_its_pretrained_rows(tmp_path, vocabs):
    src, tgt = vocabs
    save_model(build_model(ARCH, src, tgt, seed=1), src, tgt, tmp_path / "pretrained")
    other = pair_vocabs(train_spm([*DE, "ein völlig neues wort hier"], SpmModel(vocab_size=90, hard_vocab_limit=False),
                                  1, 1, "de"), train_spm(EN, SpmModel(vocab_size=90, hard_vocab_limit=False), 1, 1,
                                                         "en"))
    save_model(build_model(ARCH, *other, seed=1), *other, tmp_path / "adapted")
    rows = write_old_rows(tmp_path / "adapted", tmp_path / "pretrained")
    assert read_old_rows(tmp_path / "adapted") == rows
    known = set(src.tokens)
    assert rows["source"] == [i for i, t in enumerate(other[0].tokens) if t in known]
    assert 0 < len(rows["source"]) < len(other[0])  # the specials and shared pieces, not the new ones
    assert json.loads((tmp_path / "adapted" / "old_rows.json").read_text())["target"] == rows["target"]
    with pytest.raises(InputError, match="old_rows.json: missing"):
        read_old_rows(tmp_path / "pretrained")
