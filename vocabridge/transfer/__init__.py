"""Vocabulary transfer: each method builds its initial model (vocabularies + embeddings) from the pretrained one.

A method is a small function registered in METHODS; the transfer@method stage calls it and writes the
model directory. The baselines live here; the vocabulary-adaptation methods plug in the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from transformers import MarianMTModel

from vocabridge.errors import ConfigError
from vocabridge.nmt.model import build_model, load_model
from vocabridge.nmt.vocab import Vocab, pair_vocabs


@dataclass
class Resources:
    """What a method may draw on."""

    pretrained: Path  # Marian model directory
    downstream_spm: dict[str, Path]  # the adapted vocabularies' SentencePiece models, by role (src, tgt)
    seed: int = 1


Built = tuple[MarianMTModel, Vocab, Vocab, dict]  # model, source vocab, target vocab, diagnostics


@dataclass(frozen=True)
class Method:
    build: Callable[[Resources], Built]
    finetune: bool = True  # out-domain is evaluated as it is
    vocabulary: str = "downstream"  # whose vocabulary the model ends up with: upstream | downstream


def keep_pretrained(res: Resources) -> Built:
    """The pretrained model with its own (upstream) vocabulary: out-domain and ft-srcv."""
    model, src, tgt = load_model(res.pretrained)
    return model, src, tgt, {"rows": {"copied": 1.0}}


def from_scratch(res: Resources) -> Built:
    """A model of the pretrained model's size, randomly initialised, with the downstream vocabularies."""
    pretrained, _, _ = load_model(res.pretrained)
    c = pretrained.config
    arch = SimpleNamespace(d_model=c.d_model, encoder_layers=c.encoder_layers, decoder_layers=c.decoder_layers,
                           heads=c.encoder_attention_heads, ffn_dim=c.encoder_ffn_dim, dropout=c.dropout,
                           attention_dropout=c.attention_dropout, max_positions=c.max_position_embeddings)
    src, tgt = pair_vocabs(res.downstream_spm["src"], res.downstream_spm["tgt"])
    return build_model(arch, src, tgt, res.seed), src, tgt, {"rows": {"random": 1.0}}


METHODS: dict[str, Method] = {
    "out-domain": Method(keep_pretrained, finetune=False, vocabulary="upstream"),
    "in-domain": Method(from_scratch),
    "ft-srcv": Method(keep_pretrained, vocabulary="upstream"),
}


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise ConfigError(f"params.yaml: methods: unknown method '{name}' (known: {sorted(METHODS)})")
    return METHODS[name]
