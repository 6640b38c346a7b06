"""SentencePiece unigram models and the vocabulary-mismatch report between two domains."""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm
from tqdm import tqdm

from vocabridge.config import SpmModel
from vocabridge.errors import InputError

# Piece ids of the special tokens; the model directories of the NMT stages map them to Marian's ids.
SPECIAL = {"unk_id": 0, "bos_id": -1, "eos_id": 1, "pad_id": 2}


def train_spm(lines: list[str], cfg: SpmModel, seed: int, threads: int, name: str) -> bytes:
    """Train a unigram model on `lines`; returns the serialized model (written atomically by the caller)."""
    if not lines:
        raise InputError(f"{name}: no text to train a SentencePiece model on")
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
            vocab_size=cfg.vocab_size, character_coverage=cfg.character_coverage,
            input_sentence_size=cfg.input_sentence_size, shuffle_input_sentence=True,
            hard_vocab_limit=cfg.hard_vocab_limit, num_threads=threads,
            minloglevel=2, **SPECIAL,
        )
    except RuntimeError as err:
        raise InputError(f"{name}: SentencePiece training failed: {err}") from None
    return model.getvalue()


def load_spm(path: str | Path) -> spm.SentencePieceProcessor:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such SentencePiece model")
    return spm.SentencePieceProcessor(model_file=str(path))


def pieces(sp: spm.SentencePieceProcessor) -> set[str]:
    """The model's ordinary pieces (control and unknown symbols excluded)."""
    return {sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i))}


def vocab_lines(sp: spm.SentencePieceProcessor) -> Iterable[str]:
    return (f"{sp.id_to_piece(i)}\t{sp.get_score(i):.6g}" for i in range(sp.get_piece_size()))


def mismatch(old: spm.SentencePieceProcessor, new: spm.SentencePieceProcessor, test: list[str]) -> dict:
    """How badly the old (pretrained) vocabulary fits the new domain, measured on its test text.

    - unseen_types: pieces of the new vocabulary that the old one lacks (the rows a method must invent);
    - unseen_token_rate: share of the test set's tokens, segmented with the new model, that are unseen;
    - fertility: pieces per word of the test set under each vocabulary.
    """
    old_set, new_set = pieces(old), pieces(new)
    words = sum(len(line.split()) for line in test)
    seg_new = new.encode(test, out_type=str)
    seg_old = old.encode(test, out_type=str)
    new_tokens = [tok for line in seg_new for tok in line]
    return {
        "vocab_size": {"old": old.get_piece_size(), "new": new.get_piece_size()},
        "shared_types": len(new_set & old_set),
        "unseen_types": len(new_set - old_set),
        "unseen_type_share": round(len(new_set - old_set) / max(len(new_set), 1), 4),
        "unseen_token_rate": round(sum(tok not in old_set for tok in new_tokens) / max(len(new_tokens), 1), 4),
        "fertility": {"old": round(sum(map(len, seg_old)) / max(words, 1), 4),
                      "new": round(len(new_tokens) / max(words, 1), 4)},
        "old_unk_rate": round(sum(ids.count(old.unk_id()) for ids in old.encode(test))
                              / max(sum(map(len, seg_old)), 1), 4),
        "test_words": words,
    }


def train_all(texts: dict[str, list[str]], cfgs: dict[str, SpmModel], seed: int, threads: int,
              name: str) -> dict[str, bytes]:
    """One model per language, with a progress bar over the languages."""
    out = {}
    for code in tqdm(sorted(texts), desc=f"train spm ({name})", unit="model"):
        out[code] = train_spm(texts[code], cfgs[code], seed, threads, f"{name}.{code}")
    return out
