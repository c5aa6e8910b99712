"""Figures for evaluation reports: reliability diagram, corruption heatmap, risk-coverage curve, OOD score histograms.

Figures are built on :class:`matplotlib.figure.Figure` and rendered with the Agg canvas, so nothing touches
pyplot's global state or opens a window; every function writes a PNG and returns its path.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import Colormap, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from ..files import save_figure
from ..metrics import ReliabilityBins
from ..runs.results import OodResult, Selective
from .robustness import RobustnessRow, accuracy_grid, check_table

ACCURACY_COLOR = "tab:blue"
GAP_COLOR = "tab:red"
HEATMAP_CMAP = "viridis"


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def reliability_diagram(bins: ReliabilityBins, path: str | Path, title: str = "Reliability diagram") -> Path:
    """Per-bin accuracy against the diagonal with the calibration gap shaded, over a histogram of confidences."""
    fig = Figure(figsize=(5.2, 6.4))  # fixed margins: the layout engine cost more than the drawing
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.08, top=0.89, hspace=0.06)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    _draw_reliability(top, bins)
    _draw_confidence_histogram(bottom, bins)
    fig.suptitle(
        f"{title}\nECE {100 * bins.ece:.2f}%  ·  accuracy {_percent(bins.overall_accuracy)}  ·  n = {bins.n}",
        fontsize=11,
    )
    return save_figure(fig, path)


def _draw_reliability(ax: Axes, bins: ReliabilityBins) -> None:
    filled = bins.counts > 0
    width = np.diff(bins.edges)[filled]
    centers, accuracy, confidence = bins.centers[filled], bins.accuracy[filled], bins.confidence[filled]
    ax.plot([0, 1], [0, 1], linestyle="--", color="0.4", linewidth=1, label="Perfect calibration", zorder=3)
    ax.bar(centers, accuracy, width=width, color=ACCURACY_COLOR, edgecolor="black", linewidth=0.6, label="Accuracy")
    ax.bar(
        centers,
        confidence - accuracy,
        bottom=accuracy,
        width=width,
        color=GAP_COLOR,
        alpha=0.25,
        edgecolor=GAP_COLOR,
        hatch="//",
        linewidth=0.6,
        label="Gap to mean confidence",
    )
    ax.scatter(centers, confidence, marker="_", s=120, color=GAP_COLOR, zorder=4)
    ax.set(xlim=(0, 1), ylim=(0, 1), ylabel="Accuracy")
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.grid(alpha=0.3, linewidth=0.5)


def _draw_confidence_histogram(ax: Axes, bins: ReliabilityBins) -> None:
    share = bins.share
    ax.bar(bins.centers, share, width=np.diff(bins.edges), color="0.6", edgecolor="black", linewidth=0.6)
    for center, value in zip(bins.centers, share):
        if value > 0:
            ax.annotate(
                _percent(value),
                (center, value),
                ha="center",
                va="bottom",
                fontsize=6,
                xytext=(0, 1),
                textcoords="offset points",
            )
    ax.axvline(bins.overall_accuracy, color=ACCURACY_COLOR, linewidth=1.2, label="Accuracy")
    ax.axvline(bins.overall_confidence, color=GAP_COLOR, linestyle="--", linewidth=1.2, label="Mean confidence")
    ax.set(xlim=(0, 1), ylim=(0, max(share.max() * 1.25, 0.05)), xlabel="Confidence", ylabel="Share of samples")
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1))
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))
    if len(bins.edges) <= 21:
        ax.set_xticks(bins.edges)
        ax.tick_params(axis="x", labelsize=7)
    ax.legend(loc="upper right", fontsize=7, frameon=False)


def corruption_heatmap(
    rows: Sequence[RobustnessRow],
    path: str | Path,
    *,
    clean_acc: float | None = None,
    title: str = "Accuracy under corruption",
) -> Path:
    """Accuracy per corruption (rows, grouped by family) and severity (columns), with means and clean accuracy."""
    source = check_table(rows)
    corruptions, severities, grid = accuracy_grid(rows)
    values = np.vstack([np.column_stack([grid, grid.mean(axis=1)]), [*grid.mean(axis=0), grid.mean()]])
    fig = Figure(figsize=(6.8, 0.36 * len(values) + 2.6), layout="constrained")
    ax = fig.subplots()
    vmax = max(values.max(), clean_acc or 0.0)
    image = ax.imshow(values, cmap=HEATMAP_CMAP, vmin=values.min(), vmax=vmax, aspect="auto")
    _annotate_cells(ax, values, image.cmap, image.norm)
    ax.set_xticks(range(values.shape[1]), [*map(str, severities), "mean"])
    ax.set_yticks(range(values.shape[0]), [*(c.replace("_", " ") for c in corruptions), "mean"])
    ax.set_xlabel("Severity")
    ax.tick_params(length=0)
    for line in (ax.axvline(len(severities) - 0.5), ax.axhline(len(corruptions) - 0.5)):
        line.set(color="white", linewidth=3)
    _label_families(ax, [row for row in rows if row.severity == severities[0]], corruptions, values.shape[1])
    colorbar = fig.colorbar(image, ax=ax, orientation="horizontal", shrink=0.8, aspect=40)
    colorbar.ax.xaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))
    colorbar.set_label("Accuracy")
    headline = f"{source} corruptions  ·  robustness {_percent(grid.mean())}"
    if clean_acc is not None:
        colorbar.ax.axvline(clean_acc, color="black", linewidth=2)
        colorbar.ax.annotate(
            "clean",
            (clean_acc, 1),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
            annotation_clip=False,
        )
        headline += f"  ·  clean {_percent(clean_acc)}"
    ax.set_title(f"{title}\n{headline}", fontsize=11)
    return save_figure(fig, path)


def _annotate_cells(ax: Axes, values: np.ndarray, cmap: Colormap, norm: Normalize) -> None:
    for (i, j), value in np.ndenumerate(values):
        red, green, blue, _ = cmap(norm(value))
        luminance = 0.299 * red + 0.587 * green + 0.114 * blue
        color = "black" if luminance > 0.5 else "white"
        ax.text(j, i, f"{100 * value:.1f}", ha="center", va="center", fontsize=7, color=color)


def _label_families(ax: Axes, rows: Sequence[RobustnessRow], corruptions: list[str], n_columns: int) -> None:
    """Separate family groups with white lines and name each group beside the heatmap."""
    family = {row.corruption: row.family for row in rows}
    x, start = n_columns - 0.5 + 0.15, 0
    for name, members in groupby(corruptions, key=family.__getitem__):
        end = start + len(list(members))
        if end < len(corruptions):
            ax.axhline(end - 0.5, color="white", linewidth=1.5)
        ax.plot([x, x], [start - 0.35, end - 0.65], color="0.3", linewidth=1, clip_on=False, scalex=False, scaley=False)
        ax.text(
            x + 0.12,
            (start + end - 1) / 2,
            name,
            rotation=-90,
            ha="left",
            va="center",
            fontsize=8,
            clip_on=False,
        )
        start = end


def risk_coverage_plot(
    coverage: np.ndarray, risk: np.ndarray, generalised: np.ndarray, areas: Selective, path: str | Path, title: str
) -> Path:
    """Selective risk and generalised risk against coverage (the model abstains on its least confident), with the
    error rate a random ranker would keep at every coverage; ``areas``: ``aurc`` and ``augrc``."""
    fig = Figure(figsize=(5.6, 4.2))  # fixed margins: the layout engine took a quarter of the figure's time
    fig.subplots_adjust(left=0.13, right=0.95, bottom=0.12, top=0.9)
    ax = fig.subplots()
    ax.plot(coverage, risk, color=ACCURACY_COLOR, label=f"selective risk (AURC {areas.aurc:.4f})")
    ax.plot(coverage, generalised, color=GAP_COLOR, label=f"generalised risk (AUGRC {areas.augrc:.4f})")
    ax.axhline(risk[-1], linestyle="--", color="0.4", linewidth=1, label="error rate (no abstention)")
    ax.set(xlabel="coverage", ylabel="risk", xlim=(0, 1), ylim=(0, max(0.05, float(risk.max()) * 1.05)))
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    return save_figure(fig, path)


def ood_histograms(
    inside: dict[str, np.ndarray],
    outside: dict[str, np.ndarray],
    result: OodResult,
    path: str | Path,
    title: str,
) -> Path:
    """One panel per score: its histogram on the test split and on the out-of-distribution images."""
    fig = Figure(figsize=(5.2 * len(inside), 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(inside)))
    for ax, name in zip(axes, inside):
        both = np.r_[inside[name], outside[name]]
        edges = np.histogram_bin_edges(both, bins=40)
        ax.hist(inside[name], bins=edges, alpha=0.6, density=True, color=ACCURACY_COLOR, label="test (in)")
        ax.hist(outside[name], bins=edges, alpha=0.6, density=True, color=GAP_COLOR, label="out of distribution")
        scores = result.scores[name]
        ax.set(xlabel=name, ylabel="density")
        ax.set_title(f"AUROC {scores.auroc:.3f}  ·  FPR95 {_percent(scores.fpr95)}", fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    return save_figure(fig, path)
