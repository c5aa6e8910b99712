"""Loss landscape (Li et al., 2018; the paper's Fig. 1a and Fig. C.4a): the loss on a fixed sample of augmented
training images along two random directions around the trained weights, model in eval mode (BatchNorm's
running statistics as trained, stochastic depth off), as HDVW's ``losslandscape.ipynb``.

Loss (see :mod:`.objective`): NLL of the training targets (the recipe's mixup/cutmix with label smoothing,
soft-target cross-entropy: ``targets: training``) plus HDVW's L2 term ``weight_decay * sum ||w||``
(``regulariser: hdvw``); NLL, the L2 term and their sum are all reported.

A direction has one Gaussian entry per weight, rescaled by ``normalisation``:

* ``hdvw`` (default): HDVW's ``normalize_filter``, ``d * ||w||_0 / (||d||_0 + 1e-7)`` with norms taken over
  dim 0 (``torch.norm(w, dim=0)``: across output filters, one norm per input channel and kernel position).
  Every trainable tensor of two or more dimensions moves except position parameters (HDVW's keywords
  ``pos_embed``, ``relative_position``; here also ``rel_pos`` and ``positional_encoding``, our names for them);
  class tokens move.
* ``filter``: Li et al.'s filter normalisation, one norm per output filter (slice along dim 0); position
  parameters, class/register tokens and the model's ``no_weight_decay()`` names stay fixed.

Either way tensors of one dimension or fewer (norm scales and shifts, biases) stay at their trained values,
as do frozen parameters. Evaluated: a 1-D slice along the first direction and the 2-D grid over both (HDVW's
21 x 21 over [-1, 1]^2), every point on the same images and the same mixing draws. The weights are restored
bit for bit afterwards.
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
from .config import ObjectiveConfig, require, require_choice
from .context import AnalysisContext
from .data import Batch, objective_batches
from .objective import Objective, batch_size_of, nll_accuracy, objective_of
from .tables import compact

# Parameter names holding positions rather than filters: HDVW's ``kws`` and our names for the same tables.
HDVW_POSITION_KEYWORDS = ("pos_embed", "relative_position", "rel_pos", "positional_encoding")
# ... and, for filter normalisation, the learned tokens too.
POSITION_KEYWORDS = (*HDVW_POSITION_KEYWORDS, "cls_token", "reg_token", "dist_token")
NORMALISATIONS = ("hdvw", "filter")
HDVW_EPS = 1e-7  # HDVW's normalize_filter: ws_norm / (bs_norm + 1e-7)

Direction = dict[str, torch.Tensor]


@dataclass(frozen=True)
class LandscapeConfig(ObjectiveConfig):
    analysis: ClassVar[str] = "landscape"

    span: float
    points_1d: int
    points_2d: int
    normalisation: str

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.span > 0, self.analysis, f"span must be > 0, got {self.span}")
        for key in ("points_1d", "points_2d"):
            points = getattr(self, key)
            require(points >= 3 and points % 2 == 1, self.analysis, f"{key} must be odd and >= 3 (to include 0)")
        require_choice(self.normalisation, NORMALISATIONS, self.analysis, "normalisation")


def has_direction(name: str, param: nn.Parameter, normalisation: str, excluded: set[str]) -> bool:
    """Whether a parameter is perturbed: a trainable weight of >= 2 dimensions, not a position parameter (nor,
    for ``filter``, a token or a ``no_weight_decay()`` name)."""
    if param.ndim < 2 or not param.requires_grad:
        return False
    if normalisation == "hdvw":
        return not any(key in name for key in HDVW_POSITION_KEYWORDS)
    return name not in excluded and not any(key in name for key in POSITION_KEYWORDS)


def filter_norms(tensor: torch.Tensor) -> torch.Tensor:
    """L2 norm of each output filter (slice along dim 0), shaped to broadcast against ``tensor``."""
    return torch.linalg.vector_norm(tensor, dim=tuple(range(1, tensor.ndim)), keepdim=True)


def dim0_norms(tensor: torch.Tensor) -> torch.Tensor:
    """HDVW's ``torch.norm(w, dim=0, keepdim=True)``: the norm across output filters at each other index."""
    return torch.linalg.vector_norm(tensor, dim=0, keepdim=True)


def normalised(direction: torch.Tensor, weight: torch.Tensor, normalisation: str) -> torch.Tensor:
    """``direction`` rescaled to ``weight``'s norms (per output filter, or HDVW's over dim 0)."""
    if normalisation == "hdvw":
        return direction * (dim0_norms(weight) / (dim0_norms(direction) + HDVW_EPS))
    return direction * (filter_norms(weight) / filter_norms(direction).clamp_min(1e-12))


def random_direction(model: nn.Module, generator: torch.Generator, normalisation: str) -> Direction:
    """A random direction normalised as configured; zero for the parameters that stay fixed."""
    excluded = set(getattr(model, "no_weight_decay", set)())
    direction = {}
    for name, param in model.named_parameters():
        d = torch.randn(param.shape, generator=generator).to(param.device, param.dtype)
        if has_direction(name, param, normalisation, excluded):
            d = normalised(d, param.detach(), normalisation)
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
    objective = objective_of(model, context.recipe, config)
    batch_size = batch_size_of(config, context.recipe)
    batches = objective_batches(context, config, config.images, batch_size, config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    directions = [random_direction(model, generator, config.normalisation) for _ in range(2)]
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
            alphas,
            {"NLL": np.array([r["nll"] for r in one]), objective.describe(): np.array([r["loss"] for r in one])},
            context.path("landscape_1d.png"),
        ),
        plots.landscape_2d(
            grid,
            grid,
            {
                "NLL": np.array([r["nll"] for r in two]).reshape(shape),
                objective.describe(): np.array([r["loss"] for r in two]).reshape(shape),
            },
            context.path("landscape_2d.png"),
        ),
    ]
    origin = one[config.points_1d // 2]
    edges = (one[0], one[-1])
    return compact(
        dict(
            images=sum(len(y) for _, y in batches),
            batch_size=batch_size,
            targets=config.targets,
            regulariser=config.regulariser,
            normalisation=config.normalisation,
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
