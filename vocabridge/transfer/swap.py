"""Swap new vocabularies and embedding matrices into a Marian model.

Everything but the vocabulary-sized tensors (encoder and decoder embeddings, output layer, final_logits_bias)
is carried over unchanged; the config gets the new sizes and special-token ids, and embeddings become
separate for source and target (an OPUS-MT model with one shared vocabulary is split). The result saves with
nmt.model.save_model into a directory that AutoModelForSeq2SeqLM and MarianTokenizer reload. NLLB-200 and
M2M100 models keep their one shared, tied matrix (`swap_shared_embeddings`; nmt.shared saves them).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np
import torch

from vocabridge.nmt.vocab import PAD, Vocab

if TYPE_CHECKING:
    from transformers import M2M100ForConditionalGeneration
    from transformers.models.marian.modeling_marian import MarianMTModel

VOCAB_SIZED = ("embed_tokens", "shared.weight", "lm_head", "final_logits_bias")


def matrices(model: MarianMTModel) -> dict[str, np.ndarray]:
    """The vocabulary-sized tensors: encoder rows, decoder rows, output rows (None when tied), output bias."""
    enc = model.get_encoder().embed_tokens.weight
    dec = model.get_decoder().embed_tokens.weight
    out = model.lm_head.weight
    return {"encoder": enc.detach().float().numpy().copy(), "decoder": dec.detach().float().numpy().copy(),
            "output": None if out.data_ptr() == dec.data_ptr() else out.detach().float().numpy().copy(),
            "bias": model.final_logits_bias.detach().float().numpy()[0].copy()}


def fit_vocab(vocab: Vocab, size: int) -> Vocab:
    """The same vocabulary with `<unused_i>` fillers so that it has `size` entries (`<pad>` stays last)."""
    tokens = [t for t in vocab.tokens if not t.startswith("<unused_") and t != PAD]
    if len(tokens) + 1 > size:
        raise ValueError(f"vocabulary of {len(tokens) + 1} entries does not fit in {size}")
    tokens += [f"<unused_{i}>" for i in range(size - 1 - len(tokens))] + [PAD]
    return Vocab(tokens, vocab.sp, vocab.spm_bytes)


def pair(src: Vocab, tgt: Vocab) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies of equal length (one pad id serves both in a Marian config)."""
    size = max(len([t for t in v.tokens if not t.startswith("<unused_")]) for v in (src, tgt))
    return fit_vocab(src, size), fit_vocab(tgt, size)


def carry_over(model: torch.nn.Module, new: torch.nn.Module, who: str) -> None:
    """Load every parameter of `model` that does not depend on the vocabulary size into `new`; any other
    difference between the two is an error."""
    kept = {k: v for k, v in model.state_dict().items() if not any(s in k for s in VOCAB_SIZED)}
    missing, unexpected = new.load_state_dict(kept, strict=False)
    stray = [k for k in [*missing, *unexpected] if not any(s in k for s in VOCAB_SIZED)]
    if stray:
        raise ValueError(f"{who}: parameters that do not carry over: {stray[:5]}")


def swap_embeddings(model: MarianMTModel, src: Vocab, tgt: Vocab, encoder: np.ndarray, decoder: np.ndarray,
                    bias: np.ndarray, output: np.ndarray | None = None) -> MarianMTModel:
    """A new Marian model with the given vocabularies and rows; `output` only for an untied output layer."""
    from transformers.models.marian.modeling_marian import MarianMTModel

    if len(src) != len(tgt) or encoder.shape[0] != len(src) or decoder.shape[0] != len(tgt):
        raise ValueError("swap_embeddings: matrix rows must match equal-length vocabularies")
    config = copy.deepcopy(model.config)
    config.vocab_size, config.decoder_vocab_size = len(src), len(tgt)
    config.share_encoder_decoder_embeddings = False
    config.pad_token_id = config.decoder_start_token_id = tgt.pad_id
    config.eos_token_id = config.forced_eos_token_id = 0
    config.tie_word_embeddings = output is None
    new = MarianMTModel(config)
    carry_over(model, new, "swap_embeddings")
    with torch.no_grad():
        new.get_encoder().embed_tokens.weight.copy_(torch.from_numpy(encoder))
        new.get_decoder().embed_tokens.weight.copy_(torch.from_numpy(decoder))
        if output is not None:
            new.lm_head.weight.copy_(torch.from_numpy(output))
        new.final_logits_bias.copy_(torch.from_numpy(bias)[None, :])
    return new.to(model.dtype)


def swap_shared_embeddings(model: M2M100ForConditionalGeneration, emb: np.ndarray) -> M2M100ForConditionalGeneration:
    """A new NLLB/M2M100 model with `emb` as its one embedding matrix (encoder, decoder and output tied; these
    models have no final_logits_bias); every other parameter carried over, special-token ids unchanged."""
    from transformers import M2M100ForConditionalGeneration

    config = copy.deepcopy(model.config)
    config.vocab_size = emb.shape[0]
    config.tie_word_embeddings = True
    new = M2M100ForConditionalGeneration(config)
    carry_over(model, new, "swap_shared_embeddings")
    with torch.no_grad():
        new.get_input_embeddings().weight.copy_(torch.from_numpy(emb))
    new.tie_weights()
    if new.lm_head.weight.data_ptr() != new.get_input_embeddings().weight.data_ptr():
        raise ValueError("swap_shared_embeddings: the output layer is not tied to the embeddings")
    return new.to(model.dtype)
