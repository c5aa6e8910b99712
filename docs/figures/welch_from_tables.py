"""The laptop-scale comparisons between architectures, recomputed by the report's rule in force (docs/experiments.md):
Welch's interval across seeds (two architectures share no initial weights, so pairing them by seed number pairs
nothing they share), Holm's correction across a sweep's variants, and the verdict the report reads from them
(alternet.report.verdicts), from the per-job tables docs/reproduction.md publishes.

    python docs/figures/welch_from_tables.py

Those runs kept no per-image predictions (or their files are gone), so the test set's own term cannot be estimated
for them: each interval here has the seed term only. The report's, with a test-set term, may be narrower or wider:
the term adds variance but also raises the Satterthwaite degrees of freedom, which at 3 seeds an arm can narrow the
interval. Each row therefore also prints the test-set standard deviation at which the verdict would change (the
same term added to every variant of the sweep), to be set against the terms measured where predictions exist
(0.05 pp between the laptop AlterNet and its twin at 7 seeds, docs/reproduction.md; the hybrids' own, from
arms trained again: hybrids_test_term.py).

The tables' test top-1 is exact (a count of 10,000 test images in percent to 2 decimals); the clean training NLL
is rounded to 3 decimals (at most 0.0005 nats off a job, far below the seeds' spread); robustness to 2 decimals of
a percentage over 150,000 images.
"""

from __future__ import annotations

from alternet.report.statistics import Difference, difference, with_holm
from alternet.report.verdicts import Rule, budget_reason, verdict

# preset -> (baseline, {arm: [(seed, test top-1 %, clean training NLL, robustness % or None), ...]}), as published
TABLES: dict[str, tuple[str, dict[str, list[tuple[int, float, float, float | None]]]]] = {
    "inductive_bias": (
        "preresnet_laptop",
        {
            "preresnet_laptop": [(0, 57.11, 1.379, None), (1, 57.20, 1.375, None), (2, 57.50, 1.357, None)],
            "alternet_laptop": [(0, 57.72, 1.376, None), (1, 58.58, 1.366, None), (2, 57.84, 1.370, None)],
            "vit_mini_cifar": [(0, 30.26, 2.750, None), (1, 32.66, 2.672, None), (2, 32.41, 2.651, None)],
            "pit_mini_cifar": [(0, 42.42, 2.125, None), (1, 42.96, 2.098, None), (2, 42.64, 2.123, None)],
        },
    ),
    "hybrids": (
        "preresnet_laptop",
        {
            "preresnet_laptop": [(0, 57.21, 1.383, 41.81), (1, 57.95, 1.372, 41.28), (2, 57.42, 1.390, 41.78)],
            "alternet_laptop": [(0, 58.74, 1.353, 42.35), (1, 58.69, 1.368, 42.01), (2, 57.96, 1.371, 42.11)],
            "botnet_laptop": [(0, 55.17, 1.402, 34.82), (1, 55.23, 1.420, 32.89), (2, 55.03, 1.437, 33.41)],
            "coatnet_laptop": [(0, 55.18, 1.544, 30.13), (1, 55.75, 1.536, 31.17), (2, 55.71, 1.536, 31.04)],
        },
    ),
    "specificity": (
        "model.attention=window",
        {
            "model.attention=window": [(0, 58.74, 1.353, None), (1, 58.69, 1.368, None), (2, 57.96, 1.371, None)],
            "model.attention=position_only": [
                (0, 58.26, 1.375, None),
                (1, 58.08, 1.378, None),
                (2, 58.31, 1.377, None),
            ],
        },
    ),
}
RULE = Rule()  # the report's defaults: alpha 0.05, min 3 seeds, margins 0.5 pp and 0.02 nats, power 0.8
BUDGET = budget_reason(True, None)  # every run completed its schedule; no preset holds a 2x-epoch arm


def column(jobs: list[tuple], index: int, scale: float = 1.0) -> dict[str, float]:
    return {str(job[0]): job[index] * scale for job in jobs if job[index] is not None}


def compare(
    baseline: str, arms: dict, test_sd: float | dict[str, float] = 0.0
) -> dict[str, tuple[Difference, Difference, str]]:
    """Each variant's Welch differences in test error and clean training NLL, Holm-corrected across the variants,
    and the report's verdict; ``test_sd`` (a fraction, or one per variant) adds a test-set term to the error
    differences."""
    variants = [arm for arm in arms if arm != baseline]
    sds = test_sd if isinstance(test_sd, dict) else dict.fromkeys(variants, test_sd)
    errors = with_holm(
        [
            difference(
                column(arms[arm], 1, -0.01),
                column(arms[baseline], 1, -0.01),
                paired=False,
                extra_variance=sds.get(arm, 0.0) ** 2,
            )
            for arm in variants
        ]
    )
    nlls = with_holm([difference(column(arms[arm], 2), column(arms[baseline], 2), paired=False) for arm in variants])
    return {
        arm: (error, nll, verdict(error, nll, BUDGET, RULE))
        for arm, error, nll in zip(variants, errors, nlls)
        if error is not None and nll is not None
    }


def breaking_sd(baseline: str, arms: dict, arm: str) -> float | None:
    """The smallest test-set sd (fraction) at which ``arm``'s verdict changes; None when it holds past 5 pp."""
    now = compare(baseline, arms)[arm][2]
    low, high = 0.0, 0.05
    if compare(baseline, arms, high)[arm][2] == now:
        return None
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if compare(baseline, arms, middle)[arm][2] == now else (low, middle)
    return high


def robustness(baseline: str, arms: dict) -> None:
    variants = [arm for arm in arms if arm != baseline and arms[arm][0][3] is not None]
    found = [difference(column(arms[a], 3), column(arms[baseline], 3), paired=False) for a in variants]
    for arm, d in zip(variants, found):
        print(
            f"  {arm:30s} Δ robustness {d.delta:+.2f} pp [{d.low:+.2f}, {d.high:+.2f}] (Welch, df {d.df:.1f}, "
            f"p {d.p:.4f}; described, no verdict)"
        )


def main() -> None:
    for preset, (baseline, arms) in TABLES.items():
        print(f"\n## {preset}: each arm against {baseline} (Welch, seed term only; Holm across {len(arms) - 1})")
        for arm, (error, nll, reading) in compare(baseline, arms).items():
            mde = 100 * error.detectable(RULE.alpha, RULE.power)
            breaks = breaking_sd(baseline, arms, arm)
            holds = "past 5 pp" if breaks is None else f"up to {100 * breaks:.2f} pp"
            print(
                f"  {arm:30s} Δ error {100 * error.delta:+.2f} pp [{100 * error.low:+.2f}, {100 * error.high:+.2f}] "
                f"(df {error.df:.1f}, p {error.p:.4f}, Holm {error.p_holm:.4f}, MDE {mde:.2f} pp) | "
                f"Δ training NLL {nll.delta:+.3f} [{nll.low:+.3f}, {nll.high:+.3f}] (df {nll.df:.1f}, "
                f"Holm {nll.p_holm:.4f}, MDE {nll.detectable(RULE.alpha, RULE.power):.3f}) | {reading} "
                f"(holds for a test-set sd {holds})"
            )
        if any(jobs[0][3] is not None for jobs in arms.values()):
            robustness(baseline, arms)


if __name__ == "__main__":
    main()
