"""Robustness to band-limited noise (the paper's Fig. 2b): the accuracy lost to noise confined to a band of spatial
frequencies, band by band from low to high frequency. The bands (``bands: hdvw`` or ``rings``), the noise's filter
and scale, and which of them are this module's choices (HDVW publishes no code for this figure): docs/analysis.md,
"Robustness to band-limited noise".
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..files import write_csv
from . import plots
from .config import NoiseConfig
from .context import AnalysisContext
from .data import Batch, clean_batches
from .errors import AnalysisError
from .objective import accuracy
from .tables import summary

HDVW_CENTRES = tuple(round(0.1 * i, 10) for i in range(1, 10))  # units of pi
HDVW_WIDTH = 0.1


def radial_frequency(height: int, width: int) -> torch.Tensor:
    """(H, W) radial frequency of each unshifted FFT bin, in units of pi (pi = 0.5 cycles per pixel)."""
    fy = torch.fft.fftfreq(height, dtype=torch.float64)[:, None]
    fx = torch.fft.fftfreq(width, dtype=torch.float64)[None, :]
    return 2.0 * torch.sqrt(fy**2 + fx**2)


@dataclass(frozen=True)
class Band:
    """Radial frequencies ``low <= r < high`` (``<= high`` when ``closed``), units of pi."""

    low: float
    high: float
    closed: bool = False

    @property
    def centre(self) -> float:
        return (self.low + self.high) / 2


def band_edges(bands: int, max_frequency: float) -> np.ndarray:
    return np.linspace(0.0, max_frequency, bands + 1)


def frequency_bands(config: NoiseConfig) -> list[Band]:
    """The configured bands, lowest first."""
    if config.bands == "hdvw":
        return [Band(c - HDVW_WIDTH / 2, c + HDVW_WIDTH / 2) for c in HDVW_CENTRES]
    edges = band_edges(config.rings, config.max_frequency)
    return [
        Band(float(lo), float(hi), closed=i == config.rings - 1) for i, (lo, hi) in enumerate(itertools.pairwise(edges))
    ]


def band_mask(height: int, width: int, low: float, high: float, closed: bool) -> torch.Tensor:
    """Boolean (H, W) mask of FFT bins with low <= radius < high (<= high when ``closed``)."""
    radius = radial_frequency(height, width)
    upper = radius <= high + 1e-9 if closed else radius < high - 1e-9
    mask = (radius >= low - 1e-9) & upper
    if not mask.any():
        raise AnalysisError(
            f"the frequency band [{low:.3f}, {high:.3f}]π holds no FFT bin of a {height}x{width} image; "
            "use larger images, or analysis.noise.bands=rings with fewer rings"
        )
    return mask


def band_noise(shape: Sequence[int], mask: torch.Tensor, l2_norm: float, generator: torch.Generator) -> torch.Tensor:
    """(B, C, H, W) real noise whose spectrum lies in ``mask``, each sample scaled to ``l2_norm``."""
    white = torch.randn(tuple(shape), generator=generator, dtype=torch.float64)
    noise = torch.fft.ifft2(torch.fft.fft2(white) * mask).real
    norms = noise.flatten(1).norm(dim=1).clamp_min(1e-12)
    return (noise * (l2_norm / norms).view(-1, 1, 1, 1)).float()


def noisy_batches(batches: Sequence[Batch], noise: Sequence[torch.Tensor], std: Sequence[float]) -> list[Batch]:
    """Add pixel-unit noise to normalised images (dividing by the normalisation std per channel)."""
    scale = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return [(x + (n / scale).to(x.device), y) for (x, y), n in zip(batches, noise)]


def band_accuracies(
    model: nn.Module, batches: Sequence[Batch], std: Sequence[float], config: NoiseConfig
) -> list[float]:
    """Accuracy under noise in each band (one seeded draw per image and band)."""
    generator = torch.Generator().manual_seed(config.seed)
    results = []
    for band in frequency_bands(config):
        noise = []
        for x, _ in batches:
            _, c, h, w = x.shape
            mask = band_mask(h, w, band.low, band.high, closed=band.closed)
            noise.append(band_noise(x.shape, mask, config.rms * float(np.sqrt(c * h * w)), generator))
        results.append(accuracy(model, noisy_batches(batches, noise, std)))
    return results


def run(context: AnalysisContext, config: NoiseConfig) -> dict[str, Any]:
    batches = clean_batches(context, config)
    clean = accuracy(context.model, batches)
    accuracies = band_accuracies(context.model, batches, context.datamodule.std, config)
    bands = frequency_bands(config)
    drops = [clean - acc for acc in accuracies]
    rows = [
        dict(band=i, low=b.low, high=b.high, center=b.centre, accuracy=acc, drop=drop)
        for i, (b, acc, drop) in enumerate(zip(bands, accuracies, drops))
    ]
    title = f"Band-limited noise ({config.bands}), RMS {config.rms:g} (clean accuracy {100 * clean:.1f}%)"
    files = [
        write_csv(context.path("noise.csv"), rows),
        plots.noise_bands(
            np.array([b.centre for b in bands]),
            np.array(drops),
            bands[0].high - bands[0].low,
            title,
            context.path("noise.png"),
        ),
    ]
    return summary(
        batches,
        files,
        bands=config.bands,
        clean_acc=clean,
        drop_lowest_band=drops[0],
        drop_highest_band=drops[-1],
        drop_mean=sum(drops) / len(drops),
        **{f"drop_band_{i}": d for i, d in enumerate(drops)},
    )
