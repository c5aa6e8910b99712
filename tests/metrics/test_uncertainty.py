"""Selective classification, equal-mass and classwise ECE, and OOD detection against cases with closed forms
(each written down in alternet/metrics/uncertainty.py's docstring)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from alternet.metrics.uncertainty import (
    adaptive_ece,
    classwise_ece,
    ood_metrics,
    ood_scores,
    risk_coverage,
    selective_metrics,
)


def two_class(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities predicting class 0 with each ``confidence`` (>= 0.5), labelled 0 where ``correct``."""
    confidence = np.asarray(confidence, dtype=np.float64)
    probs = np.stack([confidence, 1 - confidence], axis=1)
    return probs, np.where(np.asarray(correct), 0, 1)


def ranked(n: int, m: int, errors_first: bool) -> tuple[np.ndarray, np.ndarray]:
    """``n`` predictions, ``m`` of them wrong, the errors least (perfect ranker) or most (worst) confident."""
    confidence = np.linspace(0.99, 0.51, n)
    correct = np.arange(n) >= m if errors_first else np.arange(n) < n - m
    return two_class(confidence, correct)


def harmonic(n: int) -> float:
    return float(np.sum(1 / np.arange(1, n + 1)))


@pytest.mark.parametrize(("n", "m"), [(10, 2), (100, 30), (7, 7), (7, 0)])
def test_a_perfect_ranker(n, m):
    e = m / n
    metrics = selective_metrics(*ranked(n, m, errors_first=False))
    assert metrics["augrc"] == pytest.approx(e**2 / 2, abs=1e-12)
    assert metrics["aurc"] == pytest.approx(sum(j / (n - m + j) for j in range(1, m + 1)) / n, abs=1e-12)
    assert metrics["acc_cov90"] == pytest.approx(min(1.0, (n - m) / math.ceil(0.9 * n)), abs=1e-12)


def test_a_perfect_rankers_aurc_tends_to_geifmans_optimum():
    n, e = 100_000, 0.2
    metrics = selective_metrics(*ranked(n, int(e * n), errors_first=False))
    assert metrics["aurc"] == pytest.approx(e + (1 - e) * math.log(1 - e), abs=1e-4)


@pytest.mark.parametrize(("n", "m"), [(10, 2), (100, 30)])
def test_the_worst_ranker(n, m):
    e = m / n
    metrics = selective_metrics(*ranked(n, m, errors_first=True))
    assert metrics["augrc"] == pytest.approx(e - e**2 / 2, abs=1e-12)
    assert metrics["aurc"] == pytest.approx(e + e * (harmonic(n) - harmonic(m)), abs=1e-12)
    assert metrics["acc_cov95"] == pytest.approx(1 - m / math.ceil(0.95 * n), abs=1e-12)


def test_ties_are_a_random_ranker_whatever_order_they_arrive_in():
    rng = np.random.default_rng(0)
    correct = rng.random(1000) < 0.7
    probs, labels = two_class(np.full(1000, 0.8), correct)
    e = 1 - correct.mean()
    metrics = selective_metrics(probs, labels)
    assert metrics["aurc"] == pytest.approx(e, abs=1e-12) and metrics["augrc"] == pytest.approx(e / 2, abs=1e-12)
    assert metrics["acc_cov90"] == pytest.approx(1 - e, abs=1e-12)
    shuffled = rng.permutation(1000)
    assert selective_metrics(probs[shuffled], labels[shuffled]) == pytest.approx(metrics, abs=1e-12)


def test_all_right_and_all_wrong():
    right = selective_metrics(*two_class([0.9, 0.6, 0.7], [True] * 3))
    wrong = selective_metrics(*two_class([0.9, 0.6, 0.7], [False] * 3))
    assert right == {"aurc": 0.0, "augrc": 0.0, "acc_cov90": 1.0, "acc_cov95": 1.0}
    assert wrong == pytest.approx({"aurc": 1.0, "augrc": 0.5, "acc_cov90": 0.0, "acc_cov95": 0.0})


def test_the_risk_coverage_curve_by_hand():
    coverage, risk, generalised = risk_coverage(*two_class([0.9, 0.8, 0.7, 0.6], [True, False, True, False]))
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(risk, [0, 1 / 2, 1 / 3, 2 / 4])
    np.testing.assert_allclose(generalised, [0, 1 / 4, 1 / 4, 2 / 4])


def test_equal_mass_ece_by_hand():
    # confidence order: [0.6 right, 0.7 wrong | 0.8 right, 0.9 right]; two bins of two
    probs, labels = two_class([0.9, 0.6, 0.8, 0.7], [True, True, True, False])
    low, high = abs(0.5 - 0.65), abs(1.0 - 0.85)
    assert adaptive_ece(probs, labels, n_bins=2) == pytest.approx((2 * low + 2 * high) / 4)
    overconfident = two_class(np.ones(10), np.arange(10) < 7)
    assert adaptive_ece(*overconfident, n_bins=3) == pytest.approx(0.3)  # any binning: |0.7 - 1|
    tied = two_class([0.75] * 4, [True, True, True, False])  # one bin whatever their order: |0.75 - 0.75|
    assert adaptive_ece(*tied, n_bins=4) == pytest.approx(0.0, abs=1e-12)


def test_classwise_ece_by_hand():
    # two classes, probabilities of class 0: 0.75 for four images (three are class 0), 0.25 for four (one is class 0)
    p0 = np.array([0.75] * 4 + [0.25] * 4)
    probs = np.stack([p0, 1 - p0], axis=1)
    labels = np.array([0, 0, 0, 1, 0, 1, 1, 1])
    assert classwise_ece(probs, labels, n_bins=10) == pytest.approx(0.0, abs=1e-12)  # calibrated for each class
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1])  # class 0 is certain where it is said 75%, absent at 25%
    assert classwise_ece(probs, labels, n_bins=10) == pytest.approx(0.25)  # each class: 4/8 * .25 + 4/8 * .25
    assert classwise_ece(probs, labels, n_bins=10, chunk=1) == pytest.approx(0.25)  # chunking changes nothing


def test_ood_scores_and_metrics_by_hand():
    logits = np.array([[2.0, 0.0], [0.0, 0.0]])
    scores = ood_scores(logits)
    np.testing.assert_allclose(scores["msp"], [math.exp(2) / (math.exp(2) + 1), 0.5])
    np.testing.assert_allclose(scores["energy"], [math.log(math.exp(2) + 1), math.log(2)])
    apart = ood_metrics(np.array([3.0, 4.0]), np.array([1.0, 2.0]))
    assert apart == {"auroc": 1.0, "aupr_in": 1.0, "aupr_out": 1.0, "fpr95": 0.0}
    # in {2, 3} against out {1, 2}: 3 of 4 pairs ordered, one tied (half): 0.875; keeping both in-distribution
    # images means accepting everything >= 2, one of the two out-of-distribution images
    overlap = ood_metrics(np.array([2.0, 3.0]), np.array([1.0, 2.0]))
    assert overlap["auroc"] == pytest.approx(0.875) and overlap["fpr95"] == pytest.approx(0.5)
    same = ood_metrics(np.full(5, 1.0), np.full(5, 1.0))
    assert same["auroc"] == pytest.approx(0.5) and same["fpr95"] == pytest.approx(1.0)


def test_fpr95_counts_at_the_threshold_with_paired_ties():
    """Each in-distribution score has an equal out-of-distribution twin: the ROC runs up the diagonal through
    every point, so the threshold that keeps 95% of the inside accepts exactly 95% of the outside (a thinned ROC
    curve, scikit-learn's default, keeps only its ends and read 1.0)."""
    scores = np.arange(100.0)
    assert ood_metrics(scores, scores)["fpr95"] == pytest.approx(0.95)
    # ties inside each pair, and pairs shuffled: the same answer
    rng = np.random.default_rng(0)
    assert ood_metrics(rng.permutation(scores), rng.permutation(scores))["fpr95"] == pytest.approx(0.95)
    # 20 in-distribution scores: keeping 19 of them sets the threshold at the second lowest, 1.0; the outside ties
    # there (two at 1.0) and above count as accepted
    inside, outside = np.arange(20.0), np.r_[np.full(5, -1.0), np.full(2, 1.0), np.arange(2.0, 15.0)]
    assert ood_metrics(inside, outside)["fpr95"] == pytest.approx(15 / 20)


@pytest.mark.parametrize(
    ("logits", "message"), [(np.array([[np.nan, 1.0]]), "NaN or infinite"), (np.array([1.0, 2.0]), r"shape \(N, K\)")]
)
def test_ood_scores_refuse_what_is_no_logits(logits, message):
    with pytest.raises(ValueError, match=message):
        ood_scores(logits)


def test_ood_metrics_refuse_non_finite_or_shapeless_scores():
    with pytest.raises(ValueError, match="NaN or infinite"):
        ood_metrics(np.array([np.nan, 1.0]), np.array([0.0]))
    with pytest.raises(ValueError, match="1-D"):
        ood_metrics(np.ones((2, 2)), np.array([0.0]))
