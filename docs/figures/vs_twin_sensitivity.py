"""The sensitivity reading of the pre-declared AlterNet-vs-twin run (docs/reproduction.md): its primary outcome, the
difference in test error, under the test-set term it was published with (a bootstrap of the seed-averaged per-image
error difference, the seeds' flips counted a second time) and under the corrected one (the flips removed:
docs/experiments.md, "Each source of noise once"), both beside Welch's seed term, with the pre-declared rule's
reading of each. The published label stays the pre-declared one.

    python docs/figures/vs_twin_sensitivity.py outputs/multirun/paper/alternet_vs_twin
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from alternet.report.build import group_variants
from alternet.report.runs import read_sweep
from alternet.report.statistics import bootstrap_variance, difference

BASELINE, VARIANT = "preresnet_laptop", "alternet_laptop"
MARGIN = 0.01  # the pre-declared equivalence margin (--error-margin 0.01)
DRAWS = 1000  # the report's bootstrap draws, seed 0


def published_test_term(variant: list[np.ndarray], baseline: list[np.ndarray]) -> float:
    """The estimator of before: the bootstrap variance of the mean per-image error difference, seed-averaged, with
    nothing removed (the report's resampling: ``DRAWS`` draws of the images from a generator seeded 0)."""
    per_image = np.mean(baseline, axis=0) - np.mean(variant, axis=0)
    rng = np.random.default_rng(0)
    samples = [per_image[rng.integers(0, per_image.size, per_image.size)].mean() for _ in range(DRAWS)]
    return float(np.var(samples, ddof=1))


def reading(low90: float, high90: float, low95: float, high95: float) -> str:
    """The pre-declared decision rule on the error difference (fractions)."""
    if high95 < 0:
        return "the AlterNet has the lower error at this budget"
    if low95 > 0:
        return "the AlterNet has the higher error at this budget"
    if low90 > -MARGIN and high90 < MARGIN:
        return "no difference as large as 1 pp (equivalent within the margin)"
    return "not decided by 7 seeds"


def main(sweep: str) -> None:
    runs, _ = read_sweep(Path(sweep))
    variants = {variant.label: variant for variant in group_variants(runs, ["model"])}
    arms = {name: sorted(variants[f"model={name}"].runs, key=lambda run: run.seed) for name in (VARIANT, BASELINE)}
    errors = {name: {run.seed: 1 - float(run.metrics.test["acc"]) for run in arms[name]} for name in arms}
    correct = {name: [run.test_correct() for run in arms[name]] for name in arms}
    print(f"{sweep}: {len(arms[VARIANT])} + {len(arms[BASELINE])} jobs, seeds {sorted(errors[VARIANT])}")
    for label, term in (
        ("published (flips counted twice)", published_test_term(correct[VARIANT], correct[BASELINE])),
        ("corrected (flips removed)", bootstrap_variance(correct[VARIANT], correct[BASELINE], DRAWS)),
    ):
        at95 = difference(errors[VARIANT], errors[BASELINE], paired=False, extra_variance=term)
        at90 = difference(errors[VARIANT], errors[BASELINE], paired=False, extra_variance=term, confidence=0.90)
        print(
            f"{label}: test-set sd {100 * term**0.5:.3f} pp; seed sd {100 * (at95.se**2 - term) ** 0.5:.3f} pp; "
            f"diff {100 * at95.delta:+.2f} pp, 95% [{100 * at95.low:+.2f}, {100 * at95.high:+.2f}], "
            f"90% [{100 * at90.low:+.3f}, {100 * at90.high:+.3f}], df {at95.df:.1f}, p {at95.p:.3f}: "
            f"{reading(at90.low, at90.high, at95.low, at95.high)}"
        )


if __name__ == "__main__":
    main(*sys.argv[1:])
