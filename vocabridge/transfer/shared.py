"""Vocabulary adaptation of NLLB-200 and M2M100 models: their one shared vocabulary and tied embedding matrix.

The same initialisers as for Marian's sides (transfer.adapt), run once on the shared matrix (Side "shared"): the
new vocabulary is a BPE SentencePiece model trained on the user's text of both languages, laid out as the
model's tokenizer requires (nmt.shared); `<s>`, `<pad>`, `</s>`, `<unk>`, the language codes and `<mask>` copy
their pretrained rows whatever the method. With `extend: N` the model's pieces keep their ids and rows and N
word-initial pieces of the trained vocabulary are appended (`extend_bpe`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import sentencepiece as spm

from vocabridge.errors import InputError
from vocabridge.nmt.shared import HEAD, SharedVocab, load_model, vocab_tokens
from vocabridge.transfer.diagnostics import leave_one_out, neighbours
from vocabridge.transfer.extension import candidates
from vocabridge.transfer.init_map import InitMap, apply_map, resolve
from vocabridge.transfer.plan import Side
from vocabridge.transfer.swap import swap_shared_embeddings

if TYPE_CHECKING:
    from transformers import M2M100ForConditionalGeneration


def extend_bpe(old: SharedVocab, new_sp: spm.SentencePieceProcessor, text: list[str], n: int
               ) -> tuple[bytes, dict]:
    """The model's BPE SentencePiece model with the `n` candidates that save most pieces appended (extension.py's
    choice). A BPE model only makes a piece by merging two adjacent ones, so a word the pretrained model cut into
    a b c gets a+b and then ab+c; appended pieces score below every existing one, so they merge only after all the
    model's own merges: other words keep their segmentation."""
    from sentencepiece import sentencepiece_model_pb2  # needs protobuf

    if not text:
        raise InputError("vocabulary extension needs the new domain's text")
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(old.spm_bytes)
    known = {p.piece for p in proto.pieces}
    score = min(p.score for p in proto.pieces)
    chosen = [c for c in candidates(old.sp, new_sp, text) if _mergeable(old.sp, c.piece)][:n]
    for cand in chosen:
        parts = old.sp.encode(cand.piece[1:], out_type=str)
        merged = parts[0]
        for part in parts[1:]:
            merged += part
            if merged not in known:
                score -= 1.0
                piece = proto.pieces.add()
                piece.piece, piece.score = merged, score
                known.add(merged)
    added = len(proto.pieces) - old.sp.get_piece_size()
    proto.trainer_spec.vocab_size = len(proto.pieces)
    blob = proto.SerializeToString()
    words = max(sum(len(line.split()) for line in text), 1)
    before, after = (sum(map(len, sp.encode(text))) for sp in (old.sp, spm.SentencePieceProcessor(model_proto=blob)))
    return blob, {"appended": added, "words": len(chosen), "asked": n, "pieces_saved": before - after,
                  "fertility": {"before": round(before / words, 4), "after": round(after / words, 4)},
                  "first": [c.piece for c in chosen[:10]]}


def _mergeable(sp: spm.SentencePieceProcessor, piece: str) -> bool:
    """Whether merges of the pretrained pieces spell `piece`: none of them unknown (tokenizers' BPE cannot merge
    an unknown character) and no normalisation in between."""
    parts = sp.encode(piece[1:], out_type=str)
    return "".join(parts) == piece and all(sp.piece_to_id(p) != sp.unk_id() for p in parts)


def adapt_shared(pretrained: Path, spm_bytes: bytes, text: list[str], initializer: Callable, knobs, cfg,
                 seed: int, aux=None, aux_file: str = "CBOW vectors", init_map: InitMap | None = None,
                 check_loo: bool = True) -> tuple[M2M100ForConditionalGeneration, SharedVocab, dict]:
    """The model with its shared vocabulary replaced by `spm_bytes`' pieces (or extended by them), rows from
    `initializer`; `cfg`: the diagnostics' settings. Returns the model, its vocabulary and the diagnostics."""
    model, old = load_model(pretrained)
    diagnostics: dict = {"sides": ["shared"], "knobs": {k: v for k, v in dataclasses.asdict(knobs).items()
                                                          if v is not None}}
    if knobs.extend:
        spm_bytes, diagnostics["extension"] = extend_bpe(old, spm.SentencePieceProcessor(model_proto=spm_bytes),
                                                         text, knobs.extend)
    new_sp = spm.SentencePieceProcessor(model_proto=spm_bytes)
    new = SharedVocab(vocab_tokens(spm_bytes, old.tail), new_sp, spm_bytes, old.architecture)
    emb = model.get_input_embeddings().weight.detach().float().numpy().copy()
    side = Side("shared", old.tokens, new.tokens, emb, aux, old.sp, aux_file, new_sp, text or None)
    old_index = side.old_index
    rows = {i: [old_index[t]] for i, t in enumerate(new.tokens) if t in (*HEAD, *old.tail)}  # the tokenizer's own
    if init_map:
        rows |= resolve(init_map, {"shared": (old.tokens, new.tokens)})["shared"]
    plan = apply_map(initializer(side, knobs, np.random.default_rng(seed)), rows)
    diagnostics["shared"] = {
        "adapted": True, "rows": plan.shares(), **plan.stats,
        "leave_one_out": leave_one_out(side, initializer, knobs, cfg.held_out, cfg.seed) if check_loo else None,
        "neighbours": neighbours(side, plan, plan.apply(emb), cfg.probes),
        "kept_tokens": len(rows)}
    return swap_shared_embeddings(model, plan.apply(emb)), new, diagnostics


def distill_shared(model: M2M100ForConditionalGeneration, new: SharedVocab, pretrained: Path,
                   pairs: tuple[list[str], list[str]], knobs, seed: int, src_lang: str, tgt_lang: str) -> dict:
    """Token distillation (distill.py) of an adapted NLLB/M2M100 model's new rows, in place: the pretrained model
    reads the pairs in its own pieces, the adapted one in `new`'s, each sentence led by its language code."""
    from vocabridge.transfer.distill import Settings, distill

    teacher, old = load_model(pretrained)
    settings = Settings(align=knobs.align, epochs=knobs.distill_epochs, lr=knobs.distill_lr,
                        pairs=knobs.distill_pairs, output=knobs.distill_output, seed=seed)
    return distill(teacher, old.for_lang(src_lang, pretrained), old.for_lang(tgt_lang, pretrained), model,
                   new.for_lang(src_lang, pretrained), new.for_lang(tgt_lang, pretrained), *pairs, settings)
