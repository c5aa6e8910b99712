"""Loss landscape (Li et al., 2018; the paper's Fig. 1 and Fig. 4): the loss on a fixed set of augmented
training images along random, filter-normalised directions around the trained weights.

A direction has one Gaussian entry per weight; for every weight tensor with at least two dimensions, each
output filter (slice along dim 0: a conv filter, a linear layer's row) is rescaled to the norm of the
corresponding filter of the weights. Norm parameters and biases (tensors of one dimension or fewer) and
position embeddings / bias tables get a zero direction, so they stay at their trained values. BatchNorm
running statistics are left as trained and the model runs in eval mode.

Evaluated: a 1-D slice along the first direction and a 2-D grid over the first two, both through the
origin; NLL and NLL + L2 (see :mod:`.objective`). The weights are restored bit for bit afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from ..files import write_csv
from ..progress import Progress
from . import plots
from .config import SampleConfig, require
from .context import AnalysisContext
from .data import Batch, augmented_batches
from .objective import Objective, nll_accuracy
from .tables import compact

# Parameter names holding positions rather than filters (as the paper's notebook excludes them).
POSITION_KEYWORDS = ("pos_embed", "relative_position", "rel_pos", "cls_token", "reg_token", "dist_token")

Direction = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LandscapeConfig(SampleConfig):
    analysis: ClassVar[str] = "landscape"

    span: float
    points_1d: int
    points_2d: int
    label_smoothing: float

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.span > 0, self.analysis, f"span must be > 0, got {self.span}")
        for key in ("points_1d", "points_2d"):
            points = getattr(self, key)
            require(points >= 3 and points % 2 == 1, self.analysis, f"{key} must be odd and >= 3 (to include 0)")


def has_direction(name: str, param: nn.Parameter, excluded: set[str]) -> bool:
    """Whether a parameter is perturbed: a weight with filters, not a norm/bias/position parameter."""
    return param.ndim >= 2 and name not in excluded and not any(key in name for key in POSITION_KEYWORDS)


def filter_norms(tensor: torch.Tensor) -> torch.Tensor:
    """L2 norm of each output filter (slice along dim 0), shaped to broadcast against ``tensor``."""
    return torch.linalg.vector_norm(tensor, dim=tuple(range(1, tensor.ndim)), keepdim=True)


def filter_normalized_direction(model: nn.Module, generator: torch.Generator) -> Direction:
    """A random direction with each filter scaled to its weight filter's norm; zero for excluded parameters."""
    excluded = set(getattr(model, "no_weight_decay", set)())
    direction = {}
    for name, param in model.named_parameters():
        d = torch.randn(param.shape, generator=generator).to(param.device, param.dtype)
        if has_direction(name, param, excluded):
            d = d * (filter_norms(param.detach()) / filter_norms(d).clamp_min(1e-12))
        else:
            d.zero_()
        direction[name] = d
    return direction


@contextmanager
def weight_offsets(model: nn.Module) -> Iterator[Any]:
    """Yield ``move(coefficients, directions)`` setting ``w = w0 + sum c_i d_i``; restore ``w0`` exactly after."""
    params = dict(model.named_parameters())
    origin = {name: p.detach().clone() for name, p in params.items()}

    @torch.no_grad()
    def move(coefficients: Sequence[float], directions: Sequence[Direction]) -> None:
        for name, p in params.items():
            value = origin[name].clone()
            for c, d in zip(coefficients, directions):
                value.add_(d[name], alpha=float(c))
            p.copy_(value)

    try:
        yield move
    finally:
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(origin[name])


@torch.no_grad()
def measure(model: nn.Module, batches: Sequence[Batch], objective: Objective) -> dict[str, float]:
    """NLL, L2 term, their sum and accuracy at the current weights."""
    nll, acc = nll_accuracy(model, batches, objective)
    l2 = float(objective.l2())
    return dict(nll=nll, l2=l2, loss=nll + l2, acc=acc)


def run(context: AnalysisContext, config: LandscapeConfig) -> dict[str, Any]:
    model = context.model
    objective = Objective.from_recipe(model, context.recipe, config.label_smoothing)
    batches = augmented_batches(context.datamodule, config.images, config.batch_size, config.seed, context.device)
    generator = torch.Generator().manual_seed(config.seed)
    directions = [filter_normalized_direction(model, generator) for _ in range(2)]
    alphas = np.linspace(-config.span, config.span, config.points_1d)
    grid = np.linspace(-config.span, config.span, config.points_2d)
    rows = []
    points = len(alphas) + len(grid) ** 2
    with weight_offsets(model) as move, Progress(points, "landscape", unit="points", every=30.0) as shown:
        for a in alphas:
            move([a], directions[:1])
            rows.append(dict(slice="1d", x=float(a), y=0.0, **measure(model, batches, objective)))
            shown.update()
        for b in grid:
            for a in grid:
                move([a, b], directions)
                rows.append(dict(slice="2d", x=float(a), y=float(b), **measure(model, batches, objective)))
                shown.update()
    one = [r for r in rows if r["slice"] == "1d"]
    two = [r for r in rows if r["slice"] == "2d"]
    shape = (config.points_2d, config.points_2d)
    files = [
        write_csv(context.path("landscape.csv"), rows),
        plots.landscape_1d(
            alphas, {key: np.array([r[key] for r in one]) for key in ("nll", "loss")}, context.path("landscape_1d.png")
        ),
        plots.landscape_2d(
            grid,
            grid,
            {
                "NLL": np.array([r["nll"] for r in two]).reshape(shape),
                "NLL + L2": np.array([r["loss"] for r in two]).reshape(shape),
            },
            context.path("landscape_2d.png"),
        ),
    ]
    origin = one[config.points_1d // 2]
    edges = (one[0], one[-1])
    return compact(
        dict(
            images=sum(len(y) for _, y in batches),
            nll_origin=origin["nll"],
            loss_origin=origin["loss"],
            l2_origin=origin["l2"],
            acc_origin=origin["acc"],
            nll_rise_1d=sum(e["nll"] for e in edges) / 2 - origin["nll"],
            loss_rise_1d=sum(e["loss"] for e in edges) / 2 - origin["loss"],
            nll_max_2d=max(r["nll"] for r in two),
            loss_max_2d=max(r["loss"] for r in two),
            files=[str(f) for f in files],
        )
    )
