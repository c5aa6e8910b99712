"""Calibration error accumulated batch by batch (and across DDP ranks) with exactly the binning of
:func:`alternet.metrics.calibration.reliability_bins`, so training's ``test/ece`` and evaluate.py's ``ece`` are
one number computed one way."""

from __future__ import annotations

import torch
from torchmetrics import Metric

from .calibration import HALF_EPS, check_bins, check_k, sum_tolerance


class BinnedCalibrationError(Metric):
    """Expected calibration error over ``n_bins`` equal-width confidence bins, (lo, hi] with 0 in the first bin.

    Per bin it keeps the sample count, the number correct and the summed confidence (sums reduce across ranks),
    so the result does not depend on the batch size or the number of processes. Half-precision rows are renormalised
    as :func:`~alternet.metrics.calibration.check_inputs` renormalises them. Rows that are no probabilities
    (logits, a label outside the classes) are counted on the device, never read per batch, and :meth:`compute`
    refuses them as :func:`~alternet.metrics.reliability_bins` does; a non-finite row (a diverged model) makes the
    result NaN.
    """

    full_state_update = False

    def __init__(self, n_bins: int = 10, **kwargs):
        super().__init__(**kwargs)
        check_bins(n_bins)
        self.n_bins = n_bins
        for name in ("counts", "correct", "confidence"):
            self.add_state(name, default=torch.zeros(n_bins, dtype=torch.float64), dist_reduce_fx="sum")
        for name in ("invalid", "nonfinite"):
            self.add_state(name, default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, probs: torch.Tensor, labels: torch.Tensor) -> None:
        _check_batch(probs, labels, "probs")
        tolerance = sum_tolerance(probs.dtype)
        values = probs.detach().double()
        finite = torch.isfinite(values).all(dim=1)
        sums = values.sum(dim=1)
        in_range = (values.amin(dim=1) >= -tolerance) & ((sums - 1).abs() <= tolerance)
        if str(probs.dtype) in HALF_EPS:  # renormalised, as check_inputs does: the same confidences
            values = values / sums[:, None]
        labelled = (labels >= 0) & (labels < values.shape[1])
        self.invalid += (finite & ~(in_range & labelled)).sum()
        self.nonfinite += (~finite).sum()
        confidence, prediction = values.max(dim=1)
        confidence = confidence.clamp(0.0, 1.0)
        edges = torch.arange(self.n_bins + 1, dtype=torch.float64, device=values.device) / self.n_bins  # (lo, hi]
        index = (torch.searchsorted(edges, confidence, right=False) - 1).clamp(0, self.n_bins - 1)
        self.counts += torch.bincount(index, minlength=self.n_bins).double()
        self.correct += torch.bincount(index, weights=(prediction == labels).double(), minlength=self.n_bins)
        self.confidence += torch.bincount(index, weights=confidence, minlength=self.n_bins)

    def compute(self) -> torch.Tensor:
        if self.invalid > 0:
            raise ValueError(
                f"{int(self.invalid)} rows were no probabilities with a label among their classes (logits, rows not "
                "summing to 1, or a label outside [0, K-1]): pass softmax probabilities and class indices"
            )
        if self.nonfinite > 0:
            return torch.tensor(float("nan"), device=self.counts.device)
        total = self.counts.sum().clamp(min=1.0)
        return ((self.correct - self.confidence).abs().sum() / total).float()


class TopKAccuracy(Metric):
    """Share of samples whose label is among the ``k`` highest scores, a label tied with other classes counted at
    its expectation over the orders of the tie, (places left) / (classes tied), as
    :func:`~alternet.metrics.calibration.top_k_accuracy` counts it on a whole split. torch's ``topk`` breaks a tie by
    position, so bf16 logits (ties are common there) gave training's test/top5 and the evaluation's different values."""

    full_state_update = False

    def __init__(self, k: int, **kwargs):
        super().__init__(**kwargs)
        check_k(k)
        self.k = k
        for name in ("hits", "seen", "nonfinite", "invalid"):
            self.add_state(name, default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, scores: torch.Tensor, labels: torch.Tensor) -> None:
        """``scores``: logits (ranked as :func:`~alternet.metrics.calibration.top_k_accuracy` ranks them) or
        probabilities (where softmax underflows, the zeros tie)."""
        _check_batch(scores, labels, "scores")
        scores, labels = scores.detach(), labels.long()
        self.nonfinite += (~torch.isfinite(scores).all(dim=1)).sum()  # a diverged model's: the result is NaN
        outside = (labels < 0) | (labels >= scores.shape[1])  # counted on the device, refused by compute
        self.invalid += outside.sum()
        label_score = scores.gather(1, labels.clamp(0, scores.shape[1] - 1)[:, None])
        above, tied = (scores > label_score).sum(dim=1), (scores == label_score).sum(dim=1)  # tied: the label too
        places = min(self.k, scores.shape[1]) - above
        self.hits += (places.double() / tied.double()).clamp(0.0, 1.0).sum()
        self.seen += labels.numel()

    def compute(self) -> torch.Tensor:
        if self.invalid > 0:
            raise ValueError(
                f"{int(self.invalid)} labels were outside the classes [0, K-1]: pass class indices below the scores' "
                "width"
            )
        if self.nonfinite > 0:  # a NaN score ties with nothing: it counted as a hit
            return torch.tensor(float("nan"), device=self.hits.device)
        return (self.hits / self.seen.clamp(min=1.0)).float()


def _check_batch(scores: torch.Tensor, labels: torch.Tensor, name: str) -> None:
    """A batch's shapes and label dtype, read from the tensors' metadata (no device sync): refused in one line (a
    float label was truncated to a class, a mismatched batch failed inside torch)."""
    if scores.dim() != 2 or labels.shape != scores.shape[:1]:
        raise ValueError(
            f"{name} must have shape (N, K) and labels (N,), got {tuple(scores.shape)} and {tuple(labels.shape)}"
        )
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integer class indices, got dtype {labels.dtype}")
