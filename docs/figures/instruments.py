"""The paper's instruments on a sweep's trained models, across seeds: the figures and numbers of the instruments
section of docs/reproduction.md. Each job must have been scored into <job>/instruments with

    alternet evaluate ckpt=JOB out_dir=JOB/instruments "analysis=[fourier,variance,lesion]" \
        robustness.root=CIFAR100C_DIR robustness.max_images=2000

(robustness.enabled=false leaves CIFAR-100-C out: its table and figure are then skipped).

Usage: python docs/figures/instruments.py SWEEP_DIR [--models preresnet_laptop alternet_laptop vit_mini_cifar]
       [--out docs/figures] [--name instruments]

Prints, per model, the block-level statistics with 95% intervals over seeds (alternet.report.statistics), each
block's p-value Holm-corrected over the model's identity blocks (one family per model and instrument), and writes
NAME_fourier.png, NAME_variance.png, NAME_lesion.png and NAME_robustness.png. A block's effect is read across
blocks that keep the map's size (identity shortcut): the change in high-frequency Δ log amplitude (Fig. 8's
quantity) and the ratio of feature-map variance (Fig. 9's) from its input to its output. Between two models (the
same position, or CIFAR-100-C) the interval is Welch's: two architectures share no initial weights, so pairing
them by seed number pairs nothing they share (the report's rule).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

import matplotlib.pyplot as plt

from alternet.report.statistics import difference, with_holm
from alternet.runs.directories import RunDir, SweepDir

KIND_STYLE = {"stem": ("grey", "o"), "C": ("tab:blue", "o"), "M": ("tab:red", "s")}
KIND_LABEL = {"stem": "stem", "C": "Conv block (a ViT's MLP)", "M": "MSA block (a ViT's attention)"}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def load(sweep: Path, models: list[str]) -> dict[str, dict[str, dict]]:
    """model -> seed -> {"fourier": [(depth, name, kind, high)], "variance": [...], "lesion": rows, "robustness"}."""
    found: dict[str, dict[str, dict]] = defaultdict(dict)
    for job in SweepDir(sweep).jobs().jobs:
        swept = RunDir(job.path).swept_values()
        model, seed = swept.get("model"), swept.get("seed", "0")
        folder = job.path / "instruments"
        if model not in models or not (folder / "metrics.json").is_file():
            continue
        last: dict[int, tuple] = {}
        for row in read_csv(folder / "analysis" / "fourier.csv"):  # a tap's profile, its last point last
            last[int(row["depth"])] = (row["name"], row["kind"], float(row["delta_log_amplitude"]))
        variance = [
            (int(r["depth"]), r["name"], r["kind"], float(r["variance"]))
            for r in read_csv(folder / "analysis" / "variance.csv")
        ]
        robustness = json.loads((folder / "metrics.json").read_text()).get("robustness")
        found[model][seed] = {
            "fourier": [(depth, *last[depth]) for depth in sorted(last)],
            "variance": variance,
            "lesion": read_csv(folder / "analysis" / "lesion.csv"),
            "robustness": robustness and robustness["summary"],
            "projection": {
                r["name"] for r in read_csv(folder / "analysis" / "lesion.csv") if r["projection_shortcut"] == "True"
            },
        }
    return found


def block_changes(taps: list[tuple], projection: set[str], log_ratio: bool) -> dict[str, tuple[str, float]]:
    """name -> (kind, change from the tap before to this block's output) for blocks that keep the map's size."""
    changes = {}
    for before, after in itertools.pairwise(taps):
        _, name, kind, value = after
        if name in projection:
            continue
        changes[name] = (kind, math.log(value / before[3]) if log_ratio else value - before[3])
    return changes


def intervals(per_block: dict[str, dict[str, float]]) -> dict[str, str]:
    """Each block's mean [95% CI] over seeds (a one-sample t interval: the seed-paired difference from 0), its
    p-value Holm-corrected over the blocks of the model (one family per model and instrument)."""
    found = with_holm([difference(values, {seed: 0.0 for seed in values}) for values in per_block.values()])
    tests = sum(d is not None for d in found)
    lines = {}
    for (name, values), d in zip(per_block.items(), found):
        if d is None:
            lines[name] = f"{statistics.fmean(values.values()):+.3f} (n={len(values)})"
        else:
            lines[name] = (
                f"{d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (n={len(values)}, p {d.p:.3f}, "
                f"Holm over {tests} blocks {d.p_holm:.3f})"
            )
    return lines


def summarise(found: dict[str, dict[str, dict]], instrument: str, log_ratio: bool, label: str) -> dict:
    per_model = {}
    print(f"\n## {label}")
    for model, seeds in found.items():
        per_block: dict[str, dict[str, float]] = defaultdict(dict)
        kinds = {}
        for seed, data in seeds.items():
            for name, (kind, change) in block_changes(data[instrument], data["projection"], log_ratio).items():
                per_block[name][seed] = change
                kinds[name] = kind
        per_model[model] = (per_block, kinds)
        for name, line in intervals(per_block).items():
            print(f"{model:18s} {name:14s} {kinds[name]:4s} {line}")
    return per_model


def summarise_lesion(found: dict[str, dict[str, dict]]) -> dict:
    """Accuracy lost (pp) with each block's residual branch removed, over seeds: the identity-shortcut blocks (the
    comparisons read), then, apart, the projection blocks (a stage's first block in a CNN: its shortcut is a strided
    1x1 convolution, so removing its branch does not leave the identity)."""
    per_model = {}
    print("\n## lesion: accuracy lost with the block's residual branch removed (pp)")
    for model, seeds in found.items():
        per_block: dict[str, dict[str, float]] = defaultdict(dict)
        projection: dict[str, dict[str, float]] = defaultdict(dict)
        kinds = {}
        for seed, data in seeds.items():
            for row in data["lesion"]:
                into = projection if row["projection_shortcut"] == "True" else per_block
                into[row["name"]][seed] = 100 * float(row["drop"])
                kinds[row["name"]] = row["kind"]
        per_model[model] = (per_block, kinds)
        for name, line in intervals(per_block).items():
            print(f"{model:18s} {name:14s} {kinds[name]:4s} {line}")
        for name, line in intervals(projection).items():
            print(f"{model:18s} {name:14s} {kinds[name]:4s} {line}  (projection block, apart)")
    return per_model


def compare_last_blocks(per_instrument: dict[str, dict], variant: str, baseline: str) -> None:
    """The same position in two models (the last block: an MSA in one, a Conv in the other), Welch's interval per
    instrument, Holm-corrected over the instruments (one family per pair of models)."""
    lasts = {label: list(per_model[variant][0])[-1] for label, per_model in per_instrument.items()}
    found = with_holm(
        [
            difference(per_model[variant][0][lasts[label]], per_model[baseline][0][lasts[label]], paired=False)
            for label, per_model in per_instrument.items()
        ]
    )
    for (label, per_model), d in zip(per_instrument.items(), found):
        if d is None:
            continue
        name = lasts[label]
        kind_v, kind_b = per_model[variant][1][name], per_model[baseline][1][name]
        print(
            f"{label}: {variant} {name} ({kind_v}) - {baseline} ({kind_b}): {d.delta:+.3f} "
            f"[{d.low:+.3f}, {d.high:+.3f}] (n={d.n}, {d.method}, df {d.df:.1f}, p {d.p:.4f}, "
            f"Holm over {sum(x is not None for x in found)} instruments {d.p_holm:.4f})"
        )


def depth_figure(found: dict, instrument: str, ylabel: str, path: Path, log_scale: bool = False) -> None:
    models = list(found)
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, model in zip(axes, models):
        for _seed, data in sorted(found[model].items()):
            taps = data[instrument]
            depth = [t[0] / (len(taps) - 1) for t in taps]
            ax.plot(depth, [t[3] for t in taps], color="black", alpha=0.35, lw=1)
            for d, tap in zip(depth, taps):
                colour, marker = KIND_STYLE.get(tap[2], ("tab:green", "^"))
                hollow = tap[1] in data["projection"]
                ax.scatter(
                    d, tap[3], color="white" if hollow else colour, edgecolors=colour, marker=marker, zorder=3, s=28
                )
        ax.set_title(f"{model} (seeds: {len(found[model])})")
        ax.set_xlabel("normalised depth (0: stem)")
        if log_scale:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(ylabel)
    handles = [plt.Line2D([], [], color=c, marker=m, ls="", label=KIND_LABEL[k]) for k, (c, m) in KIND_STYLE.items()]
    handles.append(plt.Line2D([], [], color="grey", marker="o", mfc="white", ls="", label="projection shortcut"))
    axes[-1].legend(handles=handles, fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def lesion_figure(found: dict, path: Path) -> None:
    models = list(found)
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), sharey=True, squeeze=False)
    axes = axes[0]
    for ax, model in zip(axes, models):
        for _seed, data in sorted(found[model].items()):
            for index, row in enumerate(data["lesion"]):
                colour, marker = KIND_STYLE.get(row["kind"], ("tab:green", "^"))
                hollow = row["projection_shortcut"] == "True"
                ax.scatter(
                    index,
                    100 * float(row["drop"]),
                    color="white" if hollow else colour,
                    edgecolors=colour,
                    marker=marker,
                    s=28,
                )
        names = [row["name"] for row in next(iter(found[model].values()))["lesion"]]
        ax.set_xticks(range(len(names)), names, rotation=60, fontsize=7)
        ax.set_title(f"{model} (seeds: {len(found[model])})")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy lost, branch removed (pp)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def robustness_figure(found: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for index, (model, seeds) in enumerate(found.items()):
        for seed, data in sorted(seeds.items()):
            summary = data["robustness"]
            severities = sorted(summary["per_severity"], key=int)
            accs = [100 * summary["clean_acc"]] + [100 * summary["per_severity"][s]["acc"] for s in severities]
            ax.plot(
                range(len(accs)),
                accs,
                color=f"C{index}",
                marker="o",
                ms=3,
                lw=1,
                alpha=0.8,
                label=model if seed == min(seeds) else None,
            )
    ax.set_xticks(range(6), ["clean", "1", "2", "3", "4", "5"])
    ax.set_xlabel("CIFAR-100-C severity (generated; first 2,000 test images of each set)")
    ax.set_ylabel("top-1 accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def robustness_table(found: dict, baseline: str) -> None:
    print("\n## CIFAR-100-C (generated, 75 sets x the first 2,000 test images; clean: the same 2,000), seed means")
    accs = {m: {s: d["robustness"]["robustness"] for s, d in seeds.items()} for m, seeds in found.items()}
    clean = {m: {s: d["robustness"]["clean_acc"] for s, d in seeds.items()} for m, seeds in found.items()}
    # the share of clean accuracy kept; undefined (nan) for a model that gets no clean image right
    ratio = {m: {s: accs[m][s] / clean[m][s] if clean[m][s] else math.nan for s in accs[m]} for m in accs}
    for model in found:
        line = (
            f"{model:18s} corrupted {100 * statistics.fmean(accs[model].values()):.2f}% "
            f"clean {100 * statistics.fmean(clean[model].values()):.2f}% "
            f"retained {statistics.fmean(ratio[model].values()):.3f}"
        )
        if model != baseline:
            for name, table, scale in (("corrupted acc pp", accs, 100), ("retained ratio", ratio, 1)):
                d = difference(table[model], table[baseline], paired=False)
                if d is None:  # one seed: no interval
                    continue
                line += f" | Δ {name} vs {baseline}: {scale * d.delta:+.2f} "
                line += f"[{scale * d.low:+.2f}, {scale * d.high:+.2f}] ({d.method}, p {d.p:.3f})"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--models", nargs="+", default=["preresnet_laptop", "alternet_laptop", "vit_mini_cifar"])
    parser.add_argument("--baseline", default="preresnet_laptop")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--name", default="instruments", help="the figures' file names: NAME_fourier.png, ...")
    args = parser.parse_args()
    found = load(args.sweep, args.models)
    found = {m: found[m] for m in args.models if m in found}
    fourier = summarise(found, "fourier", False, "change in high-frequency Δ log amplitude across a block")
    variance = summarise(found, "variance", True, "log ratio of feature-map variance across a block (out / in)")
    lesion = summarise_lesion(found)
    print()
    per_instrument = {"high-frequency change": fourier, "log variance ratio": variance, "lesion": lesion}
    for model in found:
        if model not in (args.baseline, "vit_mini_cifar") and args.baseline in found:
            compare_last_blocks(per_instrument, model, args.baseline)
    args.out.mkdir(parents=True, exist_ok=True)
    figure = args.out / args.name
    scored = {m: seeds for m, seeds in found.items() if all(d["robustness"] for d in seeds.values())}
    if scored:
        robustness_table(scored, args.baseline)
        robustness_figure(scored, Path(f"{figure}_robustness.png"))
    depth_figure(found, "fourier", "Δ log amplitude at the tap's highest frequency", Path(f"{figure}_fourier.png"))
    depth_figure(found, "variance", "feature-map variance", Path(f"{figure}_variance.png"), log_scale=True)
    lesion_figure(found, Path(f"{figure}_lesion.png"))


if __name__ == "__main__":
    main()
