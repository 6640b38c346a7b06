"""A PLM decoder with the downstream vocabulary (Duan & Zhao 2023's FWET, and every initialiser of the method
contract): the SentencePiece model as a BERT tokenizer segments as SentencePiece does, the swapped decoder keeps the
rows of the tokens both vocabularies share, and the model directory loads back with its new vocabulary."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.test_sponsored import TEXT, TINY
from vocabridge.config import SpmModel, Sponsored, TransferMethod
from vocabridge.plm.bert import bert_tokenizer_from_spm, build_bert, train_plm_tokenizer
from vocabridge.plm.sponsored import PlmSponsored
from vocabridge.tokenizers import load_spm, spelled_tokens, train_spm

NEW_TEXT = ["Und Gott sah das Licht, dass es gut war.", "Da schied Gott das Licht von der Finsternis.",
            "Und nannte das Licht Tag und die Finsternis Nacht."] * 8


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_plm_tokenizer(TEXT, 60, tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def downstream_spm(tmp_path_factory):
    path = tmp_path_factory.mktemp("spm") / "de.model"
    path.write_bytes(train_spm(NEW_TEXT + TEXT, SpmModel(vocab_size=70, hard_vocab_limit=False), 1, 1, "test"))
    return path


def model(tokenizer) -> PlmSponsored:
    settings = Sponsored(coordinator_layers=1, coordinator_ffn=64, dropout=0.0, distill=False)
    return PlmSponsored(build_bert(TINY, tokenizer, 1), build_bert(TINY, tokenizer, 2), None, settings)


def test_the_spm_model_as_a_bert_tokenizer_segments_and_decodes_as_sentencepiece(downstream_spm):
    sp, tok = load_spm(downstream_spm), bert_tokenizer_from_spm(downstream_spm)
    lines = NEW_TEXT[:3] + ["Gott  nannte   Licht."]  # repeated spaces are squeezed by both
    ids = tok(lines)["input_ids"]
    assert [tok.convert_ids_to_tokens(row[1:-1]) for row in ids] == sp.encode(lines, out_type=str)
    assert [tok.decode(row, skip_special_tokens=True) for row in ids] == [sp.decode(p) for p in sp.encode(lines)]
    assert tok.convert_ids_to_tokens([ids[0][0], ids[0][-1]]) == ["[CLS]", "[SEP]"]
    ordinary = sum(not (sp.is_control(i) or sp.is_unknown(i)) for i in range(sp.get_piece_size()))
    assert len(tok) == ordinary + 5


def test_fwet_gives_the_decoder_the_new_vocabulary_and_shared_pieces_keep_their_rows(tokenizer, downstream_spm):
    from vocabridge.plm.abnet import load_abnet, save_abnet
    from vocabridge.plm.vocabulary import adapt_plm_decoder
    from vocabridge.transfer import METHODS, Resources, knobs_for

    text_file = downstream_spm.parent / "train.de"
    text_file.write_text("\n".join(NEW_TEXT) + "\n", encoding="utf-8")
    plm = model(tokenizer).eval()
    old_rows = plm.target_bert.get_input_embeddings().weight.detach().clone()
    old_bias = plm.target_bert.cls.predictions.bias.detach().clone()
    old_tokens = spelled_tokens(tokenizer)
    rows = {"plm-nmt-fwet": TransferMethod(method="plm-nmt", target_vocabulary="fwet")}
    knobs = knobs_for("plm-nmt-fwet", rows)
    res = Resources(pretrained=downstream_spm.parent, downstream_spm={"tgt": downstream_spm}, knobs=knobs,
                    text={"tgt": [text_file]})
    new_tokenizer, diagnostics = adapt_plm_decoder(plm, tokenizer, res, "plm-nmt-fwet", METHODS["plm-nmt"])
    assert diagnostics["initializer"] == "fwet" and diagnostics["counted"] > 0
    assert diagnostics["rows"]["copied"] > 0 and diagnostics["rows"]["projected"] > 0
    new_tokens = spelled_tokens(new_tokenizer)
    emb = plm.target_bert.get_input_embeddings().weight
    assert emb.shape[0] == len(new_tokenizer) == plm.target_bert.config.vocab_size
    assert plm.target_bert.cls.predictions.decoder.weight is emb  # the output layer follows
    shared = [(i, old_tokens.index(t)) for i, t in enumerate(new_tokens) if t in old_tokens]
    assert len(shared) > 5
    for new, old in shared:
        assert torch.equal(emb[new], old_rows[old]) and plm.target_bert.cls.predictions.bias[new] == old_bias[old]
    batch = new_tokenizer(NEW_TEXT[:2], padding=True, return_tensors="pt")
    source = tokenizer(TEXT[:2], padding=True, return_tensors="pt")
    logits, _, _ = plm(source["input_ids"], source["attention_mask"], batch["input_ids"], batch["attention_mask"])
    assert logits.shape[-1] == len(new_tokenizer)
    save_abnet(plm, res.pretrained / "model", tokenizer, new_tokenizer)
    loaded, _, loaded_tokenizer = load_abnet(res.pretrained / "model")
    assert len(loaded_tokenizer) == len(new_tokenizer)
    assert all(torch.equal(v, loaded.state_dict()[k]) for k, v in plm.state_dict().items())


def test_random_rows_and_wrong_rows_are_refused_clearly(tokenizer, downstream_spm):
    from vocabridge.errors import ConfigError
    from vocabridge.plm.vocabulary import adapt_plm_decoder
    from vocabridge.transfer import METHODS, Resources, knobs_for

    rows = {"plm-nmt-random": TransferMethod(method="plm-nmt", target_vocabulary="ft-tgtv-random")}
    knobs = knobs_for("plm-nmt-random", rows)
    plm = model(tokenizer)
    res = Resources(pretrained=downstream_spm.parent, downstream_spm={"tgt": downstream_spm}, knobs=knobs, seed=3)
    new_tokenizer, diagnostics = adapt_plm_decoder(plm, tokenizer, res, "plm-nmt-random", METHODS["plm-nmt"])
    assert diagnostics["rows"]["random"] > 0 and diagnostics["rows"]["projected"] == 0
    assert np.isfinite(plm.target_bert.get_input_embeddings().weight.detach().numpy()).all()
    for row, expected in ((TransferMethod(method="plm-nmt", target_vocabulary="patt-eg-kd"), "not an initialiser"),
                          (TransferMethod(method="abnet", target_vocabulary="fwet"), "only for PLM-sponsored rows"),
                          (TransferMethod(method="va-llm", target_vocabulary="fwet"), "only for PLM-sponsored rows")):
        with pytest.raises(ConfigError, match=rf"rows.x.target_vocabulary: .*{expected}"):
            knobs_for("x", {"x": row})
