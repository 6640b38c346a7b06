"""The two-level bootstrap on hand-made systems whose right answer is known."""

import numpy as np
import pytest
import sacrebleu

from vocabridge.significance import corpus_bleu, seed_bootstrap, sentence_statistics

WORDS = "the house is small and old but the garden behind it is large and green in the summer".split()
REFS = [" ".join(WORDS[i % 7 : i % 7 + 6 + i % 4]) for i in range(60)]


def damaged(refs: list[str], every: int) -> list[str]:
    """Every `every`-th word replaced: a worse system, by a known amount."""
    return [" ".join("x" if j % every == 0 else w for j, w in enumerate(r.split())) for r in refs]


def test_scores_are_sacrebleus_own():
    hyps = damaged(REFS, 3)
    assert corpus_bleu(sentence_statistics(hyps, REFS).sum(0)) == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [REFS]).score)


def test_the_same_system_against_itself_is_no_difference():
    runs = [damaged(REFS, 3), damaged(REFS, 4)]
    result = seed_bootstrap(runs, runs, REFS, n_samples=200)
    assert result.delta == 0 and result.ci_low <= 0 <= result.ci_high and result.p_value == 1.0
    assert not result.decisive


def test_a_better_method_on_every_seed_is_decisive():
    result = seed_bootstrap([REFS, damaged(REFS, 5), damaged(REFS, 6)],
                            [damaged(REFS, 2), damaged(REFS, 3), damaged(REFS, 2)], REFS, n_samples=300)
    assert result.delta > 20 and result.ci_low > 0 and result.p_value < 0.01 and result.decisive
    assert result.detectable < result.delta


def test_seed_luck_is_not_a_finding():
    """One lucky seed beats the reference on the sentences alone, but the method's seeds spread across the
    reference: over seeds and sentences the interval holds 0."""
    lucky, unlucky = damaged(REFS, 6), damaged(REFS, 2)
    steady = [damaged(REFS, 3)] * 2
    one_seed = seed_bootstrap([lucky], steady[:1], REFS, n_samples=300)
    assert one_seed.ci_low > 0 and one_seed.one_seed and not one_seed.decisive  # flagged, never a finding
    both = seed_bootstrap([lucky, unlucky], steady, REFS, n_samples=300)
    assert both.ci_low < 0 < both.ci_high and not both.decisive
    assert both.std_error > 3 * one_seed.std_error


def test_the_detectable_difference_shrinks_with_seeds_to_the_test_sets_floor():
    result = seed_bootstrap([damaged(REFS, 3), damaged(REFS, 4)], [damaged(REFS, 3), damaged(REFS, 5)], REFS,
                            n_samples=300)
    reach = [result.detectable_with(k) for k in (2, 5, 20)]
    assert reach[0] > reach[1] > reach[2] > 2.8 * np.sqrt(result.sentence_variance) * 0.99
    assert result.seeds_for(reach[1]) <= 5 and result.seeds_for(0.0) is None
    assert seed_bootstrap([REFS], [REFS], REFS, n_samples=50).detectable_with(5) is None  # seed spread unknown


def test_a_seed_with_missing_lines_is_refused():
    with pytest.raises(ValueError, match="one hypothesis per test sentence"):
        seed_bootstrap([REFS[:-1]], [REFS], REFS)
