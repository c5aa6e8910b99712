"""JSON-safe summary values of the analyses."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def finite_or_none(value: float) -> float | None:
    """``value`` as a float, or None when it is NaN or infinite (strict JSON has neither)."""
    value = float(value)
    return value if math.isfinite(value) else None


def mean_or_none(values: Sequence[float]) -> float | None:
    """The mean of ``values``, or None when there are none."""
    return finite_or_none(sum(values) / len(values)) if values else None


def kind_means(prefix: str, values: Sequence[float], kinds: Sequence[str]) -> dict[str, float | None]:
    """``{prefix}_conv_mean`` and ``{prefix}_msa_mean``: the mean of ``values`` over the Conv and the MSA blocks
    where it is defined (a 1x1 map has no spatial variance: NaN, left out; the per-block table keeps it)."""
    return {
        f"{prefix}_{label}_mean": mean_or_none(
            [v for v, k in zip(values, kinds, strict=True) if k == kind and math.isfinite(v)]
        )
        for kind, label in (("C", "conv"), ("M", "msa"))
    }


def tap_summary(prefix: str, values: Sequence[float], depth_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{prefix}_stem``, ``{prefix}_last`` and the Conv/MSA means of one value per tap (the stem's first)."""
    return {
        f"{prefix}_stem": finite_or_none(values[0]),
        f"{prefix}_last": finite_or_none(values[-1]),
        **kind_means(prefix, values, [row["kind"] for row in depth_rows]),
    }


def compact(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without its None entries."""
    return {key: value for key, value in values.items() if value is not None}


def summary(batches: Sequence[tuple[Any, Sequence[Any]]], files: Sequence[Any], **values: Any) -> dict[str, Any]:
    """An analysis' summary: how many images it read, its values and the files it wrote (nulls left out)."""
    return compact(dict(images=sum(len(y) for _, y in batches), **values, files=[str(f) for f in files]))
