"""The PLM path on a device: the BERTs of the plm stage, AB-Net, AB-Net-Enc and the PLM-sponsored model train and
decode on the device their model is on, and decode there as they do on the CPU. On $VOCABRIDGE_TEST_DEVICE, by
default cuda where there is one and the CPU elsewhere (CI): a GPU session checks what the CPU cannot, device
mismatches; on the CPU the same code paths run (`VOCABRIDGE_TEST_DEVICE=cuda` without a GPU skips)."""

from __future__ import annotations

import copy
import os
from dataclasses import replace

import pytest
import torch

from tests.test_plm import GERMAN, TINY, abnet_training, copy_corpus, tiny_abnet, tiny_abnet_enc
from vocabridge.config import AbnetAdapters, MaskPredict, MlmTraining
from vocabridge.plm.abnet import ABNet
from vocabridge.plm.bert import MlmTrainer, build_bert, encode_sentences, train_plm_tokenizer

CUDA = torch.device(os.environ.get("VOCABRIDGE_TEST_DEVICE", "cuda" if torch.cuda.is_available() else "cpu"))
pytestmark = pytest.mark.skipif(CUDA.type == "cuda" and not torch.cuda.is_available(),
                                reason="VOCABRIDGE_TEST_DEVICE=cuda and no CUDA device")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_plm_tokenizer(GERMAN, 60, tmp_path_factory.mktemp("tok"))


def test_masked_lm_pretraining_runs_on_the_device_and_resumes_there(tokenizer, tmp_path):
    ids = encode_sentences(tokenizer, GERMAN, 40)
    cfg = MlmTraining(max_updates=6, batch_sentences=8, lr=1e-3, warmup=2, eval_every=3, checkpoint_every=3,
                      held_out_sentences=6)
    first = MlmTrainer(build_bert(TINY, tokenizer, seed=1), tokenizer, ids, ids[:6], replace(cfg, max_updates=3),
                       tmp_path, {"run": 1}, "t", CUDA)
    first.train()
    resumed = MlmTrainer(build_bert(TINY, tokenizer, seed=1), tokenizer, ids, ids[:6], cfg, tmp_path, {"run": 1},
                         "t", CUDA)
    state = resumed.train()
    assert all(p.device.type == CUDA.type for p in resumed.model.parameters())
    assert [row["step"] for row in state.curve] == [0, 3, 6]
    assert state.curve[-1]["held_out_loss"] < state.curve[0]["held_out_loss"]


@pytest.mark.parametrize("kind", ["mask-predict", "abnet-enc", "plm-nmt"])
def test_each_plm_model_trains_on_the_device_and_decodes_there_as_on_the_cpu(tokenizer, tmp_path, kind):
    from tests.test_sponsored import sponsored
    from vocabridge.plm.train import fit_abnet, translate_abnet

    if kind == "mask-predict":
        size = AbnetAdapters(encoder_inner=64, decoder_ffn=64, dropout=0.0, max_target_len=36)
        model = ABNet(build_bert(TINY, tokenizer, 1), build_bert(TINY, tokenizer, 2), size, freeze_bert=False)
    elif kind == "abnet-enc":
        model = tiny_abnet_enc(tokenizer)
    else:
        model = sponsored(tokenizer)
    corpus = copy_corpus(tmp_path / "corpus", GERMAN[:6])
    cfg, lang = abnet_training(20, eval_every=10, checkpoint_every=10)
    model.to(CUDA)
    state, summary = fit_abnet(model, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "ckpt", {"run": 1}, kind,
                               MaskPredict(2, 4))
    assert summary["device"].startswith(CUDA.type) and state.step == 20
    on_gpu, _ = translate_abnet(model, tokenizer, tokenizer, GERMAN[:6], MaskPredict(2, 4), beam=2)
    on_cpu, _ = translate_abnet(copy.deepcopy(model).cpu(), tokenizer, tokenizer, GERMAN[:6], MaskPredict(2, 4),
                                beam=2)
    assert sum(a == b for a, b in zip(on_gpu, on_cpu, strict=True)) >= 5, (on_gpu, on_cpu)


def test_an_abnet_with_frozen_berts_keeps_them_frozen_on_the_device(tokenizer, tmp_path):
    from vocabridge.plm.train import fit_abnet

    model = tiny_abnet(tokenizer).to(CUDA)
    frozen = {k: v.clone() for k, v in model.source_bert.state_dict().items()}
    corpus = copy_corpus(tmp_path / "corpus", GERMAN[:6])
    cfg, lang = abnet_training(4, eval_every=2)
    fit_abnet(model, tokenizer, tokenizer, corpus, lang, cfg, tmp_path / "ckpt", {"run": 1}, "a", MaskPredict(2, 2))
    for name, value in model.source_bert.state_dict().items():
        assert torch.equal(value, frozen[name]), name
