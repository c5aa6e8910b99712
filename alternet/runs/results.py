"""An evaluation's results as records: what ``alternet evaluate`` writes into its ``metrics.json`` and what a training
run's summary holds after ``evaluate.after_training`` (:class:`~alternet.runs.summary.RunSummary`), read by field by
the console, the model card, W&B and the report. Each record's ``to_json`` is the object the file holds (the keys
it has always had) and ``from_payload`` reads one back (``EvaluationReport.from_json(path)`` reads the file, as
``RunSummary.from_json`` does); a file missing a key a record needs is refused in one line naming it. A split's
metrics stay a :data:`Record` keyed by the metric table (:mod:`alternet.metrics.table`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ..errors import CheckpointError
from ..files import read_json

SCHEMA_VERSION = 1  # of a robustness result
Record = dict[str, Any]  # a split's metrics (``{"acc": ..., "nll": ...}``), or a keyed table of them
R = TypeVar("R")


def _read(cls: type[R], payload: Any, what: str, **values: Any) -> R:
    """``cls`` from a mapping: its fields from ``payload`` (``values`` given instead of some), a missing required
    one refused in one line."""
    if not isinstance(payload, Mapping):
        raise CheckpointError(f"{what} is not a mapping: the file is not an alternet evaluation's")
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    values |= {name: payload[name] for name in names if name in payload and name not in values}
    try:
        return cls(**values)
    except TypeError:
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]  # type: ignore[arg-type]
        missing = [name for name in required if name not in values]
        raise CheckpointError(f"{what} lacks {', '.join(missing)}: the file is not an alternet evaluation's") from None


class _Flat:
    """A record whose file object is its fields, as they are (``WHAT``: its key, for the messages)."""

    WHAT: ClassVar[str]

    def to_json(self) -> Record:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_payload(cls, payload: Any, what: str | None = None) -> Any:
        return _read(cls, payload, what or cls.WHAT)


@dataclass(frozen=True)
class Selective(_Flat):
    """Selective classification on the test split (:func:`alternet.metrics.uncertainty.selective_metrics`)."""

    WHAT: ClassVar[str] = "selective"
    aurc: float
    augrc: float
    acc_cov90: float
    acc_cov95: float


@dataclass(frozen=True)
class Temperature(_Flat):
    """Temperature scaling: the temperature fitted on the validation split and the test metrics it gives."""

    WHAT: ClassVar[str] = "temperature_scaling"
    temperature: float
    test: Record


@dataclass(frozen=True)
class OodScores:
    """One score's separation of the test images from the out-of-distribution ones."""

    auroc: float
    aupr_in: float
    aupr_out: float
    fpr95: float


@dataclass(frozen=True)
class OodResult:
    """Out-of-distribution detection: the set scored and each score's separation (``msp``, ``energy``)."""

    root: str
    layout: str  # the set's file format: cifar10 / cifar100 / folder
    n_out: int
    n_in: int
    scores: dict[str, OodScores]

    def to_json(self) -> Record:
        head = {"root": self.root, "layout": self.layout, "n_out": self.n_out, "n_in": self.n_in}
        return head | {name: asdict(scores) for name, scores in self.scores.items()}

    @classmethod
    def from_payload(cls, payload: Any) -> OodResult:
        if not isinstance(payload, Mapping):
            return _read(cls, payload, "ood")  # refused in one line
        scores = {k: _read(OodScores, v, f"ood.{k}") for k, v in payload.items() if isinstance(v, Mapping)}
        return _read(cls, payload, "ood", scores=scores)


@dataclass(frozen=True)
class Condition:
    """One corruption at one severity: its metrics on the corrupted images (accuracy a fraction)."""

    corruption: str
    severity: int
    acc: float
    nll: float
    ece: float
    n: int
    source: str  # real | generated
    family: str = ""

    @property
    def key(self) -> tuple[str, int]:
        return self.corruption, self.severity

    @property
    def error(self) -> float:
        return 1.0 - self.acc


@dataclass(frozen=True)
class RobustnessSummary(_Flat):
    """A robustness table's summary (:func:`alternet.evaluation.robustness.robustness_summary`): the mean accuracy
    over its conditions, the means per corruption, family and severity (``{"acc", "error"}`` each), and against a
    baseline mCE and relative mCE in percent (None without one)."""

    WHAT: ClassVar[str] = "robustness.summary"
    source: str
    complete: bool  # the 15 corruptions at the 5 severities
    n_conditions: int
    robustness: float
    mean_error: float
    clean_acc: float | None
    per_corruption: dict[str, Record]
    per_family: dict[str, Record]
    per_severity: dict[str, Record]
    baseline: str | None = None
    baseline_clean_acc: float | None = None
    mce: float | None = None
    relative_mce: float | None = None
    ce: dict[str, float] | None = None
    relative_ce: dict[str, float] | None = None


@dataclass(frozen=True)
class CorruptedImages:
    """Where a robustness result's images came from and how they were read (:class:`CorruptedSets`)."""

    layout: str | None = None  # cifar-c | imagenet-c
    root: str | None = None
    benchmark: str | None = None
    preprocess: str | None = None
    synthetic_frost: bool = False
    frost_source: str | None = None
    max_images: int | None = None
    images_per_condition: int | None = None


@dataclass(frozen=True)
class RobustnessResult:
    """Corruption robustness: the table of conditions, its summary, where the images came from, and the corruptions
    beyond the 15 (``extra``: a result of their own, never in the summary)."""

    source: str
    table: tuple[Condition, ...]
    summary: RobustnessSummary
    images: CorruptedImages | None = None  # None: the extra corruptions' result (the images are the main one's)
    precision: str | None = None
    extra: RobustnessResult | None = None
    schema: int = SCHEMA_VERSION

    def to_json(self) -> Record:
        payload: Record = {
            "schema": self.schema,
            "source": self.source,
            "table": [asdict(row) for row in self.table],
            "summary": self.summary.to_json(),
        }
        if self.images is None:
            return payload
        extra = None if self.extra is None else self.extra.to_json()
        return payload | asdict(self.images) | {"precision": self.precision, "extra": extra}

    @classmethod
    def from_payload(cls, payload: Any, what: str = "robustness") -> RobustnessResult:
        if not isinstance(payload, Mapping) or "table" not in payload or "source" not in payload:
            raise CheckpointError(f"{what} needs 'source' and 'table' keys: the file is not an alternet evaluation's")
        schema = payload.get("schema", SCHEMA_VERSION)
        if not isinstance(schema, int) or isinstance(schema, bool) or schema > SCHEMA_VERSION:
            raise CheckpointError(
                f"{what} is of schema {schema!r}, which this alternet (schema {SCHEMA_VERSION}) does not read: a newer "
                "alternet wrote it; upgrade alternet to read it"
            )
        if not isinstance(payload["table"], list):
            raise CheckpointError(f"{what}.table is not a list of conditions: the file is not an alternet evaluation's")
        table = tuple(_read(Condition, row, f"a row of {what}.table") for row in payload["table"])
        summary = RobustnessSummary.from_payload(payload.get("summary"), f"{what}.summary")
        images = None if "layout" not in payload else _read(CorruptedImages, payload, what)
        extra = payload.get("extra")
        extra = None if not extra else cls.from_payload(extra, f"{what}.extra")
        return _read(cls, payload, what, table=table, summary=summary, images=images, extra=extra)


@dataclass(frozen=True)
class TestImages(_Flat):
    """How many test images were scored, of how many (fewer with ``max_images``: a quick look)."""

    __test__ = False  # not a pytest class
    WHAT: ClassVar[str] = "test_images"
    scored: int
    of: int

    @property
    def partial(self) -> bool:
        """Fewer than the split's images (``max_images``, ``trainer.limit_test_batches``)."""
        return self.scored < self.of


@dataclass(frozen=True, kw_only=True)
class EvaluationReport:
    """One model's evaluation, ``metrics.json`` of ``alternet evaluate`` (and of a run's ``eval/``): what was scored
    (``checkpoint``, ``source``, ``ema``, ``test_flip`` when the evaluation set them), its test metrics and every
    result asked for. Keys this version does not know are kept in ``extra``."""

    checkpoint: str | None = None
    source: str | None = None
    model: str
    data: str
    ema: bool | None = None
    test_flip: bool | None = None
    preprocessing: Record | None = None  # the test images' preprocessing as applied
    precision: str | None = None  # the clean pass's (evaluate's precision=)
    ece_bins: int | None = None  # the equal-width bins of test's ece (calibration.n_bins)
    test: Record
    selective: Selective | None = None
    temperature_scaling: Temperature | None = None
    loader: Record | None = None
    test_images: TestImages | None = None
    ood: OodResult | None = None
    robustness: RobustnessResult | None = None
    files: list[str] = field(default_factory=list)
    analysis: dict[str, Record] | None = None  # the analyses run by ``analysis=[...]``, by name
    extra: Record = field(default_factory=dict)

    def to_json(self) -> Record:
        return payload_of(self, lambda name: name in _ALWAYS)

    def moved(self, src: Path, dst: Path) -> EvaluationReport:
        """The report with its files (the analyses' too) under ``src`` named under ``dst``, where they were moved."""

        def at(path: str) -> str:
            return str(dst / Path(path).relative_to(src)) if Path(path).is_relative_to(src) else path

        analysis = self.analysis and {
            name: {**result, "files": [at(path) for path in result["files"]]} if "files" in result else result
            for name, result in self.analysis.items()
        }
        return replace(self, files=[at(path) for path in self.files], analysis=analysis)

    @classmethod
    def from_json(cls, path: str | Path) -> EvaluationReport:
        """An evaluation's ``metrics.json`` (``alternet evaluate``'s, or a run's ``eval/``), refused in one line naming
        the file when it is not one."""
        payload = read_json(path, error=CheckpointError)  # its errors name the file
        try:
            return cls.from_payload(payload)
        except CheckpointError as error:
            raise CheckpointError(f"{path}: {error}") from None

    @classmethod
    def from_payload(cls, payload: Any) -> EvaluationReport:
        """The object of an evaluation's ``metrics.json``."""
        if not isinstance(payload, Mapping):
            raise CheckpointError("an evaluation's metrics.json is not a mapping")
        if "global_step" in payload and "epochs" in payload:  # both written by every training summary, never here
            raise CheckpointError(
                "a training run's summary, not an evaluation's metrics.json: read it with RunSummary.from_json, or "
                "its evaluation in the run's eval/"
            )
        check_sections(payload, ("test",), "the evaluation", "evaluate the checkpoint again")
        typed = {key: read(payload[key]) for key, read in READERS.items() if payload.get(key) is not None}
        known = {item.name for item in fields(cls)}
        extra = {key: value for key, value in payload.items() if key not in known}
        return _read(cls, payload, "the evaluation", **typed, extra=extra)


# the ranges of the metrics a summary or an evaluation holds (a share, or Brier's [0, 2], or a loss); another metric
# is not checked
_RANGES = {"nll": (0.0, math.inf), "brier": (0.0, 2.0)} | dict.fromkeys(
    ("acc", "top5", "ece", "acc90", "unc90", "freq90", "ece_adaptive", "ece_classwise"), (0.0, 1.0)
)


def check_sections(payload: Mapping[str, Any], sections: tuple[str, ...], where: str, advice: str) -> None:
    """The metric sections of a metrics.json (``test``, ``test_ema``...): each a mapping of numbers or nulls (a NaN,
    written strictly) within their ranges, the numbers a report computes with; refused in one line naming the file
    (``where``) and what to do (``advice``)."""
    for name in sections:
        section = payload.get(name)
        if section is not None and not isinstance(section, Mapping):
            raise CheckpointError(f"{where} is malformed: its {name!r} is not a mapping of metrics")
        bad = [f"{name}.{k}={v!r}" for k, v in (section or {}).items() if not _number_or_null(v)]
        if bad:
            raise CheckpointError(f"{where} is malformed: {', '.join(bad[:3])} is not a number; {advice}")
        impossible = [f"{name}.{k}={v!r}" for k, v in (section or {}).items() if not _possible(k, v)]
        if impossible:
            raise CheckpointError(
                f"{where} is malformed: {', '.join(impossible[:3])} is out of its range (a share in [0, 1], a loss "
                f">= 0); {advice}"
            )


def _possible(name: str, value: Any) -> bool:
    low, high = _RANGES.get(name, (-math.inf, math.inf))
    return value is None or low <= value <= high


def _number_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool))


_ALWAYS = ("model", "data", "test", "files")  # written even when empty
READERS = {  # the typed parts of a metrics.json, by key (a run's summary has some of them)
    "selective": Selective.from_payload,
    "temperature_scaling": Temperature.from_payload,
    "test_images": TestImages.from_payload,
    "ood": OodResult.from_payload,
    "robustness": RobustnessResult.from_payload,
}


def payload_of(record: Any, written_when_none: Callable[[str], bool]) -> Record:
    """A record's JSON object: its fields in order (a typed part as its ``to_json``, a None only where
    ``written_when_none`` says), then the keys it read and does not know (``extra``)."""
    payload: Record = {}
    for item in fields(record):
        value = getattr(record, item.name)
        if item.name == "extra" or (value is None and not written_when_none(item.name)):
            continue
        payload[item.name] = value.to_json() if hasattr(value, "to_json") else value
    return payload | {k: v for k, v in record.extra.items() if k not in payload}
