"""How often each seed comparison calls a difference decisive: false positives with no true difference, power
with one. The old test (`significance.seed_bootstrap`) beside the new one (`significance.compare_statistics`),
paired and unpaired designs, in one table.

    python benchmarks/verdict_calibration.py                 # 1000 trials a line: 9 minutes on 2 busy cores
    python benchmarks/verdict_calibration.py --trials 4000 --book-share 1.0

What it simulates (fast: a linear score per sentence, not BLEU of real hypotheses; the tests run on the same
(seeds, sentences, statistics) arrays they get from sacrebleu, with the mean sentence score as the corpus
score). A test set of the 11 test books with their KJV verse counts (995 verses; Hebrews is 303 of them). Each
simulated comparison draws:
- the test set's term of the difference: a book effect per book (the same for every verse of the book) plus a
  verse effect per verse, scaled so that their contribution to the mean difference has SD `--sentence-sd` (the
  measured 0.2 BLEU), `--book-share` of its variance between books;
- a seed effect per seed and side with SD `--seed-sd` (0.25: the median over the `study` rows' seed SDs, 0.12-0.55):
  in the paired design seed j of both sides correlate `--correlation` (-0.14: the median over the 45 pairs of the
  study's fine-tuned rows, -0.89 to 0.90; sharing batch order and dropout does not make converged rows move together),
  in the unpaired design they are independent;
- the true difference (0, `--deltas`) added to the method's side.
A seed's score on a verse is its side's verse effect plus its seed effect, so the per-seed corpus scores spread
with the seed SD and share the test set's term. The old test ("called decisive": both sides >= 2 seeds and its
percentile interval excludes 0) resamples seeds unpaired and verses one by one, as it did; the new one pairs
the seeds in the paired design, draws whole books again, and gives two columns: its interval excludes 0 (the
test's own rate) and decisive (that, with its rule of at least MIN_SEEDS seeds a side). Target: at most 6%
false positives at 5 seeds for the new test. The binomial SE of a rate p over T trials is sqrt(p(1-p)/T)
(0.7 points at 5% and 1000 trials).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # small products: threads only wait
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vocabridge.significance import MIN_SEEDS, compare_statistics, seed_bootstrap_statistics  # noqa: E402

# The downstream test books (params.yaml prepare.downstream.bible.test_books) and their verse counts (KJV).
BOOKS = {"Joel": 73, "Amos": 146, "Obadiah": 21, "Jonah": 48, "Micah": 105, "Nahum": 47, "Habakkuk": 56,
         "Zephaniah": 53, "Haggai": 38, "Hebrews": 303, "1 John": 105}


def mean_score(totals: np.ndarray) -> np.ndarray:
    """The corpus score of summed (score, sentences) statistics: the mean sentence score."""
    return totals[..., 0] / totals[..., 1]


def simulate(rng: np.random.Generator, sizes: np.ndarray, seeds: int, delta: float, paired: bool,
             seed_sd: float, sentence_sd: float, book_share: float, correlation: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """One comparison's (seeds, sentences, 2) statistics for the method and the reference side."""
    n = int(sizes.sum())
    weights = sizes / n
    book_sd = np.sqrt(book_share * sentence_sd**2 / (weights**2).sum())  # its share of Var(mean difference)
    verse_sd = np.sqrt((1 - book_share) * sentence_sd**2 * n)
    test_term = np.repeat(rng.normal(0, book_sd, len(sizes)), sizes) + rng.normal(0, verse_sd, n)
    z_m, z_other = rng.normal(0, 1, seeds), rng.normal(0, 1, seeds)
    z_r = correlation * z_m + np.sqrt(1 - correlation**2) * z_other if paired else z_other
    method = delta + test_term[None, :] + seed_sd * z_m[:, None]
    reference = np.broadcast_to(seed_sd * z_r[:, None], (seeds, n))
    ones = np.ones((seeds, n))
    return np.stack([method, ones], -1), np.stack([reference, ones], -1)


def rates(trials: int, seeds: int, delta: float, paired: bool, args: argparse.Namespace) -> tuple[float, ...]:
    """Shares of `trials` comparisons: old called decisive, new interval excludes 0, new decisive."""
    sizes = np.array(list(BOOKS.values()))
    books = np.repeat(np.arange(len(sizes)), sizes)
    keys = list(range(seeds)) if paired else None
    hits = np.zeros(3)
    for trial in range(trials):
        rng = np.random.default_rng([args.seed, int(paired), seeds, int(round(delta * 100)), trial])
        method, reference = simulate(rng, sizes, seeds, delta, paired, args.seed_sd, args.sentence_sd,
                                     args.book_share, args.correlation)
        old = seed_bootstrap_statistics(method, reference, args.samples, trial, score=mean_score)
        new = compare_statistics(method, reference, method_seeds=keys, reference_seeds=keys, clusters=books,
                                 n_samples=args.samples, seed=trial, score=mean_score)
        assert new.form == ("paired" if paired else "unpaired")
        hits += [not old.one_seed and (old.ci_low > 0 or old.ci_high < 0), new.ci_low > 0 or new.ci_high < 0,
                 new.decisive]
    return tuple(hits / trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1000, help="simulated comparisons per line")
    parser.add_argument("--samples", type=int, default=400, help="bootstrap rounds of each test")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 5, 8], help="seeds a side")
    parser.add_argument("--deltas", type=float, nargs="*", default=[0.5, 1.0], help="true differences (power)")
    parser.add_argument("--seed-sd", type=float, default=0.25, help="BLEU spread of one row over seeds")
    parser.add_argument("--sentence-sd", type=float, default=0.2, help="SD of the test set's term of the delta")
    parser.add_argument("--book-share", type=float, default=0.5, help="share of that variance between books")
    parser.add_argument("--correlation", type=float, default=-0.14, help="per-seed correlation, paired design")
    parser.add_argument("--seed", type=int, default=2020, help="of the simulation")
    parser.add_argument("--workers", type=int, default=2, help="processes, one line each at a time")
    args = parser.parse_args()
    start = time.perf_counter()
    print(f"seed SD {args.seed_sd}, test-set SD {args.sentence_sd} ({args.book_share:.0%} between "
          f"{len(BOOKS)} books, {sum(BOOKS.values())} verses), paired correlation {args.correlation}, "
          f"{args.trials} trials a line, {args.samples} bootstrap rounds; share of comparisons called")
    print(f"{'design':<9} {'seeds':>5} {'true delta':>10} {'old':>7} {'new (interval)':>15} "
          f"{f'new decisive (>= {MIN_SEEDS} seeds)':>28}")
    lines = [(seeds, delta, paired) for paired in (True, False) for seeds in args.seeds
             for delta in (0.0, *args.deltas)]
    with ProcessPoolExecutor(args.workers) as pool:
        found = [pool.submit(rates, args.trials, *line, args) for line in lines]
        for (seeds, delta, paired), result in zip(lines, found, strict=True):
            old, new, decisive = result.result()
            label = "false pos" if delta == 0 else "power"
            print(f"{'paired' if paired else 'unpaired':<9} {seeds:>5} {delta:>10.1f} {old:>7.1%} "
                  f"{new:>15.1%} {decisive:>28.1%}  {label}", flush=True)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
