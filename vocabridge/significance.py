"""Comparisons of two methods that count both sources of luck: which seeds were trained, and which sentences
made the test set.

A fine-tuned row's test BLEU moves with its seed (initial rows, batch order, dropout) as much as with the test
sentences, so sacrebleu's paired bootstrap over sentences alone, run on one seed per method, calls differences
significant that another seed would reverse. `seed_bootstrap` resamples at two levels, the way hierarchical data
is bootstrapped (Davison & Hinkley 1997, §3.8): each round draws each method's seeds with replacement and one set
of test sentences with replacement, shared by both methods (the sentences are paired, the seeds are not), and
scores each method as the mean corpus BLEU of its drawn seeds on those sentences. BLEU's sufficient statistics
come from sacrebleu, so every score is sacrebleu's own.

With k seeds, resampling seeds sees (k-1)/k of their variance: with 3 seeds the interval is a little narrow,
which is one more reason for the `study` profile's seed count. One seed per side leaves seed luck out
altogether: such a comparison is reported and flagged, never called decisive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from sacrebleu.metrics import BLEU

Z_95 = 1.959964  # two-sided 5% level
Z_POWER = 0.841621  # 80% power


@dataclass(frozen=True)
class Comparison:
    """Method minus reference, over seeds and sentences."""

    delta: float  # mean BLEU over the method's seeds minus the reference's, on the whole test set
    ci_low: float  # 95% percentile interval of the delta
    ci_high: float
    p_value: float  # two-sided, of the null hypothesis that the delta is 0
    seeds: int
    reference_seeds: int
    std_error: float  # of the delta, from the resampled deltas
    seed_std: float | None  # BLEU's spread over the method's seeds (None with one seed)
    reference_seed_std: float | None
    sentence_variance: float  # of the delta when only the sentences are resampled

    @property
    def one_seed(self) -> bool:
        return self.seeds < 2 or self.reference_seeds < 2

    @property
    def decisive(self) -> bool:
        """The interval excludes 0 and both sides have several seeds."""
        return not self.one_seed and (self.ci_low > 0 or self.ci_high < 0)

    @property
    def detectable(self) -> float:
        """The smallest true difference this design finds with 80% power at the 5% level."""
        return (Z_95 + Z_POWER) * self.std_error

    def detectable_with(self, seeds: int) -> float | None:
        """The same for `seeds` seeds on both sides, from the measured seed spreads and sentence variance (None
        while either side has one seed: its seed spread is unknown)."""
        if self.seed_std is None or self.reference_seed_std is None:
            return None
        variance = (self.seed_std**2 + self.reference_seed_std**2) / seeds + self.sentence_variance
        return (Z_95 + Z_POWER) * math.sqrt(variance)

    def seeds_for(self, difference: float, most: int = 100) -> int | None:
        """The fewest seeds per side that detect `difference` (None: not within `most`, or unknown)."""
        for seeds in range(2, most + 1):
            reach = self.detectable_with(seeds)
            if reach is None:
                return None
            if reach <= difference:
                return seeds
        return None


def sentence_statistics(hyps: list[str], refs: list[str]) -> np.ndarray:
    """sacrebleu's BLEU sufficient statistics per sentence: (sentences, 2 + 2 * 4)."""
    return _statistics(tuple(hyps), tuple(refs))


@lru_cache(maxsize=128)
def _statistics(hyps: tuple[str, ...], refs: tuple[str, ...]) -> np.ndarray:
    """Cached: a report compares each seed with several references."""
    stats = np.asarray(BLEU()._extract_corpus_statistics(list(hyps), [list(refs)]), dtype=np.int64)
    stats.setflags(write=False)
    return stats


def corpus_bleu(stats: np.ndarray) -> np.ndarray:
    """Corpus BLEU from summed statistics, sacrebleu's formula (exp smoothing) over the last axis."""
    metric = BLEU()
    flat = stats.reshape(-1, stats.shape[-1])
    scores = np.array([metric._compute_score_from_stats(row.tolist()).score for row in flat])
    return scores.reshape(stats.shape[:-1])


def seed_bootstrap(method: list[list[str]], reference: list[list[str]], refs: list[str], n_samples: int = 1000,
                   seed: int = 12345) -> Comparison:
    """Two-level bootstrap of mean BLEU (method's seeds minus reference's seeds); each seed is one list of
    hypotheses of the whole test set."""
    for name, runs in (("method", method), ("reference", reference)):
        if not runs or any(len(hyps) != len(refs) for hyps in runs):
            raise ValueError(f"{name}: every seed needs one hypothesis per test sentence ({len(refs)})")
    rng = np.random.default_rng(seed)
    stats_m = np.stack([sentence_statistics(h, refs) for h in method])  # (seeds, sentences, 10)
    stats_r = np.stack([sentence_statistics(h, refs) for h in reference])
    n = len(refs)
    counts = rng.multinomial(n, np.full(n, 1 / n), size=n_samples)  # (samples, sentences): shared by both
    totals_m = np.einsum("bn,snk->bsk", counts, stats_m)  # every seed on every resampled test set
    totals_r = np.einsum("bn,snk->bsk", counts, stats_r)
    bleu_m, bleu_r = corpus_bleu(totals_m), corpus_bleu(totals_r)  # (samples, seeds)
    pick_m = rng.integers(0, len(method), size=(n_samples, len(method)))
    pick_r = rng.integers(0, len(reference), size=(n_samples, len(reference)))
    rows = np.arange(n_samples)[:, None]
    deltas = bleu_m[rows, pick_m].mean(1) - bleu_r[rows, pick_r].mean(1)
    sentence_only = bleu_m.mean(1) - bleu_r.mean(1)  # every seed kept: the test set's share of the noise
    full_m, full_r = corpus_bleu(stats_m.sum(1)), corpus_bleu(stats_r.sum(1))
    below, above = int((deltas <= 0).sum()), int((deltas >= 0).sum())
    low, high = np.percentile(deltas, [2.5, 97.5])
    return Comparison(
        delta=round(float(full_m.mean() - full_r.mean()), 2), ci_low=round(float(low), 2),
        ci_high=round(float(high), 2), p_value=round(min(1.0, 2 * (min(below, above) + 1) / (n_samples + 1)), 4),
        seeds=len(method), reference_seeds=len(reference), std_error=float(deltas.std(ddof=1)),
        seed_std=float(full_m.std(ddof=1)) if len(method) > 1 else None,
        reference_seed_std=float(full_r.std(ddof=1)) if len(reference) > 1 else None,
        sentence_variance=float(sentence_only.var(ddof=1)))
