"""Rows a user names: `adapt --init-map FILE` copies a new token's row from pretrained tokens it chooses.

The file is UTF-8 text, one new token a line: `NEW<TAB>OLD[<TAB>OLD...]`, tokens written as the vocabularies
hold them (`▁Gott`, SentencePiece's word-start mark included); several OLD tokens give their rows' mean; blank
lines are skipped. The map is checked line by line before any training, and against the vocabularies once they
exist; its rows replace what the method made for those tokens on every adapted side whose vocabularies hold
them (a source token's row from source rows, a target token's from target rows).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import sparse

from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import InputError
from vocabridge.transfer.plan import BOUNDARY, SPECIALS, Plan, is_filler


@dataclass(frozen=True)
class MapLine:
    line: int  # 1-based, for errors
    new: str
    old: tuple[str, ...]


@dataclass(frozen=True)
class InitMap:
    path: Path
    lines: tuple[MapLine, ...]


def read_init_map(path: Path) -> InitMap:
    """Parse the map; a malformed line is an error naming FILE:LINE."""
    seen: dict[str, int] = {}
    out = []
    for number, text in enumerate(read_text_lines(path), start=1):
        if not text.strip():
            continue
        fields = text.split("\t")
        where = f"{path}:{number}"
        if len(fields) < 2:
            raise InputError(f"{where}: expected NEW<TAB>OLD[<TAB>OLD...], got {text!r} (no tab)")
        if any(not f or f != f.strip() for f in fields):
            raise InputError(f"{where}: an empty token or one with spaces around it in {text!r}")
        new, old = fields[0], tuple(fields[1:])
        if new in seen:
            raise InputError(f"{where}: '{new}' is mapped already on line {seen[new]}")
        if new in SPECIALS or is_filler(new):
            raise InputError(f"{where}: '{new}' is a special token; it keeps its own row")
        seen[new] = number
        out.append(MapLine(number, new, old))
    return InitMap(path, tuple(out))


def resolve(init_map: InitMap, vocabs: dict[str, tuple[list[str], list[str]]]) -> dict[str, dict[int, list[int]]]:
    """{side: {new id: [old ids]}} from {side: (old tokens, new tokens)} of the adapted sides. Every NEW must be in
    some side's new vocabulary, and its OLD tokens in that side's pretrained one."""
    index = {side: ({t: i for i, t in enumerate(old)}, {t: i for i, t in enumerate(new)})
             for side, (old, new) in vocabs.items()}
    rows: dict[str, dict[int, list[int]]] = {side: {} for side in vocabs}
    for entry in init_map.lines:
        where = f"{init_map.path}:{entry.line}"
        holders = [side for side, (_, new) in index.items() if entry.new in new]
        if not holders:
            marked = BOUNDARY + entry.new
            hint = f" (a word-initial piece is written '{marked}')" if any(marked in new for _, new in
                                                                         index.values()) else ""
            raise InputError(f"{where}: '{entry.new}' is not in the new vocabulary of the adapted "
                             f"{' or '.join(vocabs)}{hint}")
        applied = False
        for side in holders:
            old_index, new_index = index[side]
            missing = [t for t in entry.old if t not in old_index]
            if not missing:
                rows[side][new_index[entry.new]] = [old_index[t] for t in entry.old]
                applied = True
        if not applied:
            missing = next(t for t in entry.old if all(t not in index[s][0] for s in holders))
            raise InputError(f"{where}: '{missing}' is not in the pretrained {' or '.join(holders)} vocabulary "
                             f"that holds '{entry.new}'")
    return rows


def apply_map(plan: Plan, rows: dict[int, list[int]]) -> Plan:
    """The plan with the mapped rows replaced: a copy of one old row, or the mean of several."""
    if not rows:
        return plan
    ids = np.array(sorted(rows), dtype=np.int64)
    keep = np.ones(len(plan.kind))
    keep[ids] = 0.0
    r, c, v = [], [], []
    for i in ids.tolist():
        r += [i] * len(rows[i])
        c += rows[i]
        v += [1.0 / len(rows[i])] * len(rows[i])
    mapped = sparse.csr_matrix((v, (r, c)), shape=plan.weights.shape, dtype=np.float32)
    weights = sparse.csr_matrix(sparse.diags(keep.astype(np.float32)) @ plan.weights + mapped)
    kind = list(plan.kind)
    for i in ids.tolist():
        kind[i] = "copied" if len(rows[i]) == 1 else "projected"
    direct, pooled = plan.direct.copy(), None if plan.pooled is None else plan.pooled.copy()
    direct[ids] = False
    if pooled is not None:
        pooled[ids] = False
    return replace(plan, kind=kind, weights=weights, direct=direct, pooled=pooled)
