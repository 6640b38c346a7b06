"""Batched translation with transformers' generation (beam or greedy), sorted by length for speed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from vocabridge.nmt.model import load_model, load_vocabs
from vocabridge.nmt.precision import Precision, resolve_bf16
from vocabridge.nmt.vocab import Vocab, fit_positions
from vocabridge.progress import progress as progress_bar

if TYPE_CHECKING:
    from transformers.models.marian.modeling_marian import MarianMTModel


@torch.inference_mode()
def translate(model: MarianMTModel, src: Vocab, tgt: Vocab, lines: list[str], *, beam: int = 5,
              length_penalty: float = 1.0, batch_tokens: int = 4000, max_len_a: float = 1.5, max_len_b: int = 10,
              bf16: bool = False, progress: bool = True) -> tuple[list[str], dict]:
    """Translate `lines`; returns detokenised hypotheses in input order and speed figures."""
    model.eval()
    device = next(model.parameters()).device
    ids = src.encode(lines)
    limit = model.config.max_position_embeddings
    ids = [fit_positions(x, limit) for x in ids]
    order = np.argsort([-len(x) for x in ids], kind="stable")
    out: list[list[int]] = [[] for _ in lines]
    started = time.perf_counter()
    bar = progress_bar(total=len(lines), desc=f"translate (beam {beam})", unit="sent", disable=not progress)
    pos = 0
    while pos < len(order):
        longest = len(ids[order[pos]])
        size = max(1, batch_tokens // (longest * beam))
        idx = order[pos : pos + size]
        batch = np.full((len(idx), longest), src.pad_id, dtype=np.int64)
        for row, i in enumerate(idx):
            batch[row, : len(ids[i])] = ids[i]
        input_ids = torch.from_numpy(batch).to(device)
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
        with autocast:
            gen = model.generate(input_ids=input_ids, attention_mask=(input_ids != src.pad_id).long(),
                                 num_beams=beam, length_penalty=length_penalty, do_sample=False,
                                 max_new_tokens=min(limit, int(longest * max_len_a) + max_len_b))
        for row, i in enumerate(idx):
            out[i] = gen[row].tolist()
        pos += len(idx)
        bar.update(len(idx))
    bar.close()
    seconds = time.perf_counter() - started
    hyps = [tgt.decode(x) for x in out]
    lengths = [sum(1 for t in x if t > 1 and t != tgt.pad_id) for x in out]
    return hyps, {"seconds": round(seconds, 3), "sentences_per_second": round(len(lines) / max(seconds, 1e-9), 2),
                  "mean_output_tokens": round(float(np.mean(lengths)) if lengths else 0.0, 2)}


class ModelTranslator:
    """A model directory decoded as `evaluate.decoder` says, so that every stage that translates (evaluate,
    backtranslate) decodes alike: CTranslate2 (converted from the directory on first use; its own compute type) or
    transformers' search on `device`, in bf16 where `bf16` (evaluate.bf16: auto | true | false) resolves to it."""

    def __init__(self, model_dir: Path, decoder: str, device: torch.device, bf16: bool | str = False,
                 threads: int = 1):
        self.model_dir, self.decoder, self.threads = Path(model_dir), decoder, threads
        self.device = torch.device(device)
        if decoder == "ctranslate2":  # CTranslate2 reads the directory itself: the vocabularies only
            self.model, (self.src, self.tgt) = None, load_vocabs(self.model_dir)
            self.precision = Precision(False, "ctranslate2 (its own default compute type)")
        else:
            self.model, self.src, self.tgt = load_model(self.model_dir, str(self.device))
            self.precision = resolve_bf16(bf16, self.device)

    def __call__(self, lines: list[str], *, beam: int, length_penalty: float = 1.0,
                 batch_tokens: int = 4000) -> tuple[list[str], dict]:
        """Hypotheses in input order and speed figures, as `translate` gives them."""
        if self.decoder == "ctranslate2":
            from vocabridge.ct2 import translate_ct2

            return translate_ct2(self.model_dir, lines, beam=beam, length_penalty=length_penalty,
                                 batch_tokens=batch_tokens, threads=self.threads, device=self.device.type)
        return translate(self.model, self.src, self.tgt, lines, beam=beam, length_penalty=length_penalty,
                         batch_tokens=batch_tokens, bf16=self.precision.bf16)
