"""Eigenvalues of a symmetric linear operator given only its products ``v -> A v`` on flat vectors.

* :func:`power_iteration`: the ``k`` eigenvalues of largest magnitude, one at a time, each search kept
  orthogonal to the eigenvectors already found (deflation, as in PyHessian).
* :func:`lanczos`: ``steps`` Lanczos iterations with full reorthogonalisation; the Ritz values approximate
  both ends of the spectrum and, with their weights, form one sample of stochastic Lanczos quadrature (SLQ).
* :func:`extreme_eigenvalues`: Lanczos run until both ends of the spectrum converge (or a step cap), each with its
  convergence flag: the largest and the smallest eigenvalue, and so the dominant one's sign, even where
  ``|lambda_min| ~ |lambda_max|`` and power iteration wanders between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal

Operator = Callable[[torch.Tensor], torch.Tensor]


def _orthogonalise(v: torch.Tensor, basis: list[torch.Tensor]) -> torch.Tensor:
    for u in basis:
        v = v - torch.dot(u, v) * u
    return v


@dataclass(frozen=True)
class PowerResult:
    """Eigenvalues (largest magnitude first) and their unit eigenvectors."""

    eigenvalues: list[float]
    eigenvectors: list[torch.Tensor]


def power_iteration(
    operator: Operator, start: Callable[[], torch.Tensor], k: int, max_iter: int, tol: float
) -> PowerResult:
    """Top-``k`` eigenvalues by magnitude; each stops when its estimate changes by less than ``tol`` (relative).

    ``start()`` returns a fresh random start vector (flat, on the operator's device).
    """
    values: list[float] = []
    vectors: list[torch.Tensor] = []
    for _ in range(k):
        v = _orthogonalise(start(), vectors)
        v = v / v.norm()
        estimate, used = None, 0
        while used < max_iter:
            used += 1
            av = _orthogonalise(operator(v), vectors)
            new = float(torch.dot(av, v))
            norm = av.norm()
            converged = estimate is not None and abs(new - estimate) <= tol * (abs(estimate) + 1e-12)
            estimate = new
            if norm == 0 or converged:
                break
            v = av / norm
        values.append(estimate)
        vectors.append(v)
    return PowerResult(values, vectors)


@dataclass(frozen=True)
class LanczosResult:
    """Ritz values (ascending), their quadrature weights (summing to 1) and residual norms ``|beta_m s_mi|``."""

    values: np.ndarray
    weights: np.ndarray
    residuals: np.ndarray

    def top_by_magnitude(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` Ritz values of largest magnitude and their residual norms."""
        order = np.argsort(-np.abs(self.values))[:k]
        return self.values[order], self.residuals[order]


def _lanczos_steps(
    operator: Operator, start: torch.Tensor, steps: int
) -> Iterator[tuple[list[float], list[float], float]]:
    """Lanczos with full reorthogonalisation from ``start``, for at most ``steps`` steps (and the dimension): after
    each, the tridiagonal's diagonal so far, its off-diagonal so far, and the new residual norm (the next
    off-diagonal entry; the iteration ends when it vanishes, an invariant subspace)."""
    dim = start.numel()
    steps = min(steps, dim)
    basis = torch.empty(steps, dim, dtype=start.dtype, device=start.device)
    basis[0] = start / start.norm()
    alphas: list[float] = []
    betas: list[float] = []
    for j in range(steps):
        w = operator(basis[j])
        alphas.append(float(torch.dot(w, basis[j])))
        for _ in range(2):  # full reorthogonalisation, twice for numerical safety
            w = w - basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta = float(w.norm())
        yield alphas, betas, beta
        if j + 1 == steps or beta == 0:
            return
        betas.append(beta)
        basis[j + 1] = w / beta


def lanczos(operator: Operator, start: torch.Tensor, steps: int) -> LanczosResult:
    """``steps`` Lanczos iterations from ``start`` (stops early on an invariant subspace)."""
    for step in _lanczos_steps(operator, start, steps):
        if step[2] <= 1e-10 * max(abs(a) for a in step[0]):
            break
    alphas, betas, beta = step
    values, vectors = eigh_tridiagonal(np.array(alphas), np.array(betas))
    return LanczosResult(values, vectors[0] ** 2, abs(beta) * np.abs(vectors[-1]))


@dataclass(frozen=True)
class Extremes:
    """The largest and smallest eigenvalue, whether each converged (its Ritz residual within ``tol`` of the
    spectrum's scale), and the products used."""

    lambda_max: float
    lambda_min: float
    converged_max: bool
    converged_min: bool
    steps: int

    @property
    def dominant(self) -> float:
        """The eigenvalue of largest magnitude, its sign kept (the paper's per-mini-batch statistic)."""
        return self.lambda_max if abs(self.lambda_max) >= abs(self.lambda_min) else self.lambda_min

    @property
    def converged(self) -> bool:
        return self.converged_max and self.converged_min


def extreme_eigenvalues(operator: Operator, start: torch.Tensor, max_steps: int, tol: float) -> Extremes:
    """Lanczos with full reorthogonalisation from ``start``, stopped once the largest and the smallest Ritz values
    both have a residual ``|beta_j s_ji|`` at most ``tol`` times ``max(|lambda_max|, |lambda_min|)`` (they are
    then eigenvalues to that accuracy), at an invariant subspace (exact), or after ``max_steps`` products, where the
    flags say which end had not converged."""
    dim, last = start.numel(), min(max_steps, start.numel())
    for alphas, betas, beta in _lanczos_steps(operator, start, max_steps):
        values, vectors = eigh_tridiagonal(np.array(alphas), np.array(betas))
        scale = max(abs(values[0]), abs(values[-1]), 1e-30)
        exhausted = beta <= 1e-10 * scale or len(alphas) == dim  # an invariant subspace: the Ritz values are exact
        residual_min, residual_max = beta * abs(vectors[-1, 0]), beta * abs(vectors[-1, -1])
        converged = (bool(exhausted or residual_max <= tol * scale), bool(exhausted or residual_min <= tol * scale))
        if all(converged) or len(alphas) == last:
            return Extremes(float(values[-1]), float(values[0]), converged[0], converged[1], len(alphas))
    raise ValueError(f"max_steps must be >= 1, got {max_steps}")


@dataclass(frozen=True)
class TopEigenvalues:
    """The ``k`` eigenvalues of largest magnitude (signs kept, by decreasing magnitude), whether each converged,
    and the products used."""

    values: np.ndarray
    converged: np.ndarray
    steps: int


def top_eigenvalues(operator: Operator, start: torch.Tensor, k: int, max_steps: int, tol: float) -> TopEigenvalues:
    """Lanczos with full reorthogonalisation from ``start``, stopped once the ``k`` Ritz values of largest magnitude
    each have a residual ``|beta_j s_ji|`` at most ``tol`` times the largest magnitude (at least ``k`` steps), at an
    invariant subspace (exact), or after ``max_steps`` products, where the flags say which had not converged."""
    dim, last = start.numel(), min(max_steps, start.numel())
    for alphas, betas, beta in _lanczos_steps(operator, start, max_steps):
        if len(alphas) < min(k, last):
            continue
        values, vectors = eigh_tridiagonal(np.array(alphas), np.array(betas))
        order = np.argsort(-np.abs(values))[:k]
        scale = max(abs(values[order[0]]), 1e-30)
        exhausted = beta <= 1e-10 * scale or len(alphas) == dim
        converged = exhausted | (beta * np.abs(vectors[-1, order]) <= tol * scale)
        if converged.all() or len(alphas) == last:
            return TopEigenvalues(values[order], converged, len(alphas))
    raise ValueError(f"max_steps must be >= 1, got {max_steps}")


def rademacher(dim: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """A random ±1 vector (fp32)."""
    return (torch.randint(0, 2, (dim,), generator=generator).float() * 2 - 1).to(device)


@dataclass(frozen=True)
class SpectralDensity:
    """SLQ estimate of the eigenvalue distribution of a ``dim``-dimensional operator from several runs."""

    runs: list[LanczosResult]
    dim: int

    def negative_fraction(self) -> float:
        """Estimated fraction of eigenvalues below zero."""
        return float(np.mean(self._negative_fractions()))

    def negative_fraction_se(self) -> float | None:
        """The standard error of :meth:`negative_fraction` across the runs (None from one run: no estimate)."""
        runs = self._negative_fractions()
        return float(np.std(runs, ddof=1) / np.sqrt(len(runs))) if len(runs) > 1 else None

    def _negative_fractions(self) -> list[float]:
        return [float(r.weights[r.values < 0].sum()) for r in self.runs]

    def trace(self) -> float:
        """Estimated trace (``dim`` times the mean eigenvalue)."""
        return float(self.dim * np.mean([(r.weights * r.values).sum() for r in self.runs]))

    def curve(self, grid: np.ndarray, sigma: float) -> np.ndarray:
        """Gaussian-broadened density on ``grid`` (integrates to about 1)."""
        density = np.zeros_like(grid, dtype=float)
        for run in self.runs:
            kernel = np.exp(-0.5 * ((grid[:, None] - run.values[None, :]) / sigma) ** 2)
            density += kernel @ run.weights / (sigma * np.sqrt(2 * np.pi))
        return density / len(self.runs)
