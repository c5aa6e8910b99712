"""Calibration error accumulated batch by batch (and across DDP ranks) with exactly the binning of
:func:`alternet.metrics.calibration.reliability_bins`, so training's ``test/ece`` and evaluate.py's ``ece`` are
one number computed one way."""

from __future__ import annotations

import torch
from torchmetrics import Metric


class BinnedCalibrationError(Metric):
    """Expected calibration error over ``n_bins`` equal-width confidence bins, (lo, hi] with 0 in the first bin.

    Per bin it keeps the sample count, the number correct and the summed confidence (sums reduce across ranks),
    so the result does not depend on the batch size or the number of processes.
    """

    full_state_update = False

    def __init__(self, n_bins: int = 10, **kwargs):
        super().__init__(**kwargs)
        if n_bins < 1:
            raise ValueError(f"n_bins must be >= 1, got {n_bins}")
        self.n_bins = n_bins
        self.register_buffer("edges", torch.arange(n_bins + 1, dtype=torch.float64) / n_bins, persistent=False)
        for name in ("counts", "correct", "confidence"):
            self.add_state(name, default=torch.zeros(n_bins, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, probs: torch.Tensor, labels: torch.Tensor) -> None:
        confidence, prediction = probs.detach().double().max(dim=1)
        confidence = confidence.clamp(0.0, 1.0)
        index = (torch.searchsorted(self.edges, confidence, right=False) - 1).clamp(0, self.n_bins - 1)
        self.counts += torch.bincount(index, minlength=self.n_bins).double()
        self.correct += torch.bincount(index, weights=(prediction == labels).double(), minlength=self.n_bins)
        self.confidence += torch.bincount(index, weights=confidence, minlength=self.n_bins)

    def compute(self) -> torch.Tensor:
        total = self.counts.sum().clamp(min=1.0)
        return ((self.correct - self.confidence).abs().sum() / total).float()
