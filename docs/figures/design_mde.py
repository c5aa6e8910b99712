"""Each paper preset's minimum detectable effect (MDE) in test error, from its own design, by the report's code
(alternet.report.statistics: ``difference`` and ``Difference.detectable``, 80% power, two-sided alpha 0.05, before
Holm; docs/reproduction.md, "The laptop scale").

    python docs/figures/design_mde.py

A preset that ran is read from its published job table (its seeds' own spread, the test set's term left out: most
of those runs' predictions are gone); one that has not run is read from its design (seeds an arm, Welch or
seed-paired as the report would compare its arms) with each arm's seed spread taken from the runs of the same
model on the same recipe, named beside it. Those spreads come from 3 to 7 seeds, so a design's MDE is an
estimate; the report prints each sweep's own once it has run.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a file: its sibling scripts

from welch_from_tables import RULE, TABLES, column

from alternet.report.statistics import difference

# test top-1 (%) of runs of the same models on the same recipe (paper/_cpu): the pre-declared run's 14 jobs (seeds
# 10-16, vs_twin_correct.npz), inductive_bias's ViT (its published table) and that ViT's rerun (docs/reproduction.md)
_SAVED = np.load(Path(__file__).resolve().parent / "vs_twin_correct.npz")
TWIN_7, ALTERNET_7 = (list(100 * _SAVED[f"{name}/acc"]) for name in ("preresnet_laptop", "alternet_laptop"))
VIT_6 = [job[1] for job in TABLES["inductive_bias"][1]["vit_mini_cifar"]] + [30.60, 31.64, 31.87]
# data_regime, seeds 0-2 (the twin's 10% arm: 2 seeds), each model against its own 50% arm, seed-paired
DATA_REGIME = {
    "preresnet_laptop": {
        "2%": [14.51, 14.65, 14.66],
        "10%": [31.59, 31.81],
        "50%": [55.66, 55.06, 54.72],
    },
    "vit_mini_cifar": {"2%": [8.71, 8.42, 8.52], "10%": [16.08, 17.39, 18.46], "50%": [30.12, 31.86, 31.89]},
}


def mde(variant: dict[str, float], baseline: dict[str, float], paired: bool = False) -> float:
    """The comparison's MDE in percentage points (values in percent of test top-1)."""
    return difference(variant, baseline, paired=paired).detectable(RULE.alpha, RULE.power)


def spread(sd: float, seeds: int) -> dict[str, float]:
    """``seeds`` values whose sample sd is ``sd``, for a design not yet run (only the spread enters the MDE)."""
    centred = [i - (seeds - 1) / 2 for i in range(seeds)]
    scale = sd / statistics.stdev(centred)
    return {str(i): v * scale for i, v in enumerate(centred)}


def pooled_sd(groups: list[list[float]]) -> float:
    df = sum(len(g) - 1 for g in groups)
    return (sum((len(g) - 1) * statistics.variance(g) for g in groups) / df) ** 0.5


def main() -> None:
    print("Presets that ran: each arm against the baseline, from its published job table (Welch, seed term only)")
    for preset, (baseline, arms) in TABLES.items():
        for arm in arms:
            if arm != baseline:
                found = mde(column(arms[arm], 1), column(arms[baseline], 1))
                print(f"  {preset:16s} {arm:30s} {len(arms[arm])} + {len(arms[baseline])} seeds: MDE {found:.2f} pp")
    twin, alternet = ({str(seed): v for seed, v in enumerate(values, 10)} for values in (TWIN_7, ALTERNET_7))
    print(f"  {'alternet_vs_twin':16s} {'alternet_laptop':30s} 7 + 7 seeds: MDE {mde(alternet, twin):.2f} pp")
    for model, arms in DATA_REGIME.items():
        base = {str(i): v for i, v in enumerate(arms["50%"])}
        for fraction in ("2%", "10%"):
            values = {str(i): v for i, v in enumerate(arms[fraction])}
            found = mde(values, {k: base[k] for k in values}, paired=True)
            print(
                f"  {'data_regime':16s} {model + ', ' + fraction:30s} {len(values)} seeds, seed-paired vs 50%: "
                f"MDE {found:.2f} pp"
            )

    sd_twin, sd_alternet = statistics.stdev(TWIN_7), statistics.stdev(ALTERNET_7)
    sd_vit = pooled_sd([VIT_6[:3], VIT_6[3:]])
    print(
        f"\nPresets not run: from their designs, with the seed sds of the same models on the same recipe (twin "
        f"{sd_twin:.2f} pp and AlterNet {sd_alternet:.2f} pp over 7 seeds, alternet_vs_twin; ViT {sd_vit:.2f} pp "
        "pooled over 3 + 3 seeds, inductive_bias and its rerun)"
    )
    designs = {
        "locality": ("window 2 vs 4, AlterNet arms, Welch", sd_alternet, sd_alternet, 3),
        "locality_vit": ("3x3 / 5x5 vs global, ViT arms, Welch", sd_vit, sd_vit, 3),
        "buildup": ("a layout vs C|CC|CC, AlterNet- and twin-like arms, Welch", sd_alternet, sd_twin, 3),
        # no spread measured at the paper's scale: the laptop models' stand in, an assumption the report replaces
        "inductive_bias_full": ("AlterNet-50 vs ResNet-50 at the laptop spreads, Welch", sd_alternet, sd_twin, 5),
    }
    for preset, (what, sd_a, sd_b, seeds) in designs.items():
        found = mde(spread(sd_a, seeds), spread(sd_b, seeds))
        print(f"  {preset:19s} {what}, {seeds} + {seeds} seeds: MDE {found:.2f} pp")
    print("  locality_swin       2 seeds an arm: below the report's 3, no verdict (insufficient seeds)")
    print("  spectra             1 seed: a distribution of mini-batch eigenvalues per model, no interval")


if __name__ == "__main__":
    main()
