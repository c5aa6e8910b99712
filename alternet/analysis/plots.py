"""Figures of the analysis toolkit, drawn on :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot).

Depth plots follow the paper: x is the normalised depth (stem 0, last block 1); the span leading into each
MSA block is shaded grey and the span leading into each block that starts a new stage is shaded blue.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FormatStrFormatter

from ..files import save_figure
from .blocks import BlockSequence

KIND_STYLE = {"stem": ("black", "D"), "C": ("tab:blue", "o"), "M": ("tab:red", "s")}
MSA_SHADE = "tab:gray"
STAGE_SHADE = "tab:blue"


def shade_blocks(ax: Axes, sequence: BlockSequence, kinds: bool = True) -> None:
    """Shade MSA blocks (grey) and stage boundaries (blue) on a normalised-depth axis; the legend lists the
    axes' labelled artists, the shades and, when ``kinds``, the block-kind markers."""
    total = len(sequence.blocks)
    previous = sequence.blocks[0].stage
    for depth, block in enumerate(sequence.blocks, start=1):
        span = ((depth - 1) / total, depth / total)
        if block.kind == "M":
            ax.axvspan(*span, color=MSA_SHADE, alpha=0.2, lw=0)
        if block.stage != previous:
            ax.axvspan(*span, color=STAGE_SHADE, alpha=0.15, lw=0)
        previous = block.stage
    handles = [
        *ax.get_legend_handles_labels()[0],
        Patch(color=MSA_SHADE, alpha=0.2, label="MSA block"),
        Patch(color=STAGE_SHADE, alpha=0.15, label="new stage"),
        *(
            ax.scatter([], [], color=color, marker=marker, label=label)
            for label, (color, marker) in KIND_STYLE.items()
            if kinds and (label == "stem" or any(b.kind == label for b in sequence.blocks))
        ),
    ]
    ax.legend(handles=handles, fontsize=7, loc="best")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("Normalized depth")


def depth_series(
    sequence: BlockSequence,
    depths: Sequence[int],
    values: Sequence[float],
    ylabel: str,
    title: str,
    path: Path,
    apart: Sequence[bool] | None = None,
    apart_label: str = "",
) -> Path:
    """``values`` at the given depths (0 = stem), line plus markers styled by block kind, shaded. Points flagged
    in ``apart`` stay off the line, as hollow markers labelled ``apart_label``."""
    total = len(sequence.blocks)
    kinds = ["stem", *(block.kind for block in sequence.blocks)]
    x = np.asarray(depths) / total
    apart = [False] * len(depths) if apart is None else list(apart)
    fig = Figure(figsize=(6.5, 4), layout="constrained")
    ax = fig.subplots()
    on_line = [i for i, flag in enumerate(apart) if not flag]
    ax.plot(x[on_line], np.asarray(values, dtype=float)[on_line], color="0.4", lw=1.2, zorder=2)
    for xi, yi, depth, flag in zip(x, values, depths, apart):
        color, marker = KIND_STYLE[kinds[depth]]
        style = dict(facecolors="none", edgecolors=color) if flag else dict(color=color)
        ax.scatter([xi], [yi], marker=marker, zorder=3, s=28, clip_on=False, **style)
    if any(apart):
        ax.scatter([], [], marker="o", facecolors="none", edgecolors="0.3", label=apart_label)
    shade_blocks(ax, sequence)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def fourier_profiles(
    frequencies: Sequence[np.ndarray],
    profiles: Sequence[np.ndarray],
    normalized_depths: Sequence[float],
    path: Path,
    xlabel: str = "Frequency",
) -> Path:
    """Delta log amplitude against frequency (0 to pi), one line per depth coloured by normalised depth."""
    fig = Figure(figsize=(4.2, 4), layout="constrained")
    ax = fig.subplots()
    cmap, norm = "plasma_r", Normalize(0.0, 1.0)
    mappable = ScalarMappable(norm=norm, cmap=cmap)
    for freq, profile, depth in reversed(list(zip(frequencies, profiles, normalized_depths))):
        ax.plot(freq, profile, color=mappable.to_rgba(depth), lw=1.4)
    fig.colorbar(mappable, ax=ax, label="Normalized depth")
    ax.set_xlim(0.0, 1.0)
    ax.xaxis.set_major_formatter(FormatStrFormatter("%.1fπ"))
    ax.set_xlabel(xlabel, fontsize=8 if len(xlabel) > 20 else None)
    ax.set_ylabel("Δ Log amplitude")
    return save_figure(fig, path)


def landscape_1d(alphas: np.ndarray, curves: dict[str, np.ndarray], path: Path) -> Path:
    """Loss curves along one normalised random direction."""
    fig = Figure(figsize=(5, 4), layout="constrained")
    ax = fig.subplots()
    for label, values in curves.items():
        ax.plot(alphas, values, marker=".", label=label)
    ax.set_xlabel("Step along the direction (normalised units)")
    ax.set_ylabel("Loss")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def landscape_2d(
    xs: np.ndarray, ys: np.ndarray, surfaces: dict[str, np.ndarray], path: Path, clip: float | None = None
) -> Path:
    """Filled contours of each loss surface over two normalised random directions, the trained weights marked.
    ``clip``: points more than ``clip`` above the surface's finite minimum are left blank (HDVW's notebook's
    ``zs[zs > 42] = nan``); non-finite points are always blank."""
    fig = Figure(figsize=(4.6 * len(surfaces), 4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(surfaces)))
    for ax, (label, surface) in zip(axes, surfaces.items()):
        surface = np.where(np.isfinite(surface), surface, np.nan)
        if clip is not None and np.isfinite(surface).any():
            surface = np.where(surface - np.nanmin(surface) > clip, np.nan, surface)
            label = f"{label} (clipped at min + {clip:g})"
        filled = ax.contourf(xs, ys, surface, levels=20, cmap="viridis")
        ax.contour(xs, ys, surface, levels=20, colors="white", linewidths=0.4)
        ax.plot([0], [0], marker="*", color="red", markersize=10)
        fig.colorbar(filled, ax=ax)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("Direction 1")
        ax.set_ylabel("Direction 2")
        ax.set_aspect("equal")
    return save_figure(fig, path)


def hessian_spectrum(
    top: np.ndarray, grid: np.ndarray | None, density: np.ndarray | None, title: str, path: Path
) -> Path:
    """Top eigenvalues (stems) and, when given, the SLQ eigenvalue density (log scale)."""
    panels = 2 if density is not None else 1
    fig = Figure(figsize=(4.6 * panels, 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, panels))
    axes[0].stem(np.arange(1, len(top) + 1), top)
    axes[0].set_xticks(np.arange(1, len(top) + 1))
    axes[0].axhline(0.0, color="0.5", lw=0.8)
    axes[0].set_xlabel("Rank (by magnitude)")
    axes[0].set_ylabel("Eigenvalue")
    if density is not None:
        axes[1].semilogy(grid, np.maximum(density, 1e-12))
        axes[1].axvline(0.0, color="0.5", lw=0.8)
        axes[1].set_xlabel("Eigenvalue")
        axes[1].set_ylabel("Density (SLQ)")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def max_eigenvalue_density(
    values: np.ndarray, title: str, path: Path, label: str = "Max eigenvalue (largest magnitude, sign kept)"
) -> Path:
    """Histogram (as a density) of the per-mini-batch maximum Hessian eigenvalues (or the pooled top ones, as
    ``label`` says), zero marked."""
    fig = Figure(figsize=(5, 3.8), layout="constrained")
    ax = fig.subplots()
    ax.hist(values, bins=min(30, max(5, len(values) // 2)), density=True, color="tab:blue", alpha=0.8)
    ax.plot(values, np.zeros_like(values), "|", color="k", ms=14)  # each value, seen however close they lie
    low, high = float(np.min(values)), float(np.max(values))
    if low - (high - low) <= 0.0 <= high + (high - low):  # zero in sight; marking a far one squeezed the bars to lines
        ax.axvline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel(label)
    ax.set_ylabel("Density")
    ax.set_title(textwrap.fill(title, 60), fontsize=9)
    return save_figure(fig, path)


def noise_bands(centers: np.ndarray, drops: np.ndarray, width: float, title: str, path: Path) -> Path:
    """Accuracy drop under band-limited noise against the band's centre frequency."""
    fig = Figure(figsize=(5, 3.8), layout="constrained")
    ax = fig.subplots()
    ax.bar(centers, 100 * drops, width=0.9 * width, color="tab:purple")
    ax.xaxis.set_major_formatter(FormatStrFormatter("%.1fπ"))
    ax.set_xlabel("Noise frequency band")
    ax.set_ylabel("Accuracy drop (%)")
    ax.set_title(title, fontsize=10)
    return save_figure(fig, path)


def attention_by_depth(
    sequence: BlockSequence,
    depths: Sequence[int],
    stats: dict[str, tuple[Sequence[float], Sequence[float]] | tuple[Sequence[float], Sequence[float], str]],
    path: Path,
) -> Path:
    """Per-head attention statistics against normalised depth (one panel per statistic), each with a reference
    value (black crosses; by default what uniform attention would give), on the shaded depth axis."""
    total = len(sequence.blocks)
    x = np.asarray(depths) / total
    fig = Figure(figsize=(5 * len(stats), 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(stats)))
    for ax, (label, (values, reference, *name)) in zip(axes, stats.items()):
        ax.scatter(x, values, color=KIND_STYLE["M"][0], marker="_", s=150, zorder=3, clip_on=False, label="head")
        reference_label = name[0] if name else "uniform"
        ax.scatter(x, reference, color="black", marker="x", s=20, zorder=4, clip_on=False, label=reference_label)
        shade_blocks(ax, sequence, kinds=False)
        ax.set_ylabel(label)
    return save_figure(fig, path)
