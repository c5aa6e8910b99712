"""Accuracy and calibration metrics on a whole split, and temperature scaling.

Every metric is computed per sample on the full arrays (``probs`` of shape (N, K), ``labels`` of shape (N,)), never
averaged per batch, so the result does not depend on the batch size. The definitions (HDVW ``ops/tests.py``'s
meaning, its flaws fixed), ECE's bin edges and how they differ from HDVW's and torchmetrics': docs/reference.md,
section 3, "Metrics".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

PROB_FLOOR = 1e-12
SUM_TOLERANCE = 1e-3
# a half-precision softmax's rows sum to 1 within its precision (each probability rounds by a relative eps / 2)
HALF_EPS = {"torch.bfloat16": 2.0**-7, "torch.float16": 2.0**-10, "float16": 2.0**-10}
CONFIDENCE_CUTOFF = 0.9
TEMPERATURE_BOUNDS = (0.05, 20.0)


@dataclass(frozen=True)
class ReliabilityBins:
    """Per-bin sample counts, accuracy and mean confidence (NaN for empty bins) over equal-width edges."""

    edges: np.ndarray
    counts: np.ndarray
    accuracy: np.ndarray
    confidence: np.ndarray

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @property
    def share(self) -> np.ndarray:
        """Fraction of all samples in each bin."""
        return self.counts / max(self.n, 1)

    @property
    def centers(self) -> np.ndarray:
        return (self.edges[:-1] + self.edges[1:]) / 2

    @property
    def ece(self) -> float:
        """Expected calibration error: sum over non-empty bins of share * |accuracy - confidence|."""
        filled = self.counts > 0
        return float(np.sum(self.share[filled] * np.abs(self.accuracy[filled] - self.confidence[filled])))

    @property
    def overall_accuracy(self) -> float:
        filled = self.counts > 0
        return float(np.sum(self.share[filled] * self.accuracy[filled]))

    @property
    def overall_confidence(self) -> float:
        filled = self.counts > 0
        return float(np.sum(self.share[filled] * self.confidence[filled]))


def as_array(values: Any, dtype: Any = None) -> np.ndarray:
    """An array of ``values``: a numpy array, a list, or a torch tensor of any dtype (bf16 too), on any device,
    with or without its graph."""
    if hasattr(values, "detach"):  # a torch tensor, read without importing torch
        values = values.detach().cpu()
        values = (values.double() if values.is_floating_point() else values).numpy()
    return np.asarray(values, dtype=dtype)


def sum_tolerance(dtype: Any) -> float:
    """How far a row of probabilities of ``dtype`` may sum from 1: :data:`SUM_TOLERANCE`, or a half precision's
    own."""
    return max(SUM_TOLERANCE, HALF_EPS.get(str(dtype), 0.0))


def check_bins(n_bins: Any) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")


def check_k(k: Any) -> None:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")


def check_inputs(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate and return ``(probs as float64 (N, K), labels as int64 (N,))``; raise ``ValueError`` otherwise. Half
    precision probabilities are checked within their precision and returned renormalised (rows summing to 1)."""
    half = str(getattr(probs, "dtype", "")) in HALF_EPS
    tolerance = sum_tolerance(getattr(probs, "dtype", ""))
    probs = as_array(probs, np.float64)
    if probs.ndim != 2 or probs.shape[0] == 0 or probs.shape[1] < 2:
        raise ValueError(f"probs must have shape (N, K) with N >= 1 and K >= 2, got {probs.shape}")
    labels = _check_labels(labels, *probs.shape)
    if not np.all(np.isfinite(probs)):
        raise ValueError("probs contain NaN or infinite values")
    sums = probs.sum(axis=1)
    worst = int(np.argmax(np.abs(sums - 1)))
    if probs.min() < -tolerance or probs.max() > 1 + tolerance or abs(sums[worst] - 1) > tolerance:
        raise ValueError(
            f"probs must be probabilities in [0, 1] whose rows sum to 1 (within {tolerance:g}); row {worst} sums "
            f"to {sums[worst]:.6g}. Pass softmax probabilities, e.g. softmax(logits) or apply_temperature(logits, T), "
            "not logits or log-probabilities."
        )
    return (probs / sums[:, None] if half else probs), labels


def _check_labels(labels: np.ndarray, n: int, k: int) -> np.ndarray:
    labels = as_array(labels)
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},) to match the {n} rows of predictions, got {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integer class indices, got dtype {labels.dtype}")
    if labels.min() < 0 or labels.max() >= k:
        raise ValueError(f"labels must lie in [0, {k - 1}] for {k} classes, got range [{labels.min()}, {labels.max()}]")
    return labels.astype(np.int64)


def confidence_and_correct(probs: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    confidence = np.clip(probs.max(axis=1), 0.0, 1.0)
    return confidence, probs.argmax(axis=1) == labels


def bin_index(confidence: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each confidence: ``edges[b] < c <= edges[b + 1]``, with 0 in the first bin."""
    return np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, len(edges) - 2)


def reliability_bins(probs: np.ndarray, labels: np.ndarray, n_bins: int = 10) -> ReliabilityBins:
    """Counts, accuracy and mean confidence per equal-width confidence bin (the data of ECE and its diagram)."""
    check_bins(n_bins)
    probs, labels = check_inputs(probs, labels)
    confidence, correct = confidence_and_correct(probs, labels)
    edges = np.arange(n_bins + 1) / n_bins  # exactly i / n_bins, so a confidence of 0.9 sits on an edge
    index = bin_index(confidence, edges)
    counts = np.bincount(index, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.bincount(index, weights=correct.astype(np.float64), minlength=n_bins) / counts
        mean_confidence = np.bincount(index, weights=confidence, minlength=n_bins) / counts
    return ReliabilityBins(edges=edges, counts=counts, accuracy=accuracy, confidence=mean_confidence)


def top_k_accuracy(probs: np.ndarray, labels: np.ndarray, k: int, logits: np.ndarray | None = None) -> float:
    """Share of samples whose label is among the ``min(k, K)`` most probable classes, ranked by the ``logits`` the
    probabilities came from where given (the same order, without the ties softmax makes where it underflows). A label
    tied with other classes counts at its expectation over the orders of the tie: (places left) / (classes tied),
    so a model that scores every class alike has top-k k/K, as a random choice among them would."""
    check_k(k)
    tolerance = sum_tolerance(getattr(probs, "dtype", ""))
    probs, labels = check_inputs(probs, labels)
    return _top_k(probs if logits is None else _logits_of(probs, logits, tolerance), labels, k)


def _top_k(scores: np.ndarray, labels: np.ndarray, k: int) -> float:
    label_score = scores[np.arange(len(labels)), labels][:, None]
    above, tied = np.sum(scores > label_score, axis=1), np.sum(scores == label_score, axis=1)  # tied: the label too
    return float(np.mean(np.clip((min(k, scores.shape[1]) - above) / tied, 0.0, 1.0)))


def nll(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean over samples of ``-log p_y``, with ``p_y`` clipped below at ``PROB_FLOOR``."""
    probs, labels = check_inputs(probs, labels)
    return float(np.mean(-np.log(np.maximum(probs[np.arange(len(labels)), labels], PROB_FLOOR))))


def brier_score(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean over samples of ``sum_k (p_k - onehot_k)^2`` (not divided by K; range [0, 2])."""
    probs, labels = check_inputs(probs, labels)
    squared = np.square(probs).sum(axis=1)
    label_prob = probs[np.arange(len(labels)), labels]
    return float(np.mean(squared - 2 * label_prob + 1))


def nll_per_sample(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each sample's ``logsumexp(z) - z_y`` in float64: the exact NLL, never floored."""
    z = check_logits(logits)
    labels = _check_labels(labels, *z.shape)
    top = z.max(axis=1, keepdims=True)
    log_norm = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
    return log_norm - z[np.arange(len(labels)), labels]


def nll_from_logits(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean over samples of :func:`nll_per_sample`: the exact NLL, never floored."""
    return float(np.mean(nll_per_sample(logits, labels)))


def calibration_metrics(
    probs: np.ndarray, labels: np.ndarray, n_bins: int = 10, logits: np.ndarray | None = None
) -> dict[str, float]:
    """``acc, top5, nll, ece, brier, acc90, unc90, freq90`` (fractions, not percent) of a whole split; with the
    ``logits`` the probabilities came from, the NLL is exact (:func:`nll_from_logits`)."""
    tolerance = sum_tolerance(getattr(probs, "dtype", ""))
    probs, labels = check_inputs(probs, labels)
    if logits is not None:
        logits = _logits_of(probs, logits, tolerance)
    confidence, correct = confidence_and_correct(probs, labels)
    confident, errors = confidence > CONFIDENCE_CUTOFF, ~correct
    return {
        "acc": float(np.mean(correct)),
        "top5": _top_k(probs if logits is None else logits, labels, 5),
        "nll": nll(probs, labels) if logits is None else nll_from_logits(logits, labels),
        "ece": reliability_bins(probs, labels, n_bins).ece,
        "brier": brier_score(probs, labels),
        "acc90": float(correct[confident].mean()) if confident.any() else float("nan"),
        "unc90": float(np.mean(~confident[errors])) if errors.any() else float("nan"),
        "freq90": float(confident.mean()),
    }


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64, stable for large logits."""
    logits = check_logits(logits)
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def apply_temperature(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Calibrated probabilities ``softmax(logits / temperature)``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    return softmax(check_logits(logits) / temperature)


def _logits_of(probs: np.ndarray, logits: np.ndarray, tolerance: float) -> np.ndarray:
    """``logits`` as float64, refused unless they are those ``probs`` came from (their softmax, within the
    probabilities' precision): an NLL or a top-5 of other logits would be another model's."""
    z = check_logits(logits)
    if z.shape != probs.shape:
        raise ValueError(
            f"logits must have the shape of probs, {probs.shape} (the logits the probabilities came from), got "
            f"{z.shape}"
        )
    worst = float(np.abs(softmax(z) - probs).max())
    if worst > tolerance:
        raise ValueError(
            f"softmax(logits) differs from probs by up to {worst:.3g} (more than {tolerance:g}): pass the logits the "
            "probabilities came from (of temperature-scaled probabilities apply_temperature(logits, T): logits / T)"
        )
    return z


def check_logits(logits: np.ndarray) -> np.ndarray:
    logits = as_array(logits, np.float64)
    if logits.ndim != 2 or logits.shape[0] == 0:
        raise ValueError(f"logits must have shape (N, K) with N >= 1, got {logits.shape}")
    if not np.all(np.isfinite(logits)):
        raise ValueError("logits contain NaN or infinite values")
    if len(logits) > 1 and logits.min() >= 0 and logits.max() <= 1 and np.all(np.abs(logits.sum(axis=1) - 1) < 1e-6):
        raise ValueError(  # their softmax is valid arithmetic, and another model's numbers (NLL 2.33 where 5.00 is)
            "logits look like probabilities (every row in [0, 1], summing to 1): pass the scores before softmax (a "
            "model that ends in a softmax: drop it, or pass the log of its outputs)"
        )
    return logits


def _nll_and_derivatives(logits: np.ndarray, labels: np.ndarray, beta: float) -> tuple[float, float, float]:
    """NLL of ``softmax(beta * logits)`` and its first two derivatives in the inverse temperature ``beta``."""
    scaled = beta * logits
    shifted = scaled - scaled.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    probs = np.exp(shifted - log_norm)
    rows = np.arange(len(labels))
    mean_logit = (probs * logits).sum(axis=1)
    variance = np.maximum((probs * np.square(logits)).sum(axis=1) - np.square(mean_logit), 0.0)
    value = -np.mean(shifted[rows, labels] - log_norm[:, 0])
    return float(value), float(np.mean(mean_logit - logits[rows, labels])), float(np.mean(variance))


def fit_temperature(
    logits: np.ndarray, labels: np.ndarray, bounds: tuple[float, float] = TEMPERATURE_BOUNDS, max_iter: int = 100
) -> float:
    """Temperature T in ``bounds`` minimising the NLL of ``softmax(logits / T)`` (fit it on the validation split).

    The NLL is convex in the inverse temperature, so a safeguarded Newton search for the zero of its derivative
    (bisection whenever a Newton step leaves the bracket) finds the global minimum deterministically. The result
    never has a higher NLL than T = 1 on the data it was fitted on.
    """
    logits = check_logits(logits)
    labels = _check_labels(labels, *logits.shape)
    if not 0 < bounds[0] < 1 < bounds[1]:
        raise ValueError(f"bounds must satisfy 0 < low < 1 < high, got {bounds}")
    beta = _minimise_convex(lambda b: _nll_and_derivatives(logits, labels, b), 1 / bounds[1], 1 / bounds[0], max_iter)
    at_one, at_best = _nll_and_derivatives(logits, labels, 1.0)[0], _nll_and_derivatives(logits, labels, beta)[0]
    return 1.0 / beta if at_best <= at_one else 1.0


def _minimise_convex(
    objective: Callable[[float], tuple[float, float, float]], low: float, high: float, max_iter: int
) -> float:
    """Minimiser in [low, high] (low < 1 < high) of a convex 1-D function ``x -> (value, f'(x), f''(x))``."""
    if objective(low)[1] >= 0:
        return low
    if objective(high)[1] <= 0:
        return high
    x = 1.0
    for _ in range(max_iter):
        _, grad, curvature = objective(x)
        if grad == 0:
            return x
        low, high = (low, x) if grad > 0 else (x, high)
        newton = x - grad / curvature if curvature > 0 else None
        following = newton if newton is not None and low < newton < high else (low + high) / 2
        if abs(following - x) <= 1e-12 * x:
            return following
        x = following
    return x
