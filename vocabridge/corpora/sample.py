"""The low-resource regime's fixed sample of downstream training pairs, as a corpus folder of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import ConfigError
from vocabridge.fileio import write_lines


def sample_pairs(corpus: Path, lang, n: int, out: Path, key: str) -> Path:
    """A corpus folder with `n` training pairs drawn from `corpus` (a fixed sample: the same for every row, seed
    and stage that asks, in corpus order) and the same dev and test sets; `key` names the param in errors.

    Where the corpus has extra pairs (`extra.LANG`: training verses outside the vocabularies' text), `n` beyond
    the training pairs takes all of them and the rest from a fixed sample of the extra ones, and 0 takes
    everything: samples are nested, the smaller inside the larger."""
    src, tgt = read_text_lines(corpus / f"train.{lang.src}"), read_text_lines(corpus / f"train.{lang.tgt}")
    has_extra = (corpus / f"extra.{lang.src}").is_file()
    extra_src = read_text_lines(corpus / f"extra.{lang.src}") if has_extra else []
    extra_tgt = read_text_lines(corpus / f"extra.{lang.tgt}") if has_extra else []
    total = len(src) + len(extra_src)
    n = n or total
    if not 0 < n <= total:
        more = f" and {len(extra_src)} extra" if has_extra else ""
        raise ConfigError(f"params.yaml: {key}: {n} is not between 1 and the {len(src)} training pairs{more} of "
                          f"{corpus}")
    keep = np.sort(np.random.default_rng(0).permutation(len(src))[:n])
    more = np.sort(np.random.default_rng(0).permutation(len(extra_src))[: max(0, n - len(src))])
    out.mkdir(parents=True, exist_ok=True)
    for code, lines, extra in ((lang.src, src, extra_src), (lang.tgt, tgt, extra_tgt)):
        write_lines(out / f"train.{code}", [lines[i] for i in keep] + [extra[i] for i in more])
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
