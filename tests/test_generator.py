"""Generator pretraining (Liu et al. 2021, §3.3): re-segmentation, the extended model, training and resuming."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from vocabridge.config import Arch, GeneratorTraining, Resegment, SpmModel
from vocabridge.nmt.data import Parallel
from vocabridge.nmt.model import build_model
from vocabridge.nmt.vocab import pair_vocabs
from vocabridge.tokenizers import train_spm
from vocabridge.transfer.generator import Generator
from vocabridge.transfer.generator_training import (
    GeneratorTrainer,
    forward_extended,
    resegment,
    resegment_word,
    words_of,
)

B = "\u2581"
VOCAB = {f"{B}the", f"{B}house", "s", f"{B}is", "ing", f"{B}build", f"{B}un", "believ", "able", f"{B}a", "b", "le",
         f"{B}", "x", "</s>", "<unk>"}

DE = [f"das gebäude nummer {i} ist {'großartig' if i % 2 else 'unglaublich'} und wunderschön" for i in range(200)]
EN = [f"the building number {i} is {'magnificent' if i % 2 else 'unbelievable'} and beautiful" for i in range(200)]
ARCH = Arch(d_model=16, encoder_layers=1, decoder_layers=1, heads=2, ffn_dim=32, max_positions=64, dropout=0.3)
CFG = GeneratorTraining(steps=8, batch_tokens=300, lr=0.05, log_every=2, checkpoint_every=2,
                        max_members=6, threads=1)


def test_words_group_pieces_at_the_boundary_marker():
    pieces = [f"{B}un", "believ", "able", f"{B}", "x", f"{B}is", "</s>"]
    assert words_of(pieces) == [[f"{B}un", "believ", "able"], [f"{B}", "x"], [f"{B}is"], ["</s>"]]


def boundaries(pieces):
    return set(np.cumsum([len(p) for p in pieces])[:-1].tolist())


def test_resegmentation_splits_and_merges_keeping_words_and_the_marker():
    word = [f"{B}un", "believ", "able"]
    splits, merges = set(), set()
    for seed in range(300):
        rng = np.random.default_rng(seed)
        out = resegment_word(word, VOCAB, Resegment(), rng)
        assert "".join(out) == "".join(word)  # the same characters, nothing lost or added
        assert out[0].startswith(B) and not any(B in p for p in out[1:])  # the marker stays in front
        (merges if boundaries(out) <= boundaries(word) else splits).add(tuple(out))
    assert {(f"{B}unbelievable",), (f"{B}unbeliev", "able"), (f"{B}un", "believable"), tuple(word)} == merges
    assert len(splits) > 5  # long words are split too, at new boundaries
    # a split never leaves a left piece that the pretrained vocabulary has
    split_only = Resegment(split_word=1.0, split_cut=0.9, split_cut_edge=0.9)
    for seed in range(100):
        out = resegment_word(word, VOCAB, split_only, np.random.default_rng(seed))
        if out != word:
            assert all(p not in VOCAB for p in out[:-1]), out
    # short words are never split, only merged
    short = [f"{B}a", "b", "le"]
    assert all("".join(resegment_word(short, VOCAB, split_only, np.random.default_rng(s))) == f"{B}able"
               and len(resegment_word(short, VOCAB, split_only, np.random.default_rng(s))) <= 3 for s in range(20))


def test_resegmentation_is_seeded_and_aligns_words():
    pieces = [f"{B}the", f"{B}house", "s", f"{B}un", "believ", "able", "<unk>", f"{B}build", "ing"]
    a = resegment(pieces, VOCAB, Resegment(), np.random.default_rng(3))
    assert a == resegment(pieces, VOCAB, Resegment(), np.random.default_rng(3))
    new, word_old, word_new = a
    assert word_old == [0, 1, 1, 2, 2, 2, 3, 4, 4] and "<unk>" in new
    for w in range(5):
        assert "".join(p for p, i in zip(new, word_new, strict=True) if i == w) == "".join(
            p for p, i in zip(pieces, word_old, strict=True) if i == w)


@pytest.fixture(scope="module")
def setup():
    cfg = SpmModel(vocab_size=90, hard_vocab_limit=False)
    src, tgt = pair_vocabs(train_spm(DE, cfg, 1, 1, "de"), train_spm(EN, cfg, 1, 1, "en"))
    model = build_model(ARCH, src, tgt, seed=1)
    return model, src, tgt, Parallel.encode(DE, EN, src, tgt, max_len=60)


def trainer(setup, tmp_path, kind="patt", kd=0.5, cfg=CFG, sides="decoder"):
    model, src, tgt, data = setup
    return GeneratorTrainer(model, src, tgt, data, Generator(kind, ARCH.d_model), kd, cfg, Resegment(),
                            tmp_path / "ckpt", {"test": 1}, sides=sides)


def test_extended_forward_equals_the_plain_model_and_the_model_is_frozen(setup, tmp_path):
    tr = trainer(setup, tmp_path)
    model = setup[0]
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    b = tr.batch(np.arange(6), 0)
    with torch.no_grad():
        logits, _, _ = forward_extended(model, b.input_ids, b.attention_mask, b.decoder_input_ids)
        plain = model(input_ids=b.input_ids, attention_mask=b.attention_mask,
                      decoder_input_ids=b.decoder_input_ids).logits
        # both sides extended by zero rows: still the plain model
        empty = torch.zeros(0, ARCH.d_model)
        both, _, _ = forward_extended(model, b.input_ids, b.attention_mask, b.decoder_input_ids, dec_rows=empty,
                                      bias_rows=torch.zeros(0), enc_rows=empty)
    assert torch.equal(logits, plain) and torch.equal(both, plain)
    assert b.unseen["decoder"] and b.new_labels.max() >= len(setup[2])  # unseen tokens get extra ids


def test_training_reduces_the_loss_and_only_the_generator_changes(setup, tmp_path):
    model = setup[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tr = trainer(setup, tmp_path, cfg=replace(CFG, steps=12, checkpoint_every=100))
    fixed = [tr.batch(np.arange(i, i + 8), 1000 + i) for i in range(0, 40, 8)]
    with torch.no_grad():
        start = sum(tr.losses(b)[0].item() for b in fixed)
    state = tr.train()
    with torch.no_grad():
        end = sum(tr.losses(b)[0].item() for b in fixed)
    assert end < start, (start, end)
    assert state.step == 12 and state.unseen > 0 and [r["step"] for r in state.log] == [2, 4, 6, 8, 10, 12]
    assert tr.gen.w.abs().sum() > 0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("sides", ["decoder", "both"])
def test_interrupted_training_resumes_exactly(setup, tmp_path, sides):
    cfg = CFG
    whole = trainer(setup, tmp_path / "whole", cfg=cfg, sides=sides)
    whole.train()
    first = trainer(setup, tmp_path / "parts", cfg=replace(cfg, steps=4), sides=sides)
    first.train()
    assert {p.name for p in (tmp_path / "parts/ckpt/last").iterdir()} == {
        "model.safetensors", "optimizer.safetensors", "state.json"}  # vocabridge/checkpoint.py's layout
    assert not list((tmp_path / "parts/ckpt/last").glob("*.pt")) and not list((tmp_path / "parts").rglob("*.bin"))
    second = trainer(setup, tmp_path / "parts", cfg=cfg, sides=sides)  # a fresh process would start like this
    state = second.train()
    assert state.step == 8 and second.state.log == whole.state.log
    assert torch.equal(second.gen.w, whole.gen.w)
    # a checkpoint of another configuration is not resumed
    other = GeneratorTrainer(*setup, Generator("patt", ARCH.d_model), 0.5, cfg, Resegment(),
                             tmp_path / "parts" / "ckpt", {"test": 2})
    assert not other._resume()


@pytest.mark.parametrize(("method", "sides"), [("patt-eg", None), ("patt-eg-kd", "both"), ("att-eg", None)])
def test_trained_generator_methods_load_the_stage_output(setup, tmp_path, method, sides):
    from vocabridge.config import TransferMethod
    from vocabridge.errors import InputError
    from vocabridge.fileio import sha256_file
    from vocabridge.nmt.model import save_model
    from vocabridge.transfer import METHODS, Resources, knobs_for
    from vocabridge.transfer.generator import save_generator

    model, src, tgt, _ = setup
    save_model(model, src, tgt, tmp_path / "pretrained")
    cfg = SpmModel(vocab_size=60, hard_vocab_limit=False)
    new = {"src": tmp_path / "de.model", "tgt": tmp_path / "en.model"}
    new["src"].write_bytes(train_spm([x.replace("gebäude", "haus") for x in DE], cfg, 1, 1, "de"))
    text = [f"buildings numbered {i} are unbelievably magnificent, beautifully built" for i in range(200)]
    new["tgt"].write_bytes(train_spm(text, cfg, 1, 1, "en"))
    knobs = knobs_for(method, {method: TransferMethod(sides=sides)} if sides else {})
    res = Resources(pretrained=tmp_path / "pretrained", downstream_spm=new, knobs=knobs, generator=tmp_path / "gen")
    with pytest.raises(InputError, match="run `dvc repro generator`"):
        METHODS[method].build(res)
    variant = {"att-eg": "att", "patt-eg": "patt", "patt-eg-kd": "patt-kd"}[method]
    variant += "-both" if sides == "both" else ""  # a row on both sides uses the generator trained on both
    gen = Generator("att" if method == "att-eg" else "patt", ARCH.d_model)
    torch.nn.init.normal_(gen.w)
    (tmp_path / "gen").mkdir()
    save_generator(gen, tmp_path / "gen" / f"{variant}.safetensors", model_sha256="0" * 64)
    with pytest.raises(InputError, match="generator trained against another model"):
        METHODS[method].build(res)  # same dimension, another model: refused, not silently applied
    pretrained_sha = sha256_file(tmp_path / "pretrained" / "model.safetensors")
    save_generator(gen, tmp_path / "gen" / f"{variant}.safetensors", model_sha256=pretrained_sha)
    adapted, _, new_tgt, diagnostics = METHODS[method].build(res)
    assert diagnostics["decoder"]["adapted"] and diagnostics["decoder"]["generator"] == gen.kind
    assert diagnostics["decoder"]["with_members"] > 0
    assert diagnostics["encoder"]["adapted"] == (sides == "both")
    assert knobs.sides == (sides or "decoder")  # Liu et al.'s experiments adapt the decoder only
    # the stage output's weights make the rows: another generator in the same file gives other rows, only there
    other = Generator(gen.kind, ARCH.d_model)
    torch.nn.init.normal_(other.w, std=3.0)
    save_generator(other, tmp_path / "gen" / f"{variant}.safetensors", model_sha256=pretrained_sha)
    again, _, _, _ = METHODS[method].build(res)
    for side in ("decoder", "encoder"):
        a, b = (getattr(m.model, side).embed_tokens.weight for m in (adapted, again))
        changed = int((a != b).any(1).sum())  # a row of one member is that member's row, whatever the weights
        if diagnostics[side]["adapted"]:
            assert 0 < changed <= diagnostics[side]["with_members"], side
        else:
            assert changed == 0, side


def test_distillation_loss_is_zero_when_nothing_is_resegmented(setup, tmp_path):
    model, src, tgt, data = setup
    still = Resegment(split_word=0.0, merge=0.0)
    tr = GeneratorTrainer(model, src, tgt, data, Generator("patt", ARCH.d_model), 0.5, CFG, still, tmp_path / "c",
                          {"test": 2})
    b = tr.batch(np.arange(8), 0)
    assert not b.unseen["decoder"] and b.words > 0
    with torch.no_grad():
        total, lp, ld = tr.losses(b)
    assert ld.item() == 0.0 and total.item() == lp.item()


@pytest.mark.slow
def test_a_saved_generator_is_the_same_bytes_in_every_process(tmp_path):
    """safetensors writes metadata in a hash map's order, which differs between processes: save_generator sorts
    it, so a rerun of the generator stage writes the same file (else DVC sees a new output)."""
    import subprocess
    import sys

    code = ("import sys, torch; from vocabridge.transfer.generator import Generator, save_generator; "
            "torch.manual_seed(0); save_generator(Generator('patt', 4, 'code'), sys.argv[1], model_sha256='ab')")
    blobs = set()
    for i in range(4):
        out = tmp_path / f"g{i}.safetensors"
        subprocess.run([sys.executable, "-c", code, str(out)], check=True, timeout=120)
        blobs.add(out.read_bytes())
    assert len(blobs) == 1
    from vocabridge.transfer.generator import load_generator

    assert load_generator(tmp_path / "g0.safetensors", 4, model_sha256="ab").kind == "patt"
