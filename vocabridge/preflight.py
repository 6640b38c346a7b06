"""Settings checked against the prepared corpora before anything trains, every problem at once.

What params.yaml asks of the data (fine-tune samples, SentencePiece vocabulary sizes) can only be checked once the
corpora are prepared, and the stages that read it come after an upstream pretraining of half an hour or more: a
wrong pair count found there wastes the pretraining. `problems` reads the prepared corpora (minutes after the
start) and returns every mismatch, each naming its key and the value that would fit; `check` raises them as one
error. The vocabulary check trains SentencePiece on the text where no model of the asked size is there yet
(seconds for a few thousand pairs, about half a minute for 280k segments on one thread), since only training says
how many pieces a text gives.
"""

from __future__ import annotations

import json
from pathlib import Path

from vocabridge.config import LANGS, Params
from vocabridge.corpora.user import read_text_lines
from vocabridge.errors import ConfigError
from vocabridge.tokenizers import VocabularyTooLarge, load_spm, train_spm
from vocabridge.transfer import knobs_for


def _lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for _ in handle)


def _drops(stats: Path) -> str:
    """What cleaning took out of a corpus's training pairs, from its stats.json ('' where it took nothing)."""
    if not stats.is_file():
        return ""
    dropped = {k: v for k, v in json.loads(stats.read_text(encoding="utf-8")).get("dropped", {}).get("train",
                                                                                                       {}).items() if v}
    return f" (cleaning dropped {', '.join(f'{n} {why}' for why, n in sorted(dropped.items()))})" if dropped else ""


def pair_problems(params: Params, downstream: Path) -> list[str]:
    """Every fine-tune sample (finetune.train_pairs, each row's train_pairs) that the downstream corpus cannot give."""
    train = downstream / f"train.{params.lang.src}"
    if not train.is_file():
        return []
    extra = downstream / f"extra.{params.lang.src}"
    have, more = _lines(train), _lines(extra) if extra.is_file() else 0
    asks = {"finetune.train_pairs": params.finetune.train_pairs}
    asks |= {f"rows.{row}.train_pairs": knobs_for(row, params.rows).train_pairs for row in params.rows}
    out = []
    for key, n in asks.items():
        if n is not None and n > have + more:
            out.append(f"{key}: {n} pairs asked, {downstream} has {have}{f' and {more} extra' if more else ''}"
                       f"{_drops(downstream / 'stats.json')}; set it to at most {have + more}, or 0 for all")
    return out


def vocabulary_problems(params: Params, corpora: Path, spm_models: Path, threads: int = 1) -> list[str]:
    """Every `spm.DOMAIN.LANG.vocab_size` that SentencePiece cannot make of that domain's text (with
    hard_vocab_limit on), with the largest size it can. A model already trained at the asked size is taken as
    proof; otherwise SentencePiece is tried on the text (the same text the spm stage reads)."""
    out = []
    for domain in ("upstream", "downstream"):
        for code in LANGS:
            cfg = getattr(getattr(params.spm, domain), code)
            key, model = f"spm.{domain}.{code}", spm_models / domain / f"{code}.model"
            if not cfg.hard_vocab_limit or (model.is_file() and load_spm(model).get_piece_size() == cfg.vocab_size):
                continue
            texts = [corpora / domain / f"{name}.{code}" for name in ("train", "mono")]
            if not texts[0].is_file():
                continue
            lines = [line for path in texts if path.is_file() for line in read_text_lines(path)]
            try:
                train_spm(lines, cfg, params.spm.seed, threads, key)
            except VocabularyTooLarge as err:
                out.append(f"{err} ({corpora / domain}, train and mono text)")
    return out


def problems(params: Params, corpora: Path, spm_models: Path | None, threads: int = 1) -> list[str]:
    """All the problems `check` would raise: fine-tune samples, then vocabulary sizes (not without `spm_models`)."""
    found = pair_problems(params, corpora / "downstream")
    return found + (vocabulary_problems(params, corpora, spm_models, threads) if spm_models else [])


def check(params: Params, corpora: Path, spm_models: Path | None, threads: int = 1) -> None:
    """Raise every problem of `problems` as one error, numbered; nothing where the settings fit the data."""
    found = problems(params, corpora, spm_models, threads)
    if found:
        listed = " ".join(f"({i}) {p};" for i, p in enumerate(found, start=1)).rstrip(";")
        raise ConfigError(f"params.yaml does not fit the prepared corpora, {len(found)} problem"
                          f"{'s' if len(found) > 1 else ''}: {listed}")
