"""focus-ref (the FOCUS reference implementation, deepfocus) on tiny hand-made vocabularies, and our `focus`
configuration held against deepfocus's own code on the same auxiliary vectors.

The first test runs everywhere; the others need deepfocus
(`pip install -e '.[focus]' && pip install --no-deps deepfocus==1.0.1`), which CI installs and requires
(VOCABRIDGE_REQUIRE_FOCUS=1: a missing deepfocus fails them); elsewhere they skip with that reason.
"""

from __future__ import annotations

import importlib
import os
import random
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import sentencepiece as spm
import torch
from gensim.models import KeyedVectors

from vocabridge.entry import run
from vocabridge.errors import ConfigError
from vocabridge.nmt.model import build_model, load_model, save_model
from vocabridge.nmt.vocab import Vocab
from vocabridge.transfer import METHODS, Resources, knobs_for
from vocabridge.transfer import focus_ref as focus_ref_module
from vocabridge.transfer.methods import anchors
from vocabridge.transfer.plan import SPECIALS, Side, is_filler
from vocabridge.transfer.swap import matrices, pair

D = 16
ARCH = SimpleNamespace(d_model=D, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=32, dropout=0.0,
                       attention_dropout=0.0, max_positions=32)
MESSAGE = ("focus-ref needs deepfocus: pip install -e '.[focus]' && "
           "pip install --no-deps deepfocus==1.0.1")
NO_EXTRA = ("deepfocus is not installed; `pip install -e '.[focus]' && pip install --no-deps deepfocus==1.0.1` "
            "runs this comparison with FOCUS's own code")


def test_focus_ref_without_the_extra_is_one_clear_line(monkeypatch, tmp_path, capsys):
    for name in ("deepfocus", "deepfocus.focus", "deepfocus.fasttext_embs"):
        monkeypatch.setitem(sys.modules, name, None)  # `import deepfocus` now fails, installed or not
    res = Resources(pretrained=tmp_path / "no-model", downstream_spm={}, corpus=tmp_path)
    with pytest.raises(ConfigError) as err:
        METHODS["focus-ref"].build(res)
    assert str(err.value) == MESSAGE
    with pytest.raises(SystemExit) as stop:
        run(lambda argv: METHODS["focus-ref"].build(res), [])
    assert stop.value.code == 2
    assert capsys.readouterr().err == f"error: {MESSAGE}\n"


# --- with deepfocus ---------------------------------------------------------------------------------------------

WORDS = {
    "de": (["haus", "garten", "wasser", "licht", "strasse", "abend", "morgen", "freund", "wort", "stadt"],
           ["datei", "fenster", "drucker", "menue", "taste"],  # upstream only (software)
           ["tempel", "prophet", "gnade", "suende", "hirte", "opfer"]),  # downstream only (Bible)
    "en": (["house", "garden", "water", "light", "street", "evening", "morning", "friend", "word", "city"],
           ["file", "window", "printer", "menu", "button"],
           ["temple", "prophet", "grace", "sinner", "shepherd", "offering"]),
}
SUFFIXES = ["", "s", "en", "er"]


def lines_of(lang: str, domain: str, n: int, seed: int) -> list[str]:
    common, upstream, downstream = WORDS[lang]
    words = common + (upstream if domain == "upstream" else downstream)
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) + rng.choice(SUFFIXES) for _ in range(8)) for _ in range(n)]


def train_spm(lines: list[str], prefix, size: int):
    prefix.parent.mkdir(parents=True, exist_ok=True)
    text = prefix.with_suffix(".txt")
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(prefix), vocab_size=size, model_type="unigram",
                                   character_coverage=1.0, bos_id=-1, eos_id=1, unk_id=0, pad_id=-1,
                                   hard_vocab_limit=False, num_threads=1, minloglevel=2)
    return prefix.with_suffix(".model")


@pytest.fixture
def project(tmp_path):
    """A tiny pretrained Marian model (upstream vocabularies), new vocabularies and downstream text (de -> en)."""
    old, new = {}, {}
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for seed, lang in enumerate(("de", "en")):
        old[lang] = train_spm(lines_of(lang, "upstream", 1500, seed), tmp_path / "upstream" / lang, 60)
        train = lines_of(lang, "downstream", 1500, 10 + seed)
        mono = lines_of(lang, "downstream", 500, 20 + seed)
        new[lang] = train_spm(train + mono, tmp_path / "downstream" / lang, 70)
        (corpus / f"train.{lang}").write_text("\n".join(train) + "\n", encoding="utf-8")
        (corpus / f"mono.{lang}").write_text("\n".join(mono) + "\n", encoding="utf-8")
        (corpus / f"test.{lang}").write_text("never read\n", encoding="utf-8")
    src, tgt = pair(Vocab.from_spm(old["de"]), Vocab.from_spm(old["en"]))
    save_model(build_model(ARCH, src, tgt, seed=0), src, tgt, tmp_path / "pretrained")
    return SimpleNamespace(pretrained=tmp_path / "pretrained", new_spm={"src": new["de"], "tgt": new["en"]},
                           corpus=corpus)


def deepfocus(module: str):
    """deepfocus's `module`; skips without it, fails where the run requires it (CI)."""
    if os.environ.get("VOCABRIDGE_REQUIRE_FOCUS", "0") != "0":
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=NO_EXTRA)


@pytest.fixture
def deepfocus_embs():
    return deepfocus("deepfocus.fasttext_embs")


@pytest.fixture
def focus_ref(deepfocus_embs, project, monkeypatch):
    """focus-ref built on the tiny project, fastText at the model's dimension (so that our `focus` can take the
    same vectors), with deepfocus's fastText models kept for the checks. (Without the extra it skips before the
    project is built.)"""
    monkeypatch.setitem(focus_ref_module.FASTTEXT, "dim", D)
    trained = []
    original = deepfocus_embs.load_target_token_embedding

    def keep(**kw):
        model = original(**kw)
        trained.append((kw["target_tokenizer"].get_vocab(), model))
        return model

    monkeypatch.setattr(deepfocus_embs, "load_target_token_embedding", keep)
    res = Resources(pretrained=project.pretrained, downstream_spm=project.new_spm, corpus=project.corpus, seed=1,
                    knobs=knobs_for("focus-ref", {}))
    model, src, tgt, diagnostics = METHODS["focus-ref"].build(res)
    pretrained, old_src, old_tgt = load_model(project.pretrained)
    sides = {}
    for name, old, new in (("encoder", old_src, src), ("decoder", old_tgt, tgt)):
        vocab = {t: i for i, t in enumerate(new.tokens)}
        fasttext = next(m for v, m in trained if v == vocab)
        sides[name] = SimpleNamespace(old=old.tokens, new=new.tokens, old_rows=matrices(pretrained)[name],
                                      rows=matrices(model)[name], fasttext=fasttext, old_sp=old.sp)
    return SimpleNamespace(sides=sides, diagnostics=diagnostics, model=model, src=src, tgt=tgt)


def convex_residual(x: np.ndarray, points: np.ndarray) -> float:
    """Distance of x from the convex hull of `points` (non-negative weights summing to one, by NNLS)."""
    from scipy.optimize import nnls

    big = 1e3
    a = np.vstack([points.T, big * np.ones((1, len(points)))]).astype(np.float64)
    b = np.append(x, big).astype(np.float64)
    w, _ = nnls(a, b)
    return float(np.linalg.norm(points.T @ w - x))


@pytest.mark.slow
def test_focus_ref_copies_overlapping_tokens_and_combines_their_rows(focus_ref):
    from deepfocus.focus import is_very_rare_token

    for name, s in focus_ref.sides.items():
        diag = focus_ref.diagnostics[name]
        assert diag["adapted"] and diag["deepfocus"]
        old_index = {t: j for j, t in enumerate(s.old)}
        ordinary = [(i, t) for i, t in enumerate(s.new) if t not in SPECIALS and not is_filler(t)]
        shared = [(i, old_index[t]) for i, t in ordinary if t in old_index]
        new = [i for i, t in ordinary if t not in old_index]
        assert shared and new
        # overlapping = our exact shared pieces; their rows are the pretrained rows, bit for bit
        assert diag["overlapping"] == diag["overlapping_as_ours"] == diag["shared_exact"] == len(shared)
        for i, j in shared:
            np.testing.assert_array_equal(s.rows[i], s.old_rows[j])
        used = [j for i, j in shared if not is_very_rare_token(s.new[i], s.fasttext)]
        used += [old_index[t] for t in SPECIALS if t in s.new and t in old_index and t in s.fasttext]
        assert diag["special_anchors"] == ["</s>"]  # fastText's end-of-line token meets Marian's </s>
        anchors_ = s.old_rows[used]
        projected = [i for i in new if not is_very_rare_token(s.new[i], s.fasttext)]
        assert diag["projected"] == len(projected) > 0 and diag["anchors"] == len(used)
        scale = float(np.linalg.norm(s.old_rows, axis=1).mean())
        for i in projected:  # each new token: a convex combination of the overlapping tokens' rows
            assert convex_residual(s.rows[i], anchors_) < 1e-4 * scale, s.new[i]
        assert diag["rows"]["projected"] > 0 and diag["leave_one_out"]["held_out"] >= 1
        for i, t in enumerate(s.new):  # specials copied, fillers empty, as in every method
            if t in SPECIALS:
                np.testing.assert_array_equal(s.rows[i], s.old_rows[old_index[t]])
            elif is_filler(t):
                assert not s.rows[i].any()
    # the reloaded directory is the same kind as every method's
    assert focus_ref.model.config.vocab_size == len(focus_ref.src) == len(focus_ref.tgt)


@pytest.mark.slow
def test_our_focus_gives_focus_refs_rows_on_its_own_fasttext_vectors(focus_ref):
    """Our reading of FOCUS (anchors, select=all, weighting=sparsemax) against deepfocus.FOCUS end to end:
    given deepfocus's fastText vectors as the auxiliary vectors, every row must agree. FOCUS also takes the
    specials it finds in both vocabularies and in fastText (`</s>`) as anchors; our Side is told they are
    ordinary shared tokens, which is what FOCUS makes of them."""
    from deepfocus.focus import is_very_rare_token

    for name, s in focus_ref.sides.items():
        diag = focus_ref.diagnostics[name]
        ordinary = {t: f"\u2581{t}" for t in diag["special_anchors"]}  # "</s>" -> "▁</s>": no longer special
        old, new = [ordinary.get(t, t) for t in s.old], [ordinary.get(t, t) for t in s.new]
        known = [t for t in s.new if not is_very_rare_token(t, s.fasttext)]
        aux = KeyedVectors(vector_size=D)
        aux.add_vectors([ordinary.get(t, t) for t in known], np.stack([s.fasttext[t] for t in known]))
        side = Side(name, old, new, s.old_rows, aux, s.old_sp)
        plan = anchors(side, knobs_for("focus", {}), np.random.default_rng(0), select="all", weighting="sparsemax")
        assert plan.stats["anchors"] == diag["anchors"]
        projected = [i for i, k in enumerate(plan.kind) if k == "projected"]
        assert len(projected) == diag["projected"] > 0
        ours = plan.apply(s.old_rows)
        np.testing.assert_allclose(ours[projected], s.rows[projected], atol=1e-5, rtol=0)
        kept = [i for i, k in enumerate(plan.kind) if k in ("copied", "special", "unused")]
        np.testing.assert_array_equal(ours[kept], s.rows[kept])


@pytest.mark.slow
def test_our_sparsemax_weighting_is_deepfocus_weighting_step():
    """The weighting step alone on random vectors with wide sparsemax supports: our rows = deepfocus's."""
    focus = deepfocus("deepfocus.focus")
    from deepfocus.vocab_helper import NewToken, OverlappingToken, TokenClass

    rng = np.random.default_rng(3)
    dim, n_shared, n_new = 24, 150, 120
    shared = [f"\u2581s{i}" for i in range(n_shared)]
    old = ["</s>", "<unk>", *shared, "\u2581o1", "\u2581o2", "<pad>"]
    new = ["</s>", "<unk>", *shared, *(f"\u2581n{i}" for i in range(n_new)), "<pad>"]
    aux = KeyedVectors(vector_size=dim)
    aux.add_vectors(new[2:-1], rng.standard_normal((len(new) - 3, dim)).astype(np.float32))
    emb = rng.standard_normal((len(old), dim)).astype(np.float32)
    side = Side("decoder", old, new, emb, aux)
    plan = anchors(side, knobs_for("focus", {}), np.random.default_rng(0), select="all", weighting="sparsemax")
    assert plan.stats["mean_support"] > 5  # wide supports, not one-hot

    def token(native, i):
        return TokenClass(native_form=native, id=i, canonical_form=native, fuzzy_form=native, uncased_form=native,
                          no_whitespace_form=native, is_beginning_of_word=True)

    overlapping = {t: OverlappingToken(source=[token(t, old.index(t))], target=token(t, new.index(t)),
                                       source_embedding=torch.from_numpy(emb[old.index(t)]), auxiliary_embedding=aux[t])
                   for t in shared}
    fresh = {t: NewToken(target=token(t, new.index(t)), auxiliary_embedding=aux[t]) for t in new[2 + n_shared : -1]}
    theirs = focus.focus_additional_token_initialization(overlapping, fresh, torch.zeros(len(new), dim), device="cpu")
    ids = [new.index(t) for t in fresh]
    assert [plan.kind[i] for i in ids] == ["projected"] * n_new
    np.testing.assert_allclose(plan.apply(emb)[ids], theirs.numpy()[ids], atol=1e-5, rtol=0)
