"""Each variant of a sweep against a baseline variant, in the paper's terms (Park & Kim, 2022, section 2): an
inductive bias that *helps optimisation* lowers the training NLL and the test error; one that *regularises* raises
the training NLL and lowers the test error. The paper reads HDVW's training NLL (the epoch's mean loss on its
augmented, mixed batches); this project's primary reading is the clean one (the fixed subset in eval mode), and the
report gives a verdict with each. A verdict is read from the differences' confidence intervals
(:mod:`.statistics`), never from means alone. The verdicts, the order they are tried in, and when a verdict holds
only *at this budget* (:func:`budget_reason`): docs/experiments.md, "Report".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import check_option

if TYPE_CHECKING:  # numpy and scipy: `alternet report --help` reads this module's defaults without them
    from .statistics import Difference

HELPS_OPTIMISATION = "helps optimisation"
REGULARISES = "regularises"
HURTS = "hurts"
EQUIVALENT = "equivalent"
AT_THIS_BUDGET = "at this budget"
INCONCLUSIVE = "inconclusive"
INSUFFICIENT = "insufficient seeds"


@dataclass(frozen=True)
class Rule:
    """The settings a verdict is read with; ``describe()`` states them in the report."""

    alpha: float = 0.05
    min_seeds: int = 3
    error_margin: float = 0.005  # 0.5 percentage points of test error
    nll_margin: float = 0.02  # nats of clean training NLL
    power: float = 0.8  # the power at which each comparison's minimum detectable effect is stated

    def __post_init__(self) -> None:
        """Each setting in its range, named as ``alternet report``'s option, before any run is read."""
        check_option("--alpha", self.alpha, 0 < self.alpha <= 0.5, "a family-wise significance level in (0, 0.5]")
        check_option(
            "--min-seeds",
            self.min_seeds,
            isinstance(self.min_seeds, int) and self.min_seeds >= 2,
            "an integer >= 2 (a variant's interval needs a spread over seeds)",
        )
        margin = self.error_margin
        check_option("--error-margin", margin, 0 < margin < 1, "a fraction of test error in (0, 1)")
        check_option("--nll-margin", self.nll_margin, self.nll_margin > 0, "nats of training NLL, > 0")
        check_option("--power", self.power, 0.5 <= self.power < 1, "a power in [0.5, 1)")

    def describe(self) -> str:
        return (
            f"95% intervals; significance at alpha = {self.alpha} after Holm's correction across the variants "
            f"(per metric); at least {self.min_seeds} seeds per variant; equivalence by TOST (per variant, "
            "not corrected across them) inside ±"
            f"{self.error_margin * 100:g} pp test error and ±{self.nll_margin:g} nats training NLL; minimum "
            f"detectable effects at {self.power:.0%} power; a verdict reads as the paper's claim only when every run "
            f"completed the paper's schedule ({PAPER_EPOCHS} epochs), else as true at this budget (saying whether "
            "the ranking holds at twice the epochs where the sweep has them)"
        )


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation (0 with one value) over a variant's seeds."""

    mean: float
    sd: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Summary | None:
        values = [v for v in values if v is not None and math.isfinite(v)]
        if not values:
            return None
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values))


PAPER_EPOCHS = 305  # the paper's schedule: 5 warm-up epochs and 300 (recipe=paper, recipe=imagenet)


def budget_reason(completed: bool, ranking_holds_at_twice: bool | None, paper_schedule: bool = False) -> str | None:
    """Why a verdict holds only at this budget (None: it stands as the paper's claim, which only runs that
    completed the paper's schedule, ``paper_schedule``, can make): a run that did not complete its schedule, a
    ranking that changes at twice the epochs, or a shorter schedule, with or without an arm at twice the epochs
    (``None``: none; two short budgets say no more of the paper's 300 epochs than one)."""
    if not completed:
        return "a run did not complete its schedule"
    if ranking_holds_at_twice is False:
        return "the ranking changes at twice the epochs"
    if paper_schedule:
        return None
    if ranking_holds_at_twice is None:
        return "no arm at twice the epochs tests the ranking"
    return f"shorter than the paper's {PAPER_EPOCHS} epochs; the ranking, by its means, holds at twice the epochs"


def verdict(
    error: Difference | None,
    nll: Difference | None,
    budget: str | None = None,
    rule: Rule = Rule(),
    nll_name: str = "clean training NLL",
    nll_read: bool = True,
) -> str:
    """The paper's reading of a variant's differences in test error and a training NLL (``nll_name``: the clean
    one, or HDVW's epoch mean on augmented batches) from the baseline (``budget``: why a claim, any verdict but
    inconclusive, holds only at this budget, :func:`budget_reason`; None: it stands as the paper's claim)."""
    if error is None or min(error.n) < rule.min_seeds:
        seeds = min(error.n) if error else 1
        return f"{INSUFFICIENT} ({seeds}; {rule.min_seeds} needed)"
    claim = (lambda kind: kind) if budget is None else (lambda kind: f"{kind} {AT_THIS_BUDGET} ({budget})")
    if error.above_zero(rule.alpha):
        return claim(HURTS)
    if error.below_zero(rule.alpha):
        if nll is None:
            return f"{INCONCLUSIVE} (lower error; no {nll_name} logged)"
        if min(nll.n) < rule.min_seeds:
            return f"{INCONCLUSIVE} (lower error; {nll_name} of {min(nll.n)} seeds, {rule.min_seeds} needed)"
        if nll.below_zero(rule.alpha) or nll.above_zero(rule.alpha):
            return claim(HELPS_OPTIMISATION if nll.delta < 0 else REGULARISES)
        return f"{INCONCLUSIVE} (lower error; training NLL unresolved)"
    nll_equivalent = nll is None or (min(nll.n) >= rule.min_seeds and nll.equivalent(rule.nll_margin, rule.alpha))
    if error.equivalent(rule.error_margin, rule.alpha) and nll_equivalent:
        # ``nll_read=False``: the NLL is there but not of the tested weights, so it cannot be said to agree
        return claim(EQUIVALENT) if nll_read else f"{INCONCLUSIVE} (equivalent test error; no {nll_name})"
    return INCONCLUSIVE
