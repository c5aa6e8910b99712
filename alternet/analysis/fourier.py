"""Fourier analysis of feature maps (the paper's Fig. 2a and Fig. 8).

For the stem (depth 0) and every block's output on clean test images, with the model in eval mode:
log |FFT2| per sample and channel, fftshifted, averaged over samples and channels; its half-diagonal from
frequency 0 to pi (for even map sizes, index 0 of the shifted spectrum holds the Nyquist frequency pi and
closes the profile); minus the value at 0 ("delta log amplitude").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from ..files import write_csv
from . import plots
from .blocks import Tap
from .config import SampleConfig
from .context import AnalysisContext
from .data import clean_batches
from .errors import AnalysisError
from .features import mean_per_tap
from .tables import compact, tap_summary

AMPLITUDE_EPS = 1e-6  # added to |FFT| before the log, as in the paper's notebook


@dataclass(frozen=True)
class FourierConfig(SampleConfig):
    analysis: ClassVar[str] = "fourier"


def log_amplitude(maps: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) maps -> (B, C, H, W) log amplitudes of their 2-D FFTs, zero frequency centred."""
    amplitude = torch.fft.fft2(maps.float()).abs()
    return torch.fft.fftshift((amplitude + AMPLITUDE_EPS).log(), dim=(-2, -1))


def half_diagonal(spectrum: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(frequencies in units of pi, values) along the diagonal of a centred (H, H) spectrum, from 0 up to pi
    (even H) or (H - 1) / H * pi (odd H)."""
    height, width = spectrum.shape
    if height != width:
        raise AnalysisError(f"the Fourier profile needs square feature maps, got {height}x{width}")
    centre = height // 2
    indices = list(range(centre, height)) + ([0] if height % 2 == 0 else [])
    frequencies = 2.0 * np.arange(len(indices)) / height
    values = spectrum[indices, indices].double().cpu().numpy()
    return frequencies, values


def delta_profiles(
    model: torch.nn.Module, taps: Sequence[Tap], batches: Sequence[torch.Tensor]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per tap, (frequencies, delta log amplitude) of its mean log-amplitude spectrum."""
    profiles = []
    for spectrum in mean_per_tap(model, taps, batches, log_amplitude):
        frequencies, values = half_diagonal(spectrum)
        profiles.append((frequencies, values - values[0]))
    return profiles


def run(context: AnalysisContext, config: FourierConfig) -> dict[str, Any]:
    sequence = context.blocks
    batches = clean_batches(context.datamodule, config.images, config.batch_size, config.seed, context.device)
    profiles = delta_profiles(context.model, sequence.taps, [x for x, _ in batches])
    depth_rows = sequence.depth_rows()
    rows, high = [], []
    for info, (frequencies, delta) in zip(depth_rows, profiles):
        high.append(float(delta[-1]))
        rows += [dict(info, frequency=float(f), delta_log_amplitude=float(d)) for f, d in zip(frequencies, delta)]
    files = [
        write_csv(context.path("fourier.csv"), rows),
        plots.fourier_profiles(
            [f for f, _ in profiles],
            [d for _, d in profiles],
            [r["normalized_depth"] for r in depth_rows],
            context.path("fourier_profiles.png"),
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
    return compact(
        dict(
            images=sum(len(y) for _, y in batches),
            **tap_summary("high_freq", high, depth_rows),
            files=[str(f) for f in files],
        )
    )
