"""Morphologically similar tokens Sm(w) of a new token w (Liu et al. 2021, §3.2).

Sm(w) = w's subwords (w segmented by the pretrained tokenizer) + w's hyperwords (pretrained vocabulary entries
that contain w), capped at `max_members`, subwords first, hyperwords in vocabulary order (SentencePiece
orders pieces by score, so frequent ones come first). Each member carries its relation to w:

    0 subword, prefix of w      3 hyperword, w is its prefix
    1 subword, suffix of w      4 hyperword, w is its suffix
    2 subword, infix of w       5 hyperword, w is its infix

SentencePiece's word-boundary marker is stripped before comparing strings and kept as information: a piece
that starts a word can only be a prefix, and a word-initial w can only be the prefix of a word-initial
hyperword. Hyperwords come from an index of every substring of every pretrained token (built once, linear in
the vocabulary's total substring count), not from a scan of the vocabulary per token.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import sentencepiece as spm

from vocabridge.transfer.plan import BOUNDARY, SPECIALS, is_filler, segment_like

PREFIX, SUFFIX, INFIX, HYPER_PREFIX, HYPER_SUFFIX, HYPER_INFIX = range(6)
RELATIONS = 6


class MorphIndex:
    """Sm(w) lookups against one pretrained vocabulary."""

    def __init__(self, old_tokens: list[str], old_sp: spm.SentencePieceProcessor | None, max_members: int = 10,
                 max_substring: int = 24):
        self.old_tokens, self.sp, self.max_members = old_tokens, old_sp, max_members
        self.index = {tok: i for i, tok in enumerate(old_tokens)}
        # substring -> [(old id, relation of the substring to that token)], in vocabulary order
        self.hyper: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i, tok in enumerate(old_tokens):
            if tok in SPECIALS or is_filler(tok):
                continue
            initial = tok.startswith(BOUNDARY)
            body = tok[1:] if initial else tok
            seen = set()
            for start in range(len(body)):
                for end in range(start + 1, min(len(body), start + max_substring) + 1):
                    if start == 0 and end == len(body):
                        continue  # the token itself is not its own hyperword
                    sub = body[start:end]
                    if start == 0 and initial:
                        key = BOUNDARY + sub  # a word-initial w matches only word-initial hyperwords
                        relation = HYPER_PREFIX
                    else:
                        key = sub
                        relation = HYPER_PREFIX if start == 0 else HYPER_SUFFIX if end == len(body) else HYPER_INFIX
                    if (key, relation) not in seen:
                        seen.add((key, relation))
                        self.hyper[key].append((i, relation))

    def subwords(self, token: str) -> list[tuple[int, int]]:
        """w's pieces under the pretrained tokenizer, with their position in w."""
        if self.sp is None:
            return []
        pieces = segment_like(token, self.sp, self.index)
        if len(pieces) == 1 and pieces[0] == token:
            return []
        out = []
        for pos, piece in enumerate(pieces):
            relation = PREFIX if pos == 0 else SUFFIX if pos == len(pieces) - 1 else INFIX
            out.append((self.index[piece], relation))
        return out

    def hyperwords(self, token: str) -> list[tuple[int, int]]:
        return list(self.hyper.get(token, ()))

    def members(self, token: str) -> list[tuple[int, int]]:
        """Sm(w): (old id, relation) pairs, at most `max_members`, each old token once."""
        out, seen = [], set()
        for old_id, relation in self.subwords(token) + self.hyperwords(token):
            if old_id not in seen:
                seen.add(old_id)
                out.append((old_id, relation))
            if len(out) == self.max_members:
                break
        return out

    def batch(self, tokens: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Padded (ids, relations, mask) arrays of shape (len(tokens), max_members) for a generator."""
        n, m = len(tokens), self.max_members
        ids, rel, mask = np.zeros((n, m), np.int64), np.zeros((n, m), np.int64), np.zeros((n, m), bool)
        for row, tok in enumerate(tokens):
            for col, (old_id, relation) in enumerate(self.members(tok)):
                ids[row, col], rel[row, col], mask[row, col] = old_id, relation, True
        return ids, rel, mask
