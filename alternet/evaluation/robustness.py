"""Corruption robustness: a table of per-(corruption, severity) results, its summary, CSV and metrics.json.

The paper's number (the mean accuracy over the 15 CIFAR-C corruptions x 5 severities, every condition weighted
equally), mCE and relative mCE against a baseline's table (AlexNet's is built in, :mod:`alternet.evaluation.baselines`;
or any model's metrics.json), and real and generated corruptions never mixed: docs/reference.md, section 4,
"Robustness". mCE and relative mCE are percent (100 = as robust as the baseline); accuracies and errors elsewhere are
fractions.

metrics.json schema (read by :func:`load_baseline`; the ``robustness`` section is
:class:`~alternet.runs.results.RobustnessResult`'s ``to_json``, of :func:`robustness_record`'s result)::

    {
      "model": "alternet_r50",                  # optional, names the baseline
      "test": {"acc": 0.84, ...},               # clean test metrics; "acc" or "test/acc"
      "robustness": {
        "schema": 1,
        "source": "real" | "generated",
        "table": [{"corruption": "fog", "severity": 1, "family": "weather", "acc": 0.8, "nll": 0.7,
                   "ece": 0.05, "n": 10000, "source": "real"}, ...],
        "summary": {...},                        # robustness_summary(table, ...).to_json()
        "layout": "cifar-c" | "imagenet-c", "root": ..., "benchmark": ..., "preprocess": ..., "synthetic_frost": ...,
        "extra": null | {"schema", "source", "table", "summary"}   # corruptions beyond the 15, never in the summary
      }
    }
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.corrupted.names import CORRUPTIONS, EXTRA_CORRUPTIONS, FAMILIES, SEVERITIES
from ..errors import AlternetError, CheckpointError
from ..files import read_json, write_csv
from ..files import update_json as update_metrics_json  # merge into metrics.json, atomically
from ..runs.results import Condition, CorruptedImages, RobustnessResult, RobustnessSummary

SOURCES = ("real", "generated")
FAMILY_OF = {corruption: family for family, members in FAMILIES.items() for corruption in members}
TABLE_COLUMNS = ("corruption", "severity", "family", "source", "n", "acc", "error", "nll", "ece")

__all__ = [
    "CORRUPTIONS",
    "FAMILIES",
    "FAMILY_OF",
    "SEVERITIES",
    "SOURCES",
    "RobustnessBaseline",
    "RobustnessError",
    "RobustnessRow",
    "accuracy_grid",
    "check_table",
    "clean_accuracy",
    "load_baseline",
    "robustness_record",
    "robustness_summary",
    "rows_from_record",
    "update_metrics_json",
    "write_accuracy_csv",
    "write_table_csv",
]


class RobustnessError(AlternetError, ValueError):
    """A robustness table or baseline that cannot be summarised or compared as asked."""


@dataclass(frozen=True)
class RobustnessRow(Condition):
    """Metrics of one model on one corruption at one severity, checked; its family filled in when not given."""

    def __post_init__(self) -> None:
        if not self.family:
            if self.corruption not in FAMILY_OF:
                raise RobustnessError(
                    f"unknown corruption {self.corruption!r}: pass its family explicitly or use one of {CORRUPTIONS}"
                )
            object.__setattr__(self, "family", FAMILY_OF[self.corruption])
        if self.source not in SOURCES:
            raise RobustnessError(f"row {self.key}: source must be one of {SOURCES}, got {self.source!r}")
        if int(self.severity) != self.severity or self.severity < 1:
            raise RobustnessError(f"row {self.key}: severity must be a positive integer")
        if not 0.0 <= self.acc <= 1.0:
            raise RobustnessError(f"row {self.key}: acc must be a fraction in [0, 1], got {self.acc}")
        if self.n < 1:
            raise RobustnessError(f"row {self.key}: n must be >= 1, got {self.n}")

    @classmethod
    def from_metrics(
        cls, corruption: str, severity: int, metrics: Mapping[str, float], n: int, source: str, family: str = ""
    ) -> RobustnessRow:
        """A row from :func:`~alternet.metrics.calibration_metrics` output."""
        return cls(corruption, int(severity), metrics["acc"], metrics["nll"], metrics["ece"], int(n), source, family)


@dataclass(frozen=True)
class RobustnessBaseline:
    """A reference model's robustness table and clean accuracy, for mCE."""

    name: str
    rows: tuple[RobustnessRow, ...]
    clean_acc: float | None
    published: bool = False  # a built-in table of published results (whole sets), not an evaluation's own
    severity_means: bool = False  # each corruption's error averaged over severities 1..5 (Hendrycks' ImageNet-C)
    data: str | None = None  # an evaluation's own: the data set it was scored on (metrics.json's data)
    images: CorruptedImages | None = None  # and where its corrupted images came from, how they were read

    def check_same_benchmark(self, data: str, images: CorruptedImages) -> None:
        """An evaluation's own baseline was scored on corruptions of the same data set, read the same way: mCE
        divides this model's errors by its errors on the same images (CIFAR-10-C errors under CIFAR-100-C ones
        passed, as both hold 10,000 images a condition)."""
        theirs = self.images or CorruptedImages()
        differences = [
            (what, mine, other)
            for what, mine, other in (
                ("data", data, self.data),
                ("layout", images.layout, theirs.layout),
                ("benchmark", images.benchmark, theirs.benchmark),
                ("preprocess", images.preprocess, theirs.preprocess),
                ("frost_source", images.frost_source, theirs.frost_source),
            )
            if mine is not None and other is not None and mine != other
        ]
        if differences:
            what, mine, other = differences[0]
            raise RobustnessError(
                f"baseline {self.name!r} was scored with {what} {other}, this evaluation with {what} {mine}: mCE "
                "divides errors on the same images; evaluate the baseline on these corruptions first"
            )

    def __post_init__(self) -> None:
        _check_fraction(f"baseline {self.name!r} clean_acc", self.clean_acc)

    @property
    def source(self) -> str:
        return check_table(self.rows)


def _ordered(rows: Iterable[RobustnessRow]) -> list[RobustnessRow]:
    """Rows in the canonical order: the 15 corruptions by family, the 4 extra ones, then any others by name;
    severity ascending."""
    rank = {name: index for index, name in enumerate(CORRUPTIONS + EXTRA_CORRUPTIONS)}
    return sorted(rows, key=lambda row: (rank.get(row.corruption, len(rank)), row.corruption, row.severity))


def check_table(rows: Sequence[RobustnessRow]) -> str:
    """Validate a table (non-empty, one source, no duplicates, every corruption at the same severities);
    return its source."""
    if not rows:
        raise RobustnessError("the robustness table is empty")
    sources = sorted({row.source for row in rows})
    if len(sources) > 1:
        raise RobustnessError(
            f"the robustness table mixes sources {sources}: numbers from real CIFAR-C files and generated "
            "corruptions must be summarised separately"
        )
    duplicates = sorted(key for key, count in Counter(row.key for row in rows).items() if count > 1)
    if duplicates:
        raise RobustnessError(f"the robustness table has duplicate (corruption, severity) rows: {duplicates}")
    corruptions = dict.fromkeys(row.corruption for row in rows)
    severities = {c: tuple(sorted(row.severity for row in rows if row.corruption == c)) for c in corruptions}
    if len(set(severities.values())) > 1:
        raise RobustnessError(f"every corruption needs the same severities; the table has {severities}")
    return sources[0]


def accuracy_grid(rows: Sequence[RobustnessRow]) -> tuple[list[str], list[int], np.ndarray]:
    """``(corruptions, severities, acc)`` with ``acc[i, j]`` the accuracy of corruption i at severity j."""
    check_table(rows)
    ordered = _ordered(rows)
    corruptions = list(dict.fromkeys(row.corruption for row in ordered))
    severities = sorted({row.severity for row in ordered})
    grid = np.array([row.acc for row in ordered], dtype=np.float64).reshape(len(corruptions), len(severities))
    return corruptions, severities, grid


def _family_of(rows: Iterable[RobustnessRow]) -> dict[str, str]:
    return {row.corruption: row.family for row in rows}


def _mean_block(acc: float) -> dict[str, float]:
    return {"acc": float(acc), "error": float(1.0 - acc)}


def robustness_summary(
    rows: Sequence[RobustnessRow], baseline: RobustnessBaseline | None = None, *, clean_acc: float | None = None
) -> RobustnessSummary:
    """Robustness (mean accuracy over all conditions), per-corruption / family / severity means and, against a
    baseline, mCE (and relative mCE when both clean accuracies are known), in percent."""
    source = check_table(rows)
    _check_fraction("clean_acc", clean_acc)
    corruptions, severities, grid = accuracy_grid(rows)
    family = _family_of(rows)
    families = list(dict.fromkeys(family[c] for c in corruptions))
    return RobustnessSummary(
        source=source,
        complete=set(corruptions) == set(CORRUPTIONS) and tuple(severities) == SEVERITIES,
        n_conditions=int(grid.size),
        robustness=float(grid.mean()),
        mean_error=float(1.0 - grid.mean()),
        clean_acc=clean_acc,
        per_corruption={c: {"family": family[c], **_mean_block(grid[i].mean())} for i, c in enumerate(corruptions)},
        per_family={f: _mean_block(grid[[family[c] == f for c in corruptions]].mean()) for f in families},
        per_severity={str(s): _mean_block(grid[:, j].mean()) for j, s in enumerate(severities)},
        **(_corruption_errors(rows, baseline, clean_acc) if baseline else {}),
    )


def _check_fraction(name: str, value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise RobustnessError(f"{name} must be a fraction in [0, 1] (not a percentage), got {value}")


def _baseline_grid(rows: Sequence[RobustnessRow], baseline: RobustnessBaseline) -> np.ndarray:
    """The baseline's accuracies on the same grid as ``rows``; errors name what is missing."""
    source, baseline_source = check_table(rows), baseline.source
    if baseline_source != source:
        raise RobustnessError(
            f"baseline {baseline.name!r} was evaluated on {baseline_source} corruptions, this model on {source} "
            "ones; mCE needs both on the same source"
        )
    reference = {row.key: row.acc for row in baseline.rows}
    missing = sorted(row.key for row in rows if row.key not in reference)
    if missing:
        raise RobustnessError(f"baseline {baseline.name!r} lacks (corruption, severity) results for {missing}")
    corruptions, severities, _ = accuracy_grid(rows)
    if baseline.severity_means and tuple(severities) != SEVERITIES:
        raise RobustnessError(
            f"baseline {baseline.name!r} holds each corruption's error averaged over severities 1..5, and this "
            f"evaluation scored severities {list(severities)}: score all five (robustness.severities=[1,2,3,4,5]), "
            "or use robustness.baseline=alexnet_hdvw (per severity)"
        )
    return np.array([[reference[(c, s)] for s in severities] for c in corruptions], dtype=np.float64)


def _corruption_errors(
    rows: Sequence[RobustnessRow], baseline: RobustnessBaseline, clean_acc: float | None
) -> dict[str, Any]:
    corruptions, _, grid = accuracy_grid(rows)
    error, base_error = 1.0 - grid, 1.0 - _baseline_grid(rows, baseline)
    denominator = base_error.sum(axis=1)
    if np.any(denominator <= 0):
        raise RobustnessError(f"baseline {baseline.name!r} makes no errors on some corruption; CE is undefined")
    ce = 100.0 * error.sum(axis=1) / denominator
    result = {
        "baseline": baseline.name,
        "baseline_clean_acc": baseline.clean_acc,
        "mce": float(ce.mean()),
        "ce": dict(zip(corruptions, ce.tolist())),
    }
    if clean_acc is None or baseline.clean_acc is None:
        return {**result, "relative_mce": None, "relative_ce": None}
    relative_denominator = (base_error - (1.0 - baseline.clean_acc)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.where(
            relative_denominator > 0, 100.0 * (error - (1.0 - clean_acc)).sum(axis=1) / relative_denominator, np.nan
        )
    defined = bool(np.all(relative_denominator > 0))  # else undefined: the baseline lost no accuracy there
    relative_mce = float(relative.mean()) if defined else None
    return {**result, "relative_mce": relative_mce, "relative_ce": dict(zip(corruptions, relative.tolist()))}


def clean_accuracy(metrics: Mapping[str, Any]) -> float | None:
    """The clean test accuracy recorded in a metrics.json payload (``test.acc`` or ``test["test/acc"]``)."""
    test = metrics.get("test") or {}
    value = test.get("acc", test.get("test/acc"))
    return None if value is None else float(value)


def robustness_record(rows: Sequence[RobustnessRow], summary: RobustnessSummary) -> RobustnessResult:
    """A table and its summary as a result (where the images came from is added by the evaluator)."""
    source = check_table(rows)
    if summary.source != source:
        raise RobustnessError(f"the summary is of {summary.source!r} corruptions, the table of {source!r}")
    table = tuple(Condition(**asdict(row)) for row in _ordered(rows))  # the record's rows: plain data
    return RobustnessResult(source=source, table=table, summary=summary)


def rows_from_record(record: RobustnessResult) -> list[RobustnessRow]:
    """The table of a robustness result as checked rows, against the result's source."""
    rows = [RobustnessRow(**asdict(condition)) for condition in record.table]
    if check_table(rows) != record.source:
        raise RobustnessError(f"the robustness record says source {record.source!r} but its rows disagree")
    return rows


def load_baseline(path: str | Path) -> RobustnessBaseline:
    """A baseline model's robustness table and clean accuracy from its metrics.json."""
    path = Path(path)
    if not path.is_file():
        raise RobustnessError(f"baseline metrics file {path} not found; evaluate the baseline's robustness first")
    metrics = read_json(path, error=RobustnessError)
    if "robustness" not in metrics:
        raise RobustnessError(f"{path} has no 'robustness' section; evaluate the baseline on corruptions first")
    try:
        record = RobustnessResult.from_payload(metrics["robustness"], f"{path}'s robustness")
        rows = rows_from_record(record)
    except CheckpointError as error:
        raise RobustnessError(str(error)) from None
    clean = record.summary.clean_acc  # on the images its corrupted sets hold (robustness.max_images); test.acc is
    return RobustnessBaseline(  # the whole split's, another set of images than its corrupted errors'
        name=str(metrics.get("model", path.parent.name)) + (" (EMA weights)" if metrics.get("ema") else ""),
        rows=tuple(rows),
        clean_acc=float(clean) if clean is not None else clean_accuracy(metrics),
        data=metrics.get("data"),
        images=record.images,
    )


def _format(value: float) -> str:
    return f"{value:.6f}"


def write_table_csv(rows: Sequence[RobustnessRow], path: str | Path) -> Path:
    """Long form: one line per (corruption, severity) with every metric."""
    check_table(rows)
    lines = []
    for row in _ordered(rows):
        metrics = (_format(row.acc), _format(row.error), _format(row.nll), _format(row.ece))
        values = (row.corruption, row.severity, row.family, row.source, row.n, *metrics)
        lines.append(dict(zip(TABLE_COLUMNS, values)))
    return write_csv(path, lines, TABLE_COLUMNS)


def write_accuracy_csv(rows: Sequence[RobustnessRow], path: str | Path) -> Path:
    """Wide accuracy table: one line per corruption, one column per severity, a mean column and a mean line."""
    corruptions, severities, grid = accuracy_grid(rows)
    family = _family_of(rows)
    columns = ("corruption", "family", *(f"severity_{s}" for s in severities), "mean")
    lines = [
        dict(zip(columns, (corruption, family[corruption], *map(_format, accs), _format(accs.mean()))))
        for corruption, accs in zip(corruptions, grid)
    ]
    lines.append(dict(zip(columns, ("mean", "", *map(_format, grid.mean(axis=0)), _format(grid.mean())))))
    return write_csv(path, lines, columns)
