"""The sensitivity reading of the pre-declared AlterNet-vs-twin run (docs/reproduction.md): its primary outcome, the
difference in test error, under the test-set term it was published with (a bootstrap of the seed-averaged per-image
error difference, the seeds' flips counted a second time) and under the corrected one (the flips removed:
docs/experiments.md, "Each source of noise once"), both beside Welch's seed term, with the pre-declared rule's
reading of each. The published label stays the pre-declared one.

    python docs/figures/vs_twin_sensitivity.py outputs/multirun/paper/alternet_vs_twin --save
    python docs/figures/vs_twin_sensitivity.py                 # from docs/figures/vs_twin_correct.npz

From a sweep directory it reads each job's test accuracy (metrics.json) and which test images it classified
correctly (eval/predictions.npz); ``--save`` keeps just those in ``vs_twin_correct.npz`` (the 14 jobs' predictions
are 100 MB, these 20 kB), from which the reading recomputes without the run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a file: its sibling scripts

from arms import read_arms

from alternet.report.statistics import bootstrap_variance, difference

BASELINE, VARIANT = "preresnet_laptop", "alternet_laptop"
MARGIN = 0.01  # the pre-declared equivalence margin (--error-margin 0.01)
DRAWS = 1000  # the report's bootstrap draws, seed 0
SAVED = Path(__file__).resolve().parent / "vs_twin_correct.npz"


def published_test_term(variant: np.ndarray, baseline: np.ndarray) -> float:
    """The estimator of before: the bootstrap variance of the mean per-image error difference, seed-averaged, with
    nothing removed (the report's resampling: ``DRAWS`` draws of the images from a generator seeded 0)."""
    per_image = baseline.mean(axis=0) - variant.mean(axis=0)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", type=Path, help=f"the run's sweep directory (default: read {SAVED.name})")
    parser.add_argument("--save", action="store_true", help=f"keep the seeds, accuracies and correctness in {SAVED}")
    args = parser.parse_args()
    fields = ("seed", "acc", "correct")
    arrays = read_arms([args.sweep], fields, (VARIANT, BASELINE)) if args.sweep else dict(np.load(SAVED))
    if args.save:
        np.savez_compressed(SAVED, **arrays)
    arms = (VARIANT, BASELINE)
    errors = {name: {str(s): 1 - a for s, a in zip(arrays[f"{name}/seed"], arrays[f"{name}/acc"])} for name in arms}
    correct = {name: arrays[f"{name}/correct"] for name in arms}
    print(f"{args.sweep or SAVED}: seeds {arrays[f'{VARIANT}/seed'].tolist()} of each arm")
    seeds = difference(errors[VARIANT], errors[BASELINE], paired=False)  # Welch: the seed term and its df
    for label, term, df in (
        (
            "as published (flips counted twice; Welch's df)",
            published_test_term(correct[VARIANT], correct[BASELINE]),
            seeds.df,
        ),
        (
            "corrected (flips removed; Satterthwaite's df, as the report now reads it)",
            bootstrap_variance(list(correct[VARIANT]), list(correct[BASELINE]), DRAWS),
            None,
        ),
    ):
        se = (seeds.se**2 + term) ** 0.5
        df = df or difference(errors[VARIANT], errors[BASELINE], paired=False, extra_variance=term).df
        low95, high95 = (seeds.delta + side * stats.t.ppf(0.975, df) * se for side in (-1, 1))
        low90, high90 = (seeds.delta + side * stats.t.ppf(0.95, df) * se for side in (-1, 1))
        p = 2 * stats.t.sf(abs(seeds.delta) / se, df)
        print(
            f"{label}: test-set sd {100 * term**0.5:.3f} pp, seed sd {100 * seeds.se:.3f} pp; "
            f"diff {100 * seeds.delta:+.2f} pp, 95% [{100 * low95:+.2f}, {100 * high95:+.2f}], "
            f"90% [{100 * low90:+.3f}, {100 * high90:+.3f}], df {df:.1f}, p {p:.4f}: "
            f"{reading(low90, high90, low95, high95)}"
        )


if __name__ == "__main__":
    main()
