"""Multi-domain learning by target-token mixing (Britz et al. 2017; Sato et al. 2020's MDL) on hand-made data:
domain tags in the target vocabulary, tagged targets, and a model that learns to name the domain first."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import DE_BIBLE, DE_IT, EN_BIBLE, EN_IT
from tests.test_nmt import ARCH, TRAIN
from vocabridge.config import Lang, SpmModel
from vocabridge.nmt.data import Parallel
from vocabridge.nmt.model import build_model
from vocabridge.nmt.train import fit
from vocabridge.nmt.translate import translate
from vocabridge.nmt.vocab import domain_tag, pair_vocabs
from vocabridge.tokenizers import train_spm

TAGS = (domain_tag("upstream"), domain_tag("downstream"))


@pytest.fixture(scope="module")
def tagged():
    cfg = SpmModel(vocab_size=60, hard_vocab_limit=False)
    return pair_vocabs(train_spm(DE_IT + DE_BIBLE, cfg, 1, 1, "de"), train_spm(EN_IT + EN_BIBLE, cfg, 1, 1, "en"),
                       tgt_extra=TAGS)


def test_domain_tags_are_target_tokens_that_decoding_drops(tagged):
    src, tgt = tagged
    assert len(src) == len(tgt) and src.pad_id == tgt.pad_id  # the source side is filled up to the same size
    up, down = (tgt.id_of(t) for t in TAGS)
    assert down == up + 1 and all(t.startswith("<unused_") for t in tgt.tokens[down + 1 : -1])  # after the pieces
    assert not any(t in src.tokens for t in TAGS)
    assert not any(up in ids or down in ids for ids in tgt.encode(EN_IT[:4] + EN_BIBLE[:3] + [TAGS[0]]))
    ids = tgt.encode(["Open file"])[0]
    assert tgt.decode([down, *ids]) == tgt.decode(ids) == "Open file"
    with pytest.raises(KeyError, match="no token '<domain:nowhere>'"):
        tgt.id_of(domain_tag("nowhere"))


def test_a_prefix_leads_every_target_and_the_source_is_unchanged(tagged):
    src, tgt = tagged
    plain = Parallel.encode(DE_IT[:4], EN_IT[:4], src, tgt, max_len=64)
    led = Parallel.encode(DE_IT[:4], EN_IT[:4], src, tgt, max_len=64, tgt_prefix=tgt.id_of(TAGS[1]))
    assert all(np.array_equal(a, b) for a, b in zip(plain.src, led.src, strict=True))
    assert all(b[0] == tgt.id_of(TAGS[1]) and np.array_equal(a, b[1:]) for a, b in zip(plain.tgt, led.tgt,
                                                                                       strict=True))
    both = plain + led
    assert len(both) == 8 and both.tgt[4][0] == tgt.id_of(TAGS[1])


def write_corpus(folder: Path, de: list[str], en: list[str]) -> Path:
    folder.mkdir(parents=True)
    for split, n in (("train", len(de)), ("dev", 6)):
        (folder / f"{split}.de").write_text("\n".join(de[:n]) + "\n", encoding="utf-8")
        (folder / f"{split}.en").write_text("\n".join(en[:n]) + "\n", encoding="utf-8")
    return folder


def test_a_mixed_model_names_each_sentences_domain_first(tmp_path, tagged, monkeypatch):
    """Trained on both corpora with tagged targets, the model starts an IT sentence's translation with the
    upstream tag and a Bible verse's with the downstream one; the downstream corpus's dev set selects."""
    from vocabridge.nmt import train

    src, tgt = tagged
    seen = {}

    class Recording(train.Trainer):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            seen.update(dev=self.dev_ref, prefix=self.dev_prefix)

    monkeypatch.setattr(train, "Trainer", Recording)
    upstream = write_corpus(tmp_path / "it", DE_IT, EN_IT)
    downstream = write_corpus(tmp_path / "bible", DE_BIBLE, EN_BIBLE)
    model = build_model(ARCH, src, tgt, seed=1)
    cfg = replace(TRAIN, max_updates=400, lr=1e-2, eval_every=200, checkpoint_every=200, log_every=50)
    state, summary = fit(model, src, tgt, upstream, Lang(), cfg, tmp_path / "ckpt", {"cfg": "mdl"}, "mdl",
                         mix_with=downstream)
    assert summary["pairs_by_domain"] == {"upstream": len(DE_IT), "downstream": len(DE_BIBLE)}
    assert summary["train_pairs"] == len(DE_IT) + len(DE_BIBLE)
    assert seen == {"dev": EN_BIBLE[:6], "prefix": tgt.id_of(TAGS[1])}
    assert state.best_bleu > 50 and state.dev_log[-1]["dev_loss"] < state.dev_log[0]["dev_loss"] / 4
    model.eval()
    with torch.inference_mode():
        for lines, tag in ((DE_IT[:4], TAGS[0]), (DE_BIBLE[:3], TAGS[1])):
            for line in lines:
                ids = torch.from_numpy(src.encode([line])[0])[None]
                first = model.generate(input_ids=ids, num_beams=1, do_sample=False, max_new_tokens=2)[0, 1]
                assert tgt.tokens[int(first)] == tag, line
    hyps, _ = translate(model, src, tgt, DE_BIBLE[:3], beam=2, progress=False)
    assert hyps == EN_BIBLE[:3]  # the tag is emitted, and dropped from the text
