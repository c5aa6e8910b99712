"""Robustness baselines for mCE: a model's metrics.json, or a built-in table by name.

Built in: ``alexnet``, the conventional mCE normaliser, with one table per benchmark (``alexnet.yaml``: AlexNet's
per-condition results carried over as data from HDVW's ``resources/results/``; the file says exactly where from).
"""

from __future__ import annotations

import functools
from importlib.resources import files
from pathlib import Path
from typing import Any

from ..files import read_yaml
from .robustness import FAMILY_OF, RobustnessBaseline, RobustnessError, RobustnessRow, load_baseline

BUILTIN = {"alexnet": "alexnet.yaml"}
BENCHMARKS = ("cifar10-c", "cifar100-c", "imagenet-c")


@functools.cache
def _tables(name: str) -> dict[str, Any]:
    return read_yaml(Path(str(files("alternet.evaluation").joinpath(BUILTIN[name]))), error=RobustnessError)


def builtin_baseline(name: str, benchmark: str) -> RobustnessBaseline:
    """The built-in baseline ``name`` on ``benchmark`` (one of :data:`BENCHMARKS`), as real-corruption rows."""
    if name not in BUILTIN:
        raise RobustnessError(f"no built-in robustness baseline {name!r}; built in: {sorted(BUILTIN)}")
    tables = _tables(name)
    if benchmark not in tables:
        raise RobustnessError(f"built-in baseline {name!r} has tables for {sorted(tables)}, not {benchmark!r}")
    table = tables[benchmark]
    rows = tuple(
        RobustnessRow(
            corruption,
            severity,
            acc=float(acc),
            nll=float(table["nll"][corruption][severity - 1]),
            ece=float(table["ece"][corruption][severity - 1]),
            n=int(table["n"]),
            source="real",
            family=FAMILY_OF.get(corruption, "extra"),
        )
        for corruption, accs in table["acc"].items()
        for severity, acc in enumerate(accs, start=1)
    )
    return RobustnessBaseline(f"{name} ({benchmark})", rows, table["clean_acc"], published=True)


def resolve_baseline(value: str | None, benchmark: str | None, source: str) -> RobustnessBaseline | None:
    """``robustness.baseline``: null, a built-in name (its table for ``benchmark``, which needs ``source`` real
    corruptions), or a baseline's metrics.json."""
    if not value:
        return None
    if value in BUILTIN:
        if source != "real":
            raise RobustnessError(
                f"robustness.baseline={value} holds results on the real corruption files, and these corruptions are "
                f"{source}: set robustness.root to the real CIFAR-C or ImageNet-C files"
            )
        if benchmark is None:
            raise RobustnessError(
                f"robustness.baseline={value} has tables for {', '.join(BENCHMARKS)} only; this evaluation is on "
                "none of them: pass a baseline model's metrics.json instead"
            )
        return builtin_baseline(value, benchmark)
    return load_baseline(value)
