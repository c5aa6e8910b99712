"""Hessian spectrum of the training objective (see :mod:`.objective`) over a fixed set of augmented training
images, by Hessian-vector products (double backward).

The Hessian is that of the mean loss over the sampled images, with respect to every trainable parameter.
Choices, as in PyHessian: the model runs in eval mode (BatchNorm uses its running statistics, dropout and
stochastic depth are off), so that the loss is a fixed function of the weights; a private fp32 copy with the
explicit (math) attention path is used, since fused attention kernels have no double backward.

``method: lanczos`` (default) runs ``iterations`` Lanczos steps with full reorthogonalisation; its Ritz values
give the top-``k`` eigenvalues by magnitude (with residual norms bounding their error), and each of the
``slq_runs`` runs is one sample of stochastic Lanczos quadrature for the eigenvalue density, the negative
fraction of the spectrum and the trace. ``method: power`` finds the top-``k`` by power iteration with
deflation (PyHessian's method; up to ``iterations`` products per eigenvalue), and ``slq_runs`` (may be 0)
extra Lanczos runs give the density.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from ..files import write_csv
from ..models import WindowAttention
from ..progress import Progress
from . import plots
from .config import SampleConfig, require
from .context import AnalysisContext
from .data import Batch, augmented_batches
from .eigen import Operator, SpectralDensity, lanczos, power_iteration, rademacher
from .objective import Objective
from .tables import compact

METHODS = ("lanczos", "power")


@dataclass(frozen=True)
class HessianConfig(SampleConfig):
    analysis: ClassVar[str] = "hessian"

    k: int
    method: str
    iterations: int
    tol: float
    slq_runs: int
    label_smoothing: float

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.method in METHODS, self.analysis, f"method must be one of {list(METHODS)}, got {self.method!r}")
        require(self.k >= 1, self.analysis, f"k must be >= 1, got {self.k}")
        require(self.iterations >= 1, self.analysis, f"iterations must be >= 1, got {self.iterations}")
        if self.method == "lanczos":
            require(self.iterations >= self.k, self.analysis, f"lanczos needs iterations >= k ({self.k})")
            require(self.slq_runs >= 1, self.analysis, "lanczos needs slq_runs >= 1 (its first run gives the top-k)")
        require(self.slq_runs >= 0, self.analysis, f"slq_runs must be >= 0, got {self.slq_runs}")
        require(self.tol > 0, self.analysis, f"tol must be > 0, got {self.tol}")


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

    def __init__(self, operator: Operator, shown: Progress | None = None):
        self.operator = operator
        self.calls = 0
        self.shown = shown

    def __call__(self, vector: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        result = self.operator(vector)
        if self.shown is not None:
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


def _rows(spectrum: Spectrum) -> list[dict[str, Any]]:
    rows = [
        dict(kind="top", run="", rank=rank, value=float(v), weight="", residual=float(r))
        for rank, (v, r) in enumerate(zip(spectrum.top, spectrum.residuals), start=1)
    ]
    for index, run in enumerate(spectrum.density.runs if spectrum.density else []):
        rows += [
            dict(kind="ritz", run=index, rank="", value=float(v), weight=float(w), residual=float(r))
            for v, w, r in zip(run.values, run.weights, run.residuals)
        ]
    return rows


def run(context: AnalysisContext, config: HessianConfig) -> dict[str, Any]:
    model = copy.deepcopy(context.model).float().eval()
    force_math_attention(model)
    params = [p for p in model.parameters() if p.requires_grad]
    dim = sum(p.numel() for p in params)
    objective = Objective.from_recipe(model, context.recipe, config.label_smoothing)
    batches = augmented_batches(context.datamodule, config.images, config.batch_size, config.seed, context.device)
    operator = model_hvp(model, params, batches, objective.nll, objective.l2)
    with torch.autocast(context.device.type, enabled=False):
        spectrum = hessian_spectrum(operator, dim, config, context.device)
    density = spectrum.density
    grid = curve = None
    if density is not None:
        values = np.concatenate([r.values for r in density.runs])
        pad = 0.05 * (values.max() - values.min() + 1e-12)
        grid = np.linspace(values.min() - pad, values.max() + pad, 400)
        curve = density.curve(grid, sigma=max(pad / 2, 1e-12))
    title = f"Hessian of NLL + L2 (wd {objective.weight_decay:g}), {config.method}, {len(batches)} batch(es)"
    files = [
        write_csv(context.path("hessian.csv"), _rows(spectrum)),
        plots.hessian_spectrum(spectrum.top, grid, curve, title, context.path("hessian.png")),
    ]
    summary: dict[str, Any] = {f"eig_{i}": float(v) for i, v in enumerate(spectrum.top, start=1)}
    if config.method == "lanczos":
        summary["top_residual_max"] = float(spectrum.residuals.max())  # bounds each top eigenvalue's error
    if density is not None:
        summary.update(
            lambda_max=float(max(r.values.max() for r in density.runs)),
            lambda_min=float(min(r.values.min() for r in density.runs)),
            negative_fraction=density.negative_fraction(),
            negative_count=density.negative_fraction() * dim,
            trace=density.trace(),
        )
    return compact(
        dict(
            summary,
            images=sum(len(y) for _, y in batches),
            params=dim,
            hvps=spectrum.products,
            weight_decay=objective.weight_decay,
            files=[str(f) for f in files],
        )
    )
