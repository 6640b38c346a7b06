"""Vocabulary-transfer methods on tiny hand-made embeddings whose right answer is known."""

from __future__ import annotations

import json
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
import sentencepiece as spm
import torch
from gensim.models import KeyedVectors
from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

from vocabridge.cbow import load_vectors, save_vectors
from vocabridge.config import Cbow, TransferMethod
from vocabridge.errors import ConfigError, InputError
from vocabridge.nmt.model import build_model, load_model, save_model
from vocabridge.nmt.vocab import Vocab
from vocabridge.transfer import METHODS, Resources, generators_needed, get_method, knobs_for
from vocabridge.transfer.diagnostics import leave_one_out
from vocabridge.transfer.methods import (
    anchors,
    cbow,
    char_ngrams,
    embedding_recon,
    independent,
    linear,
    random_init,
    word2vec,
)
from vocabridge.transfer.plan import Side, greedy_pieces, lle_weights, procrustes, segment_like, sparsemax
from vocabridge.transfer.swap import matrices, pair, swap_embeddings

D = 6
SHARED = ["▁a", "▁b", "▁c", "▁d", "▁e", "▁f", "▁g", "▁h"]
OLD = ["</s>", "<unk>", *SHARED, "▁old1", "▁old2", "<pad>"]
NEW = ["</s>", "<unk>", *SHARED, "▁x", "▁y", "<unused_0>", "<pad>"]


def knobs(**kw) -> TransferMethod:
    return TransferMethod(**({"sides": "both", "shared": "copy", "k": 3, "reg": 0.0} | kw))


def kv(vectors: dict[str, np.ndarray]) -> KeyedVectors:
    out = KeyedVectors(vector_size=D)
    out.add_vectors(list(vectors), np.stack(list(vectors.values())).astype(np.float32))
    return out


@pytest.fixture
def side() -> Side:
    """CBOW space = model space rotated: the shared tokens' model rows are their CBOW vectors times R."""
    rng = np.random.default_rng(0)
    cbow_vecs = {tok: rng.normal(size=D) for tok in SHARED}
    for tok in ("▁a", "▁b", "▁c"):  # a tight cluster: the nearest neighbours of their mean by cosine
        cbow_vecs[tok] = 5 * np.eye(D)[0] + rng.normal(size=D)
    cbow_vecs["▁x"] = (cbow_vecs["▁a"] + cbow_vecs["▁b"] + cbow_vecs["▁c"]) / 3
    cbow_vecs["▁y"] = rng.normal(size=D)
    rotation, _ = np.linalg.qr(rng.normal(size=(D, D)))
    emb = rng.normal(size=(len(OLD), D)).astype(np.float32)
    for tok in SHARED:
        emb[OLD.index(tok)] = cbow_vecs[tok] @ rotation
    s = Side("decoder", OLD, NEW, emb, kv(cbow_vecs))
    s.rotation = rotation
    return s


def row(plan, side, token):
    return plan.apply(side.emb)[NEW.index(token)]


def test_lle_weights_of_a_token_that_is_the_mean_of_its_neighbours():
    rng = np.random.default_rng(1)
    nbrs = rng.normal(size=(1, 3, D))
    for reg in (0.0, 1e-3):
        w, ill = lle_weights(nbrs.mean(1), nbrs, reg=reg)
        np.testing.assert_allclose(w, [[1 / 3, 1 / 3, 1 / 3]], atol=1e-6)
        assert ill.tolist() == [True]  # an exact reconstruction makes C singular: C @ 1 = 0
    x = nbrs.mean(1) + rng.normal(size=(1, D))  # off the neighbours' affine hull: C is regular
    w0, ill = lle_weights(x, nbrs, reg=0.0)
    w_reg, _ = lle_weights(x, nbrs, reg=1e-3)
    assert not ill.any()
    np.testing.assert_allclose(w_reg, w0, atol=5e-3)
    np.testing.assert_allclose(w0.sum(), 1.0, atol=1e-6)


def test_lle_flags_a_singular_local_gram_matrix():
    nbrs = np.ones((1, 3, D))  # identical neighbours: C is singular
    w, ill = lle_weights(np.zeros((1, D)), nbrs, reg=1e-3)
    assert ill.tolist() == [True]
    np.testing.assert_allclose(w.sum(1), [1.0], atol=1e-6)


def test_va_llm_gives_the_mean_of_the_exact_neighbours(side):
    plan = anchors(side, knobs(k=3), np.random.default_rng(0), select="knn", weighting="lle")
    expected = side.emb[[OLD.index(t) for t in ("▁a", "▁b", "▁c")]].mean(0)
    np.testing.assert_allclose(row(plan, side, "▁x"), expected, atol=1e-5)
    np.testing.assert_array_equal(row(plan, side, "▁a"), side.emb[OLD.index("▁a")])  # shared: copied
    assert plan.kind[NEW.index("▁x")] == "projected" and plan.kind[NEW.index("▁a")] == "copied"
    assert plan.kind[NEW.index("<unused_0>")] == "unused" and plan.kind[0] == "special"


def test_va_llm_reprojects_shared_tokens_without_using_themselves(side):
    plan = anchors(side, knobs(k=3, shared="reproject"), np.random.default_rng(0), select="knn", weighting="lle")
    assert plan.kind[NEW.index("▁a")] == "projected"
    a_row = plan.weights[NEW.index("▁a")]
    assert OLD.index("▁a") not in a_row.indices.tolist() and a_row.nnz == 3
    np.testing.assert_allclose(a_row.sum(), 1.0, atol=1e-5)


@pytest.mark.parametrize("method", ["va-cbow", "va-linear", "va-llm"])
def test_a_shared_token_without_a_cbow_vector_keeps_its_pretrained_row_when_reprojecting(side, method):
    vectors = {t: side.aux[t] for t in side.aux.index_to_key if t != "▁h"}
    lacking = Side(side.name, OLD, NEW, side.emb, kv(vectors))
    initializer = {"va-cbow": cbow, "va-linear": linear,
                   "va-llm": partial(anchors, select="knn", weighting="lle")}[method]
    plan = initializer(lacking, knobs(k=3, shared="reproject"), np.random.default_rng(0))
    assert plan.kind[NEW.index("▁h")] == "copied" and plan.kind[NEW.index("▁a")] == "projected"
    np.testing.assert_array_equal(row(plan, lacking, "▁h"), side.emb[OLD.index("▁h")])
    assert plan.stats["shared_without_vector_copied"] == 1


def test_va_linear_recovers_a_rotation_exactly(side):
    plan = linear(side, knobs(), np.random.default_rng(0))
    for tok in ("▁x", "▁y"):
        np.testing.assert_allclose(row(plan, side, tok), side.aux[tok] @ side.rotation, atol=1e-5)
    np.testing.assert_allclose(procrustes(side.aux[SHARED], side.aux[SHARED] @ side.rotation), side.rotation,
                               atol=1e-5)


def test_norm_scale_matches_the_pretrained_rows_norms(side):
    from vocabridge.transfer.methods import norm_scale

    long = Side(side.name, OLD, NEW, side.emb, kv({t: 10 * side.aux[t] for t in side.aux.index_to_key}))
    factor = np.linalg.norm(side.emb, axis=1).mean() / np.linalg.norm(long.aux.vectors, axis=1).mean()
    assert norm_scale(long, knobs(scale="norm")) == pytest.approx(factor, rel=1e-5)
    assert norm_scale(long, knobs()) == norm_scale(long, knobs(scale="none")) == 1.0  # the paper: as they are
    plain = cbow(long, knobs(shared="reproject"), np.random.default_rng(0))
    scaled = cbow(long, knobs(shared="reproject", scale="norm"), np.random.default_rng(0))
    np.testing.assert_allclose(row(scaled, long, "▁x"), factor * row(plain, long, "▁x"), rtol=1e-5)
    # a rotation of vectors 10x too long: without the scale the rows keep the 10x; with it, the mapped rows
    # have the pretrained rows' mean norm (the rotation is recovered up to the common factor)
    mapped = linear(long, knobs(scale="norm"), np.random.default_rng(0))
    np.testing.assert_allclose(row(mapped, long, "▁x"), factor * 10 * side.aux["▁x"] @ side.rotation, atol=1e-4)
    assert mapped.stats["scale"] == pytest.approx(factor, rel=1e-5)


def test_leave_one_out_is_perfect_for_va_linear_on_a_rotated_space(side):
    result = leave_one_out(side, linear, knobs(), share=0.25, seed=0)
    assert result["held_out"] == 2 and result["mean_cosine"] == pytest.approx(1.0, abs=1e-4)


def test_va_cbow_uses_the_cbow_vectors_as_they_are(side):
    plan = cbow(side, knobs(shared="reproject"), np.random.default_rng(0))
    for tok in ("▁a", "▁x"):
        np.testing.assert_allclose(row(plan, side, tok), side.aux[tok], atol=1e-6)
    assert plan.apply_bias(np.ones(len(OLD), np.float32))[NEW.index("▁x")] == 0.0


def test_random_init_copies_shared_rows_and_draws_new_ones_at_the_pretrained_scale():
    rng = np.random.default_rng(0)
    old = ["</s>", "<unk>", *[f"▁t{i}" for i in range(2000)], "<pad>"]
    new = ["</s>", "<unk>", "▁t5", *[f"▁n{i}" for i in range(3000)], "<pad>"]
    emb = (rng.normal(size=(len(old), 4)) * [1, 2, 3, 4] + 10).astype(np.float32)
    plan = random_init(Side("encoder", old, new, emb), knobs(), np.random.default_rng(1))
    rows = plan.apply(emb)
    np.testing.assert_array_equal(rows[2], emb[old.index("▁t5")])
    np.testing.assert_array_equal(rows[0], emb[0])
    np.testing.assert_allclose(rows[3:-1].std(0), [1, 2, 3, 4], rtol=0.1)
    np.testing.assert_allclose(rows[3:-1].mean(0), 10, atol=0.2)
    assert plan.shares()["random"] == pytest.approx(3000 / 3004, abs=1e-4)  # eos, unk, pad, ▁t5 and the new ones


def test_independent_rows_reuse_nothing_but_the_special_tokens(side):
    plan = independent(side, knobs(), np.random.default_rng(0))
    rows = plan.apply(side.emb)
    assert plan.shares()["copied"] == 0 and plan.shares()["special"] == pytest.approx(3 / 13, abs=1e-4)
    assert not np.allclose(rows[NEW.index("▁a")], side.emb[OLD.index("▁a")])  # a shared token is new as well
    np.testing.assert_array_equal(rows[NEW.index("</s>")], side.emb[OLD.index("</s>")])


class Lines:
    """A tokenizer whose pieces are the words of a line (SentencePiece's encode signature)."""

    def encode(self, lines, out_type=str):
        return [line.split() for line in lines]


def test_word2vec_learns_new_rows_in_the_model_space_around_fixed_shared_rows(side):
    # ▁x stands where ▁a stands, ▁y where ▁d stands: their learned rows lean towards those pretrained rows
    text = ["▁b ▁c ▁a ▁e ▁f", "▁b ▁c ▁x ▁e ▁f", "▁g ▁h ▁d ▁e ▁b", "▁g ▁h ▁y ▁e ▁b"] * 100
    texted = Side(side.name, OLD, NEW, side.emb, None, new_sp=Lines(), text=text)
    plan = word2vec(texted, knobs(), np.random.default_rng(0), Cbow(epochs=30))
    rows = plan.apply(side.emb)
    for tok in SHARED:  # shared tokens keep their pretrained rows
        np.testing.assert_array_equal(rows[NEW.index(tok)], side.emb[OLD.index(tok)])
    assert plan.stats["anchors"] == 8 and plan.stats["learned"] == 2

    def cos(u, v):
        return float(u @ v / np.linalg.norm(u) / np.linalg.norm(v))

    x, y = rows[NEW.index("▁x")], rows[NEW.index("▁y")]
    a, d = side.emb[OLD.index("▁a")], side.emb[OLD.index("▁d")]
    assert cos(x, a) > cos(x, d) and cos(y, d) > cos(y, a)
    again = word2vec(texted, knobs(), np.random.default_rng(0), Cbow(epochs=30)).apply(side.emb)
    np.testing.assert_array_equal(rows, again)  # one thread: the same rows every time
    # scale: norm gives the learned rows the pretrained rows' mean norm, directions unchanged
    scaled = word2vec(texted, knobs(scale="norm"), np.random.default_rng(0), Cbow(epochs=30))
    learned = np.stack([rows[NEW.index("▁x")], rows[NEW.index("▁y")]])
    factor = np.linalg.norm(side.emb, axis=1).mean() / np.linalg.norm(learned, axis=1).mean()
    assert scaled.stats["scale"] == pytest.approx(factor, rel=1e-5)
    np.testing.assert_allclose(scaled.apply(side.emb)[NEW.index("▁x")], factor * x, rtol=1e-5)
    with pytest.raises(InputError, match="text"):
        word2vec(Side(side.name, OLD, NEW, side.emb), knobs(), np.random.default_rng(0))


def test_char_ngrams_mark_the_word_start():
    assert char_ngrams("▁abcd") == ["<ab", "abc", "bcd", "<abc", "abcd", "<abcd"]
    assert char_ngrams("ab") == ["ab"]


def test_embedding_recon_rebuilds_a_token_from_the_ngrams_it_shares_with_pretrained_ones():
    rng = np.random.default_rng(0)
    old = ["</s>", "<unk>", "▁abcdef", "▁uvwxyz", "▁klmnop", "ghij", "<pad>"]
    new = ["</s>", "<unk>", "▁abcdefq", "▁zzzz", "<pad>"]  # ▁abcdefq: every seen n-gram is one of ▁abcdef's
    emb = rng.normal(size=(len(old), 8)).astype(np.float32)
    plan = embedding_recon(Side("decoder", old, new, emb), knobs(), np.random.default_rng(0))
    rows = plan.apply(emb)
    assert plan.stats["fit_relative_error"] < 0.05 and plan.stats["reconstructed"] == 1
    target = emb[old.index("▁abcdef")]
    got = rows[new.index("▁abcdefq")]
    assert got @ target / np.linalg.norm(got) / np.linalg.norm(target) > 0.95
    assert plan.kind[new.index("▁zzzz")] == "random"  # no n-gram seen: a counted random row


def test_sparsemax_known_values():
    out = sparsemax(torch.tensor([[1.0, 0.5, -1.0], [1.0, 0.0, 0.0]]))
    np.testing.assert_allclose(out.numpy(), [[0.75, 0.25, 0.0], [1.0, 0.0, 0.0]], atol=1e-6)


def test_focus_puts_all_weight_on_an_anchor_with_the_same_direction():
    e = np.eye(D)
    vectors = {"▁a": e[0], "▁b": e[1], "▁c": e[2], "▁x": 2 * e[0]}
    old = ["</s>", "<unk>", "▁a", "▁b", "▁c", "<pad>"]
    new = ["</s>", "<unk>", "▁a", "▁b", "▁c", "▁x", "<pad>"]
    emb = np.random.default_rng(0).normal(size=(len(old), D)).astype(np.float32)
    plan = anchors(Side("encoder", old, new, emb, kv(vectors)), knobs(), np.random.default_rng(0), select="all",
                   weighting="sparsemax")
    np.testing.assert_allclose(plan.apply(emb)[new.index("▁x")], emb[old.index("▁a")], atol=1e-6)


def test_fvt_is_the_mean_of_the_pretrained_pieces(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(["haus boot hausboot"] * 50 + ["baum haus"] * 30))
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(tmp_path / "old"), vocab_size=20,
                                   model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=1, unk_id=0,
                                   pad_id=-1, hard_vocab_limit=False, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "old.model"))
    old_vocab = Vocab.from_spm(tmp_path / "old.model")
    index = {t: i for i, t in enumerate(old_vocab.tokens)}
    emb = np.random.default_rng(0).normal(size=(len(old_vocab), D)).astype(np.float32)
    new = ["</s>", "<unk>", "▁hausbootbaum", "bootbaum", "<pad>"]
    plan = anchors(Side("encoder", old_vocab.tokens, new, emb, None, sp), knobs(), np.random.default_rng(0),
                   select="pieces", weighting="mean")
    for i, tok in ((2, "▁hausbootbaum"), (3, "bootbaum")):
        pieces = segment_like(tok, sp, index)
        assert len(pieces) >= 2 and all(p in index for p in pieces)
        assert tok.startswith("▁") == pieces[0].startswith("▁")
        np.testing.assert_allclose(plan.apply(emb)[i], emb[[index[p] for p in pieces]].mean(0), atol=1e-6)


def test_greedy_pieces_takes_the_longest_match():
    assert greedy_pieces("abcd", {"a": 0, "ab": 1, "abc": 2, "d": 3, "cd": 4}) == ["abc", "d"]


def test_bad_input_is_a_clear_error(side):
    with pytest.raises(ConfigError, match="k=9 is larger than the 8 shared tokens"):
        anchors(side, knobs(k=9), np.random.default_rng(0), select="knn", weighting="lle")
    strangers = Side("encoder", OLD, ["</s>", "<unk>", "▁p", "▁q", "<pad>"], side.emb,
                     kv({"▁p": np.ones(D), "▁q": -np.ones(D)}))
    with pytest.raises(InputError, match="no shared tokens"):
        linear(strangers, knobs(), np.random.default_rng(0))
    narrow = Side("encoder", OLD, NEW, side.emb, kv({"▁a": np.ones(D)}).__class__(vector_size=3), aux_file="x.bin")
    with pytest.raises(InputError, match="x.bin: vectors have dimension 3, the model's embeddings 6"):
        cbow(narrow, knobs(), np.random.default_rng(0))
    with pytest.raises(ConfigError, match="rows.va-lm: unknown method .va-lm."):
        knobs_for("va-llm", {"va-lm": TransferMethod(k=5)})
    assert knobs_for("va-llm", {"va-llm": TransferMethod(k=5)}).shared == "reproject"
    assert knobs_for("ft-tgtv-random", {}).shared == "copy"


def test_named_rows_run_a_method_with_their_own_knobs():
    rows = {"patt-eg-kd-both": TransferMethod(method="patt-eg-kd", sides="both"), "va-llm": TransferMethod(k=5)}
    both = knobs_for("patt-eg-kd-both", rows)
    assert both.method == "patt-eg-kd" and both.sides == "both" and both.max_members == 10
    assert knobs_for("patt-eg-kd", rows).sides == "decoder"  # the method's own row keeps its defaults
    assert get_method("patt-eg-kd-both", rows) is METHODS["patt-eg-kd"]
    assert generators_needed(rows) == ["patt-kd-both"]
    assert generators_needed(rows | {"patt-eg-kd": TransferMethod(), "att-eg": TransferMethod()}) == \
        ["att", "patt-kd", "patt-kd-both"]
    with pytest.raises(ConfigError, match="rows.patt-eg-both: unknown method .patt-eg-both."):
        get_method("patt-eg-both", rows)
    with pytest.raises(ConfigError, match="rows.x.method: unknown method .patt."):
        knobs_for("va-llm", {"x": TransferMethod(method="patt")})
    with pytest.raises(ConfigError, match="rows.va-llm.method: .va-llm. is a method itself"):
        knobs_for("va-llm", {"va-llm": TransferMethod(method="fvt")})


def test_a_row_s_own_fine_tune_budget_changes_its_condition_only():
    """rows.ROW.max_updates: the row fine-tunes under its own budget (the +BT rows, on four times the pairs), its
    cells pool under a condition of their own, and every other row's knobs and condition digests stay as they were
    (committed cells of those rows still count)."""
    from dataclasses import asdict

    from vocabridge.config import Params
    from vocabridge.grid import condition_digest, knobs_digest
    from vocabridge.transfer import finetune_training, resolved_knobs

    def digests(rows: dict) -> dict:
        params = Params(rows=rows)
        return {row: (knobs_digest(resolved_knobs(row, rows)),
                      condition_digest(asdict(finetune_training(row, params)), asdict(params.evaluate), 2000))
                for row in rows}

    before = digests({"ft-srcv": TransferMethod(), "va-llm-bt": TransferMethod(method="va-llm", backtranslated=True)})
    rows = {"ft-srcv": TransferMethod(), "va-llm-bt": TransferMethod(method="va-llm", backtranslated=True,
                                                                      max_updates=8000)}
    params = Params(rows=rows)
    assert finetune_training("va-llm-bt", params).max_updates == 8000
    assert finetune_training("ft-srcv", params) == params.finetune.train  # the family's budget
    after = digests(rows)
    assert after["ft-srcv"] == before["ft-srcv"]
    assert after["va-llm-bt"][0] != before["va-llm-bt"][0] and after["va-llm-bt"][1] != before["va-llm-bt"][1]
    with pytest.raises(ConfigError, match="rows.ft-srcv.max_updates: must be at least 1, got 0"):
        knobs_for("ft-srcv", {"ft-srcv": TransferMethod(max_updates=0)})


def test_cbow_file_round_trip_and_dimension_check(tmp_path, side):
    save_vectors(side.aux, tmp_path / "de.bin")
    back = load_vectors(tmp_path / "de.bin", D)
    np.testing.assert_allclose(back["▁x"], side.aux["▁x"], atol=1e-6)
    with pytest.raises(InputError, match="de.bin: vectors have dimension 6, the model's embeddings 8"):
        load_vectors(tmp_path / "de.bin", 8)
    (tmp_path / "junk.bin").write_bytes(b"\x80\x81 not a header\n")
    with pytest.raises(InputError, match="junk.bin"):
        load_vectors(tmp_path / "junk.bin", D)


ARCH = SimpleNamespace(d_model=D * 2, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=16, dropout=0.0,
                       attention_dropout=0.0, max_positions=32)


def _spm(tmp_path, name: str, lines: list[str], size: int):
    (tmp_path / f"{name}.txt").write_text("\n".join(lines))
    spm.SentencePieceTrainer.train(input=str(tmp_path / f"{name}.txt"), model_prefix=str(tmp_path / name),
                                   vocab_size=size, model_type="unigram", character_coverage=1.0, bos_id=-1,
                                   eos_id=1, unk_id=0, pad_id=-1, hard_vocab_limit=False, minloglevel=2)
    return tmp_path / f"{name}.model"


def test_swap_keeps_the_model_and_reloads_with_transformers(tmp_path):
    de = _spm(tmp_path, "de", ["das haus ist gross", "das boot ist klein"] * 20, 20)
    en = _spm(tmp_path, "en", ["the house is big", "the boat is small"] * 20, 20)
    src, tgt = pair(Vocab.from_spm(de), Vocab.from_spm(en))
    model = build_model(ARCH, src, tgt, seed=0)
    with torch.no_grad():
        model.final_logits_bias.normal_()
    mats = matrices(model)
    assert mats["output"] is None  # tied
    # the same target pieces in reverse order: rows follow the tokens, so the outputs must not change
    pieces = [t for t in tgt.tokens[2:-1] if not t.startswith("<unused_")]
    tgt2 = Vocab(["</s>", "<unk>", *pieces[::-1], *[t for t in tgt.tokens if t.startswith("<unused_")], "<pad>"],
                 tgt.sp, tgt.spm_bytes)
    src2, tgt2 = pair(src, tgt2)
    assert len(src2) == len(tgt2) == len(tgt) and tgt2.tokens != tgt.tokens
    order = [tgt.tokens.index(t) for t in tgt2.tokens]
    src_order = [src.tokens.index(t) for t in src2.tokens]
    new = swap_embeddings(model, src2, tgt2, mats["encoder"][src_order], mats["decoder"][order], mats["bias"][order])
    assert new.lm_head.weight.data_ptr() == new.get_decoder().embed_tokens.weight.data_ptr()
    save_model(new, src2, tgt2, tmp_path / "out")
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out", use_safetensors=True).eval()
    tok = MarianTokenizer.from_pretrained(tmp_path / "out")
    batch = tok(["das haus ist klein"], return_tensors="pt")
    assert batch["input_ids"][0].tolist() == src2.encode(["das haus ist klein"])[0].tolist()
    start = torch.tensor([[tgt2.pad_id, tgt2.tokens.index(pieces[0])]])
    old_start = torch.tensor([[tgt.pad_id, tgt.tokens.index(pieces[0])]])
    old_ids = torch.tensor([src.encode(["das haus ist klein"])[0].tolist()])
    with torch.no_grad():
        before = model.eval()(input_ids=old_ids, decoder_input_ids=old_start).logits[0]
        after = reloaded(input_ids=batch["input_ids"], decoder_input_ids=start).logits[0]
    real = [i for i, t in enumerate(tgt2.tokens) if not t.startswith("<unused_") and t != "<pad>"]
    np.testing.assert_allclose(after[:, real].numpy(), before[:, [order[i] for i in real]].numpy(), atol=1e-5)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["decoder_vocab_size"] == len(tgt2) and config["pad_token_id"] == tgt2.pad_id


@pytest.mark.parametrize(("method", "sides"), [(m, "both") for m in ("ft-tgtv-random", "va-cbow", "va-linear",
                                                                      "va-llm", "fvt", "focus", "avg-eg", "fwet",
                                                                      "word2vec", "embedding-recon",
                                                                      "independent-encoder", "mean")]
                         + [("va-llm", "decoder"), ("avg-eg", "decoder")])
def test_every_method_builds_a_model_that_reloads(tmp_path, method, sides):
    de_lines = ["das haus ist gross", "das boot ist klein", "ein haus am see"] * 20
    en_lines = ["the house is big", "the boat is small", "a house by the lake"] * 20
    old = pair(Vocab.from_spm(_spm(tmp_path, "de_old", de_lines, 26)),
               Vocab.from_spm(_spm(tmp_path, "en_old", en_lines, 26)))
    save_model(build_model(ARCH, *old, seed=0), *old, tmp_path / "pretrained")
    new_de = _spm(tmp_path, "de_new", [x.replace("haus", "hütte") for x in de_lines], 30)
    new_en = _spm(tmp_path, "en_new", [x.replace("house", "hut") for x in en_lines], 30)
    cbows = {}
    for role, path, lines in (("src", new_de, de_lines), ("tgt", new_en, en_lines)):
        sp = spm.SentencePieceProcessor(model_file=str(path))
        pieces = sorted({p for line in lines for p in sp.encode(line, out_type=str)} | {
            sp.id_to_piece(i) for i in range(sp.get_piece_size())})
        rng = np.random.default_rng(len(role))
        vectors = KeyedVectors(vector_size=ARCH.d_model)
        vectors.add_vectors(pieces, rng.normal(size=(len(pieces), ARCH.d_model)).astype(np.float32))
        save_vectors(vectors, tmp_path / f"{role}.bin")
        cbows[role] = tmp_path / f"{role}.bin"
    texts = {}
    for role, lines in (("src", de_lines), ("tgt", en_lines)):
        texts[role] = [tmp_path / f"text.{role}"]
        texts[role][0].write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = Resources(pretrained=tmp_path / "pretrained", downstream_spm={"src": new_de, "tgt": new_en}, cbow=cbows,
                    text=texts, knobs=knobs_for(method, {method: TransferMethod(sides=sides, k=2)}))
    model, src, tgt, diagnostics = METHODS[method].build(res)
    assert diagnostics["decoder"]["adapted"] and diagnostics["encoder"]["adapted"] == (sides == "both")
    save_model(model, src, tgt, tmp_path / "out")
    reloaded, src2, tgt2 = load_model(tmp_path / "out")
    assert tgt2.sp.serialized_model_proto() == Vocab.from_spm(new_en).spm_bytes
    old_src_proto = spm.SentencePieceProcessor(model_file=str(tmp_path / "de_old.model")).serialized_model_proto()
    assert (src2.spm_bytes == old_src_proto) == (sides == "decoder")
    assert not any(torch.isnan(p).any() for p in reloaded.parameters())
    out = reloaded.generate(input_ids=torch.tensor([src2.encode(["das haus"])[0].tolist()]), max_new_tokens=5)
    assert reloaded.get_output_embeddings().weight.shape[0] == len(tgt2)  # every generated id is a token of tgt2
    assert out[0, 0] == reloaded.config.decoder_start_token_id and int(out.max()) < len(tgt2)


@pytest.mark.parametrize("method", ["ft-tgtv-random", "va-llm", "fwet", "avg-eg", "word2vec"])
def test_extension_keeps_every_pretrained_row_and_appends_the_new_ones(tmp_path, method):
    de_lines = ["das haus ist gross", "das boot ist klein", "ein haus am see"] * 20
    en_lines = ["the house is big", "the boat is small", "a house by the lake"] * 20
    old = pair(Vocab.from_spm(_spm(tmp_path, "de_old", de_lines, 26)),
               Vocab.from_spm(_spm(tmp_path, "en_old", en_lines, 26)))
    pretrained = build_model(ARCH, *old, seed=0)
    save_model(pretrained, *old, tmp_path / "pretrained")
    new_de = [x.replace("haus", "hütte").replace("boot", "kahn") for x in de_lines]
    new_en = [x.replace("house", "cottage").replace("boat", "canoe") for x in en_lines]
    spms, texts, cbows = {}, {}, {}
    for role, lines in (("src", new_de), ("tgt", new_en)):
        spms[role] = _spm(tmp_path, f"{role}_new", lines, 30)
        texts[role] = [tmp_path / f"text.{role}"]
        texts[role][0].write_text("\n".join(lines) + "\n", encoding="utf-8")
        sp = spm.SentencePieceProcessor(model_file=str(spms[role]))
        pieces = sorted({sp.id_to_piece(i) for i in range(sp.get_piece_size())})
        vectors = KeyedVectors(vector_size=ARCH.d_model)
        rows = np.random.default_rng(3).normal(size=(len(pieces), ARCH.d_model)).astype(np.float32)
        vectors.add_vectors(pieces, rows)
        save_vectors(vectors, tmp_path / f"{role}.bin")
        cbows[role] = tmp_path / f"{role}.bin"
    row = {"ext": TransferMethod(method=method, extend=2, sides="both", k=2)}
    knobs = knobs_for("ext", row)
    assert knobs.shared == "copy"  # extension keeps the pretrained rows, whatever the method's default
    res = Resources(pretrained=tmp_path / "pretrained", downstream_spm=spms, cbow=cbows, text=texts, knobs=knobs)
    model, src, tgt, diagnostics = get_method("ext", row).build(res)
    sides = ((src, old[0], model.get_encoder(), pretrained.get_encoder(), "src"),
             (tgt, old[1], model.get_decoder(), pretrained.get_decoder(), "tgt"))
    for new_vocab, old_vocab, module, old_module, role in sides:
        emb, old_emb = module.embed_tokens.weight, old_module.embed_tokens.weight
        info = diagnostics[f"{role}_extension"]
        assert 1 <= info["appended"] <= 2 and info["fertility"]["after"] < info["fertility"]["before"]
        real = [t for t in old_vocab.tokens if t != "<pad>" and not t.startswith("<unused_")]
        assert new_vocab.tokens[: len(real)] == real
        for i, token in enumerate(real):  # every pretrained row as it was
            assert torch.equal(emb[i], old_emb[old_vocab.tokens.index(token)]), token
        assert set(info["first"]) <= set(new_vocab.tokens)
    save_model(model, src, tgt, tmp_path / "out")
    tok = MarianTokenizer.from_pretrained(tmp_path / "out")
    cottage = tok(["das hütte"], return_tensors="pt")["input_ids"][0].tolist()
    assert cottage == src.encode(["das hütte"])[0].tolist()


def test_a_generator_row_on_another_upstream_model_is_a_named_error():
    with pytest.raises(ConfigError, match="rows.g.upstream: 'ft-tgtv'"):
        knobs_for("g", {"g": TransferMethod(method="patt-eg-kd", upstream="ft-tgtv")})


def test_extension_is_refused_for_methods_that_adapt_nothing():
    with pytest.raises(ConfigError, match="rows.x.extend"):
        knobs_for("x", {"x": TransferMethod(method="ft-srcv", extend=10)})
    with pytest.raises(ConfigError, match="rows.y.extend"):
        knobs_for("y", {"y": TransferMethod(method="va-llm", extend=-1)})


def test_methods_are_one_interface():
    for name in ("va-llm", "focus", "fvt"):
        assert METHODS[name].build.keywords["initializer"].func is anchors
    assert isinstance(METHODS["va-llm"].build.keywords["initializer"], partial)


# --- Liu et al.'s Sm(w) and generators, Duan & Zhao's FWET ------------------------------------------------------


class Segmenter:
    """A tokenizer with fixed, hand-written segmentations (SentencePiece's encode signature)."""

    def __init__(self, table: dict[str, list[str]]):
        self.table = table

    def encode(self, words, out_type=str):
        return [list(self.table[w]) for w in words]

    def encode_as_pieces(self, text):
        return list(self.table[text.strip()])


def test_sm_members_and_relations_handle_the_word_boundary_marker():
    from vocabridge.transfer.morph import HYPER_INFIX, HYPER_PREFIX, HYPER_SUFFIX, INFIX, PREFIX, SUFFIX, MorphIndex

    old = ["</s>", "<unk>", "▁nothing", "▁no", "th", "ing", "▁things", "something", "▁thing", "<pad>"]
    seg = Segmenter({"nothingness": ["▁no", "th", "ing", "ness"], "thin": ["th", "in"]})
    index = MorphIndex(old, seg, max_members=10)
    idx = {t: i for i, t in enumerate(old)}
    # a word-initial token: its pieces (prefix, infix, ...), no hyperwords but word-initial ones
    assert index.subwords("▁nothingness") == [(idx["▁no"], PREFIX), (idx["th"], INFIX), (idx["ing"], SUFFIX)]
    assert index.hyperwords("▁thin") == [(idx["▁things"], HYPER_PREFIX), (idx["▁thing"], HYPER_PREFIX)]
    # a word-internal token matches inside words, never the start of a word-initial token
    hyper = dict(index.hyperwords("thin"))
    assert hyper == {idx["▁nothing"]: HYPER_INFIX, idx["something"]: HYPER_INFIX}
    assert dict(index.hyperwords("ing"))[idx["▁nothing"]] == HYPER_SUFFIX
    assert dict(index.hyperwords("some"))[idx["something"]] == HYPER_PREFIX
    capped = MorphIndex(old, seg, max_members=2).members("thin")
    assert capped == [(idx["th"], PREFIX), (idx["▁nothing"], HYPER_INFIX)]  # subwords first, then by rank


def test_hyperword_index_matches_a_brute_force_scan():
    from vocabridge.transfer.morph import MorphIndex

    rng = np.random.default_rng(0)
    letters = list("abcde")
    old = ["</s>", "<unk>"] + sorted({("▁" if rng.random() < 0.5 else "") + "".join(rng.choice(letters, rng.integers(
        1, 6))) for _ in range(300)}) + ["<pad>"]
    index = MorphIndex(old, None, max_members=1000)
    for w in ["ab", "▁ab", "c", "▁c", "dea"]:
        found = {i for i, _ in index.hyperwords(w)}
        body = w.lstrip("▁")
        brute = {i for i, t in enumerate(old[2:-1], start=2) if t != w and (
            t.startswith(w) if w.startswith("▁") else body in t.lstrip("▁")[1:] or (
                not t.startswith("▁") and t.startswith(body)))}
        assert found == brute, w


def test_generators_follow_the_equations():
    from vocabridge.transfer.generator import Generator

    emb = torch.tensor([[1.0, 0.0], [0.0, 2.0], [4.0, 4.0]])
    ids, rel = torch.tensor([[0, 1, 0]]), torch.tensor([[0, 3, 0]])
    mask = torch.tensor([[True, True, False]])
    np.testing.assert_allclose(Generator("avg", 2)(emb, ids, rel, mask).detach().numpy(), [[0.5, 1.0]])
    # an untrained attention generator is avg
    np.testing.assert_allclose(Generator("att", 2)(emb, ids, rel, mask).detach().numpy(), [[0.5, 1.0]])
    att = Generator("att", 2)
    with torch.no_grad():
        att.w.copy_(torch.tensor([0.0, 1.0]))  # scores 0 and 2
    p = np.exp(2) / (1 + np.exp(2))
    np.testing.assert_allclose(att(emb, ids, rel, mask).detach().numpy(), [[1 - p, 2 * p]], rtol=1e-6)
    patt = Generator("patt", 2, patt_scale="paper")
    with torch.no_grad():
        patt.w[3] = torch.tensor([0.0, 1.0])  # relation 3 scores E . (0, 1) = 2; relation 0 scores 0
    # Eq. 3 as printed divides by |Sm(w)| = 2
    np.testing.assert_allclose(patt(emb, ids, rel, mask).detach().numpy(), [[(1 - p) / 2, 2 * p / 2]], rtol=1e-6)
    code = Generator("patt", 2)  # the default: as Eq. 2 and the authors' code, no 1/|Sm(w)|
    code.load_state_dict(patt.state_dict())
    np.testing.assert_allclose(code(emb, ids, rel, mask).detach().numpy(), [[1 - p, 2 * p]], rtol=1e-6)
    none = Generator("att", 2)(emb, ids, rel, torch.zeros_like(mask))
    assert torch.equal(none, torch.zeros(1, 2))


def test_generator_files_are_safetensors(tmp_path):
    from vocabridge.transfer.generator import Generator, load_generator, save_generator

    gen = Generator("patt", 4, patt_scale="code")
    with torch.no_grad():
        gen.w.normal_()
    save_generator(gen, tmp_path / "g.safetensors", model_sha256="ab" * 32)
    back = load_generator(tmp_path / "g.safetensors", 4, model_sha256="ab" * 32)
    assert back.kind == "patt" and back.patt_scale == "code" and torch.equal(back.w, gen.w)
    with pytest.raises(InputError, match="dimension 4, the model's embeddings 8"):
        load_generator(tmp_path / "g.safetensors", 8)
    with pytest.raises(InputError, match="trained against another model"):
        load_generator(tmp_path / "g.safetensors", 4, model_sha256="cd" * 32)
    with pytest.raises(InputError, match="run `dvc repro generator`"):
        load_generator(tmp_path / "missing.safetensors", 4)


SUN = ["</s>", "<unk>", "▁sun", "shine", "▁sunshine", "▁sunny", "<pad>"]  # a pretrained vocabulary


def avg_eg_plan(new: list[str], segmentations: dict[str, list[str]]):
    """avg-eg's plan for the decoder side from SUN to `new`, with hand-written pretrained segmentations."""
    from vocabridge.transfer.methods import generated

    emb = np.random.default_rng(0).normal(size=(len(SUN), D)).astype(np.float32)
    plan = generated(Side("decoder", SUN, new, emb, None, Segmenter(segmentations)),
                     knobs(max_members=10, patt_scale="paper"), np.random.default_rng(0))
    return emb, plan


def test_avg_eg_is_the_mean_of_sm(side):
    new = ["</s>", "<unk>", "▁sun", "▁sunsh", "<pad>"]
    emb, plan = avg_eg_plan(new, {"sunsh": ["▁sun", "sh"]})
    # subwords: ▁sun (sh is not a pretrained piece); hyperwords: ▁sunshine
    expected = emb[[SUN.index("▁sun"), SUN.index("▁sunshine")]].mean(0)
    np.testing.assert_allclose(plan.apply(emb)[new.index("▁sunsh")], expected, atol=1e-6)
    np.testing.assert_array_equal(plan.apply(emb)[new.index("▁sun")], emb[SUN.index("▁sun")])


def test_a_token_without_sm_members_gets_a_counted_random_row_not_zero():
    new = ["</s>", "<unk>", "▁sun", "▁sunsh", "▁qqq", "<pad>"]
    # no piece of qqq, no pretrained token containing it
    emb, plan = avg_eg_plan(new, {"sunsh": ["▁sun", "sh"], "qqq": ["▁q", "qq"]})
    row = plan.apply(emb)[new.index("▁qqq")]
    assert plan.kind[new.index("▁qqq")] == "random" and plan.kind[new.index("▁sunsh")] == "projected"
    assert np.linalg.norm(row) > 0.1 * np.linalg.norm(emb, axis=1).mean()
    assert plan.stats["without_members"] == 1 and plan.stats["with_members"] == 1


def test_fwet_counts_follow_algorithm_1():
    from vocabridge.transfer.methods import fwet, fwet_counts

    old = ["</s>", "<unk>", "▁the", "▁un", "to", "▁he", "ll", "o", "<pad>"]
    new = ["</s>", "<unk>", "▁the", "▁unto", "▁hel", "lo", "<pad>"]
    new_seg = Segmenter({"the": ["▁the"], "unto": ["▁unto"], "hello": ["▁hel", "lo"]})
    old_seg = Segmenter({"the": ["▁the"], "unto": ["▁un", "to"], "hello": ["▁he", "ll", "o"]})
    side = Side("decoder", old, new, np.eye(len(old), dtype=np.float32), new_sp=new_seg, old_sp=old_seg,
                text=["the unto the", "hello unto"])
    c = fwet_counts(side).toarray()
    n, o = {t: i for i, t in enumerate(new)}, {t: i for i, t in enumerate(old)}
    assert c[n["▁the"], o["▁the"]] == 2  # identical pieces count 1 per occurrence
    assert c[n["▁unto"], o["▁un"]] == c[n["▁unto"], o["to"]] == 2 * 2 / 1  # len(old)/len(new) per occurrence
    for piece in ("▁hel", "lo"):
        for other in ("▁he", "ll", "o"):
            assert c[n[piece], o[other]] == pytest.approx(3 / 2)
    normalized = fwet(side, knobs(fwet_weights="normalized"), np.random.default_rng(0))
    np.testing.assert_allclose(normalized.apply(side.emb)[n["▁hel"]][[o["▁he"], o["ll"], o["o"]]], [1 / 3] * 3,
                               atol=1e-6)
    soft = fwet(side, knobs(fwet_weights="softmax"), np.random.default_rng(0))
    np.testing.assert_allclose(soft.apply(side.emb)[n["▁unto"]][[o["▁un"], o["to"]]], [0.5, 0.5], atol=1e-6)


def test_fwet_without_text_is_an_error_not_zero_rows():
    from vocabridge.transfer.methods import fwet

    old, new = ["</s>", "▁the", "<pad>"], ["</s>", "▁the", "▁unto", "<pad>"]
    seg = Segmenter({"the": ["▁the"]})
    for text in ([], ["", "  "]):
        side = Side("decoder", old, new, np.eye(len(old), dtype=np.float32), new_sp=seg, old_sp=seg, text=text)
        with pytest.raises(InputError, match="fwet found no text to count"):
            fwet(side, knobs(), np.random.default_rng(0))
