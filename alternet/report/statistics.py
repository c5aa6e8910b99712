"""The statistics behind a verdict: a difference between two variants' seeds with its confidence interval and
p-value (seed-paired, Welch, or with a variance pooled over the sweep), the test set's own sampling noise (a
bootstrap over test images), Holm's step-down correction across the variants compared, and equivalence by two
one-sided tests (TOST) inside a declared margin."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

PAIRED, WELCH, POOLED = "paired", "welch", "pooled"


@dataclass(frozen=True)
class Pooled:
    """A within-variant variance pooled over a sweep's variants (the assumption: seeds scatter alike in each)."""

    variance: float
    df: int

    @classmethod
    def of(cls, groups: Sequence[Sequence[float]]) -> Pooled | None:
        groups = [g for g in groups if len(g) > 1]
        df = sum(len(g) - 1 for g in groups)
        if not df:
            return None
        return cls(sum((len(g) - 1) * statistics.variance(g) for g in groups) / df, df)


@dataclass(frozen=True)
class Difference:
    """``variant - baseline`` of a metric: mean difference, its standard error, degrees of freedom, two-sided
    p-value against no difference, its 95% interval (``low``, ``high``); ``p_holm`` once corrected across variants."""

    delta: float
    se: float
    df: float
    p: float
    low: float
    high: float
    n: tuple[int, int]
    method: str
    p_holm: float | None = None

    def interval(self, confidence: float) -> tuple[float, float]:
        half = _t_quantile(confidence, self.df) * self.se
        return self.delta - half, self.delta + half

    def below_zero(self, alpha: float) -> bool:
        """Significantly below 0 after Holm's correction (uncorrected when not corrected)."""
        return self.delta < 0 and self._p() < alpha

    def above_zero(self, alpha: float) -> bool:
        return self.delta > 0 and self._p() < alpha

    def equivalent(self, margin: float, alpha: float) -> bool:
        """TOST: both one-sided tests reject at ``alpha``, i.e. the 1 - 2 alpha interval lies inside (-margin,
        margin). An intersection-union test, so it needs no multiplicity correction for its own two parts."""
        low, high = self.interval(1 - 2 * alpha)
        return -margin < low and high < margin

    def _p(self) -> float:
        return self.p if self.p_holm is None else self.p_holm

    def detectable(self, alpha: float, power: float = 0.8) -> float:
        """The minimum detectable effect: the smallest true difference this comparison (its standard error, test-set
        noise included where it was added, and its degrees of freedom) finds at two-sided level ``alpha`` with
        probability ``power``, ``(t[1 - alpha/2] + t[power]) * se`` (the far tail's share of the power ignored)."""
        return (_t_quantile(1 - alpha, self.df) + _t_quantile(2 * power - 1, self.df)) * self.se


def _t_quantile(confidence: float, df: float) -> float:
    quantile = 0.5 + confidence / 2
    return float(stats.t.ppf(quantile, df) if math.isfinite(df) else stats.norm.ppf(quantile))


def difference(
    variant: Mapping[str, float],
    baseline: Mapping[str, float],
    *,
    paired: bool = True,
    pooled: Pooled | None = None,
    extra_variance: float = 0.0,
) -> Difference | None:
    """``variant - baseline`` over their seeds (``{seed: value}``). Seed-paired when both hold the same seeds and
    ``paired`` (a seed fixes data order and augmentation, so the pairs share them); else Welch's unequal-variance
    interval, or ``pooled``'s variance when given. ``extra_variance`` adds an independent source of noise to the
    difference (the test set's own, :func:`bootstrap_variance`), with the degrees of freedom by Satterthwaite's
    rule (that term estimated from thousands of test images: known next to the seeds'). ``None`` when the seeds
    cannot give a spread."""
    a, b = _finite(variant), _finite(baseline)
    if not a or not b:
        return None
    delta = statistics.fmean(a.values()) - statistics.fmean(b.values())
    n = (len(a), len(b))
    if paired and pooled is None and set(a) == set(b) and len(a) > 1:
        pairs = [a[seed] - b[seed] for seed in a]
        variance, df, method = statistics.variance(pairs) / len(pairs), len(pairs) - 1, PAIRED
    elif pooled is not None:
        variance, df, method = pooled.variance * (1 / n[0] + 1 / n[1]), pooled.df, POOLED
    elif min(n) > 1:
        va, vb = statistics.variance(a.values()) / n[0], statistics.variance(b.values()) / n[1]
        variance, method = va + vb, WELCH
        denominator = va**2 / (n[0] - 1) + vb**2 / (n[1] - 1)
        df = variance**2 / denominator if denominator > 0 else n[0] + n[1] - 2
    else:
        return None
    if extra_variance > 0:  # Satterthwaite: the test-set term is estimated from thousands of images, as good as
        # known next to the seeds'; with no spread between the seeds the error is that term alone (df infinite)
        df = (variance + extra_variance) ** 2 / (variance**2 / df) if variance > 0 else math.inf
    se = math.sqrt(variance + extra_variance)
    p = float(2 * stats.t.sf(abs(delta) / se, df)) if se > 0 else float(delta == 0)
    half = _t_quantile(0.95, df) * se
    return Difference(delta, se, df, p, delta - half, delta + half, n, method)


def _finite(values: Mapping[str, float | None]) -> dict[str, float]:
    return {str(k): float(v) for k, v in values.items() if v is not None and math.isfinite(v)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error at most alpha for ``adjusted < alpha``): the i-th
    smallest p times (m - i + 1), made non-decreasing, capped at 1."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted, running = [1.0] * len(p_values), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def with_holm(differences: Sequence[Difference | None]) -> list[Difference | None]:
    """The differences with ``p_holm`` set, corrected over those that exist (one family: one metric, the variants
    compared against one baseline)."""
    present = [d for d in differences if d is not None]
    adjusted = iter(holm([d.p for d in present]))
    return [None if d is None else replace(d, p_holm=next(adjusted)) for d in differences]


def bootstrap_variance(
    variant_correct: Sequence[np.ndarray],
    baseline_correct: Sequence[np.ndarray],
    draws: int = 1000,
    seed: int = 0,
    paired: bool = False,
) -> float:
    """The test set's own share of the variance of the difference in mean test error, the share the seed term does
    not already hold (docs/experiments.md, "Each source of noise once").

    Per test image ``i``, the seeds' mean error difference is ``d_i = mu_i + e_i``: ``mu_i`` what the two
    architectures differ by on that image in expectation over training seeds, ``e_i`` the seeds' own flips around it.
    Drawing another test set changes the ``mu_i`` (variance ``var(mu) / N``); drawing other seeds changes the
    ``e_i``, and that is in the seed term already (Welch's or the paired variance of the seeds' accuracies holds it).
    So the image term is ``var(mu) / N``, estimated as the bootstrap variance of the mean of ``d`` over test images
    (``draws`` resamples, the same images for both variants, so their correlation is kept) less the flips' share,
    ``mean_i(v_i) / N`` with ``v_i`` the variance of ``e_i`` from the seeds, as the seed term counts them (unpaired:
    per arm ``s2_i / S``; ``paired``, the same seeds in the same order in both arms: the variance of the per-seed
    differences over ``S``); never below 0. Bootstrapping ``d`` alone, as before, counted the flips twice.
    ``*_correct``: one boolean vector per seed, over the same images."""
    a = np.stack([np.asarray(c, dtype=np.float64) for c in variant_correct])
    b = np.stack([np.asarray(c, dtype=np.float64) for c in baseline_correct])
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the variants were tested on different test sets ({a.shape[1]} vs {b.shape[1]} images)")
    per_image = b.mean(axis=0) - a.mean(axis=0)  # error difference = accuracy difference with the sign turned
    rng = np.random.default_rng(seed)
    samples = [per_image[rng.integers(0, per_image.size, per_image.size)].mean() for _ in range(draws)]
    flips = _flip_variance(a, b, paired)
    return max(float(np.var(samples, ddof=1)) - float(flips.mean()) / per_image.size, 0.0)


def _flip_variance(a: np.ndarray, b: np.ndarray, paired: bool) -> np.ndarray:
    """Per image, the variance of the seeds' mean correctness difference that comes from the seeds themselves:
    paired, the per-seed differences' variance over ``S``; else each arm's variance over its seeds divided by its
    count (an arm of one seed cannot say: 0)."""
    if paired and a.shape == b.shape and len(a) > 1:
        return np.var(b - a, axis=0, ddof=1) / len(a)
    return sum(np.var(x, axis=0, ddof=1) / len(x) if len(x) > 1 else np.zeros(x.shape[1]) for x in (a, b))
