"""CIFAR-100-C on the pre-declared run's 14 models (docs/reproduction.md): the AlterNet's and its twin's corrupted
accuracy (the mean over the 75 generated sets of the first 2,000 test images) and the share of clean accuracy each
keeps, and the AlterNet's differences from the twin by the report's rule: Welch's seed term and the test images' own
term (the seeds' flips removed, alternet.report.statistics.bootstrap_variance), described, never a verdict. For the
corrupted accuracy the term is over each image's share of the 75 sets it is classified correctly in; for the share
kept, a ratio (corrupted over clean accuracy on the same images), over each image's linearised contribution to it
(the delta method: ``(r_i - k c_i) / C`` for a seed's share kept ``k``, clean accuracy ``C``, image share ``r_i``
and clean correctness ``c_i``), whose mean is the ratio's first-order change when the images are drawn again (on
the ViT-twin pair a bootstrap of the ratios themselves, flips in, gave an sd of 0.00900, the linearised 0.00899).

    python docs/figures/vs_twin_robustness.py SWEEP [--vit VIT_SWEEP] --save   # each job scored into JOB/eval (below)
    python docs/figures/vs_twin_robustness.py                                 # from docs/figures/vs_twin_robustness.npz

``--vit``: inductive_bias's ViT arm (the same recipe, its own seeds) scored alike, compared with both arms of the run
by the same rule (Welch, unpaired: other seeds).

Each job of SWEEP (a copy of the run's sweep directory) scored with
``alternet evaluate ckpt=JOB out_dir=JOB/eval robustness.enabled=true robustness.max_images=2000``. ``--save``
keeps each job's seed, corrupted and clean accuracy, per-image count of sets classified correctly and per-image
clean correctness on those images (35 kB).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a file: its sibling scripts

from arms import SETS, read_arms

from alternet.report.statistics import bootstrap_variance, difference

BASELINE, VARIANT, VIT = "preresnet_laptop", "alternet_laptop", "vit_mini_cifar"
DRAWS = 1000  # the report's bootstrap draws, seed 0
FIELDS = ("seed", "robustness", "clean", "sets_correct", "clean_correct")
SAVED = Path(__file__).resolve().parent / "vs_twin_robustness.npz"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", type=Path, help=f"the scored sweep directory (default: read {SAVED.name})")
    parser.add_argument("--vit", type=Path, help="inductive_bias's ViT arm, scored alike")
    parser.add_argument("--save", action="store_true", help=f"keep what the numbers need in {SAVED}")
    args = parser.parse_args()
    arrays = read_arms([args.sweep], FIELDS, (VARIANT, BASELINE)) if args.sweep else dict(np.load(SAVED))
    if args.vit:
        arrays |= read_arms([args.vit], FIELDS, (VIT,))
    if args.save:
        np.savez_compressed(SAVED, **arrays)
    arms = (VARIANT, BASELINE, VIT) if f"{VIT}/seed" in arrays else (VARIANT, BASELINE)

    def per_seed(key: str, name: str) -> dict[str, float]:
        return {str(s): float(v) for s, v in zip(arrays[f"{name}/seed"], arrays[f"{name}/{key}"])}

    kept = {
        name: {s: r / c for (s, r), c in zip(per_seed("robustness", name).items(), arrays[f"{name}/clean"])}
        for name in arms
    }
    for name in arms:
        print(
            f"{name:18s} corrupted {100 * arrays[f'{name}/robustness'].mean():.2f}% "
            f"(sd {100 * arrays[f'{name}/robustness'].std(ddof=1):.2f}), clean on the same images "
            f"{100 * arrays[f'{name}/clean'].mean():.2f}%, share kept {np.mean(list(kept[name].values())):.3f} "
            f"({len(arrays[f'{name}/seed'])} seeds)"
        )
    correct = {name: arrays[f"{name}/sets_correct"].astype(np.float64) / SETS for name in arms}
    linear = {  # each image's contribution to each seed's share kept, linearised
        name: (correct[name] - np.array(list(kept[name].values()))[:, None] * arrays[f"{name}/clean_correct"])
        / arrays[f"{name}/clean"][:, None]
        for name in arms
    }
    pairs = [(VARIANT, BASELINE)] + [(VIT, other) for other in (BASELINE, VARIANT) if VIT in arms]
    for one, other in pairs:
        term = bootstrap_variance(list(correct[one]), list(correct[other]), DRAWS)
        print(f"\n{one} - {other}:")
        for label, extra in (
            ("seed term only", 0.0),
            (f"with the test images' term (sd {100 * term**0.5:.3f} pp)", term),
        ):
            d = difference(
                per_seed("robustness", one), per_seed("robustness", other), paired=False, extra_variance=extra
            )
            print(
                f"Δ corrupted accuracy, {label}: {100 * d.delta:+.2f} pp [{100 * d.low:+.2f}, {100 * d.high:+.2f}] "
                f"(df {d.df:.1f}, p {d.p:.4f})"
            )
        term = bootstrap_variance(list(linear[one]), list(linear[other]), DRAWS)
        for label, extra in (("seed term only", 0.0), (f"with the test images' term (sd {term**0.5:.4f})", term)):
            d = difference(kept[one], kept[other], paired=False, extra_variance=extra)
            print(f"Δ share kept, {label}: {d.delta:+.4f} [{d.low:+.4f}, {d.high:+.4f}] (df {d.df:.1f}, p {d.p:.4f})")


if __name__ == "__main__":
    main()
