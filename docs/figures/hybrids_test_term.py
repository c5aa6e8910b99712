"""The `hybrids` preset's test-set term (docs/reproduction.md): the published comparison of BoTNet, CoAtNet and the
AlterNet against the ResNet twin held the seed term only, because those runs kept no per-image predictions. This
script measures the test images' own term for each pair and reads the published table again with it.

    python docs/figures/hybrids_test_term.py SWEEP [SWEEP ...] --save   # BoTNet's and CoAtNet's arms trained again
    python docs/figures/hybrids_test_term.py                            # from docs/figures/hybrids_correct.npz

Each SWEEP is `alternet train experiment=hybrids hydra.sweeper.params.model=MODEL`: one arm's seeds 0-2 again (or some
of them, with hydra.sweeper.params.seed: an arm's sweeps are merged), on the same recipe, each job scored after
training on the test split and on the CIFAR-100-C subset (its eval/). The twin's and the AlterNet's per-image
correctness come from the pre-declared run (7 seeds each, the same recipe: vs_twin_correct.npz and
vs_twin_robustness.npz). Every pair is unpaired (other seeds, no shared initial weights), so each term is
alternet.report.statistics.bootstrap_variance with the seeds' flips removed, unpaired.

The terms are then added, arm by arm, to the published table's Welch comparison (welch_from_tables.py: the same
intervals, Holm across the three models and the report's verdicts), and to its robustness differences. Each rerun
job is also set beside the published job of its seed: where the two agree, the term is that of the published runs
themselves; where they do not, it is the term of the same design. ``--save`` keeps each job's seed, test accuracy,
per-image correctness and per-image count of corruption sets classified correctly (about 10 kB an arm).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a file: its sibling scripts

from arms import SETS, read_arms
from welch_from_tables import TABLES, column, compare

from alternet.report.statistics import bootstrap_variance, difference

FIGURES = Path(__file__).resolve().parent
SAVED = FIGURES / "hybrids_correct.npz"
BASELINE, ALTERNET = "preresnet_laptop", "alternet_laptop"
RERUN = ("botnet_laptop", "coatnet_laptop")
DRAWS = 1000  # the report's bootstrap draws, seed 0
FIELDS = ("seed", "acc", "correct", "robustness", "sets_correct")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", nargs="*", type=Path, help=f"the rerun arms' sweeps (default: read {SAVED.name})")
    parser.add_argument("--save", action="store_true", help=f"keep what the numbers need in {SAVED}")
    args = parser.parse_args()
    arrays = read_arms(args.sweeps, FIELDS) if args.sweeps else dict(np.load(SAVED))
    if args.save:
        np.savez_compressed(SAVED, **arrays)
    twin = np.load(FIGURES / "vs_twin_correct.npz")
    twin_sets = np.load(FIGURES / "vs_twin_robustness.npz")
    correct = {name: list(twin[f"{name}/correct"]) for name in (BASELINE, ALTERNET)}
    robust = {name: list(twin_sets[f"{name}/sets_correct"] / SETS) for name in (BASELINE, ALTERNET)}
    baseline, published = TABLES["hybrids"]
    present = [name for name in RERUN if f"{name}/seed" in arrays]
    for name in present:
        correct[name] = list(arrays[f"{name}/correct"])
        robust[name] = list(arrays[f"{name}/sets_correct"] / SETS)
        jobs = {job[0]: job for job in published[name]}
        print(f"{name}, trained again (test top-1, then the published job's; CIFAR-100-C subset, then published):")
        for seed, acc, rob in zip(arrays[f"{name}/seed"], arrays[f"{name}/acc"], arrays[f"{name}/robustness"]):
            old = jobs.get(int(seed))
            was = f"{old[1]:.2f}%, {old[3]:.2f}%" if old else "no published job"
            print(f"  seed {seed}: {100 * acc:.2f}% and {100 * rob:.2f}% (published: {was})")

    print(f"\nThe test images' term against {baseline} (7 seeds of the pre-declared run), unpaired:")
    error_sd, robust_sd = {}, {}
    for name in (ALTERNET, *present):
        error_sd[name] = bootstrap_variance(correct[name], correct[BASELINE], DRAWS) ** 0.5
        robust_sd[name] = bootstrap_variance(robust[name], robust[BASELINE], DRAWS) ** 0.5
        seeds = len(correct[name])
        upper = "; with one seed its flips stay in: an upper bound" if seeds == 1 else ""
        sds = f"test error sd {100 * error_sd[name]:.3f} pp, CIFAR-100-C sd {100 * robust_sd[name]:.3f} pp"
        print(f"  {name:18s} {sds} ({seeds} seed{'s' * (seeds != 1)}{upper})")

    missing = [name for name in RERUN if name not in present]
    note = f" ({', '.join(missing)}: not measured, seed term only)" if missing else ""
    print(f"\nThe published hybrids table with each arm's measured term (Welch, Holm across 3){note}:")
    for arm, (error, _, reading) in compare(baseline, published, error_sd).items():
        print(
            f"  {arm:18s} Δ error {100 * error.delta:+.2f} pp [{100 * error.low:+.2f}, {100 * error.high:+.2f}] "
            f"(df {error.df:.1f}, p {error.p:.4f}, Holm {error.p_holm:.4f}) | {reading}"
        )
    for arm in robust_sd:
        term = (100 * robust_sd[arm]) ** 2  # the table's robustness is in percent
        d = difference(column(published[arm], 3), column(published[baseline], 3), paired=False, extra_variance=term)
        print(
            f"  {arm:18s} Δ robustness {d.delta:+.2f} pp [{d.low:+.2f}, {d.high:+.2f}] (Welch with the term, df "
            f"{d.df:.1f}, p {d.p:.4f}; described, no verdict)"
        )


if __name__ == "__main__":
    main()
