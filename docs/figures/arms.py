"""What the figure scripts read of scored sweeps: each model's scored jobs (those with eval/predictions.npz, written
by ``evaluate.after_training`` or by ``alternet evaluate ckpt=JOB out_dir=JOB/eval``), in seed order, as arrays keyed
``MODEL/FIELD``, the keys of the scripts' saved .npz files. A model's jobs may come from several sweeps (its seeds
split across machines)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from alternet.report.build import group_variants
from alternet.report.runs import Run, read_sweep
from alternet.runs.directories import METRICS_FILE
from alternet.runs.results import EvaluationReport, RobustnessSummary

SETS = 75  # CIFAR-100-C's 15 corruptions x 5 severities


def _robustness(run: Run) -> RobustnessSummary:
    report = EvaluationReport.from_json(run.job.eval_dir / METRICS_FILE)
    if report.robustness is None:
        raise SystemExit(f"{run.job.path}: its evaluation holds no corruption robustness (robustness.enabled=true)")
    return report.robustness.summary


FIELDS: dict[str, Callable[[Run], Any]] = {
    "seed": lambda run: int(run.seed),
    "acc": lambda run: float(run.metrics.test["acc"]),  # test top-1
    "correct": Run.test_correct,  # which test images it classified correctly
    "robustness": lambda run: _robustness(run).robustness,  # mean accuracy over the corrupted sets
    "clean": lambda run: _robustness(run).clean_acc,  # the clean accuracy of the images corrupted
    "sets_correct": lambda run: np.rint(run.robust_correct() * SETS).astype(np.uint8),  # per image, sets correct
    "clean_correct": lambda run: run.test_correct()[: run.robust_correct().size],  # the corrupted images, clean
}


def scored(sweeps: Sequence[Path]) -> list[Run]:
    """The finished jobs of ``sweeps`` that were scored after training (their eval/predictions.npz)."""
    return [run for sweep in sweeps for run in read_sweep(sweep)[0] if run.test_correct() is not None]


def keyed(arms: Mapping[str, Iterable[Run]], fields: Iterable[str]) -> dict[str, np.ndarray]:
    """``fields`` of each arm's runs, in seed order, keyed ``ARM/FIELD``."""
    arrays = {}
    for name, runs in arms.items():
        jobs = sorted(runs, key=lambda run: int(run.seed))
        arrays |= {f"{name}/{field}": np.array([FIELDS[field](run) for run in jobs]) for field in fields}
    return arrays


def read_arms(sweeps: Sequence[Path], fields: Iterable[str], models: Iterable[str] | None = None) -> dict[str, Any]:
    """``fields`` of every model's scored jobs in ``sweeps``, or of ``models``' only, each of which must be there."""
    arms = {variant.label.removeprefix("model="): variant.runs for variant in group_variants(scored(sweeps), ["model"])}
    missing = [name for name in models or () if name not in arms]
    if missing:
        where = ", ".join(map(str, sweeps))
        raise SystemExit(f"{where}: no scored jobs of model={', '.join(missing)} (each job's eval/predictions.npz)")
    return keyed({name: arms[name] for name in models or arms}, tuple(fields))
