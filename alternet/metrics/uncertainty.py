"""Uncertainty beyond the top-label ECE, from a split's probabilities (and logits): selective classification,
equal-mass and classwise calibration error, and out-of-distribution detection. Definitions and conventions (and how
they differ from torch-uncertainty's): docs/evaluation.md, "Uncertainty beyond calibration".

The selective metrics and FPR95, with their closed-form cases written down for the tests. With ``n`` predictions,
``m`` errors, the error rate ``e = m / n`` and ``E_k`` the errors among the ``k`` most confident (selective risk
``E_k / k``, generalised risk ``E_k / n``):

- ``aurc``, the mean selective risk over ``k = 1..n``: all tied (a random ranker) -> ``e`` exactly; a perfect ranker
  (every error less confident than every correct prediction) -> ``(1/n) sum_{j=1..m} j / (n - m + j)``, tending to
  ``e + (1 - e) ln(1 - e)``; the worst ranker -> ``e + e (H_n - H_m)`` (harmonic numbers), tending to
  ``e (1 - ln e)``.
- ``augrc``, the trapezoid of the generalised risk from ``(0, 0)``: ``e^2 / 2`` exactly for a perfect ranker,
  ``e / 2`` for a random one, ``e - e^2 / 2`` for the worst.
- ``acc_cov90`` / ``acc_cov95``: the accuracy of the ``k = ceil(c n)`` most confident at coverage ``c`` = 0.9 / 0.95.
- ``fpr95``: a set of distinct scores scored against itself gives 0.95, not 1.0: it is counted at the threshold
  itself, not read off a thinned ROC curve, which skips that point when scores tie (scores tied at the threshold
  count wholly, so a tied set gives more).
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

from .calibration import as_array, bin_index, check_bins, check_inputs, check_logits, confidence_and_correct

COVERAGES = {"acc_cov90": 0.9, "acc_cov95": 0.95}
TPR = 0.95  # fpr95's true-positive rate


def expected_errors(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """``E_k`` for ``k = 1..n``: errors among the ``k`` most confident, ties at their expectation."""
    order = np.argsort(-confidence, kind="stable")
    ranked, errors = confidence[order], (~correct[order]).astype(np.float64)
    starts = np.r_[0, np.flatnonzero(np.diff(ranked)) + 1]
    sizes = np.diff(np.r_[starts, len(ranked)])
    spread = np.repeat(np.add.reduceat(errors, starts) / sizes, sizes) if len(ranked) else errors
    return np.cumsum(spread)


def risk_coverage(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coverage ``c_k``, selective risk ``r_k``, generalised risk ``g_k``) for ``k = 1..n``."""
    probs, labels = check_inputs(probs, labels)
    confidence, correct = confidence_and_correct(probs, labels)
    errors = expected_errors(confidence, correct)
    n = len(errors)
    k = np.arange(1, n + 1)
    return k / n, errors / k, errors / n


def selective_metrics(probs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """``aurc``, ``augrc``, ``acc_cov90``, ``acc_cov95`` (the module docstring defines them)."""
    coverage, risk, generalised = risk_coverage(probs, labels)
    n = len(coverage)
    metrics = {
        "aurc": float(risk.mean()),
        "augrc": float(np.sum(np.r_[0.0, generalised[:-1]] + generalised) / (2 * n)),
    }
    for key, target in COVERAGES.items():
        k = max(1, math.ceil(target * n - 1e-9))
        metrics[key] = float(1 - risk[k - 1])
    return metrics


def adaptive_ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> float:
    """Top-label ECE over ``n_bins`` equal-mass bins: edges at the confidences' quantiles, so each bin holds
    ``n / n_bins`` predictions, and tied confidences share a bin (their order would otherwise decide the value)."""
    check_bins(n_bins)
    probs, labels = check_inputs(probs, labels)
    confidence, correct = confidence_and_correct(probs, labels)
    edges = np.quantile(confidence, np.arange(n_bins + 1) / n_bins)
    index = bin_index(confidence, edges)
    hits = np.bincount(index, weights=correct.astype(np.float64), minlength=n_bins)
    sure = np.bincount(index, weights=confidence, minlength=n_bins)
    return float(np.abs(hits - sure).sum() / len(labels))  # sum over bins of |B| * |acc_B - conf_B|


def classwise_ece(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10, chunk: int = 64) -> float:
    """The mean over classes of each class's ECE (its probability against being the label, equal-width bins)."""
    check_bins(n_bins)
    probs, labels = check_inputs(probs, labels)
    n, k = probs.shape
    edges = np.arange(n_bins + 1) / n_bins
    total = 0.0
    for start in range(0, k, chunk):  # n x chunk bin indices at a time: ImageNet's 50,000 x 1,000 would not fit
        p = np.clip(probs[:, start : start + chunk], 0.0, 1.0)
        width = p.shape[1]
        flat = (bin_index(p, edges) + n_bins * np.arange(width)).ravel()
        is_label = labels[:, None] == np.arange(start, start + width)
        sum_p = np.bincount(flat, weights=p.ravel().astype(np.float64), minlength=width * n_bins)
        hits = np.bincount(flat, weights=is_label.ravel().astype(np.float64), minlength=width * n_bins)
        total += float(np.abs(hits - sum_p).sum())  # |B| * |freq_B - conf_B| summed over bins and classes
    return total / (n * k)


def ood_scores(logits: np.ndarray) -> dict[str, np.ndarray]:
    """Per image, higher = more in-distribution: ``msp`` and ``energy`` (float64)."""
    z = check_logits(logits)
    top = z.max(axis=1, keepdims=True)
    log_norm = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
    return {"msp": np.exp(top[:, 0] - log_norm), "energy": log_norm}


def ood_metrics(inside: np.ndarray, outside: np.ndarray) -> dict[str, float]:
    """``auroc``, ``aupr_in``, ``aupr_out``, ``fpr95`` of in-distribution scores against out-of-distribution ones."""
    inside, outside = as_array(inside, np.float64), as_array(outside, np.float64)
    if inside.ndim != 1 or outside.ndim != 1 or not len(inside) or not len(outside):
        raise ValueError(
            f"OOD metrics need 1-D in- and out-of-distribution scores, got shapes {inside.shape} and {outside.shape}"
        )
    if not (np.all(np.isfinite(inside)) and np.all(np.isfinite(outside))):
        raise ValueError("OOD scores contain NaN or infinite values")
    truth = np.r_[np.ones(len(inside)), np.zeros(len(outside))]
    scores = np.r_[inside, outside]
    keep = math.ceil(TPR * len(inside) - 1e-9)  # in-distribution images a threshold must accept
    threshold = np.sort(inside)[len(inside) - keep]  # the keep-th highest in-distribution score
    return {
        "auroc": float(roc_auc_score(truth, scores)),
        "aupr_in": float(average_precision_score(truth, scores)),
        "aupr_out": float(average_precision_score(1 - truth, -scores)),
        "fpr95": float(np.mean(outside >= threshold)),
    }
