"""Marian vocabularies from SentencePiece models, and fast encoding that matches MarianTokenizer.

OPUS-MT layout: `</s>` = 0, `<unk>` = 1, the pieces, `<pad>` last. Source and target vocabularies share one
`pad_token_id` in a Marian config, so the shorter side is filled with `<unused_i>` entries up to the
longer side's size (none when the sizes agree, as in every profile). A target vocabulary may carry domain tags
after its pieces (`<domain:upstream>`, `<domain:downstream>`): tokens that no text segments into, which a model
trained by target-token mixing (Britz et al. 2017) emits first and `decode` drops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece as spm

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
DOMAIN_TAG = "<domain:{}>"


def domain_tag(domain: str) -> str:
    return DOMAIN_TAG.format(domain)


def is_domain_tag(token: str) -> bool:
    return token.startswith("<domain:") and token.endswith(">")


def spm_pieces(sp: spm.SentencePieceProcessor, lines: list[str], alpha: float = 0.0, seed: int = 0) -> list[list[int]]:
    """SentencePiece ids of each line; alpha > 0: a segmentation sampled from the unigram lattice (subword
    regularisation, Kudo 2018), the same for the same seed (one thread, SentencePiece's generator seeded first)."""
    if alpha:
        spm.set_random_generator_seed(seed)
        return sp.encode(lines, enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)
    return sp.encode(lines)


@dataclass
class Vocab:
    """One side's vocabulary: Marian token list plus the SentencePiece model that segments text."""

    tokens: list[str]
    sp: spm.SentencePieceProcessor
    spm_bytes: bytes

    @classmethod
    def from_spm(cls, model: bytes | str | Path, size: int | None = None, extra: tuple[str, ...] = ()) -> Vocab:
        """`extra`: tokens after the pieces (domain tags), which no text segments into."""
        blob = Path(model).read_bytes() if isinstance(model, (str, Path)) else model
        sp = spm.SentencePieceProcessor(model_proto=blob)
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                  if not (sp.is_control(i) or sp.is_unknown(i))]
        tokens = [EOS, UNK, *pieces, *extra]
        size = size or len(tokens) + 1
        tokens += [f"<unused_{i}>" for i in range(size - 1 - len(tokens))] + [PAD]
        return cls(tokens, sp, blob)

    @classmethod
    def from_files(cls, spm_file: Path, vocab_json: Path) -> Vocab:
        mapping = json.loads(vocab_json.read_text(encoding="utf-8"))
        tokens = [tok for tok, _ in sorted(mapping.items(), key=lambda kv: kv[1])]
        blob = spm_file.read_bytes()
        return cls(tokens, spm.SentencePieceProcessor(model_proto=blob), blob)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def pad_id(self) -> int:
        return len(self.tokens) - 1

    def id_of(self, token: str) -> int:
        """The id of `token`, e.g. a domain tag; a clear error when the vocabulary lacks it."""
        try:
            return self.tokens.index(token)
        except ValueError:
            raise KeyError(f"the vocabulary has no token {token!r}") from None

    @property
    def filler_ids(self) -> list[int]:
        return [i for i, tok in enumerate(self.tokens) if tok.startswith("<unused_")]

    def _spm_to_marian(self) -> np.ndarray:
        if not hasattr(self, "_lookup"):
            index = {tok: i for i, tok in enumerate(self.tokens)}
            self._lookup = np.array([index.get(self.sp.id_to_piece(i), 1) for i in range(self.sp.get_piece_size())],
                                    dtype=np.int64)
        return self._lookup

    def encode(self, lines: list[str], alpha: float = 0.0, seed: int = 0) -> list[np.ndarray]:
        """Token ids with the final `</s>`, exactly as MarianTokenizer encodes (but batched in C++).

        alpha > 0: a segmentation sampled from the unigram lattice (subword regularisation, Kudo 2018), the same
        for the same seed (one thread, SentencePiece's generator seeded first)."""
        lookup = self._spm_to_marian()
        pieces = spm_pieces(self.sp, lines, alpha, seed)
        return [np.append(lookup[np.asarray(ids, dtype=np.int64)], 0) for ids in pieces]

    def decode(self, ids) -> str:
        pieces = [self.tokens[i] for i in ids if i > 1 and i != self.pad_id and i < len(self.tokens)]
        return self.sp.decode_pieces([p for p in pieces if not (p.startswith("<unused_") or is_domain_tag(p))])

    def to_json(self) -> str:
        return json.dumps({tok: i for i, tok in enumerate(self.tokens)}, ensure_ascii=False, indent=0)


def pair_vocabs(src_spm: bytes | Path, tgt_spm: bytes | Path, tgt_extra: tuple[str, ...] = ()
                ) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies of equal length (see the module docstring); `tgt_extra`: domain tags."""
    src, tgt = Vocab.from_spm(src_spm), Vocab.from_spm(tgt_spm, extra=tgt_extra)
    size = max(len(src), len(tgt))
    return Vocab.from_spm(src.spm_bytes, size), Vocab.from_spm(tgt.spm_bytes, size, tgt_extra)


def fit_positions(ids: np.ndarray, limit: int) -> np.ndarray:
    """`ids` cut to the model's `limit` positions, keeping the family's own last token (Marian's and NLLB's
    `</s>` have different ids), so that an over-long input still ends as the model was trained to see it."""
    return ids if len(ids) <= limit else np.append(ids[: limit - 1], ids[-1])
