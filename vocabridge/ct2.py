"""CTranslate2 decoding of a Marian model directory (the `bench` extra): conversion and batched search.

CTranslate2's Marian converter assumes a model trained by Marian itself: it drops `<pad>` from the vocabulary
and starts the decoder from a zero embedding. transformers' MarianMTModel starts the decoder from the
embedding of `<pad>` (`decoder_start_token_id`), and in our models that row is not zero: the decoder's
input embeddings are tied to its output projection, which trains it. So `convert` keeps `<pad>` in the
target vocabulary as the decoder's start token, with its trained embedding, and forbids `<pad>` and the
`<unused_i>` fillers as outputs (a -inf logit bias; transformers' `bad_words_ids` do the same after the
softmax, which differs by log(1 - p(<pad>)), too little to change a step's choice here). For OPUS-MT
models converted by transformers (`<pad>` appended as a zero row) this is Marian's zero start. The source
vocabulary is the model's own, without `<pad>` (never an input).

`translate_ct2` batches, truncates and limits output lengths exactly as `nmt.translate.translate` does, so
greedy outputs are the same as transformers' (but for an empty line, which CTranslate2 translates as an
empty line and transformers decodes from `</s>` alone). Both beam searches divide a finished hypothesis's
log-probability by its length counting `</s>`; they differ in when they stop: CTranslate2 once beam x
`patience` hypotheses have finished, transformers (early_stopping=False) once no open beam looks likely to
beat the finished ones. patience 2 comes closest: on the IT test set with beam 5, 1961/2000 outputs are
identical (1844 with patience 1) and BLEU is 30.72 (30.36 with patience 1) against transformers' 30.65, for
about 10% less speed than patience 1.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vocabridge.nmt.model import check_model_dir
from vocabridge.nmt.vocab import Vocab

if TYPE_CHECKING:
    from transformers import MarianMTModel


def load_vocabs(model_dir: Path) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies of a Marian model directory (as nmt.model.load_model reads them)."""
    model_dir = Path(model_dir)
    src = Vocab.from_files(model_dir / "source.spm", model_dir / "vocab.json")
    target_vocab = model_dir / "target_vocab.json"  # OPUS-MT models with one shared vocabulary have none
    tgt = Vocab.from_files(model_dir / "target.spm", target_vocab if target_vocab.is_file() else
                           model_dir / "vocab.json")
    return src, tgt


def _converter(model_dir: Path, src: Vocab, tgt: Vocab):
    import ctranslate2

    class MarianConverter(ctranslate2.converters.TransformersConverter):
        """CTranslate2's Marian conversion, with transformers' decoder start and our vocabularies."""

        def load_model(self, model_class, model_name_or_path, **kwargs):
            self.hf_model = super().load_model(model_class, model_name_or_path, **kwargs)
            return self.hf_model

        def _load(self):
            spec = super()._load()
            model, decoder = self.hf_model, spec.decoder
            embeddings = model.get_decoder().get_input_embeddings().weight.detach()
            projection = model.get_output_embeddings().weight.detach()
            if embeddings.shape[0] != len(tgt) or projection.shape[0] != len(tgt):
                raise ValueError(f"{model_dir}: decoder has {embeddings.shape[0]} embeddings, the target "
                                 f"vocabulary {len(tgt)} tokens")
            decoder.start_from_zero_embedding = False
            decoder.embeddings.weight = embeddings
            decoder.projection.weight = embeddings if projection.data_ptr() == embeddings.data_ptr() else projection
            bias = model.final_logits_bias.detach().reshape(-1).float().clone()
            bias[[tgt.pad_id, *tgt.filler_ids]] = float("-inf")
            decoder.projection.bias = bias.to(projection.dtype)
            spec.config.decoder_start_token = tgt.tokens[tgt.pad_id]
            spec._vocabularies = {"source": [src.tokens[: src.pad_id]], "target": [list(tgt.tokens)]}
            return spec

    return MarianConverter(str(model_dir))


def convert(model_dir: Path, out: Path, src: Vocab | None = None, tgt: Vocab | None = None) -> Path:
    """Write a CTranslate2 model of the Marian directory `model_dir` into `out`; returns `out`."""
    if src is None or tgt is None:
        src, tgt = load_vocabs(model_dir)
    out = Path(out)
    _converter(Path(model_dir), src, tgt).convert(str(out), force=True)
    return out


def translate_model_ct2(model: MarianMTModel, src: Vocab, tgt: Vocab, lines: list[str], *, beam: int = 1,
                        threads: int = 1) -> list[str]:
    """translate_ct2 of a model in memory (on the CPU), e.g. a training's greedy dev BLEU: the model is written to a
    temporary directory and converted there, about a second for 10M parameters; the model is left as it was."""
    from vocabridge.nmt.model import save_model

    kept = model.generation_config
    try:
        with tempfile.TemporaryDirectory(prefix="vocabridge-ct2-model-") as tmp:
            save_model(model, src, tgt, Path(tmp))
            return translate_ct2(Path(tmp), lines, beam=beam, threads=threads)[0]
    finally:
        model.generation_config = kept


def translate_ct2(model_dir: Path, lines: list[str], *, beam: int = 5, length_penalty: float = 1.0,
                  batch_tokens: int = 4000, max_len_a: float = 1.5, max_len_b: int = 10, patience: float = 2.0,
                  threads: int = 2, device: str = "cpu", compute_type: str = "default") -> tuple[list[str], dict]:
    """Translate `lines` with CTranslate2: detokenised hypotheses in input order and speed figures, the same
    contract and settings as nmt.translate.translate (the conversion is not timed)."""
    import ctranslate2

    model_dir = Path(model_dir)
    check_model_dir(model_dir)
    src, tgt = load_vocabs(model_dir)
    limit = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))["max_position_embeddings"]
    ids = src.encode(lines)
    ids = [x if len(x) <= limit else np.append(x[: limit - 1], 0) for x in ids]
    tokens = [[src.tokens[i] for i in x] for x in ids]
    order = np.argsort([-len(x) for x in ids], kind="stable")
    out: list[list[str]] = [[] for _ in lines]
    with tempfile.TemporaryDirectory(prefix="vocabridge-ct2-") as tmp:
        translator = ctranslate2.Translator(str(convert(model_dir, Path(tmp), src, tgt)), device=device,
                                            compute_type=compute_type, intra_threads=threads)
        started = time.perf_counter()
        pos = 0
        while pos < len(order):  # nmt.translate's batches: their longest source sets the output limit
            longest = len(ids[order[pos]])
            idx = order[pos : pos + max(1, batch_tokens // (longest * beam))]
            # transformers counts the forced final </s> in max_new_tokens; CTranslate2 does not
            max_new = min(limit, int(longest * max_len_a) + max_len_b)
            results = translator.translate_batch([tokens[i] for i in idx], beam_size=beam,
                                                 length_penalty=length_penalty, patience=patience,
                                                 max_decoding_length=max_new - 1,
                                                 min_decoding_length=0,  # transformers allows "" too
                                                 max_input_length=limit)
            for i, result in zip(idx, results, strict=True):
                out[i] = result.hypotheses[0]
            pos += len(idx)
        seconds = time.perf_counter() - started
    index = {tok: i for i, tok in enumerate(tgt.tokens)}
    hyps = [tgt.decode([index[p] for p in hyp]) for hyp in out]
    return hyps, {"seconds": round(seconds, 3), "sentences_per_second": round(len(lines) / max(seconds, 1e-9), 2),
                  "mean_output_tokens": round(float(np.mean([sum(1 for p in x if p != "<unk>") for x in out]))
                                          if out else 0.0, 2)}
