"""Marian translation models: build from params, save and load OPUS-MT-style directories.

A model directory holds config.json, generation_config.json, model.safetensors, source.spm, target.spm,
vocab.json, target_vocab.json and tokenizer_config.json; AutoModelForSeq2SeqLM and MarianTokenizer load it
offline. Weights are only ever read from safetensors.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vocabridge.errors import InputError
from vocabridge.nmt.vocab import Vocab

if TYPE_CHECKING:  # transformers' model code costs seconds to import: the functions that need it import it
    from transformers.models.marian.configuration_marian import MarianConfig
    from transformers.models.marian.modeling_marian import MarianMTModel

# target_vocab.json too, unless the model shares one vocabulary between source and target
MODEL_FILES = ("config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json")


def marian_config(arch, src_size: int, tgt_size: int, pad_id: int) -> MarianConfig:
    """The Transformer of `arch` with separate source/target embeddings, decoder input/output tied."""
    from transformers.models.marian.configuration_marian import MarianConfig

    return MarianConfig(
        vocab_size=src_size, decoder_vocab_size=tgt_size, share_encoder_decoder_embeddings=False,
        d_model=arch.d_model, encoder_layers=arch.encoder_layers, decoder_layers=arch.decoder_layers,
        encoder_attention_heads=arch.heads, decoder_attention_heads=arch.heads,
        encoder_ffn_dim=arch.ffn_dim, decoder_ffn_dim=arch.ffn_dim, dropout=arch.dropout,
        attention_dropout=arch.attention_dropout, activation_dropout=0.0, activation_function="relu",
        max_position_embeddings=arch.max_positions, scale_embedding=True, tie_word_embeddings=True,
        pad_token_id=pad_id, eos_token_id=0, decoder_start_token_id=pad_id, forced_eos_token_id=0,
    )


def use_fast_attention(model: MarianMTModel, device: torch.device | str) -> MarianMTModel:
    """Eager attention on a CPU, PyTorch's SDPA elsewhere. At our sentence lengths the CPU flash-attention
    kernel's backward alone took a fifth of a fine-tune update; eager attention is about 1.3x faster per update
    and decodes a little faster too (benchmarks/finetune_speed.py). Same mathematics, other rounding."""
    model.set_attn_implementation("eager" if torch.device(device).type == "cpu" else "sdpa")
    return model


def build_model(arch, src: Vocab, tgt: Vocab, seed: int) -> MarianMTModel:
    """A freshly initialised Transformer with separate source/target embeddings, decoder in/out tied."""
    from transformers.models.marian.modeling_marian import MarianMTModel

    if len(src) != len(tgt):
        raise ValueError("source and target vocabularies must have equal length (see nmt.vocab)")
    torch.manual_seed(seed)
    return MarianMTModel(marian_config(arch, len(src), len(tgt), tgt.pad_id))


def save_model(model: MarianMTModel, src: Vocab, tgt: Vocab, out: Path, generation: dict | None = None) -> None:
    """Write an OPUS-MT-style directory into `out` (use inside fileio.atomic_dir)."""
    from transformers.generation.configuration_utils import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=tgt.pad_id, pad_token_id=tgt.pad_id, eos_token_id=0, forced_eos_token_id=0,
        bad_words_ids=[[i] for i in [tgt.pad_id, *tgt.filler_ids]], **(generation or {}))
    model.save_pretrained(out, safe_serialization=True)
    (out / "source.spm").write_bytes(src.spm_bytes)
    (out / "target.spm").write_bytes(tgt.spm_bytes)
    (out / "vocab.json").write_text(src.to_json(), encoding="utf-8")
    (out / "target_vocab.json").write_text(tgt.to_json(), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": True, "model_max_length": 512,
        "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}, indent=1), encoding="utf-8")


def check_model_dir(path: Path) -> None:
    """A clear error for a folder that is not a Marian model directory we can read safely."""
    if not path.is_dir():
        raise InputError(f"{path}: no such model directory")
    missing = [name for name in MODEL_FILES if not (path / name).is_file()]
    if (path / "pytorch_model.bin").is_file() and "model.safetensors" in missing:
        raise InputError(f"{path}: only pytorch_model.bin (pickle) found; convert it to model.safetensors first")
    if missing:
        raise InputError(f"{path}: not a Marian model directory (missing {missing})")
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "marian":
        raise InputError(f"{path}/config.json: model_type is {config.get('model_type')!r}, expected 'marian'")


def load_model(path: Path, device: str = "cpu") -> tuple[MarianMTModel, Vocab, Vocab]:
    """Model and vocabularies from a directory, weights from safetensors only."""
    from transformers.models.marian.modeling_marian import MarianMTModel

    src, tgt = load_vocabs(path)
    return MarianMTModel.from_pretrained(Path(path), use_safetensors=True).to(device), src, tgt


def load_vocabs(path: Path) -> tuple[Vocab, Vocab]:
    """The source and target vocabularies of a model directory, without its weights."""
    path = Path(path)
    check_model_dir(path)
    src = Vocab.from_files(path / "source.spm", path / "vocab.json")
    target_vocab = path / "target_vocab.json"  # OPUS-MT models with one shared vocabulary have none
    tgt = Vocab.from_files(path / "target.spm", target_vocab if target_vocab.is_file() else path / "vocab.json")
    return src, tgt


def copy_model_dir(src: Path, out: Path) -> None:
    check_model_dir(src)
    out.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.is_file() and item.suffix != ".bin":
            shutil.copy2(item, out / item.name)
