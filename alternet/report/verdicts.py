"""Each variant of a sweep against a baseline variant, in the paper's terms (Park & Kim, 2022, section 2): an
inductive bias that *helps optimisation* lowers the clean training NLL and the test error; one that *regularises*
raises the training NLL and lowers the test error.

With seeds, a difference counts only beyond the seed spread of the difference, sqrt(sd_a^2 + sd_b^2) (the sample
standard deviations over each variant's seeds); with one seed per variant every difference counts and the table
says ``1 seed``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

HELPS_OPTIMISATION = "helps optimisation"
REGULARISES = "regularises"
HURTS = "hurts"
NO_CHANGE = "no significant change"
HELPS_OTHERWISE = "helps, training NLL unchanged"  # lower error, training NLL within the spread: neither mechanism


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation (0 with one value) over a variant's seeds."""

    mean: float
    sd: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary | None:
        values = [v for v in values if v is not None and math.isfinite(v)]
        if not values:
            return None
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {self.sd:.4f}" if self.n > 1 else f"{self.mean:.4f}"


def change(variant: Summary, baseline: Summary) -> int:
    """-1, 0 or +1: the variant's mean below, within the seed spread of, or above the baseline's."""
    difference = variant.mean - baseline.mean
    spread = math.hypot(variant.sd, baseline.sd) if min(variant.n, baseline.n) > 1 else 0.0
    if abs(difference) <= spread or difference == 0:
        return 0
    return 1 if difference > 0 else -1


def verdict(error: Summary, baseline_error: Summary, nll: Summary | None, baseline_nll: Summary | None) -> str:
    """The paper's reading of a variant's test error and clean training NLL against the baseline's."""
    error_change = change(error, baseline_error)
    if error_change > 0:
        return HURTS
    if error_change == 0:
        return NO_CHANGE
    if nll is None or baseline_nll is None:
        return HELPS_OTHERWISE + " (no train_clean/nll logged)"
    nll_change = change(nll, baseline_nll)
    if nll_change < 0:
        return HELPS_OPTIMISATION
    if nll_change > 0:
        return REGULARISES
    return HELPS_OTHERWISE
