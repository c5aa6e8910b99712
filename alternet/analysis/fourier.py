"""Fourier analysis of feature maps (the paper's Fig. 2a and Fig. 8): for the stem and every block's output, the delta
log amplitude along the spectrum's half-diagonal. Definition, options (``high_frequency``, ``bn_mode``) and
differences from HDVW: docs/analysis.md, "Fourier analysis of feature maps".
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from ..files import write_csv
from . import plots
from .blocks import Tap
from .config import FourierConfig
from .context import AnalysisContext
from .data import clean_batches
from .errors import AnalysisError
from .features import mean_per_tap
from .tables import finite_or_none, summary, tap_summary

AMPLITUDE_EPS = 1e-6  # added to |FFT| before the log, as in the paper's notebook


@contextlib.contextmanager
def batch_statistics(model: torch.nn.Module) -> Iterator[None]:
    """Within the context, every BatchNorm layer of ``model`` normalises with the statistics of the batch it sees
    (training mode) while its running statistics stay as they were (momentum 0, counters restored); every other
    layer keeps its mode."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    saved = [
        (m.training, m.momentum, None if m.num_batches_tracked is None else m.num_batches_tracked.clone())
        for m in norms
    ]
    for norm in norms:
        norm.train()
        norm.momentum = 0.0
    try:
        yield
    finally:
        for norm, (training, momentum, tracked) in zip(norms, saved):
            norm.train(training)
            norm.momentum = momentum
            if tracked is not None:
                norm.num_batches_tracked.copy_(tracked)


def log_amplitude(maps: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) maps -> (B, C, H, W) log amplitudes of their 2-D FFTs, zero frequency centred."""
    amplitude = torch.fft.fft2(maps.float()).abs()
    return torch.fft.fftshift((amplitude + AMPLITUDE_EPS).log(), dim=(-2, -1))


def half_diagonal(spectrum: torch.Tensor, high_frequency: str) -> tuple[np.ndarray, np.ndarray]:
    """(frequencies in units of pi, values) along the diagonal of a centred (H, H) spectrum from 0: up to
    (1 - 2/H)π (``hdvw``, even H) or π (``nyquist``, even H); (H - 1)/H π for odd H either way."""
    height, width = spectrum.shape
    if height != width:
        raise AnalysisError(f"the Fourier profile needs square feature maps, got {height}x{width}")
    centre = height // 2
    nyquist = high_frequency == "nyquist" and height % 2 == 0
    indices = list(range(centre, height)) + ([0] if nyquist else [])
    frequencies = 2.0 * np.arange(len(indices)) / height
    values = spectrum[indices, indices].double().cpu().numpy()
    return frequencies, values


def plotted_frequencies(frequencies: np.ndarray, high_frequency: str) -> np.ndarray:
    """Where the profile figure puts each point: HDVW spreads its points evenly over 0..1π; else at their
    true frequency."""
    return np.linspace(0.0, 1.0, len(frequencies)) if high_frequency == "hdvw" else frequencies


def delta_profiles(
    model: torch.nn.Module, taps: Sequence[Tap], batches: Sequence[torch.Tensor], high_frequency: str
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per tap, (frequencies, delta log amplitude) of its mean log-amplitude spectrum."""
    profiles = []
    for spectrum in mean_per_tap(model, taps, batches, log_amplitude):
        frequencies, values = half_diagonal(spectrum, high_frequency)
        profiles.append((frequencies, values - values[0]))
    return profiles


def high_values(profiles: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    """Each profile's highest-frequency Δ log amplitude; NaN where it has no point beyond the zero frequency (HDVW's
    diagonal of a 2x2 or 1x1 map: its Δ, 0 by construction, would pull the means towards 0)."""
    return [float(delta[-1]) if len(delta) > 1 else float("nan") for _, delta in profiles]


def msa_minus_conv(profiles: Sequence[tuple[np.ndarray, np.ndarray]], kinds: Sequence[str]) -> float:
    """The MSA blocks' highest-frequency Δ log amplitude less the Conv blocks', at one frequency: per map size (the
    taps whose profiles end at the same frequency) where both kinds are, the M mean less the C mean, then the mean
    over those sizes; NaN where no size has both. The overall M and C means compare different frequencies (on CIFAR
    a 32x32 stage's last point is 0.94π, a 4x4 one's 0.5π) and mostly different stages."""
    high, by_size = high_values(profiles), {}
    for (frequencies, _), kind, value in zip(profiles, kinds, high, strict=True):
        if kind in ("C", "M") and math.isfinite(value):
            by_size.setdefault(float(frequencies[-1]), {}).setdefault(kind, []).append(value)
    contrasts = [np.mean(k["M"]) - np.mean(k["C"]) for k in by_size.values() if "M" in k and "C" in k]
    return float(np.mean(contrasts)) if contrasts else float("nan")


def run(context: AnalysisContext, config: FourierConfig) -> dict[str, Any]:
    sequence = context.blocks
    batches = clean_batches(context, config)
    with batch_statistics(context.model) if config.bn_mode == "batch" else contextlib.nullcontext():
        profiles = delta_profiles(context.model, sequence.taps, [x for x, _ in batches], config.high_frequency)
    depth_rows = sequence.depth_rows()
    rows, high = [], high_values(profiles)
    for info, (frequencies, delta) in zip(depth_rows, profiles):
        plotted = plotted_frequencies(frequencies, config.high_frequency)
        rows += [
            dict(info, frequency=float(f), plotted_frequency=float(p), delta_log_amplitude=float(d))
            for f, p, d in zip(frequencies, plotted, delta)
        ]
    files = [
        write_csv(context.path("fourier.csv"), rows),
        plots.fourier_profiles(
            [plotted_frequencies(f, config.high_frequency) for f, _ in profiles],
            [d for _, d in profiles],
            [r["normalized_depth"] for r in depth_rows],
            context.path("fourier_profiles.png"),
            "Frequency (HDVW's axis: its last point, (1 - 2/h)π, at 1.0π)"
            if config.high_frequency == "hdvw"
            else "Frequency",
        ),
        plots.depth_series(
            sequence,
            list(range(len(high))),
            high,
            "Δ Log amplitude (high frequency)",
            "Highest-frequency Δ log amplitude of feature maps",
            context.path("fourier_high_frequency.png"),
        ),
    ]
    return summary(
        batches,
        files,
        high_frequency=config.high_frequency,
        bn_mode=config.bn_mode,
        **tap_summary("high_freq", high, depth_rows),
        high_freq_msa_minus_conv=finite_or_none(msa_minus_conv(profiles, [row["kind"] for row in depth_rows])),
    )
