"""Robustness baselines for mCE: a model's metrics.json, or a built-in table by name.

Built in (``alexnet.yaml``, which says exactly where each table comes from):

- ``alexnet``, the conventional mCE normaliser: on ImageNet-C the published AlexNet errors of Hendrycks & Dietterich
  (per corruption, averaged over the five severities: the mCE of the literature), on CIFAR-10-C and CIFAR-100-C
  HDVW's AlexNet runs (the benchmark publishes none);
- ``alexnet_hdvw``: HDVW's AlexNet runs on all three, per condition (ImageNet-C scored with HDVW's Resize(256) +
  CenterCrop(224): not the literature's mCE).
"""

from __future__ import annotations

import functools
import math
from importlib.resources import files
from pathlib import Path
from typing import Any

from ..data.corrupted.names import SEVERITIES
from ..files import read_yaml
from .config import BUILTIN
from .robustness import FAMILY_OF, RobustnessBaseline, RobustnessError, RobustnessRow, load_baseline


@functools.cache
def _tables() -> dict[str, Any]:
    return read_yaml(Path(str(files("alternet.evaluation").joinpath("alexnet.yaml"))), error=RobustnessError)


def builtin_baseline(name: str, benchmark: str) -> RobustnessBaseline:
    """The built-in baseline ``name`` on ``benchmark`` (one of :data:`BENCHMARKS`), as real-corruption rows. A
    table of means over the severities (Hendrycks') gives each severity the mean, and the baseline says so
    (``severity_means``): its mCE needs all five."""
    if name not in BUILTIN:
        raise RobustnessError(f"no built-in robustness baseline {name!r}; built in: {sorted(BUILTIN)}")
    if benchmark not in BUILTIN[name]:
        raise RobustnessError(f"built-in baseline {name!r} has tables for {sorted(BUILTIN[name])}, not {benchmark!r}")
    table = _tables()[BUILTIN[name][benchmark]]
    means = table.get("mean_error")
    accuracies = (
        {corruption: [1.0 - float(error)] * len(SEVERITIES) for corruption, error in means.items()}
        if means
        else table["acc"]
    )
    rows = tuple(
        RobustnessRow(
            corruption,
            severity,
            acc=float(acc),
            nll=math.nan if means else float(table["nll"][corruption][severity - 1]),
            ece=math.nan if means else float(table["ece"][corruption][severity - 1]),
            n=int(table["n"]),
            source="real",
            family=FAMILY_OF.get(corruption, "extra"),
        )
        for corruption, accs in accuracies.items()
        for severity, acc in enumerate(accs, start=1)
    )
    return RobustnessBaseline(
        f"{name} ({benchmark})", rows, table["clean_acc"], published=True, severity_means=bool(means)
    )


def resolve_baseline(value: str | None, benchmark: str | None, source: str) -> RobustnessBaseline | None:
    """``robustness.baseline``: null, a built-in name (its table for ``benchmark``, which needs ``source`` real
    corruptions), or a baseline's metrics.json."""
    if not value:
        return None
    if value in BUILTIN:
        if benchmark is None:  # digits or a folder of the user's: no real files would give it a table
            raise RobustnessError(
                f"robustness.baseline={value} has tables for {', '.join(BUILTIN[value])} only; this evaluation is on "
                "none of them: pass a baseline model's metrics.json instead"
            )
        if source != "real":
            raise RobustnessError(
                f"robustness.baseline={value} holds results on the real corruption files, and these corruptions are "
                f"{source}: set robustness.root to the real {benchmark.upper().replace('CIFAR', 'CIFAR-')} files"
            )
        return builtin_baseline(value, benchmark)
    return load_baseline(value)
