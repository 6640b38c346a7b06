"""The architectures of a practitioner's own model that vocabridge adapts, told apart by config.json's
`model_type` (and the tokenizer's class).

Marian/OPUS-MT directories have one vocabulary per side (source.spm, target.spm, vocab.json); NLLB-200 and
M2M100 share one `m2m_100` architecture and ONE vocabulary for both sides (sentencepiece.bpe.model), embeddings
tied across encoder, decoder and output, and mark the language of each side with a language-code token. The
one place that knows which is which: the commands ask `architecture_of` and branch on `Architecture.shared`. (The
pipeline's own families of model, Marian and AB-Net, are `vocabridge.families`.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vocabridge.errors import InputError

SPM_FILE = "sentencepiece.bpe.model"  # the SentencePiece model the NLLB and M2M100 tokenizers segment with


@dataclass(frozen=True)
class Architecture:
    """What differs between the architectures vocabridge adapts."""

    name: str  # marian | nllb | m2m100
    label: str  # as the user knows it, in messages
    shared: bool  # one vocabulary and embedding matrix for both sides, language-code tokens
    files: tuple[str, ...]  # what a model directory must hold besides config.json and model.safetensors
    lang_example: str = ""  # a language code as the family spells it, for messages

    def lang_token(self, code: str) -> str:
        """The vocabulary token of a language code: NLLB's are the codes themselves, M2M100 writes `__de__`."""
        return f"__{code}__" if self.name == "m2m100" else code


MARIAN = Architecture("marian", "Marian/OPUS-MT", False, ("source.spm", "target.spm", "vocab.json"))
NLLB = Architecture("nllb", "NLLB-200", True, (SPM_FILE, "tokenizer_config.json"), "deu_Latn")
M2M100 = Architecture("m2m100", "M2M100", True, (SPM_FILE, "vocab.json", "tokenizer_config.json"), "de")
TOKENIZERS = {"NllbTokenizer": NLLB, "NllbTokenizerFast": NLLB, "M2M100Tokenizer": M2M100}


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: unreadable ({type(err).__name__})") from None


def architecture_of(path: Path) -> Architecture:
    """The architecture of a model directory, with one clear line for a folder vocabridge cannot adapt."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: no such model directory")
    config = path / "config.json"
    model_type = _json(config).get("model_type") if config.is_file() else None
    if model_type != "m2m_100":  # Marian's own check names what is missing or wrong
        return MARIAN
    tokenizer_config = path / "tokenizer_config.json"
    if not tokenizer_config.is_file():
        raise InputError(f"{path}: an m2m_100 model without tokenizer_config.json (NLLB or M2M100?)")
    cls = _json(tokenizer_config).get("tokenizer_class")
    if cls not in TOKENIZERS:
        raise InputError(f"{tokenizer_config}: tokenizer_class {cls!r}; expected one of {sorted(TOKENIZERS)}")
    return TOKENIZERS[cls]


def check_model_dir(path: Path) -> Architecture:
    """A clear error for a folder that is not a model directory of an architecture vocabridge reads safely (a folder
    that is no m2m_100 model gets Marian's checks and messages)."""
    from vocabridge.nmt.model import check_model_dir as check_marian

    arch = architecture_of(path)
    if arch is MARIAN:
        check_marian(path)
        return arch
    if (path / "pytorch_model.bin").is_file() and not (path / "model.safetensors").is_file():
        raise InputError(f"{path}: only pytorch_model.bin (pickle) found; convert it to model.safetensors first")
    missing = [name for name in ("model.safetensors", *arch.files) if not (path / name).is_file()]
    if missing:
        raise InputError(f"{path}: not a complete {arch.label} model directory (missing {missing})")
    return arch
