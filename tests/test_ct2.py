"""CTranslate2 decoding (a core dependency: the evaluate stage's default decoder) against transformers' on a tiny
randomly initialised model."""

import copy
from dataclasses import replace

import ctranslate2
import pytest
import torch

from vocabridge.config import Arch, SpmModel
from vocabridge.nmt.model import build_model, save_model
from vocabridge.nmt.translate import translate
from vocabridge.nmt.vocab import pair_vocabs
from vocabridge.tokenizers import train_spm

DE = [f"das haus nummer {i} ist {'groß' if i % 2 else 'klein'} und alt" for i in range(200)]
EN = [f"the house number {i} is {'big' if i % 2 else 'small'} and old" for i in range(200)]
ARCH = Arch(d_model=32, encoder_layers=2, decoder_layers=2, heads=2, ffn_dim=64, max_positions=64)
LINES = [*DE[:12], "ein völlig unbekanntes wort: xylophon", "haus " * 80, "nummer 7", "7"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    cfg = SpmModel(vocab_size=120, hard_vocab_limit=False)
    src, tgt = pair_vocabs(train_spm(DE, cfg, 1, 1, "de"), train_spm(EN, replace(cfg, vocab_size=100), 1, 1, "en"))
    assert tgt.filler_ids  # <unused_i> fillers on the target side: never to be generated
    model = build_model(ARCH, src, tgt, seed=3)
    with torch.no_grad():  # training leaves the <pad> row (the decoder's start) non-zero: the output layer is tied
        model.model.decoder.embed_tokens.weight[tgt.pad_id].normal_(0, 1)
        model.final_logits_bias.normal_(0, 0.5)
    out = tmp_path_factory.mktemp("ct2") / "model"
    save_model(model, src, tgt, out)
    return out, model, src, tgt


def test_greedy_outputs_equal_transformers_greedy_outputs(model_dir):
    from vocabridge.ct2 import translate_ct2

    path, model, src, tgt = model_dir
    hf, hf_speed = translate(model, src, tgt, LINES, beam=1, batch_tokens=300, progress=False)
    ct, ct_speed = translate_ct2(path, LINES, beam=1, batch_tokens=300, threads=1)
    assert ct == hf
    assert ct_speed["mean_output_tokens"] == hf_speed["mean_output_tokens"]
    assert translate_ct2(path, [""], beam=1, threads=1)[0] == [""]  # CTranslate2 keeps "" empty


def test_step_log_probs_equal_transformers_and_pad_and_fillers_are_never_scored(model_dir, tmp_path):
    from vocabridge.ct2 import convert

    path, model, src, tgt = model_dir
    translator = ctranslate2.Translator(str(convert(path, tmp_path / "ct2")), intra_threads=1)
    line, target = DE[5], [7, 12, 30, 4, 0]
    ids = torch.tensor(src.encode([line])[0])[None]
    with torch.no_grad():
        logits = model.eval()(input_ids=ids, decoder_input_ids=torch.tensor([[tgt.pad_id, *target[:-1]]])).logits
    banned = [tgt.pad_id, *tgt.filler_ids]
    logits[..., banned] = float("-inf")  # what the converted model's output bias does
    expected = torch.log_softmax(logits[0], -1)[range(len(target)), target]
    scored = translator.score_batch([[src.tokens[i] for i in ids[0]]], [[tgt.tokens[i] for i in target[:-1]]])[0]
    assert scored.log_probs == pytest.approx(expected.tolist(), abs=1e-4)


def test_dev_bleu_through_ctranslate2_equals_transformers_and_leaves_the_model_as_it_was(model_dir):
    from vocabridge.ct2 import translate_model_ct2
    from vocabridge.nmt.train import dev_bleu

    _, model, src, tgt = model_dir
    model = copy.deepcopy(model)
    with torch.no_grad():  # outputs of some letters (the random model's are empty)
        model.final_logits_bias[0, [tgt.tokens.index(t) for t in ('e', 'h', 's')]] += 4.0
    kept, config = model.generation_config, model.config.to_dict()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    hyps = translate_model_ct2(model, src, tgt, LINES)
    assert hyps == translate(model, src, tgt, LINES, beam=1, progress=False)[0]
    assert all(hyps)
    refs = [*hyps[:-2], *EN[:2]]
    ct = dev_bleu(model, src, tgt, LINES, refs, bf16=False, decoder="ctranslate2")
    hf = dev_bleu(model, src, tgt, LINES, refs, bf16=False, decoder="transformers")
    assert ct == hf
    assert model.generation_config is kept and model.config.to_dict() == config
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_model_translator_decodes_a_directory_alike_with_either_decoder(model_dir):
    """evaluate and backtranslate decode through ModelTranslator: the same greedy outputs either way, and each
    says what precision it used."""
    from vocabridge.nmt.translate import ModelTranslator

    path, _, _, _ = model_dir
    by_ct2 = ModelTranslator(path, "ctranslate2", torch.device("cpu"), threads=1)
    by_hf = ModelTranslator(path, "transformers", torch.device("cpu"), bf16=False)
    assert by_ct2(LINES, beam=1, batch_tokens=300)[0] == by_hf(LINES, beam=1, batch_tokens=300)[0]
    assert len(by_hf.src) == len(by_ct2.src) and len(by_hf.tgt) == len(by_ct2.tgt)
    assert by_ct2.precision.as_metrics()["precision"] == "fp32"
    assert by_hf.precision.as_metrics() == {"precision": "fp32", "precision_reason": "bf16: false"}
