"""Hessian of the training objective (see :mod:`.objective`) by Hessian-vector products (double backward): the
paper's per-mini-batch maximum-eigenvalue density (Fig. 1c, Fig. 4), each mini-batch's dominant eigenvalue by
Lanczos (:func:`~.eigen.extreme_eigenvalues`), and a bulk spectrum of one larger sample. Definitions, why Lanczos
rather than power iteration, the outputs, the options and every difference from the paper: docs/analysis.md,
"Hessian".
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import AlternetWarning
from ..files import write_csv
from ..models import WindowAttention
from ..progress import Progress
from ..seeds import derive_seed
from . import plots
from .config import HessianConfig
from .context import AnalysisContext
from .data import Batch, objective_batches
from .eigen import (
    Extremes,
    Operator,
    SpectralDensity,
    TopEigenvalues,
    extreme_eigenvalues,
    lanczos,
    power_iteration,
    rademacher,
    top_eigenvalues,
)
from .objective import Objective, batch_size_of, objective_of, unsquared_norms
from .tables import compact


def force_math_attention(model: nn.Module) -> None:
    """Switch alternet and timm attention modules to their explicit path (double backward works there)."""
    for module in model.modules():
        if isinstance(module, WindowAttention):
            module.fused = False
        elif isinstance(getattr(module, "fused_attn", None), bool):
            module.fused_attn = False


def model_hvp(
    model: nn.Module,
    params: Sequence[nn.Parameter],
    batches: Sequence[Batch],
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    penalty: Callable[[], torch.Tensor],
) -> Operator:
    """``v -> H v`` on flat vectors, H the Hessian of ``mean over all images of loss + penalty()``.

    ``loss(outputs, targets)`` is a batch mean; batches are weighted by their size.
    """
    total = sum(len(targets) for _, targets in batches)
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]
    offsets = np.cumsum([0, *sizes]).tolist()

    def hvp(vector: torch.Tensor) -> torch.Tensor:
        pieces = [v.view(shape) for v, shape in zip(vector.split(sizes), shapes)]
        result = torch.zeros_like(vector)
        for index, (inputs, targets) in enumerate(batches):
            objective = loss(model(inputs), targets) * (len(targets) / total)
            if index == 0:
                objective = objective + penalty()
            grads = torch.autograd.grad(objective, params, create_graph=True, allow_unused=True)
            pairs = [(g, v, i) for i, (g, v) in enumerate(zip(grads, pieces)) if g is not None and g.requires_grad]
            products = torch.autograd.grad(
                [g for g, _, _ in pairs], [params[i] for *_, i in pairs], [v for _, v, _ in pairs]
            )
            for (_, _, i), product in zip(pairs, products):
                result[offsets[i] : offsets[i + 1]] += product.flatten()
        return result

    return hvp


class CountingOperator:
    """An operator that counts its products (and reports each to ``shown``: a product is a pass over every
    batch, forward and double backward, the unit of a Hessian analysis' time)."""

    def __init__(self, operator: Operator, shown: Progress):
        self.operator = operator
        self.calls = 0
        self.shown = shown

    def __call__(self, vector: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        result = self.operator(vector)
        self.shown.update()
        return result


@dataclass(frozen=True)
class Spectrum:
    """Top-``k`` eigenvalues by magnitude (with residual bounds from Lanczos, NaN for power iteration) and the
    SLQ density (None without runs)."""

    top: np.ndarray
    residuals: np.ndarray
    density: SpectralDensity | None
    products: int


def hessian_spectrum(operator: Operator, dim: int, config: HessianConfig, device: torch.device) -> Spectrum:
    """Top-k eigenvalues and SLQ density of ``operator`` as configured."""
    budget = config.slq_runs * config.iterations + (0 if config.method == "lanczos" else config.k * config.iterations)
    shown = Progress(budget, "hessian (at most)", unit="Hessian-vector products", every=30.0)
    counted = CountingOperator(operator, shown)
    generator = torch.Generator().manual_seed(config.seed)
    runs = [lanczos(counted, rademacher(dim, generator, device), config.iterations) for _ in range(config.slq_runs)]
    if config.method == "lanczos":
        top, residuals = runs[0].top_by_magnitude(config.k)
    else:
        result = power_iteration(
            counted,
            lambda: torch.randn(dim, generator=generator).to(device),
            config.k,
            config.iterations,
            config.tol,
        )
        top, residuals = np.array(result.eigenvalues), np.full(config.k, np.nan)
    density = SpectralDensity(runs, dim) if runs else None
    shown.close()
    return Spectrum(top, residuals, density, counted.calls)


@dataclass(frozen=True)
class MaxEigenvalues:
    """Per mini-batch: its Hessian's extreme eigenvalues (:class:`~.eigen.Extremes`); ``values`` the dominant ones,
    sign kept (the paper's statistic)."""

    extremes: list[Extremes]

    @property
    def values(self) -> np.ndarray:
        return np.array([e.dominant for e in self.extremes])

    @property
    def products(self) -> np.ndarray:
        return np.array([e.steps for e in self.extremes])

    @property
    def unconverged(self) -> int:
        """Mini-batches whose Lanczos hit ``minibatch_steps`` before both ends converged."""
        return sum(not e.converged for e in self.extremes)

    @property
    def negative_fraction(self) -> float:
        return float(np.mean(self.values < 0))


def minibatch_max_eigenvalues(
    model: nn.Module,
    params: Sequence[nn.Parameter],
    minibatches: Iterable[Batch],
    objective: Objective,
    config: HessianConfig,
) -> MaxEigenvalues:
    """The extreme eigenvalues of each mini-batch's Hessian (of that mini-batch's mean loss plus the L2 term) by
    Lanczos from a Gaussian start; ``config.minibatches`` of them are expected (for the progress shown)."""

    def solve(operator: Operator, start: torch.Tensor) -> Extremes:
        return extreme_eigenvalues(operator, start, config.minibatch_steps, config.tol)

    return MaxEigenvalues(_per_minibatch(model, params, minibatches, objective, config, solve))


def _per_minibatch(
    model: nn.Module,
    params: Sequence[nn.Parameter],
    minibatches: Iterable[Batch],
    objective: Objective,
    config: HessianConfig,
    solve: Callable[[Operator, torch.Tensor], Any],
) -> list[Any]:
    """``solve(operator, start)`` for each mini-batch's Hessian, from its own seeded Gaussian start (the same for
    either statistic)."""
    dim = sum(p.numel() for p in params)
    device, dtype = params[0].device, params[0].dtype
    found = []
    with Progress(config.minibatches, "hessian mini-batches", unit="mini-batches", every=30.0) as shown:
        for index, batch in enumerate(minibatches):
            operator = model_hvp(model, params, [batch], objective.nll, objective.l2)
            generator = torch.Generator().manual_seed(derive_seed(config.seed, "hessian-lanczos", index))
            start = torch.randn(dim, generator=generator, dtype=torch.float64).to(device, dtype)
            found.append(solve(operator, start))
            shown.update()
    return found


@dataclass(frozen=True)
class MinibatchTops:
    """Per mini-batch: the ``per_minibatch`` eigenvalues of its Hessian of largest magnitude, signs kept (HDVW's
    statistic: the top 5 of every mini-batch, how-do-vits-work issue #12); the first of each is the dominant one,
    the statistic of :class:`MaxEigenvalues`."""

    tops: list[TopEigenvalues]

    @property
    def values(self) -> np.ndarray:
        """Every mini-batch's values, pooled (the density HDVW plots)."""
        return np.concatenate([t.values for t in self.tops])

    @property
    def dominant(self) -> np.ndarray:
        return np.array([t.values[0] for t in self.tops])

    @property
    def unconverged(self) -> int:
        """Values whose Ritz residual was not within ``tol`` when ``minibatch_steps`` ran out."""
        return int(sum((~t.converged).sum() for t in self.tops))


def minibatch_top_eigenvalues(
    model: nn.Module,
    params: Sequence[nn.Parameter],
    minibatches: Iterable[Batch],
    objective: Objective,
    config: HessianConfig,
) -> MinibatchTops:
    """The ``per_minibatch`` eigenvalues of largest magnitude of each mini-batch's Hessian, by Lanczos from the
    same Gaussian start as :func:`minibatch_max_eigenvalues` (so their first values are the same statistic)."""

    def solve(operator: Operator, start: torch.Tensor) -> TopEigenvalues:
        return top_eigenvalues(operator, start, config.per_minibatch, config.minibatch_steps, config.tol)

    return MinibatchTops(_per_minibatch(model, params, minibatches, objective, config, solve))


def sample_minibatches(context: AnalysisContext, config: HessianConfig, batch_size: int) -> Iterator[Batch]:
    """``minibatches`` independent draws of ``batch_size`` augmented (and mixed) training images, one at a time
    (only the current one is on the device)."""
    for index in range(config.minibatches):
        seed = derive_seed(config.seed, "hessian-minibatch", index)
        yield objective_batches(context, config, batch_size, batch_size, seed)[0]


def _rows(spectrum: Spectrum, maxima: MaxEigenvalues | None, tops: MinibatchTops | None) -> list[dict[str, Any]]:
    """The CSV's rows: the first (a top eigenvalue's, never absent) orders the columns; a row leaves the cells it
    has no value for empty."""
    rows: list[dict[str, Any]] = [
        dict(kind="top", run="", rank=rank, value=float(v), weight="", residual=float(r), products="")
        for rank, (v, r) in enumerate(zip(spectrum.top, spectrum.residuals), start=1)
    ]
    for index, run in enumerate(spectrum.density.runs if spectrum.density else []):
        rows += [
            dict(kind="ritz", run=index, value=float(v), weight=float(w), residual=float(r))
            for v, w, r in zip(run.values, run.weights, run.residuals)
        ]
    for index, extremes in enumerate(maxima.extremes if maxima is not None else []):
        ends = (
            ("minibatch_max", extremes.dominant, extremes.converged),
            ("minibatch_lambda_max", extremes.lambda_max, extremes.converged_max),
            ("minibatch_lambda_min", extremes.lambda_min, extremes.converged_min),
        )
        rows += [
            dict(kind=kind, run=index, rank=1, value=value, products=extremes.steps, converged=converged)
            for kind, value, converged in ends
        ]
    for index, top in enumerate(tops.tops if tops is not None else []):
        rows += [
            dict(kind="minibatch_top", run=index, rank=rank, value=float(v), products=top.steps, converged=bool(c))
            for rank, (v, c) in enumerate(zip(top.values, top.converged), start=1)
        ]
    return rows


def _density_curve(density: SpectralDensity) -> tuple[np.ndarray, np.ndarray]:
    values = np.concatenate([r.values for r in density.runs])
    pad = 0.05 * (values.max() - values.min() + 1e-12)
    grid = np.linspace(values.min() - pad, values.max() + pad, 400)
    return grid, density.curve(grid, sigma=max(pad / 2, 1e-12))


def _dominant_summary(dominant: np.ndarray, hvps: int, batch_size: int) -> dict[str, Any]:
    """The paper's statistic over the mini-batches (each one's dominant eigenvalue), from either Lanczos."""
    return dict(
        max_eig_mean=float(dominant.mean()),
        max_eig_median=float(np.median(dominant)),
        max_eig_min=float(dominant.min()),
        max_eig_max=float(dominant.max()),
        max_eig_negative_fraction=float(np.mean(dominant < 0)),
        max_eig_hvps=hvps,
        minibatches=len(dominant),
        minibatch_size=batch_size,
    )


def _max_summary(maxima: MaxEigenvalues, batch_size: int) -> dict[str, Any]:
    return _dominant_summary(maxima.values, int(maxima.products.sum()), batch_size) | dict(
        max_eig_unconverged=maxima.unconverged,
        lambda_min_median=float(np.median([e.lambda_min for e in maxima.extremes])),
    )


def _tops_summary(tops: MinibatchTops, batch_size: int) -> dict[str, Any]:
    return _dominant_summary(tops.dominant, sum(t.steps for t in tops.tops), batch_size) | dict(
        top_eig_per_minibatch=len(tops.tops[0].values),
        top_eig_mean=float(tops.values.mean()),
        top_eig_negative_fraction=float(np.mean(tops.values < 0)),
        top_eig_unconverged=tops.unconverged,
    )


def _warn_if_the_l2_term_dominates(summary: dict[str, Any], model: nn.Module, weight_decay: float) -> None:
    """The unsquared L2 term's curvature ``wd / ||w||`` is unbounded as a tensor's norm nears 0 (a norm layer's
    shift, a bias): where the mini-batch maxima sit at it (within 5%), they measure that tensor's penalty, not the
    loss. Said, with the tensor, and flagged in the summary (``max_eig_is_l2``)."""
    median, curvature = summary.get("max_eig_median"), summary["l2_curvature_max"]
    dominated = median is not None and curvature > 0 and abs(median - curvature) <= 0.05 * curvature
    summary["max_eig_is_l2"] = dominated
    if dominated:
        norms = {name: float(p.detach().float().norm()) for name, p in model.named_parameters() if p.requires_grad}
        name = min((n for n, v in norms.items() if v > 0), key=norms.get)
        warnings.warn(
            f"analysis hessian: the mini-batch max eigenvalues (median {median:.4g}) are the L2 term's own curvature "
            f"weight_decay / ||w|| = {curvature:.4g} of {name} (norm {norms[name]:.3g}), not the loss's; measure the "
            "loss with analysis.hessian.regulariser=none (or decay_squared)",
            AlternetWarning,
            stacklevel=2,
        )


def run(context: AnalysisContext, config: HessianConfig) -> dict[str, Any]:
    model = copy.deepcopy(context.model).float().eval()
    force_math_attention(model)
    params = [p for p in model.parameters() if p.requires_grad]
    dim = sum(p.numel() for p in params)
    objective = objective_of(model, context.recipe, config)
    batch_size = batch_size_of(config, context.recipe)
    batches = objective_batches(context, config, config.images, batch_size, config.seed)
    operator = model_hvp(model, params, batches, objective.nll, objective.l2)
    with torch.autocast(context.device.type, enabled=False):
        spectrum = hessian_spectrum(operator, dim, config, context.device)
        minibatches = sample_minibatches(context, config, batch_size)
        maxima = tops = None
        if config.minibatches and config.per_minibatch == 1:
            maxima = minibatch_max_eigenvalues(model, params, minibatches, objective, config)
        elif config.minibatches:
            tops = minibatch_top_eigenvalues(model, params, minibatches, objective, config)
    density = spectrum.density
    grid, curve = _density_curve(density) if density is not None else (None, None)
    title = f"Hessian of {objective.describe()}, {config.method}, {len(batches)} batch(es)"
    files = [
        write_csv(context.path("hessian.csv"), _rows(spectrum, maxima, tops)),
        plots.hessian_spectrum(spectrum.top, grid, curve, title, context.path("hessian.png")),
    ]
    if maxima is not None or tops is not None:
        what = (
            f"Max eigenvalues of {len(maxima.values)} mini-batch Hessians (batch {batch_size})"
            if maxima is not None
            else f"Top {config.per_minibatch} eigenvalues of each of {len(tops.tops)} mini-batch Hessians (batch "
            f"{batch_size}; HDVW's statistic)"
        )
        values = maxima.values if maxima is not None else tops.values
        path = context.path("hessian_max_eigenvalues.png")
        pooled = {} if maxima is not None else {"label": f"Top {config.per_minibatch} eigenvalues of each mini-batch"}
        files.append(plots.max_eigenvalue_density(values, f"{what}, {objective.describe()}", path, **pooled))
    summary: dict[str, Any] = {f"eig_{i}": float(v) for i, v in enumerate(spectrum.top, start=1)}
    if config.method == "lanczos":
        summary["top_residual_max"] = float(spectrum.residuals.max())  # bounds each top eigenvalue's error
    if density is not None:
        summary.update(
            lambda_max=float(max(r.values.max() for r in density.runs)),
            lambda_min=float(min(r.values.min() for r in density.runs)),
            negative_fraction=density.negative_fraction(),
            negative_fraction_se=density.negative_fraction_se(),  # across the SLQ runs (slq_runs >= 2)
            negative_count=round(density.negative_fraction() * dim),
            trace=density.trace(),
        )
    if maxima is not None:
        summary.update(_max_summary(maxima, batch_size))
        if 2 * maxima.unconverged > len(maxima.extremes):  # the summaries would mostly be of unfinished Lanczos
            warnings.warn(
                f"analysis hessian: {maxima.unconverged} of {len(maxima.extremes)} mini-batches' Lanczos did not "
                f"converge within minibatch_steps={config.minibatch_steps}: the max_eig_* summaries are mostly of "
                "values still moving; raise analysis.hessian.minibatch_steps (or tol)",
                AlternetWarning,
                stacklevel=2,
            )
    if tops is not None:
        summary.update(_tops_summary(tops, batch_size))
    if config.regulariser == "hdvw" and objective.weight_decay:  # wd * ||w||: curvature wd / ||w|| across w
        norms = [float(n.detach()) for n in unsquared_norms(params)]  # the tensors the term counts (none all zeros)
        summary["l2_curvature_max"] = max((objective.weight_decay / n for n in norms), default=0.0)
        _warn_if_the_l2_term_dominates(summary, model, objective.weight_decay)
    return compact(
        dict(
            summary,
            images=sum(len(y) for _, y in batches),
            params=dim,
            hvps=spectrum.products,
            weight_decay=objective.weight_decay,
            targets=config.targets,
            regulariser=config.regulariser,
            files=[str(f) for f in files],
        )
    )
