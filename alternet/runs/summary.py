"""A finished run's summary, ``metrics.json``: written once at the end of training, read as fields by every reader
(the console, the sweep summary, the report, export and the model card, resume)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, is_integer
from ..files import read_json
from .results import READERS, OodResult, Record, RobustnessResult, Selective, TestImages, check_sections, payload_of


@dataclass(frozen=True)
class OptimizedMetric:
    """The metric a sweeper optimises (``optimized_metric``) and this run's value of it."""

    name: str
    value: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


# keys written only when the run has them (older runs and runs without EMA, a clean training subset, skipped images
# or an evaluation after training leave them out)
_WRITTEN_WHEN_SET = (
    "test_ema",
    "test_images",
    "test_split",
    "precision",
    "test_flip",
    "train_clean",
    "skipped_images",
    "global_batch",
    "lr",
    "calibration",
    "selective",
    "ood",
    "robustness",
    "evaluation_dir",
)
_REQUIRED = ("model", "data", "test", "epochs", "global_step")  # every training summary ever written has them


@dataclass(frozen=True)
class RunSummary:
    """A finished run's ``metrics.json`` (written by :meth:`RunDir.write_summary`). The test metrics use the names
    ``alternet evaluate`` uses (``test.acc``, ``test.nll``, ...; ``test_ema.*`` with EMA). :meth:`to_json` is the
    object the file holds."""

    model: str
    data: str
    test: Record
    test_ema: Record | None = None
    test_images: TestImages | None = None  # how many test images were scored, of the split's
    test_split: str | None = None  # "validation" where the test is the validation split (ImageNet's val/), else "test"
    precision: str | None = None  # what training and its test ran at (bf16-mixed, 32-true...); calibration: 32
    test_flip: bool | None = None  # the test scored each image's and its mirror's mean logits (recipe.test_flip);
    # None: a summary of a version before it was recorded
    train_clean: Record | None = None  # the last epoch's clean training metrics (data.train_clean_size)
    train_images: int | None = None
    data_subset: float | None = None
    epochs: int = 0
    global_step: int = 0
    best_val_score: float | None = None
    best_epoch: int | None = None
    monitor: str | None = None
    tested_checkpoint: str = "final weights"  # the best by the monitor; the last where the test is the validation
    best_checkpoint: str | None = None
    last_checkpoint: str | None = None
    run_dir: str | None = None
    train_images_per_sec: float | None = None
    global_batch: int | None = None  # images per optimizer step: per-device batch x processes x accumulated batches
    lr: float | None = None  # the peak learning rate: recipe.optimizer.lr scaled to the global batch
    skipped_images: int | None = None  # reads of unreadable files skipped on rank 0, every epoch's (data.skip_corrupt)
    optimized_metric: OptimizedMetric | None = None
    calibration: Record | None = None  # evaluate.after_training: the evaluation's test record
    selective: Selective | None = None  # evaluate.after_training: selective classification (AURC, AUGRC, ...)
    ood: OodResult | None = None  # evaluate.after_training with evaluate.ood.root
    robustness: RobustnessResult | None = None  # evaluate.after_training
    evaluation_dir: str | None = None
    curves: str | None = None
    wall_seconds: float | None = None  # the run's, every session of it (a resumed run's earlier ones too)
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as they were

    # what a split measured ---------------------------------------------------------------------------------------

    def split_metrics(self, split: str) -> Record:
        """The metrics of one split (``test``, ``test_ema``, ``train_clean``), empty when the run has none."""
        value = getattr(self, split, None) if split in _SPLITS else self.extra.get(split)
        return dict(value) if isinstance(value, Mapping) else {}

    def metric(self, name: str) -> Any:
        """A reported metric by name: the checkpoint monitor (its best value) or ``split/metric``; None when the
        run did not record it."""
        if name == self.monitor:
            return self.best_val_score
        split, _, metric = name.partition("/")
        return self.split_metrics(split).get(metric)

    # the file ----------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``metrics.json``, in the order the keys have always been written."""
        return payload_of(self, lambda name: name not in _WRITTEN_WHEN_SET)

    @classmethod
    def from_json(cls, path: str | Path) -> RunSummary:
        """Read a run's ``metrics.json``; an older file without the newer keys reads with their defaults, a file
        that is not a training run's summary (an evaluation's report, another JSON object) is refused in one line
        naming it."""
        return cls.from_payload(read_json(path, error=CheckpointError), where=str(path))

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], *, where: str = "the summary") -> RunSummary:
        missing = [key for key in _REQUIRED if key not in payload]
        if missing or not isinstance(payload.get("test"), Mapping):
            lacks = f"no {', '.join(missing)}" if missing else "its 'test' is not a mapping"
            raise CheckpointError(f"{where} is not a training run's metrics.json ({lacks})")
        advice = (
            "restore the file from the run's own copy (or evaluate its checkpoint again), or move the job out of the "
            "sweep"
        )
        check_sections(payload, _SPLITS, where, advice)
        counts = [
            f"{key}={payload[key]!r}"
            for key in _COUNTS
            if payload.get(key) is not None and not is_integer(payload[key], 0)
        ]
        if counts:
            raise CheckpointError(
                f"{where} is malformed: {', '.join(counts)} is no count >= 0; restore the file from the run's own "
                "copy, or move the job out of the sweep"
            )
        known = {item.name for item in fields(cls)} - {"extra"}
        values = {key: value for key, value in payload.items() if key in known}
        try:
            values |= {key: read(values[key]) for key, read in READERS.items() if values.get(key) is not None}
        except CheckpointError as error:
            raise CheckpointError(f"{where} is malformed: {error}") from None
        optimized = values.get("optimized_metric")
        if isinstance(optimized, Mapping) and "name" in optimized:
            values["optimized_metric"] = OptimizedMetric(str(optimized["name"]), optimized.get("value"))
        elif optimized is not None:
            values["optimized_metric"] = None
        extra = {key: value for key, value in payload.items() if key not in known}
        return cls(**values, extra=extra)


_SPLITS = ("test", "test_ema", "train_clean")


_COUNTS = ("epochs", "global_step", "train_images")
