"""Loss landscape (Li et al., 2018; the paper's Fig. 1a and Fig. C.4a): the loss (see :mod:`.objective`) on a fixed
sample of augmented training images along two normalised random directions around the trained weights, as HDVW's
``losslandscape.ipynb``: a 1-D slice and a 2-D grid, the weights restored bit for bit afterwards. Directions
(``normalisation``), loss, HDVW's own protocol as options (``redraw``, ``nll``, ``clip``) and every remaining
difference: docs/analysis.md, "Loss landscape".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from ..files import write_csv
from ..progress import Progress
from ..seeds import derive_seed
from . import plots
from .config import LandscapeConfig
from .context import AnalysisContext
from .data import Batch, objective_batches, split
from .objective import Objective, batch_size_of, nll_accuracy, objective_of
from .tables import compact, finite_or_none

# Parameter names holding positions rather than filters: HDVW's ``kws`` and our names for the same tables.
HDVW_POSITION_KEYWORDS = ("pos_embed", "relative_position", "rel_pos", "positional_encoding")
# ... and, for filter normalisation, the learned tokens too.
POSITION_KEYWORDS = (*HDVW_POSITION_KEYWORDS, "cls_token", "reg_token", "dist_token")
HDVW_EPS = 1e-7  # HDVW's normalize_filter: ws_norm / (bs_norm + 1e-7)

Direction = dict[str, torch.Tensor]


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
    objective.log_of_softmax = config.nll == "log_of_softmax"
    batch_size = batch_size_of(config, context.recipe)
    fixed = None if config.redraw else objective_batches(context, config, config.images, batch_size, config.seed)

    def batches(point: int) -> list[Batch]:
        """The point's images: the one fixed sample, or (``redraw``) a draw of its own."""
        if fixed is not None:
            return fixed
        return objective_batches(context, config, config.images, batch_size, derive_seed(config.seed, "point", point))

    generator = torch.Generator().manual_seed(config.seed)
    directions = [random_direction(model, generator, config.normalisation) for _ in range(2)]
    alphas = np.linspace(-config.span, config.span, config.points_1d)
    grid = np.linspace(-config.span, config.span, config.points_2d)
    coordinates = [("1d", (float(a),)) for a in alphas] + [("2d", (float(a), float(b))) for b in grid for a in grid]
    rows = []
    with weight_offsets(model) as move, Progress(len(coordinates), "landscape", unit="points", every=30.0) as shown:
        for point, (kind, where) in enumerate(coordinates):
            move(where, directions[: len(where)])
            x, y = where if len(where) == 2 else (where[0], 0.0)
            rows.append(dict(slice=kind, x=x, y=y, **measure(model, batches(point), objective)))
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
            clip=config.clip,
        ),
    ]
    origin = one[config.points_1d // 2]
    edges = (one[0], one[-1])
    values = dict(
        nll_origin=origin["nll"],
        loss_origin=origin["loss"],
        l2_origin=origin["l2"],
        acc_origin=origin["acc"],
        nll_rise_1d=sum(e["nll"] for e in edges) / 2 - origin["nll"],
        loss_rise_1d=sum(e["loss"] for e in edges) / 2 - origin["loss"],
        nll_max_2d=max(r["nll"] for r in two),
        loss_max_2d=max(r["loss"] for r in two),
    )
    return compact(
        dict(
            images=min(config.images, len(split(context.datamodule, "train"))),  # per point
            batch_size=batch_size,
            targets=config.targets,
            regulariser=config.regulariser,
            normalisation=config.normalisation,
            redraw=config.redraw,
            nll=config.nll,
            nonfinite_points=sum(not np.isfinite(r["loss"]) for r in rows),
            **{key: finite_or_none(value) for key, value in values.items()},
            files=[str(f) for f in files],
        )
    )
