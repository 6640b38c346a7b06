"""Vocabulary extension: keep every pretrained piece and append the new domain's words that shatter most.

Replacement swaps a side's whole vocabulary; extension keeps the model's pieces (and their rows) and appends N
pieces of the adapted vocabulary. The candidates are the adapted vocabulary's word-initial pieces (`▁word`,
`▁Jerusal`) that the pretrained one lacks, counted in the new text as the adapted tokenizer segments it; a
candidate saves (its pieces under the pretrained tokenizer - 1) pieces at each occurrence, and the N that save
most are appended.

Each appended piece gets the unigram score of its old segmentation plus EPSILON: just enough to win where that
segmentation was the best one. So a word keeps its old segmentation unless the new piece covers a prefix of it
that was segmented exactly as the piece's old pieces (then that prefix becomes the one new piece); words that do
not begin with an appended piece keep their segmentation. What is not stable: a word whose best segmentation
crossed the appended prefix's end differently may tip over to the new piece, and SentencePiece's sampling
(subword regularisation) sees the new pieces too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import sentencepiece as spm

from vocabridge.errors import InputError
from vocabridge.nmt.vocab import PAD, Vocab

BOUNDARY = "\u2581"
EPSILON = 1e-3


@dataclass(frozen=True)
class Candidate:
    piece: str
    count: int  # occurrences in the new text, segmented by the adapted tokenizer
    old_pieces: int  # pieces of its surface under the pretrained tokenizer
    score: float  # unigram score it gets: the old segmentation's score + EPSILON

    @property
    def saved(self) -> int:
        return self.count * (self.old_pieces - 1)


def candidates(old: spm.SentencePieceProcessor, new: spm.SentencePieceProcessor, text: list[str]
               ) -> list[Candidate]:
    """The adapted vocabulary's word-initial pieces that the pretrained one lacks, most pieces saved first."""
    known = {old.id_to_piece(i) for i in range(old.get_piece_size())}
    counts = Counter(p for line in new.encode(text, out_type=str) for p in line
                     if p.startswith(BOUNDARY) and len(p) > 1 and p not in known)
    names = sorted(counts)
    segmented = old.encode([p[1:] for p in names])
    found = [Candidate(p, counts[p], len(ids), sum(old.get_score(i) for i in ids) + EPSILON)
             for p, ids in zip(names, segmented, strict=True)]
    return sorted((c for c in found if c.old_pieces > 1), key=lambda c: (-c.saved, c.piece))


def extend_spm(model: bytes, added: list[Candidate]) -> bytes:
    """The SentencePiece model with `added` appended (ordinary pieces, ids after every existing one)."""
    from sentencepiece import sentencepiece_model_pb2  # needs protobuf

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    if proto.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        raise InputError("vocabulary extension needs a unigram SentencePiece model (the model's is "
                         f"{sentencepiece_model_pb2.TrainerSpec.ModelType.Name(proto.trainer_spec.model_type)})")
    for cand in added:
        piece = proto.pieces.add()
        piece.piece, piece.score = cand.piece, cand.score
    proto.trainer_spec.vocab_size = len(proto.pieces)
    return proto.SerializeToString()


def extend_vocab(old: Vocab, new_sp: spm.SentencePieceProcessor, text: list[str], n: int) -> tuple[Vocab, dict]:
    """`old` with the `n` best candidates appended (before `<pad>`), and what was appended and what it saves."""
    if n < 1:
        raise ValueError(f"extend: the number of pieces to append must be positive, got {n}")
    if not text:
        raise InputError("vocabulary extension needs the new domain's text")
    chosen = candidates(old.sp, new_sp, text)[:n]
    blob = extend_spm(old.spm_bytes, chosen)
    kept = [t for t in old.tokens if t != PAD and not t.startswith("<unused_")]
    vocab = Vocab([*kept, *(c.piece for c in chosen), PAD], spm.SentencePieceProcessor(model_proto=blob), blob)
    words = max(sum(len(line.split()) for line in text), 1)
    before = sum(map(len, old.sp.encode(text)))
    after = sum(map(len, vocab.sp.encode(text)))
    return vocab, {"appended": len(chosen), "asked": n, "pieces_saved": before - after,
                   "fertility": {"before": round(before / words, 4), "after": round(after / words, 4)},
                   "first": [c.piece for c in chosen[:10]]}
