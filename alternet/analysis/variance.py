"""Feature map variance (the paper's Fig. 9): the spatial variance of the stem's and every block's output map,
averaged over samples and channels. The estimator (``unbiased``, HDVW's, or ``population``), the 1x1 maps left out of
the summary and the differences from HDVW: docs/analysis.md, "Feature-map variance".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..files import write_csv
from . import plots
from .blocks import Tap
from .config import ESTIMATORS, VarianceConfig
from .context import AnalysisContext
from .data import clean_batches
from .features import mean_per_tap
from .tables import summary, tap_summary


def spatial_variance(maps: torch.Tensor, estimator: str) -> torch.Tensor:
    """(B, C, H, W) -> (B, C) variance over the spatial positions; NaN where the divisor H*W - correction is not
    positive (a 1x1 map has no spatial variance), without torch's warning about it."""
    correction = ESTIMATORS[estimator]
    if maps.shape[-2] * maps.shape[-1] <= correction:
        return torch.full(maps.shape[:-2], float("nan"), device=maps.device)
    return maps.float().var(dim=(-2, -1), correction=correction)


def mean_variances(
    model: torch.nn.Module, taps: Sequence[Tap], batches: Sequence[torch.Tensor], estimator: str
) -> list[float]:
    """Per tap, the spatial variance averaged over all samples and channels."""
    return [float(v) for v in mean_per_tap(model, taps, batches, lambda m: spatial_variance(m, estimator).double())]


def run(context: AnalysisContext, config: VarianceConfig) -> dict[str, Any]:
    sequence = context.blocks
    batches = clean_batches(context, config)
    variances = mean_variances(context.model, sequence.taps, [x for x, _ in batches], config.estimator)
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
    return summary(
        batches,
        files,
        estimator=config.estimator,
        **tap_summary("variance", variances, depth_rows),
    )
