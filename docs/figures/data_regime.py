"""The data-regime figure of docs/reproduction.md: test error and clean training NLL against the fraction of
CIFAR-100 trained on (a fixed 1,950-step budget), one line per model through the seed means, every seed a dot.

    python docs/figures/data_regime.py SWEEP            # -> SWEEP/data_regime.png
    python docs/figures/data_regime.py SWEEP --docs     # -> docs/figures/data_regime.png (the page's figure)
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from alternet.runs.directories import RunDir, SweepDir

DOCS = Path(__file__).resolve().parent / "data_regime.png"


def main(sweep: str, out: Path) -> None:
    points: dict[str, dict[float, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for job in SweepDir(sweep).jobs().jobs:
        summary = job.summary()
        if summary is None:
            continue
        values = RunDir(job.path).swept_values()
        error, nll = 1 - summary.test["acc"], summary.train_clean["nll"]
        points[summary.model][float(values["data.subset"])].append((error, nll))
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for model, by_fraction in sorted(points.items()):
        fractions = sorted(by_fraction)
        for axis, index in ((left, 0), (right, 1)):
            means = [sum(p[index] for p in by_fraction[f]) / len(by_fraction[f]) for f in fractions]
            line = axis.plot([100 * f for f in fractions], means, marker="o", label=f"{model} (mean)")[0]
            for fraction in fractions:
                seeds = [p[index] for p in by_fraction[fraction]]
                axis.scatter([100 * fraction] * len(seeds), seeds, color=line.get_color(), alpha=0.5, s=14)
    for axis, label in ((left, "test error"), (right, "clean training NLL (nats, last epoch)")):
        axis.set_xscale("log")
        axis.set_xticks([2, 10, 50], labels=["2%", "10%", "50%"])
        axis.minorticks_off()
        axis.set_xlabel("fraction of CIFAR-100's training set (same 1,950 steps)")
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
    left.legend()
    right.set_title("the paper: a ViT's training NLL rises as data shrink", fontsize=9)
    figure.suptitle("data_regime: every seed a dot")
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    print(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", help="the data_regime sweep's folder")
    parser.add_argument("--docs", action="store_true", help="write the page's own figure in docs/figures")
    args = parser.parse_args()
    main(args.sweep, DOCS if args.docs else Path(args.sweep) / "data_regime.png")
