"""Score one model: calibration on the test split, optional temperature scaling, corruption robustness;
write metrics.json, predictions.npz, CSV tables and plots, and log them to W&B when a run is active."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data import ArrayDataset, ImageDataModule
from ..data.cifar_c import CifarC, generate_cifar_c, load_cifar_c
from ..data.corruptions import CORRUPTIONS
from ..data.transforms import build_transform
from ..errors import ConfigValueError
from ..files import write_json
from ..metrics import apply_temperature, calibration_metrics, fit_temperature, reliability_bins, softmax
from .inference import choose_device, predict
from .plots import corruption_heatmap, reliability_diagram
from .robustness import (
    RobustnessRow,
    load_baseline,
    robustness_record,
    robustness_summary,
    write_accuracy_csv,
    write_table_csv,
)

AUTOCAST = {"32": None, "bf16": torch.bfloat16, "16": torch.float16}
ROBUST_DATA = ("cifar10", "cifar100")


class Evaluator:
    """Runs every requested evaluation of one model against one data module."""

    def __init__(self, model: nn.Module, datamodule: ImageDataModule, settings: Mapping[str, Any], out_dir: Path):
        self.model = model.eval()
        self.datamodule = datamodule
        self.settings = settings
        self.out_dir = Path(out_dir)
        self.device = choose_device(settings["device"])
        precision = str(settings["precision"])
        if precision not in AUTOCAST:
            raise ConfigValueError(f"precision={precision!r} is invalid: choose one of {list(AUTOCAST)}")
        self.autocast = AUTOCAST[precision]
        self.n_bins = int(settings["calibration"]["n_bins"])
        self.files: list[Path] = []

    def _predict(self, dataset: ArrayDataset) -> tuple[np.ndarray, np.ndarray]:
        return predict(
            self.model,
            dataset,
            device=self.device,
            batch_size=int(self.settings["batch_size"]),
            autocast=self.autocast,
            num_workers=int(self.settings["num_workers"]),
        )

    def _file(self, path: Path) -> Path:
        self.files.append(path)
        return path

    # calibration ----------------------------------------------------------------------------

    def calibration(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        logits, labels = self._predict(self.datamodule.splits["test"])
        probs = softmax(logits)
        metrics: dict[str, Any] = {"test": calibration_metrics(probs, labels, self.n_bins)}
        bins = reliability_bins(probs, labels, self.n_bins)
        reliability_diagram(bins, self._file(self.out_dir / "reliability.png"), title=self._title("test"))
        if self.settings["calibration"]["temperature_scaling"]:
            metrics["temperature_scaling"] = self._temperature(logits, labels)
        return metrics, {"logits": logits, "probs": probs.astype(np.float32), "labels": labels}

    def _temperature(self, logits: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
        if "val" not in self.datamodule.splits:
            raise ConfigValueError(
                "calibration.temperature_scaling=true needs a validation split to fit on: set data.val_size > 0 "
                "(the same value as in training, so the split is the one the model did not train on)"
            )
        val_logits, val_labels = self._predict(self.datamodule.splits["val"])
        temperature = fit_temperature(val_logits, val_labels)
        scaled = apply_temperature(logits, temperature)
        bins = reliability_bins(scaled, labels, self.n_bins)
        title = self._title(f"test, T={temperature:.3f}")
        reliability_diagram(bins, self._file(self.out_dir / "reliability_temperature.png"), title=title)
        return {"temperature": temperature, "test": calibration_metrics(scaled, labels, self.n_bins)}

    def _title(self, what: str) -> str:
        return f"{self.settings['label']} on {self.datamodule.name} ({what})"

    # robustness -----------------------------------------------------------------------------

    def robustness_enabled(self) -> bool:
        cfg = self.settings["robustness"]
        enabled = cfg["enabled"]
        if enabled == "auto":  # CIFAR, or any data set whose corrupted files are given
            return self.datamodule.name in ROBUST_DATA or bool(cfg["root"])
        return bool(enabled)

    def corrupted_sets(self) -> CifarC:
        """Real CIFAR-C files from ``robustness.root``, or corruptions generated from the test split and cached."""
        cfg = self.settings["robustness"]
        corruptions = tuple(cfg["corruptions"] or CORRUPTIONS)
        if cfg["root"]:
            return load_cifar_c(cfg["root"], corruptions, num_classes=self.datamodule.num_classes)
        test = self.datamodule.splits["test"]
        images, labels = test.images, test.labels
        if cfg["max_images"]:
            images, labels = images[: int(cfg["max_images"])], labels[: int(cfg["max_images"])]
        seed = int(cfg["seed"])
        cache = Path(cfg["cache_dir"]) / f"{self.datamodule.name}-c-seed{seed}-n{len(images)}"
        severities = tuple(cfg["severities"])
        generate_cifar_c(images, labels, cache, corruptions, severities, seed=seed, workers=cfg["workers"])
        return load_cifar_c(cache, corruptions, num_classes=self.datamodule.num_classes)

    def robustness(
        self, clean_probs: np.ndarray, clean_labels: np.ndarray
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        cfg = self.settings["robustness"]
        sets = self.corrupted_sets()
        n = sets.n_per_severity  # the clean reference uses the same images as the corrupted sets
        clean_acc = float((clean_probs[:n].argmax(1) == clean_labels[:n]).mean())
        transform = build_transform(self.datamodule.mean, self.datamodule.std, self.datamodule.image_size)
        rows, predictions = [], {}
        for corruption, severity in sets.sets():
            images, labels = sets.get(corruption, severity)
            logits, labels = self._predict(ArrayDataset(np.asarray(images), np.asarray(labels), transform))
            probs = softmax(logits)
            metrics = calibration_metrics(probs, labels, self.n_bins)
            rows.append(RobustnessRow.from_metrics(corruption, severity, metrics, len(labels), sets.source))
            predictions[f"{corruption}/{severity}"] = (probs, labels)
        baseline = load_baseline(cfg["baseline"]) if cfg["baseline"] else None
        summary = robustness_summary(rows, baseline, clean_acc=clean_acc)
        record = robustness_record(rows, summary) | {"root": str(sets.root), "synthetic_frost": sets.synthetic_frost}
        write_table_csv(rows, self._file(self.out_dir / "robustness_table.csv"))
        write_accuracy_csv(rows, self._file(self.out_dir / "robustness_accuracy.csv"))
        title = f"{self._title(f'{sets.source} corruptions')}: mean acc {summary['robustness']:.1%}"
        heatmap = self._file(self.out_dir / "robustness_heatmap.png")
        corruption_heatmap(rows, heatmap, clean_acc=clean_acc, title=title)
        return record, _compact(predictions)

    # everything -----------------------------------------------------------------------------

    def run(self, meta: Mapping[str, Any]) -> dict[str, Any]:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        metrics, arrays = self.calibration()
        report: dict[str, Any] = dict(meta) | metrics
        if self.robustness_enabled():
            report["robustness"], corrupted = self.robustness(arrays["probs"], arrays["labels"])
            arrays |= corrupted
        np.savez_compressed(self._file(self.out_dir / "predictions.npz"), **arrays)
        metrics_path = self._file(self.out_dir / "metrics.json")
        report["files"] = [str(path) for path in self.files]
        write_json(metrics_path, report)
        return report


def _compact(predictions: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per corrupted set: predicted class, its probability and the true class's probability — enough to
    recompute accuracy, ECE and NLL without storing 75 full probability matrices."""
    arrays: dict[str, np.ndarray] = {}
    for key, (probs, labels) in predictions.items():
        arrays[f"corrupted/{key}/pred"] = probs.argmax(1).astype(np.int16)
        arrays[f"corrupted/{key}/confidence"] = probs.max(1).astype(np.float32)
        arrays[f"corrupted/{key}/p_true"] = probs[np.arange(len(labels)), labels].astype(np.float32)
        arrays[f"corrupted/{key}/labels"] = labels.astype(np.int16)
    return arrays
