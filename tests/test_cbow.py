"""CBOW vectors as starting rows of the upstream model (Sato et al. 2020, §4.2) on tiny hand-made data."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from gensim.models import KeyedVectors

from vocabridge.cbow import domain_text, initialise_embeddings, rows_from_vectors
from vocabridge.config import Arch, Cbow, SpmModel
from vocabridge.errors import InputError
from vocabridge.nmt.model import build_model
from vocabridge.nmt.vocab import pair_vocabs
from vocabridge.tokenizers import train_spm

DE = [f"das haus nummer {i} ist {'groß' if i % 2 else 'klein'} und alt" for i in range(300)]
EN = [f"the house number {i} is {'big' if i % 2 else 'small'} and old" for i in range(300)]
ARCH = Arch(d_model=16, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=32, max_positions=64)


def test_rows_with_a_vector_take_its_direction_at_the_scale_of_the_rows_they_replace():
    kv = KeyedVectors(vector_size=2)
    kv.add_vectors(["▁a", "▁b"], np.array([[3.0, 0.0], [0.0, 1.0]], dtype=np.float32))
    rows = np.array([[9.0, 9.0], [1.0, 0.0], [0.0, 3.0], [5.0, 5.0]], dtype=np.float32)  # </s>, ▁a, ▁b, <pad>
    out, covered = rows_from_vectors(kv, ["</s>", "▁a", "▁b", "<pad>"], rows)
    # the replaced rows' mean norm is 2 and the vectors' is 2 too: scale 1, the vectors as they are
    assert covered == 2 and np.allclose(out[1:3], [[3.0, 0.0], [0.0, 1.0]])
    assert np.array_equal(out[[0, 3]], rows[[0, 3]])  # no vector: the row stays
    out, _ = rows_from_vectors(kv, ["</s>", "▁a", "▁b", "<pad>"], rows * 10)
    assert np.allclose(out[1:3], [[30.0, 0.0], [0.0, 10.0]])  # one scale for all: relative norms kept
    none, covered = rows_from_vectors(kv, ["</s>", "▁c"], rows[:2])
    assert covered == 0 and np.array_equal(none, rows[:2])


def test_the_model_starts_from_cbow_rows_on_both_sides_and_the_output_layer_follows():
    cfg = SpmModel(vocab_size=60, hard_vocab_limit=False)
    src, tgt = pair_vocabs(train_spm(DE, cfg, 1, 1, "de"), train_spm(EN, replace(cfg, vocab_size=50), 1, 1, "en"))
    model = build_model(ARCH, src, tgt, seed=1)
    random_rows = {"src": model.get_encoder().embed_tokens.weight.detach().clone(),
                   "tgt": model.get_decoder().embed_tokens.weight.detach().clone()}
    stats = initialise_embeddings(model, {"src": src, "tgt": tgt}, {"src": DE, "tgt": EN}, Cbow(epochs=2))
    for role, vocab, embedding in (("src", src, model.get_encoder().embed_tokens),
                                   ("tgt", tgt, model.get_decoder().embed_tokens)):
        rows = embedding.weight.detach()
        changed = (rows != random_rows[role]).any(dim=1)
        text = DE if role == "src" else EN
        seen = {piece for line in vocab.sp.encode(text, out_type=str) for piece in line}
        assert stats[role]["cbow_rows"] == int(changed.sum()) == len(seen & set(vocab.tokens)) > 0  # every piece seen
        specials = [vocab.tokens.index(t) for t in ("</s>", "<unk>", "<pad>")]
        assert not changed[specials].any()
    assert torch.equal(model.lm_head.weight, model.get_decoder().embed_tokens.weight)  # tied: output rows follow


def test_domain_text_is_the_training_side_then_the_monolingual_text(tmp_path):
    (tmp_path / "train.de").write_text("eins\nzwei\n", encoding="utf-8")
    assert domain_text(tmp_path, "de") == ["eins", "zwei"]
    (tmp_path / "mono.de").write_text("drei\n", encoding="utf-8")
    assert domain_text(tmp_path, "de") == ["eins", "zwei", "drei"]
    with pytest.raises(InputError, match="train.en"):
        domain_text(tmp_path, "en")
