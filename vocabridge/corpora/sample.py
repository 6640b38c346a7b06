"""The low-resource regime's fixed sample of downstream training pairs, as a corpus folder of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import ConfigError
from vocabridge.fileio import write_lines


def sample_pairs(corpus: Path, lang, n: int, out: Path, key: str) -> Path:
    """A corpus folder with `n` training pairs drawn from `corpus` (a fixed sample: the same for every row, seed
    and stage that asks, in corpus order) and the same dev and test sets; `key` names the param in errors."""
    src, tgt = read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}")
    if not 0 < n <= len(src):
        raise ConfigError(f"params.yaml: {key}: {n} is not between 1 and the {len(src)} training pairs of {corpus}")
    keep = np.sort(np.random.default_rng(0).permutation(len(src))[:n])
    out.mkdir(parents=True, exist_ok=True)
    for code, lines in ((lang.src, src), (lang.tgt, tgt)):
        write_lines(out / f"train.{code}", [lines[i] for i in keep])
        for split in ("dev", "test"):
            (out / f"{split}.{code}").write_bytes((corpus / f"{split}.{code}").read_bytes())
    return out


def add_pairs(corpus: Path, lang, extra: Path, out: Path) -> Path:
    """A corpus folder whose training pairs are `corpus`'s followed by `extra`'s (e.g. back-translated ones), with
    `corpus`'s dev and test sets."""
    out.mkdir(parents=True, exist_ok=True)
    for code in (lang.src, lang.tgt):
        write_lines(out / f"train.{code}", read_text_lines(corpus / f"train.{code}")
                    + read_text_lines(extra / f"train.{code}"))
        for split in ("dev", "test"):
            (out / f"{split}.{code}").write_bytes((corpus / f"{split}.{code}").read_bytes())
    return out
