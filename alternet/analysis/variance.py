"""Feature map variance (the paper's Fig. 9): per sample and channel, the spatial variance of the map over its
H x W positions, averaged over samples and channels, for the stem and every block's output (HDVW's taps: the
stem, then each residual block's output; a ViT's class token dropped), clean test images, model in eval mode.

``estimator``: ``unbiased`` (default; HDVW's ``latent.var(dim=[-1, -2])``, torch's default divisor H*W - 1) or
``population`` (divisor H*W). They differ by the factor H*W / (H*W - 1): 16/15 on a 4x4 map, 1.016 on 8x8.
A 1x1 map (a timm ResNet's last stage at 32 px, a PiT's at 16 px) has no spatial variance: its row in the table
reads NaN, and the summary's means and last value leave it out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from ..files import write_csv
from . import plots
from .blocks import Tap
from .config import SampleConfig, require_choice
from .context import AnalysisContext
from .data import clean_batches
from .features import mean_per_tap
from .tables import compact, tap_summary

ESTIMATORS = {"unbiased": 1, "population": 0}  # the divisor's correction: H*W - correction


@dataclass(frozen=True)
class VarianceConfig(SampleConfig):
    analysis: ClassVar[str] = "variance"

    estimator: str

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choice(self.estimator, tuple(ESTIMATORS), self.analysis, "estimator")


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
    return compact(
        dict(
            images=sum(len(y) for _, y in batches),
            estimator=config.estimator,
            **tap_summary("variance", variances, depth_rows),
            files=[str(f) for f in files],
        )
    )
