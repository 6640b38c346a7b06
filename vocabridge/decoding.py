"""A fine-tuned model directory decoded as the evaluate stage decodes it, whatever its family: the NMT models
(CTranslate2 or transformers' beam search) and the AB-Net family (Mask-Predict; AB-Net-Enc's and the
PLM-sponsored model's beam search). The evaluate stage and the latency benchmark share it, so that a latency
measured by hand is the one the report shows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from vocabridge.config import Evaluate, MaskPredict
from vocabridge.families import ABNET, of_model_dir
from vocabridge.nmt.precision import Precision
from vocabridge.nmt.translate import ModelTranslator
from vocabridge.plm.abnet import kind_of, load_abnet
from vocabridge.plm.train import translate_abnet


class RowDecoder:
    """`decoder(lines)` -> (hypotheses in input order, speed figures); `one_at_a_time=True` decodes each sentence
    as its own batch (Guo et al.'s latency). `name` says which decoding ran, `family` the model's
    (vocabridge.families: the AB-Net family decodes with its own search, always in fp32)."""

    def __init__(self, model_dir: Path, cfg: Evaluate, mask_predict: MaskPredict, device: torch.device,
                 threads: int = 1):
        self.cfg, self.mask_predict = cfg, mask_predict
        self.family = of_model_dir(Path(model_dir))
        self.abnet = self.family is ABNET
        if self.abnet:
            self.model, self.src, self.tgt = load_abnet(Path(model_dir), device)
            self.precision = Precision(False, "AB-Net decodes in fp32")
            self.name = kind_of(self.model).decoding
        else:
            self.translator = ModelTranslator(model_dir, cfg.decoder, device, cfg.bf16, threads)
            self.src, self.tgt, self.precision = self.translator.src, self.translator.tgt, self.translator.precision
            self.name = cfg.decoder

    def __call__(self, lines: list[str], one_at_a_time: bool = False) -> tuple[list[str], dict]:
        cfg = self.cfg
        if self.abnet:
            decoding = replace(self.mask_predict, batch_sentences=1) if one_at_a_time else self.mask_predict
            return translate_abnet(self.model, self.src, self.tgt, lines, decoding, beam=cfg.beam,
                                   length_penalty=cfg.length_penalty)
        batch_tokens = 1 if one_at_a_time else cfg.batch_tokens  # a batch holds at least one sentence
        return self.translator(lines, beam=cfg.beam, length_penalty=cfg.length_penalty, batch_tokens=batch_tokens)
