"""The report's verdicts are statistics: intervals that match scipy's own tests, Holm's step-down, TOST, the
test set's own noise, the convergence gate, and verdicts that keep their error rate on tables of known truth."""

import numpy as np
import pytest
from scipy import stats

from alternet.report.statistics import PAIRED, POOLED, WELCH, Pooled, bootstrap_variance, difference, holm, with_holm
from alternet.report.verdicts import (
    EARLY_TRAINING,
    EQUIVALENT,
    HELPS_OPTIMISATION,
    HURTS,
    INCONCLUSIVE,
    INSUFFICIENT,
    REGULARISES,
    Rule,
    plateaued,
    verdict,
)

SEEDS = ("0", "1", "2")


def by_seed(values, seeds=SEEDS):
    return dict(zip(seeds, values))


def test_a_seed_paired_difference_is_scipys_paired_t_test():
    a, b = [0.30, 0.32, 0.35], [0.33, 0.36, 0.37]
    d = difference(by_seed(a), by_seed(b))
    assert d.method == PAIRED and d.n == (3, 3) and d.df == 2
    assert d.delta == pytest.approx(np.mean(a) - np.mean(b))
    assert d.p == pytest.approx(stats.ttest_rel(a, b).pvalue)
    low, high = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (d.low, d.high) == (pytest.approx(low), pytest.approx(high))


def test_different_seeds_give_welchs_interval():
    a, b = [0.30, 0.32, 0.35, 0.31], [0.33, 0.36, 0.37]
    d = difference(by_seed(a, "0123"), by_seed(b, "456"))
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert d.method == WELCH and d.p == pytest.approx(welch.pvalue)
    assert (d.low, d.high) == tuple(pytest.approx(x) for x in welch.confidence_interval(0.95))
    assert difference(by_seed(a[:3]), by_seed(b), paired=False).method == WELCH


def test_a_pooled_variance_uses_the_whole_sweeps_degrees_of_freedom():
    groups = [[0.30, 0.32, 0.35], [0.33, 0.36, 0.37], [0.40, 0.41, 0.45]]
    pooled = Pooled.of(groups)
    assert pooled.df == 6 and pooled.variance == pytest.approx(np.mean([np.var(g, ddof=1) for g in groups]))
    d = difference(by_seed(groups[0]), by_seed(groups[1]), pooled=pooled)
    t = (np.mean(groups[0]) - np.mean(groups[1])) / np.sqrt(pooled.variance * 2 / 3)
    assert d.method == POOLED and d.p == pytest.approx(2 * stats.t.sf(abs(t), 6))


def test_one_seed_has_no_interval_and_no_verdict():
    assert difference(by_seed([0.3], "0"), by_seed([0.4], "1")) is None
    assert verdict(None, None, converged=True).startswith(INSUFFICIENT)


def test_holm_steps_down():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5] and holm([0.4, 0.9]) == [0.8, 0.9]
    corrected = with_holm([None, difference(by_seed([1, 2, 3]), by_seed([2, 3, 5]))])
    assert corrected[0] is None and corrected[1].p_holm == corrected[1].p


def _arm(rng, mean, sd, n=3):
    return by_seed(rng.normal(mean, sd, n), [str(i) for i in range(n)])


def _sweep_verdicts(rng, error_shift, nll_shift, n=3, variants=4, converged=True, rule=None):
    """Verdicts of ``variants`` variants against one baseline, each variant shifted by the given amounts."""
    base_error, base_nll = _arm(rng, 0.35, 0.003, n), _arm(rng, 1.2, 0.01, n)
    errors = with_holm([difference(_arm(rng, 0.35 + error_shift, 0.003, n), base_error) for _ in range(variants)])
    nlls = with_holm([difference(_arm(rng, 1.2 + nll_shift, 0.01, n), base_nll) for _ in range(variants)])
    return [verdict(error, nll, converged, rule or Rule()) for error, nll in zip(errors, nlls)]


CLAIMS = (HELPS_OPTIMISATION, REGULARISES, HURTS, EARLY_TRAINING)


def test_a_null_table_yields_claims_at_no_more_than_the_nominal_family_rate():
    """Four variants equal to the baseline, 3 seeds each: the chance of any claim in a sweep stays at or under
    alpha = 5% (Holm). The old rule (|delta| > sqrt(sd_a^2 + sd_b^2)) made one in ~75% of such sweeps."""
    rng = np.random.default_rng(0)
    draws = 2000
    sweeps_with_a_claim = sum(any(v.startswith(CLAIMS) for v in _sweep_verdicts(rng, 0.0, 0.0)) for _ in range(draws))
    assert sweeps_with_a_claim / draws < 0.065  # 5% nominal; 2000 draws have a standard error of 0.5%


def test_a_large_effect_is_found_at_three_seeds():
    rng = np.random.default_rng(1)
    found = [_sweep_verdicts(rng, -0.02, -0.1, variants=1)[0] for _ in range(200)]
    assert found.count(HELPS_OPTIMISATION) / len(found) > 0.9
    regularising = [_sweep_verdicts(rng, -0.02, +0.1, variants=1)[0] for _ in range(200)]
    assert regularising.count(REGULARISES) / len(regularising) > 0.9
    assert _sweep_verdicts(rng, +0.02, 0.0, variants=1) == [HURTS]


def test_before_convergence_the_same_pattern_is_early_training_speed():
    rng = np.random.default_rng(2)
    (judged,) = _sweep_verdicts(rng, -0.02, -0.1, variants=1, converged=False)
    assert judged.startswith(EARLY_TRAINING) and "lower training NLL" in judged


def test_equivalence_needs_a_tight_interval_inside_the_margins():
    tight = difference(by_seed([0.350, 0.351, 0.349]), by_seed([0.351, 0.350, 0.350]))
    tight_nll = difference(by_seed([1.200, 1.201, 1.199]), by_seed([1.201, 1.200, 1.201]))
    assert verdict(tight, tight_nll, converged=True) == EQUIVALENT
    loose = difference(by_seed([0.34, 0.36, 0.35]), by_seed([0.35, 0.35, 0.36]))
    assert verdict(loose, tight_nll, converged=True) == INCONCLUSIVE  # no difference shown, none excluded either
    assert verdict(tight, tight_nll, converged=True, rule=Rule(error_margin=0.0005)) == INCONCLUSIVE


def test_two_seeds_are_insufficient_whatever_the_difference():
    d = difference(by_seed([0.20, 0.21], "01"), by_seed([0.40, 0.41], "01"))
    assert verdict(d, d, converged=True) == f"{INSUFFICIENT} (2; 3 needed)"


@pytest.mark.parametrize(
    ("curves", "expected"),
    [
        ([[3.0, 2.0, 1.5, 1.2, 1.19, 1.185, 1.18, 1.18]], True),  # last quarter: 1.185 -> 1.18
        ([[3.0, 2.0, 1.5, 1.2, 1.1, 1.0, 0.9, 0.8]], False),  # still falling 11% per quarter
        ([[3.0, 2.0, 1.5, 1.2, 1.19, 1.185, 1.18, 1.18], [3.0, 2.0, 1.0, 0.5]], False),  # one run not converged
        ([[1.2, 1.2, 1.2]], False),  # three epochs cannot tell
        ([], False),
    ],
)
def test_the_convergence_gate(curves, expected):
    assert plateaued(curves, 0.05) is expected


def test_the_test_sets_own_noise_is_a_paired_bootstrap():
    rng = np.random.default_rng(3)
    same = rng.random(5000) < 0.6
    assert bootstrap_variance([same], [same]) == 0.0  # the same predictions: the test set cannot move the difference
    a, b = rng.random(5000) < 0.6, rng.random(5000) < 0.6
    expected = (np.var(a.astype(float) - b.astype(float))) / 5000  # variance of a mean of per-image differences
    assert bootstrap_variance([a], [b], draws=2000) == pytest.approx(expected, rel=0.15)
    with pytest.raises(ValueError, match="different test sets"):
        bootstrap_variance([a], [b[:100]])
