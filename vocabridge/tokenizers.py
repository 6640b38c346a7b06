"""SentencePiece unigram models and the vocabulary-mismatch report between two domains."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from vocabridge.config import SpmModel
from vocabridge.errors import InputError
from vocabridge.progress import progress

# Piece ids of the special tokens; the model directories of the NMT stages map them to Marian's ids.
SPECIAL = {"unk_id": 0, "bos_id": -1, "eos_id": 1, "pad_id": 2}
_TOO_HIGH = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")


class VocabularyTooLarge(InputError):
    """More pieces asked than SentencePiece can make of the text (with hard_vocab_limit on); `most` is the largest
    size it can."""

    def __init__(self, name: str, asked: int, most: int, lines: int):
        self.asked, self.most = asked, most
        super().__init__(f"{name}.vocab_size: {asked} pieces do not fit these {lines} lines of text (SentencePiece "
                         f"makes at most {most}); set {name}.vocab_size to at most {most}, or "
                         f"{name}.hard_vocab_limit: false to take what fits")


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
        if found := _TOO_HIGH.search(str(err)):
            raise VocabularyTooLarge(name, cfg.vocab_size, int(found.group(2)), len(lines)) from None
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


@dataclass
class PieceVocabulary:
    """What the mismatch figures need of a vocabulary that is not a SentencePiece model (a PLM's tokenizer): its
    ordinary pieces spelled as SentencePiece spells them, its ids of a text, each id's spelling and the unknown
    piece's id. The figures tokenise the text once and read segmentation and unknown count off the same ids."""

    pieces: set[str]
    size: int
    encode: Callable[[list[str]], list[list[int]]]
    spelling: Callable[[int], str]
    unk_id: int | None

    def segment(self, lines: list[str]) -> list[list[str]]:
        return [[self.spelling(i) for i in row] for row in self.encode(lines)]

    def unknown(self, lines: list[str]) -> int:
        return sum(row.count(self.unk_id) for row in self.encode(lines))


def spm_vocabulary(sp: spm.SentencePieceProcessor) -> PieceVocabulary:
    return PieceVocabulary(pieces(sp), sp.get_piece_size(), sp.encode, sp.id_to_piece, sp.unk_id())


def spelled_tokens(tokenizer) -> list[str]:
    """Every token of a Hugging Face tokenizer, by id, in SentencePiece's spelling: unigram/Metaspace pieces as
    they are; WordPiece's word-initial `x` as `▁x` and its continuation `##x` as `x`; special tokens as they are."""
    special = set(tokenizer.all_special_tokens)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    if any(t.startswith("▁") for t in tokens if t not in special):
        return tokens
    return [t if t in special else t[2:] if t.startswith("##") else "▁" + t for t in tokens]


class TokenizerPieces:
    """A Hugging Face tokenizer behind the SentencePiece calls the transfer methods make of a pretrained
    tokenizer (`encode(lines, out_type=str)`, `encode_as_pieces`), in SentencePiece's spelling."""

    def __init__(self, tokenizer):
        self.tokenizer, self.tokens = tokenizer, spelled_tokens(tokenizer)

    def encode(self, lines: str | list[str], out_type=str) -> list:
        if isinstance(lines, str):
            return self.encode([lines], out_type)[0]
        ids = self.tokenizer(lines, add_special_tokens=False)["input_ids"] if lines else []
        return [[self.tokens[i] for i in row] for row in ids] if out_type is str else ids

    def encode_as_pieces(self, text: str) -> list[str]:
        return self.encode(text)


def plm_vocabulary(tokenizer) -> PieceVocabulary:
    """A Hugging Face tokenizer's vocabulary in SentencePiece's spelling (spelled_tokens). Special tokens are not
    pieces."""
    pieces_of = TokenizerPieces(tokenizer)
    special = set(tokenizer.all_special_tokens)
    return PieceVocabulary({t for t in pieces_of.tokens if t not in special}, len(tokenizer),
                           lambda lines: pieces_of.encode(lines, out_type=int), pieces_of.tokens.__getitem__,
                           tokenizer.unk_token_id)


def mismatch(old: spm.SentencePieceProcessor | PieceVocabulary, new: spm.SentencePieceProcessor,
             test: list[str]) -> dict:
    """How badly the old (pretrained) vocabulary fits the new domain, measured on its test text.

    - unseen_types: pieces of the new vocabulary that the old one lacks (the rows a method must invent);
    - unseen_token_rate: share of the test set's tokens, segmented with the new model, that are unseen;
    - fertility: pieces per word of the test set under each vocabulary.
    `old` may be a PLM's vocabulary (plm_vocabulary), whose pieces are compared in SentencePiece's spelling.
    """
    old = old if isinstance(old, PieceVocabulary) else spm_vocabulary(old)
    old_set, new_set = old.pieces, pieces(new)
    words = sum(len(line.split()) for line in test)
    seg_new = new.encode(test, out_type=str)
    old_ids = old.encode(test)
    old_tokens = sum(map(len, old_ids))
    new_tokens = [tok for line in seg_new for tok in line]
    return {
        "vocab_size": {"old": old.size, "new": new.get_piece_size()},
        "shared_types": len(new_set & old_set),
        "unseen_types": len(new_set - old_set),
        "unseen_type_share": round(len(new_set - old_set) / max(len(new_set), 1), 4),
        "unseen_token_rate": round(sum(tok not in old_set for tok in new_tokens) / max(len(new_tokens), 1), 4),
        "fertility": {"old": round(old_tokens / max(words, 1), 4),
                      "new": round(len(new_tokens) / max(words, 1), 4)},
        "old_unk_rate": round(sum(row.count(old.unk_id) for row in old_ids) / max(old_tokens, 1), 4),
        "test_words": words,
    }


def train_all(texts: dict[str, list[str]], cfgs: dict[str, SpmModel], seed: int, threads: int,
              name: str) -> dict[str, bytes]:
    """One model per language, with a progress bar over the languages."""
    out, too_large = {}, []
    for code in progress(sorted(texts), desc=f"train spm ({name})", unit="model"):
        try:
            out[code] = train_spm(texts[code], cfgs[code], seed, threads, f"{name}.{code}")
        except VocabularyTooLarge as err:  # both languages' sizes in one message
            too_large.append(str(err))
    if too_large:
        raise InputError("; ".join(too_large))
    return out
