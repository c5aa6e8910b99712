"""Feature map variance (the paper's Fig. 9): per sample and channel, the spatial variance of the map
(population variance over H x W), averaged over samples and channels, for the stem and every block."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..files import write_csv
from . import plots
from .blocks import Tap
from .config import SampleConfig
from .context import AnalysisContext
from .data import clean_batches
from .features import mean_per_tap
from .tables import compact, tap_summary


@dataclass(frozen=True)
class VarianceConfig(SampleConfig):
    analysis: ClassVar[str] = "variance"


def spatial_variance(maps: torch.Tensor) -> torch.Tensor:
    """(B, C, H, W) -> (B, C) variance over the spatial positions."""
    return maps.float().var(dim=(-2, -1), correction=0)


def mean_variances(model: torch.nn.Module, taps: Sequence[Tap], batches: Sequence[torch.Tensor]) -> list[float]:
    """Per tap, the spatial variance averaged over all samples and channels."""
    return [float(v) for v in mean_per_tap(model, taps, batches, lambda m: spatial_variance(m).double())]


def run(context: AnalysisContext, config: VarianceConfig) -> dict[str, Any]:
    sequence = context.blocks
    batches = clean_batches(context.datamodule, config.images, config.batch_size, config.seed, context.device)
    variances = mean_variances(context.model, sequence.taps, [x for x, _ in batches])
    depth_rows = sequence.depth_rows()
    rows = [dict(info, variance=v) for info, v in zip(depth_rows, variances)]
    files = [
        write_csv(context.path("variance.csv"), rows),
        plots.depth_series(
            sequence,
            list(range(len(variances))),
            variances,
            "Feature map variance",
            "Spatial variance of feature maps",
            context.path("variance.png"),
        ),
    ]
    return compact(
        dict(
            images=sum(len(y) for _, y in batches),
            **tap_summary("variance", variances, depth_rows),
            files=[str(f) for f in files],
        )
    )
