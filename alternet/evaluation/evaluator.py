"""Score one model: calibration and selective classification on the test split, optional temperature scaling,
out-of-distribution detection, corruption robustness;
write metrics.json, predictions.npz, CSV tables and plots, and log them to W&B when a run is active."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn
from torch.utils.data import Dataset, Subset

from ..data import ImageDataModule
from ..data.corrupted.names import is_benchmark
from ..data.files.images import UnreadableImage
from ..data.workers import loader_workers
from ..errors import AlternetWarning, CheckpointError, ConfigValueError
from ..files import atomic_write, write_json
from ..metrics import apply_temperature, calibration_metrics, fit_temperature, reliability_bins, softmax
from ..metrics.calibration import TEMPERATURE_BOUNDS, confidence_and_correct, nll_per_sample
from ..metrics.uncertainty import (
    adaptive_ece,
    classwise_ece,
    ood_metrics,
    ood_scores,
    risk_coverage,
    selective_metrics,
)
from ..progress import Progress
from ..runs.directories import ANALYSIS_DIR, METRICS_FILE, PREDICTIONS_FILE
from ..runs.results import (
    EvaluationReport,
    OodResult,
    OodScores,
    Record,
    RobustnessResult,
    Selective,
    Temperature,
    TestImages,
)
from .baselines import resolve_baseline
from .config import BUILTIN, EvaluationConfig
from .corrupted import CorruptedSets, open_corrupted_sets, source_and_benchmark
from .inference import AUTOCAST, choose_device, device_count, fast_precision, predict_sets
from .ood import OodSet, open_ood_set
from .plots import corruption_heatmap, ood_histograms, reliability_diagram, risk_coverage_plot
from .robustness import (
    FAMILY_OF,
    RobustnessBaseline,
    RobustnessError,
    RobustnessRow,
    robustness_record,
    robustness_summary,
    write_accuracy_csv,
    write_table_csv,
)

ROBUST_DATA = ("cifar10", "cifar100")
PRODUCTS = frozenset(  # every file an evaluation writes into its folder (an earlier one's are replaced whole)
    {
        METRICS_FILE,
        PREDICTIONS_FILE,
        "reliability.png",
        "reliability_temperature.png",
        "risk_coverage.png",
        "ood_scores.png",
        "robustness_table.csv",
        "robustness_accuracy.csv",
        "robustness_extra_table.csv",
        "robustness_heatmap.png",
        ANALYSIS_DIR,
    }
)


class Evaluator:
    """Runs every requested evaluation of one model against one data module."""

    def __init__(
        self,
        model: nn.Module,
        datamodule: ImageDataModule,
        config: EvaluationConfig,
        out_dir: Path,
        label: str,
        class_names: Sequence[str] | None = None,
    ):
        """``class_names``: the model's classes in its order (a checkpoint's ``data.class_names``), checked against
        an ImageNet-C tree's class folders; without them only the class count is checked."""
        self.model = model.eval()
        self.class_names = class_names
        self.datamodule = datamodule
        self.config, self.label = as_scored(config), label
        self.out_dir = Path(out_dir)
        self.device = choose_device(config.device)
        self.autocast = AUTOCAST[str(config.precision)]
        robust_precision = str(config.robustness.precision)
        self.robust_precision = fast_precision(self.device) if robust_precision == "auto" else robust_precision
        self.robust_autocast = AUTOCAST[self.robust_precision]
        self.n_bins = config.calibration.n_bins
        self.num_workers = loader_workers(config.num_workers)
        self.files: list[Path] = []

    def _predict_sets(
        self, datasets: Sequence[Dataset], names: Sequence[str], final_lines: bool = True, fast: bool = False
    ) -> Iterator[tuple[np.ndarray, ...]]:
        """Logits of each set; ``fast``: the robustness pass's precision, in channels_last when reduced."""
        autocast = self.robust_autocast if fast else self.autocast
        return predict_sets(
            self.model,
            datasets,
            device=self.device,
            batch_size=self.config.batch_size,
            autocast=autocast,
            num_workers=self.num_workers,
            labels=names,
            final_lines=final_lines,
            channels_last=fast and autocast is not None,
        )

    def _predict(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """A split's logits and labels; the test split's first ``max_images`` only, when set."""
        dataset = self.datamodule.splits[split]
        if split == "test" and self.config.max_images is not None and self.config.max_images < len(dataset):
            dataset = Subset(dataset, range(self.config.max_images))
        ((logits, labels),) = self._predict_sets([dataset], [split])
        bad = int((~np.isfinite(logits).all(axis=1)).sum())
        if bad:
            raise CheckpointError(
                f"{self.label} gives non-finite logits for {bad} of the {len(logits)} {split} images at precision "
                f"{self.config.precision}: a diverged checkpoint, or an overflow in reduced precision (precision=32)"
            )
        return logits, labels

    def _file(self, name: str) -> Path:
        """``name`` in ``out_dir``, recorded among the evaluation's files (one of :data:`PRODUCTS`)."""
        assert name in PRODUCTS, f"{name} is not among the evaluation's PRODUCTS"
        self.files.append(self.out_dir / name)
        return self.out_dir / name

    # calibration ----------------------------------------------------------------------------

    def calibration(self) -> tuple[Record, Selective, Temperature | None, dict[str, np.ndarray]]:
        """The test split: calibration (equal-width, equal-mass and classwise ECE among them), selective
        classification, and temperature scaling when asked."""
        logits, labels = self._predict("test")
        probs = softmax(logits)
        test = self._split_metrics(probs, labels, logits)
        bins = reliability_bins(probs, labels, self.n_bins)
        reliability_diagram(bins, self._file("reliability.png"), title=self._title("test"))
        selective = Selective(**selective_metrics(probs, labels))
        curve = risk_coverage(probs, labels)
        risk_coverage_plot(*curve, selective, self._file("risk_coverage.png"), self._title("test"))
        arrays = {"logits": logits, "probs": probs.astype(np.float32), "labels": labels}
        scaled = None
        if self.config.calibration.temperature_scaling:
            scaled, arrays["val/logits"], arrays["val/labels"] = self._temperature(logits, labels)
        return test, selective, scaled, arrays

    def _split_metrics(self, probs: np.ndarray, labels: np.ndarray, logits: np.ndarray) -> dict[str, float]:
        return calibration_metrics(probs, labels, self.n_bins, logits=logits) | {
            "ece_adaptive": adaptive_ece(probs, labels, self.n_bins),
            "ece_classwise": classwise_ece(probs, labels, self.n_bins),
        }

    def _temperature(self, logits: np.ndarray, labels: np.ndarray) -> tuple[Temperature, np.ndarray, np.ndarray]:
        """The temperature fitted on the validation split, the test metrics it gives, and the validation logits and
        labels it was fitted on (kept in predictions.npz; :func:`open_sources` checked there is one)."""
        val_logits, val_labels = self._predict("val")
        temperature = fit_temperature(val_logits, val_labels)
        if any(math.isclose(temperature, bound) for bound in TEMPERATURE_BOUNDS):  # its NLL still fell there
            wrong = int((val_logits.argmax(axis=1) != val_labels).sum())
            warnings.warn(
                f"temperature scaling stopped at its bound T={temperature:g}: the validation split ({len(val_labels)} "
                f"images, {wrong} misclassified) does not determine a temperature, so the temperature-scaled numbers "
                "mean little (a split without errors always asks for T -> 0); give it a larger validation split "
                "(data.val_size) or leave calibration.temperature_scaling off",
                AlternetWarning,
                stacklevel=2,
            )
        scaled = apply_temperature(logits, temperature)
        bins = reliability_bins(scaled, labels, self.n_bins)
        title = self._title(f"test, T={temperature:.3f}")
        reliability_diagram(bins, self._file("reliability_temperature.png"), title=title)
        scaled_logits = logits.astype(np.float64) / temperature  # as apply_temperature divides: recomputed to the bit
        record = Temperature(temperature, self._split_metrics(scaled, labels, scaled_logits))
        return record, val_logits, val_labels

    # out of distribution --------------------------------------------------------------------

    def ood(self, ood_set: OodSet, logits: np.ndarray) -> tuple[OodResult, dict[str, np.ndarray]]:
        """The test split's scores against the out-of-distribution images'."""
        try:
            ((outside_logits, _),) = self._predict_sets([ood_set.dataset], ["ood"])
        except UnreadableImage as error:  # ood.root's images are read whole: no skipping
            raise error.advising(f"Replace or delete the file in ood.root={ood_set.root}") from None
        inside, outside = ood_scores(logits), ood_scores(outside_logits)
        scores = {name: OodScores(**ood_metrics(inside[name], outside[name])) for name in inside}
        record = OodResult(str(ood_set.root), ood_set.layout, len(ood_set.dataset), len(logits), scores)
        path = self._file("ood_scores.png")
        ood_histograms(inside, outside, record, path, self._title(f"vs {ood_set.root.name}"))
        return record, {f"ood/{name}": scores for name, scores in outside.items()}  # float64: the metrics' own

    def _title(self, what: str) -> str:
        return f"{self.label} on {self.datamodule.name} ({what})"

    # robustness -----------------------------------------------------------------------------

    def robustness(
        self,
        sets: CorruptedSets,
        baseline: RobustnessBaseline | None,
        clean_logits: np.ndarray,
        clean_labels: np.ndarray,
    ) -> tuple[RobustnessResult, dict[str, np.ndarray]]:
        """Score every condition; the 15 benchmark corruptions make the summary (mean, mCE), any extra ones a
        separate ``extra`` section."""
        n = sets.clean_images  # the clean reference uses the same images as the corrupted sets
        _, correct = confidence_and_correct(softmax(clean_logits[:n]), clean_labels[:n])  # as test.acc counts it
        clean_acc = float(correct.mean())
        names = [f"{sets.source} {c}/{s}" for c, s in sets.conditions]
        rows, predictions = [], {}
        shown = Progress(len(names), sets.describe(), unit="sets", every=0.0)
        scored = zip(sets.conditions, self._predict_sets(sets.datasets, names, final_lines=False, fast=True))
        for (corruption, severity), (logits, labels) in scored:
            probs = softmax(logits)
            metrics = calibration_metrics(probs, labels, self.n_bins, logits=logits)
            family = FAMILY_OF.get(corruption, "extra")
            rows.append(RobustnessRow.from_metrics(corruption, severity, metrics, len(labels), sets.source, family))
            predictions |= _compact(f"{corruption}/{severity}", probs, logits, labels)  # not 75 probability matrices
            running = sum(row.acc for row in rows) / len(rows)
            shown.update(note=f"{corruption}/{severity} acc {metrics['acc']:.4f}, running mean {running:.4f}")
        shown.close(note=f"mean acc {sum(row.acc for row in rows) / len(rows):.4f}")
        benchmark = [row for row in rows if is_benchmark(row.corruption)]
        extra = [row for row in rows if not is_benchmark(row.corruption)]
        summary = robustness_summary(benchmark, baseline, clean_acc=clean_acc)
        beyond = robustness_record(extra, robustness_summary(extra)) if extra else None
        record = robustness_record(benchmark, summary)
        record = replace(record, images=sets.images(), precision=self.robust_precision, extra=beyond)
        write_table_csv(benchmark, self._file("robustness_table.csv"))
        write_accuracy_csv(benchmark, self._file("robustness_accuracy.csv"))
        if extra:
            write_table_csv(extra, self._file("robustness_extra_table.csv"))
        title = f"{self._title(f'{sets.source} corruptions')}: mean acc {summary.robustness:.1%}"
        heatmap = self._file("robustness_heatmap.png")
        corruption_heatmap(benchmark, heatmap, clean_acc=clean_acc, title=title)
        return record, predictions

    # everything -----------------------------------------------------------------------------

    def run(self, meta: Mapping[str, Any]) -> EvaluationReport:
        """Every evaluation asked for, written into ``out_dir`` (metrics.json, predictions.npz, tables, plots);
        ``meta``: what was scored (:class:`~alternet.runs.results.EvaluationReport`'s ``model``, ``data``,
        ``checkpoint`` ...)."""
        robust, ood = open_sources(self.config, self.datamodule, self.class_names)  # errors before any work
        self.out_dir.mkdir(parents=True, exist_ok=True)
        test, selective, scaled, arrays = self.calibration()
        ood_result = robust_result = None
        if ood is not None:
            ood_result, scores = self.ood(ood, arrays["logits"])
            arrays |= scores
        if robust is not None:
            robust_result, corrupted = self.robustness(*robust, arrays["logits"], arrays["labels"])
            arrays |= corrupted
        write_npz(self._file(PREDICTIONS_FILE), arrays)
        metrics_path = self._file(METRICS_FILE)
        report = EvaluationReport(
            **{"model": self.label, "data": self.datamodule.name} | dict(meta),
            test=test,
            preprocessing=preprocessing_used(self.datamodule),
            precision=str(self.config.precision),
            ece_bins=self.n_bins,
            selective=selective,
            temperature_scaling=scaled,
            loader={"num_workers": self.num_workers, "devices": device_count(self.device)},
            test_images=TestImages(len(arrays["labels"]), len(self.datamodule.splits["test"])),  # max_images
            ood=ood_result,
            robustness=robust_result,
            files=[str(path) for path in self.files],
        )
        write_json(metrics_path, report.to_json())
        return report


def preprocessing_used(datamodule: ImageDataModule) -> dict[str, Any]:
    """The test images' preprocessing as this evaluation applies it (recorded in metrics.json): the input size and
    normalisation, and for image files the resize, crop and interpolation (arrays are scored whole)."""
    used: dict[str, Any] = {"image_size": datamodule.image_size}
    used |= {key: [float(v) for v in getattr(datamodule, key)] for key in ("mean", "std")}
    for key in ("crop_pct", "crop_mode", "interpolation"):
        if hasattr(datamodule, key):
            used[key] = getattr(datamodule, key)
    return used


def robustness_enabled(config: EvaluationConfig, datamodule: ImageDataModule) -> bool:
    enabled = config.robustness.enabled
    if enabled == "auto":  # CIFAR, or any data set whose corrupted files are given
        return datamodule.name in ROBUST_DATA or bool(config.robustness.root)
    return bool(enabled)


def open_robustness(
    config: EvaluationConfig, datamodule: ImageDataModule, class_names: Sequence[str] | None
) -> tuple[CorruptedSets, RobustnessBaseline | None]:
    """The corrupted sets and the baseline, opened and checked against each other before any inference."""
    cfg = config.robustness
    source, benchmark = source_and_benchmark(cfg, datamodule)
    baseline = resolve_baseline(cfg.baseline, benchmark, source)
    if baseline is not None and baseline.source != source:
        raise RobustnessError(
            f"baseline {baseline.name!r} was evaluated on {baseline.source} corruptions, these are {source}; "
            "mCE needs both on the same source"
        )
    sets = open_corrupted_sets(cfg, datamodule, class_names)
    if baseline is not None:
        held = {row.key for row in baseline.rows}
        missing = [f"{c}/{s}" for c, s in sets.conditions if is_benchmark(c) and (c, s) not in held]
        if missing:
            raise RobustnessError(f"baseline {baseline.name!r} lacks results for {', '.join(missing[:5])}")
        check_same_images(sets, baseline)
        if not baseline.published:
            baseline.check_same_benchmark(datamodule.name, sets.images())
    return sets, baseline


def check_same_images(sets: CorruptedSets, baseline: RobustnessBaseline) -> None:
    """An evaluation's own baseline (a metrics.json) scored the same number of images of each condition as these
    sets hold, the first N of the same files: mCE compares errors on the same images. A built-in table of published
    results is of the whole sets."""
    if baseline.published:
        return
    held = {row.key: row.n for row in baseline.rows}
    for (corruption, severity), dataset in zip(sets.conditions, sets.datasets):
        theirs, ours = held.get((corruption, severity)), len(dataset)
        if theirs is not None and theirs != ours:
            raise RobustnessError(
                f"baseline {baseline.name!r} was scored on {theirs} images of {corruption}/{severity}, this "
                f"evaluation scores {ours}: mCE compares errors on the same images; evaluate both with the same "
                "max_images and robustness.max_images"
            )


def open_sources(
    config: EvaluationConfig, datamodule: ImageDataModule, class_names: Sequence[str] | None
) -> tuple[tuple[CorruptedSets, RobustnessBaseline | None] | None, OodSet | None]:
    """What the evaluation reads besides the model's own test split, opened and checked: the corrupted sets and
    their baseline (when robustness is on), and the OOD set (when ``ood.root`` is set)."""
    check_temperature_split(config, datamodule)
    enabled, cfg = robustness_enabled(config, datamodule), config.robustness
    if not enabled and cfg.baseline:
        why = f"on {datamodule.name} (robustness.enabled=auto scores CIFAR, or the files of robustness.root)"
        tables = BUILTIN.get(cfg.baseline)
        advice = (
            f", and it has tables for {', '.join(tables)} only: set robustness.root to ImageNet-C's files for an "
            "ImageNet model, or leave it out"
            if tables and datamodule.name not in ROBUST_DATA
            else "; set robustness.enabled=true to score generated corruptions against it"
        )
        warnings.warn(
            f"robustness.baseline={cfg.baseline} does nothing: no corruption is scored "
            f"{why if cfg.enabled == 'auto' else 'with robustness.enabled=false'}{advice}",
            AlternetWarning,
            stacklevel=2,
        )
    robust = open_robustness(config, datamodule, class_names) if enabled else None
    return robust, open_ood_set(config.ood, datamodule) if config.ood.root else None


def check_temperature_split(config: EvaluationConfig, datamodule: ImageDataModule) -> None:
    """Temperature scaling fits on the validation split: refused before any work without one, or where the test
    split is that split."""
    if config.calibration.temperature_scaling and not datamodule.has_validation:
        raise ConfigValueError(
            "calibration.temperature_scaling=true needs a validation split to fit on: set data.val_size > 0 "
            "(the same value as in training, so the split is the one the model did not train on)"
        )
    if config.calibration.temperature_scaling and datamodule.test_is_validation:
        raise ConfigValueError(
            f"calibration.temperature_scaling fits the temperature on the validation split, and without a test/ "
            f"folder in {datamodule.directory} the test split is the validation split: the calibrated numbers would "
            "be fitted on the images they score. Add a test/ folder, or set calibration.temperature_scaling=false"
        )


def as_scored(config: EvaluationConfig) -> EvaluationConfig:
    """``max_images`` bounds the corrupted sets too unless ``robustness.max_images`` says otherwise (scored against
    the same clean images)."""
    if config.max_images is None or config.robustness.max_images is not None:
        return config
    return replace(config, robustness=replace(config.robustness, max_images=config.max_images))


def check_evaluation_files(
    config: EvaluationConfig, datamodule: ImageDataModule, class_names: Sequence[str] | None
) -> None:
    """The evaluation's files (real corruption sets, their baseline, the OOD set) opened and checked without
    scoring anything, so that training with ``evaluate.after_training`` refuses a wrong ``robustness.root`` or
    ``ood.root`` before it trains rather than after. Generated corruptions are made when scored, not here."""
    config = as_scored(config)
    check_temperature_split(config, datamodule)
    if config.robustness.root and robustness_enabled(config, datamodule):
        open_robustness(config, datamodule, class_names)
    if config.ood.root:
        open_ood_set(config.ood, datamodule)


def _compact(key: str, probs: np.ndarray, logits: np.ndarray, labels: np.ndarray) -> dict[str, np.ndarray]:
    """One corrupted set's predicted class, its confidence and each image's NLL (``logsumexp(z) - z_y``, float64)
    — enough to recompute its accuracy, ECE and NLL exactly (the confidences binned by
    :func:`~alternet.metrics.calibration.bin_index`, the NLL's mean) without storing 75 full probability matrices."""
    return {
        f"corrupted/{key}/pred": probs.argmax(1).astype(np.int16),
        f"corrupted/{key}/confidence": probs.max(1),
        f"corrupted/{key}/nll": nll_per_sample(logits, labels),  # the NLL's own terms: their mean is it
        f"corrupted/{key}/labels": labels.astype(np.int16),
    }


def write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> Path:
    """Compressed arrays written atomically: a full disk leaves the previous file (and says so), never half of one."""

    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a handle, so numpy does not append ".npz" to the temporary name
            np.savez_compressed(handle, **arrays)

    return atomic_write(path, write)
