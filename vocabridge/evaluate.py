"""Metrics with sacrebleu: BLEU, chrF and TER with their signatures, and paired bootstrap resampling."""

from __future__ import annotations

import os
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from vocabridge.config import Lang
from vocabridge.corpora.user import read_text_lines
from vocabridge.significance import clusters_from_ids


def score(hyps: list[str], refs: list[str]) -> dict:
    """Corpus scores and the signatures that make them reproducible."""
    out = {}
    for name, metric in (("bleu", BLEU()), ("chrf", CHRF()), ("ter", TER())):
        result = metric.corpus_score(hyps, [refs])
        out[name] = round(result.score, 2)
        out[f"{name}_signature"] = str(metric.get_signature())
    return out


def heldout_verses(verse_ids: list[str], selection: int) -> list[int]:
    """The second test set: indices of the dev verses (ids `BOOK.CHAPTER.VERSE`) of the books that none of the
    first `selection` dev verses (those checkpoint selection reads) comes from, in order."""
    books = clusters_from_ids(verse_ids)
    seen = set(books[:selection])
    return [i for i, book in enumerate(books) if book not in seen]


def second_test_set(corpus: Path, lang: Lang, selection: int) -> tuple[list[str], list[str], list[str]]:
    """The second test set of a prepared corpus folder, (sources, references, each sentence's book or document):
    the user's `second_test` files whole where the corpus has them (documents from second_test.ids; without ids,
    one document), else the dev sentences of the books or documents that none of the first `selection` dev
    sentences (those checkpoint selection reads) comes from; empty where the corpus has neither (no dev.ids)."""
    if (corpus / f"second_test.{lang.src}").is_file():
        sources, refs = (read_text_lines(corpus / f"second_test.{code}") for code in (lang.src, lang.tgt))
        ids = corpus / "second_test.ids"
        return sources, refs, clusters_from_ids(read_text_lines(ids)) if ids.is_file() else ["second_test"] * len(refs)
    if not (corpus / "dev.ids").is_file():
        return [], [], []
    verses = read_text_lines(corpus / "dev.ids")
    books = clusters_from_ids(verses)
    keep = heldout_verses(verses, selection)
    sources, refs = (read_text_lines(corpus / f"dev.{code}") for code in (lang.src, lang.tgt))
    return [sources[i] for i in keep], [refs[i] for i in keep], [books[i] for i in keep]


def paired_bootstrap(baseline: tuple[str, list[str]], systems: list[tuple[str, list[str]]], refs: list[str],
                     n_samples: int = 1000, seed: int = 12345) -> dict[str, dict]:
    """sacrebleu's paired bootstrap of BLEU against a baseline: p-value and 95% interval per system.

    The first system is the baseline; each other system gets the p-value of the null hypothesis that it
    is no better than the baseline, and the bootstrap mean and 95% confidence interval of its BLEU.
    """
    os.environ["SACREBLEU_SEED"] = str(seed)
    test = PairedTest([baseline, *systems], {"BLEU": BLEU()}, [refs], test_type="bs", n_samples=n_samples)
    _, results = test()
    out = {}
    for (name, hyps), res in zip([baseline, *systems], results["BLEU"], strict=True):
        p_value = None if res.p_value is None else round(float(res.p_value), 4)
        if name != baseline[0] and list(hyps) == list(baseline[1]):
            p_value = 1.0  # sacrebleu counts strictly larger differences: identical outputs would get 1/(n+1)
        out[name] = {"bleu": round(float(res.score), 2), "mean": round(float(res.mean), 2),
                     "ci": round(float(res.ci), 2), "p_value": p_value}
    return out
