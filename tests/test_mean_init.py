"""The `mean` initialiser (transformers' mean_resizing) and `adapt --init-map` (rows copied from named tokens)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, MarianTokenizer

from tests.conftest import cli
from vocabridge.transfer import METHODS, TransferMethod, get_method, knobs_for
from vocabridge.transfer.init_map import apply_map, read_init_map
from vocabridge.transfer.methods import mean_init, random_init
from vocabridge.transfer.plan import Side

OLD = ["</s>", "<unk>", "▁a", "▁b", "c", "<unused_0>", "<pad>"]
NEW = ["</s>", "<unk>", "▁a", "▁new", "x", "<pad>"]


def side() -> Side:
    emb = np.arange(len(OLD) * 3, dtype=np.float32).reshape(len(OLD), 3) ** 1.5
    return Side("decoder", OLD, NEW, emb)


def test_new_rows_are_the_mean_of_the_ordinary_pretrained_rows_and_the_bias_follows():
    s = side()
    plan = mean_init(s, knobs_for("mean", {}), np.random.default_rng(0))
    rows = plan.apply(s.emb)
    ordinary = s.emb[[2, 3, 4]]  # ▁a ▁b c: not the specials, not the filler
    np.testing.assert_allclose(rows[3], ordinary.mean(0), rtol=1e-6)
    np.testing.assert_allclose(rows[4], ordinary.mean(0), rtol=1e-6)
    assert (rows[[0, 1, 2, 5]] == s.emb[[0, 1, 2, 6]]).all()  # specials and the shared ▁a keep their rows
    output = s.emb[:, ::-1] * 2  # an untied output layer gets its own rows' mean, not the embeddings'
    np.testing.assert_allclose(plan.apply(output)[3], output[[2, 3, 4]].mean(0), rtol=1e-6)
    bias = np.array([5, 0, 1, 2, 6, 9, 0], np.float32)
    assert plan.apply_bias(bias)[3] == pytest.approx(3.0) and plan.apply_bias(bias)[2] == 1.0
    assert plan.kind == ["special", "special", "copied", "projected", "projected", "special"]
    assert plan.stats == {"mean_over": 3}
    again = mean_init(s, knobs_for("mean", {}), np.random.default_rng(7))  # no seed in it
    assert (again.apply(s.emb) == rows).all()


def test_a_mapped_row_replaces_what_the_method_made(tmp_path):
    s = side()
    plan = random_init(s, knobs_for("ft-tgtv-random", {}), np.random.default_rng(0))
    mapped = apply_map(plan, {3: [3], 4: [2, 4]})  # ▁new <- ▁b; x <- mean(▁a, c)
    rows = mapped.apply(s.emb)
    assert (rows[3] == s.emb[3]).all() and (rows[4] == (s.emb[2] + s.emb[4]) / 2).all()
    assert (rows[[0, 1, 2, 5]] == plan.apply(s.emb)[[0, 1, 2, 5]]).all()
    assert mapped.kind[3:5] == ["copied", "projected"] and not mapped.direct[3:5].any()
    pooled = apply_map(mean_init(s, knobs_for("mean", {}), np.random.default_rng(0)), {4: [4]})
    assert (pooled.apply(s.emb)[4] == s.emb[4]).all() and pooled.apply_bias(np.arange(7.0))[4] == 4.0


def test_mean_is_a_method_of_the_pipeline_and_of_adapt():
    from vocabridge.cli import adapt_methods

    assert "mean" in METHODS and get_method("mean").adapts and "mean" in adapt_methods()
    row = knobs_for("mean-dec", {"mean-dec": TransferMethod(method="mean", sides="decoder")})
    assert get_method("mean-dec", {"mean-dec": TransferMethod(method="mean")}) is METHODS["mean"]
    assert row.sides == "decoder" and row.shared == "copy"


@pytest.fixture(scope="module")
def mean_adapted(it_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("mean") / "adapted"
    proc = cli("adapt", "--model", str(it_model / "opus-mt"), "--src-text", str(it_model / "bible.de"),
               "--tgt-text", str(it_model / "bible.en"), "--out", str(out), "--method", "mean", "--vocab-size", "60")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def embeddings(model_dir) -> tuple[dict[str, dict[str, torch.Tensor]], AutoModelForSeq2SeqLM]:
    """{side: {token: row}} of a model directory's encoder and decoder."""
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, use_safetensors=True)
    vocab = json.loads((model_dir / "vocab.json").read_text(encoding="utf-8"))
    target = model_dir / "target_vocab.json"
    tgt_vocab = json.loads(target.read_text(encoding="utf-8")) if target.is_file() else vocab
    rows = {}
    for name, v, module in (("encoder", vocab, model.get_encoder()), ("decoder", tgt_vocab, model.get_decoder())):
        weight = module.embed_tokens.weight.detach()
        rows[name] = {tok: weight[i] for tok, i in v.items()}
    return rows, model


def test_adapt_mean_puts_new_rows_at_the_pretrained_mean(it_model, mean_adapted):
    old, _ = embeddings(it_model / "opus-mt")
    new, model = embeddings(mean_adapted)
    diagnostics = json.loads((mean_adapted / "diagnostics.json").read_text())
    assert diagnostics["method"] == "mean" and "init_map" not in diagnostics["decoder"]
    for name in ("encoder", "decoder"):
        ordinary = [row for tok, row in old[name].items() if not tok.startswith("<")]
        mean = torch.stack(ordinary).mean(0)
        fresh = [tok for tok in new[name] if tok not in old[name] and not tok.startswith("<")]
        assert fresh and diagnostics[name]["mean_over"] == len(ordinary)
        for tok in fresh:
            torch.testing.assert_close(new[name][tok], mean, rtol=1e-5, atol=1e-6)
        shared = [tok for tok in new[name] if tok in old[name] and not tok.startswith("<")]
        assert shared and all(torch.equal(new[name][t], old[name][t]) for t in shared)
    assert model.get_output_embeddings().weight.shape[0] == model.config.vocab_size


def test_init_map_copies_named_rows_and_diagnostics_list_them(it_model, mean_adapted, tmp_path):
    old, _ = embeddings(it_model / "opus-mt")
    new, _ = embeddings(mean_adapted)
    fresh = [t for t in new["decoder"] if t not in old["decoder"] and t.startswith("▁")]
    src_fresh = next(t for t in new["encoder"] if t not in old["encoder"] and t.startswith("▁"))
    old_tgt = [t for t in old["decoder"] if t.startswith("▁")]
    old_src = next(t for t in old["encoder"] if t.startswith("▁"))
    mapping = tmp_path / "map.tsv"
    mapping.write_text(f"{fresh[0]}\t{old_tgt[0]}\n\n{fresh[1]}\t{old_tgt[1]}\t{old_tgt[2]}\n{src_fresh}\t{old_src}\n",
                       encoding="utf-8")
    out = tmp_path / "mapped"
    proc = cli("adapt", "--model", str(it_model / "opus-mt"), "--src-text", str(it_model / "bible.de"),
               "--tgt-text", str(it_model / "bible.en"), "--out", str(out), "--method", "mean", "--vocab-size", "60",
               "--init-map", str(mapping))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows, _ = embeddings(out)
    assert torch.equal(rows["decoder"][fresh[0]], old["decoder"][old_tgt[0]])  # exactly the named row
    torch.testing.assert_close(rows["decoder"][fresh[1]], (old["decoder"][old_tgt[1]] + old["decoder"][old_tgt[2]]) / 2)
    assert torch.equal(rows["encoder"][src_fresh], old["encoder"][old_src])
    assert torch.equal(rows["decoder"][fresh[2]], new["decoder"][fresh[2]])  # the others: the method's mean
    diagnostics = json.loads((out / "diagnostics.json").read_text())
    assert diagnostics["decoder"]["init_map"] == {fresh[0]: [old_tgt[0]], fresh[1]: [old_tgt[1], old_tgt[2]]}
    assert diagnostics["encoder"]["init_map"] == {src_fresh: [old_src]}
    # the tokenizer a user loads gives the mapped token the row that holds the named one (never the unknown id)
    tok = MarianTokenizer.from_pretrained(out)
    row = tok.target_encoder[fresh[0]]
    assert row != tok.target_encoder["<unk>"]
    assert torch.equal(model_rows(out)[row], old["decoder"][old_tgt[0]])


def model_rows(model_dir) -> torch.Tensor:
    """The decoder's embedding matrix of a model directory, by id."""
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, use_safetensors=True)
    return model.get_decoder().embed_tokens.weight.detach()


def test_init_map_errors_name_the_file_line_and_token_and_write_nothing(it_model, mean_adapted, tmp_path):
    new, _ = embeddings(mean_adapted)
    old, _ = embeddings(it_model / "opus-mt")
    fresh = next(t for t in new["decoder"] if t not in old["decoder"] and t.startswith("▁"))
    known = next(t for t in old["decoder"] if t.startswith("▁"))
    cases = [
        (f"{fresh}\t{known}\n{fresh} {known}\n", "map.tsv:2: expected NEW<TAB>OLD"),
        (f"{fresh}\t{known}\n\n{fresh}\t{known}\n", "map.tsv:3: '" + fresh + "' is mapped already on line 1"),
        (f"</s>\t{known}\n", "map.tsv:1: '</s>' is a special token"),
        (f"{fresh}\t\n", "map.tsv:1: an empty token"),
        (" \n\n", "map.tsv: file is empty"),
        (f"{fresh}\t{known}\nnowhere-token\t{known}\n", "map.tsv:2: 'nowhere-token' is not in the new vocabulary"),
        (f"{fresh.lstrip('▁')}\t{known}\n", f"(a word-initial piece is written '{fresh}')"),
        (f"{fresh}\tnever-seen\n", "map.tsv:1: 'never-seen' is not in the pretrained decoder vocabulary"),
        (b"\xff\t" + known.encode() + b"\n", "map.tsv:1: not UTF-8"),
    ]
    out = tmp_path / "never"
    for text, message in cases:
        mapping = tmp_path / "map.tsv"
        mapping.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        proc = cli("adapt", "--model", str(it_model / "opus-mt"), "--tgt-text", str(it_model / "bible.en"),
                   "--sides", "decoder", "--out", str(out), "--method", "mean", "--vocab-size", "60",
                   "--init-map", str(mapping))
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 2 and len(errors) == 1 and message in errors[0], (message, proc.stderr)
        assert not out.exists()
    with pytest.raises(Exception, match="no such file"):
        read_init_map(tmp_path / "missing.tsv")
