"""The paper-style figures of a sweep: test error against clean training NLL (the optimisation-vs-regularisation
plane, one point per run), accuracy and robustness against each swept variable, and clean training NLL curves."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..files import save_figure
from ..runs.directories import RunDir
from .runs import Run, read_history, variant_of
from .verdicts import Summary


def _wrapped(label: str) -> str:
    """A variant's label on lines of at most 40 characters: a sweep of several keys (``data.root=/a/long/path``)
    gave a legend wider than the figure, which the layout then gave up on."""
    return textwrap.fill(label, 40)


def _palette(labels: Sequence[str]) -> dict[str, tuple[float, ...]]:
    import matplotlib

    colours = matplotlib.colormaps["tab10"]
    return {label: colours(i % 10) for i, label in enumerate(dict.fromkeys(labels))}


def error_vs_train_nll(runs: Sequence[Run], keys: list[str], path: Path) -> Path | None:
    """One point per run; runs of one variant (its seeds) share a colour; each variant labelled once."""
    points = [(run.train_nll, run.test_error, variant_of(run, keys)) for run in runs if run.train_nll is not None]
    if not points:
        return None
    colours = _palette([label for *_, label in points])
    fig = Figure(figsize=(6.5, 4.5), layout="constrained")
    ax = fig.subplots()
    labelled: set[str] = set()
    for nll, error, label in points:
        ax.scatter(nll, error, color=colours[label], s=36, label=None if label in labelled else _wrapped(label))
        if label not in labelled:
            ax.annotate(_wrapped(label), (nll, error), fontsize=7, xytext=(4, 4), textcoords="offset points")
        labelled.add(label)
    ax.set_xlabel("clean training NLL (train_clean/nll, last epoch)")
    ax.set_ylabel("test error")
    ax.set_title("lower-left: helps optimisation; right of a baseline and lower: regularises", fontsize=8)
    ax.legend(fontsize=7, loc="best")
    return save_figure(fig, path)


def _ordered(values: Sequence[str]) -> list[str]:
    unique = list(dict.fromkeys(values))
    try:
        return sorted(unique, key=float)
    except ValueError:
        return unique


def metrics_vs(runs: Sequence[Run], key: str, keys: list[str], path: Path) -> Path:
    """Test accuracy (and robustness when scored) against one swept variable, one line per combination of the
    other swept variables, mean ± sd over seeds."""
    others = [k for k in keys if k != key]
    panels = [("test accuracy", lambda r: 1.0 - r.test_error)]
    if any(run.robustness is not None for run in runs):
        panels.append(("robustness (mean corrupted accuracy)", lambda r: r.robustness))
    x_values = _ordered([run.overrides.get(key, "-") for run in runs])
    lines = dict.fromkeys(variant_of(run, others) for run in runs)
    colours = _palette(list(lines))
    fig = Figure(figsize=(5.5 * len(panels), 4.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (label, value) in zip(axes, panels):
        for line in lines:
            xs, means, sds = [], [], []
            for i, x in enumerate(x_values):
                group = [r for r in runs if r.overrides.get(key, "-") == x and variant_of(r, others) == line]
                summary = Summary.of([value(r) for r in group])
                if summary is not None:
                    xs.append(i)
                    means.append(summary.mean)
                    sds.append(summary.sd)
            ax.errorbar(xs, means, yerr=sds, marker="o", capsize=3, color=colours[line], label=_wrapped(line))
        ax.set_xticks(range(len(x_values)), x_values, rotation=20, fontsize=8)
        ax.set_xlabel(key)
        ax.set_ylabel(label)
        if len(lines) > 1:
            ax.legend(fontsize=7)
    return save_figure(fig, path)


def train_nll_curves(runs: Sequence[Run], keys: list[str], path: Path) -> Path | None:
    """Clean training NLL per epoch, one line per run, coloured by variant."""
    curves = [
        (run.curves["train_clean/nll"], variant_of(run, keys)) for run in runs if run.curves.get("train_clean/nll")
    ]
    if not curves:
        return None
    colours = _palette([label for _, label in curves])
    fig = Figure(figsize=(6.5, 4.0), layout="constrained")
    ax = fig.subplots()
    labelled: set[str] = set()
    for values, label in curves:
        shown = None if label in labelled else _wrapped(label)
        ax.plot(range(len(values)), values, color=colours[label], label=shown)
        labelled.add(label)
    ax.set_xlabel("epoch")
    ax.set_ylabel("clean training NLL")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def training_curves(run: RunDir) -> Path | None:
    """The run's ``curves.png``: loss and NLL, accuracy (train, clean train, validation) per epoch and the
    learning rate per step, from the run's ``logs/metrics.csv``; the training loss is each epoch's mean over all its
    steps (``train/nll_epoch``; the logged ``train/loss`` is every ``log_every_n_steps``-th step's alone)."""
    path = run.metrics_csv
    if not path.is_file():
        return None
    fig = Figure(figsize=(14, 3.8))  # fixed margins: the layout engine took a third of a small run's wall time
    fig.subplots_adjust(left=0.055, right=0.99, bottom=0.14, top=0.92, wspace=0.24)
    for ax, (label, curves) in zip(fig.subplots(1, 3), curve_panels(read_history(path))):
        for key, curve in curves.items():
            xs, ys = zip(*curve.items())
            ax.plot(xs, ys, marker="o" if key != "train/lr@step" else None, markersize=3, label=key)
        ax.set_xlabel("step" if label == "learning rate" else "epoch")
        ax.set_ylabel(label)
        if ax.lines:
            ax.legend(fontsize=7)
    return save_figure(fig, run.curves)


def curve_panels(history: dict[str, dict[int, float]]) -> list[tuple[str, dict[str, dict[int, float]]]]:
    """``curves.png``'s three panels from a run's :func:`~alternet.report.runs.read_history`: each panel's label and
    its curves by name (those the run logged)."""
    loss = "train/nll_epoch" if history.get("train/nll_epoch") else "train/loss"  # the epoch's mean, not a sample's
    panels = [
        ("loss / NLL", [loss, "train_clean/nll", "val/nll", "val_ema/nll"]),
        ("accuracy", ["train/acc", "train_clean/acc", "val/acc", "val_ema/acc"]),
        ("learning rate", ["train/lr@step"]),
    ]
    return [(label, {key: history[key] for key in keys if history.get(key)}) for label, keys in panels]


def _job_labels(jobs: Sequence[dict]) -> list[str]:
    """Each job's number and the overrides that tell it from the others (one per line; a number to 4 significant
    digits: a search's drawn values are long), not those every job shares."""
    overrides = [dict(o.split("=", 1) for o in str(row.get("overrides") or "").split() if "=" in o) for row in jobs]
    keys = list(dict.fromkeys(key for job in overrides for key in job))
    varied = [key for key in keys if len({job.get(key) for job in overrides}) > 1]

    def shown(value: str | None) -> str:
        if value is None:
            return "-"
        try:
            return value if value.isdigit() else f"{float(value):.4g}"
        except ValueError:
            return value

    return [
        "\n".join([str(row["job"]), *(f"{key}={shown(job.get(key))}" for key in varied)])
        for row, job in zip(jobs, overrides)
    ]


def sweep_comparison(rows: Sequence[dict], metric: str, path: Path) -> Path | None:
    """One bar per finished job of a multirun for ``metric`` (a ``summary.csv`` column), labelled by its
    overrides: the picture next to the sweep's summary table."""
    jobs = [row for row in rows if row.get(metric) not in (None, "")]
    if not jobs:
        return None
    fig = Figure(figsize=(max(5.0, 0.9 * len(jobs) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    values = [float(row[metric]) for row in jobs]
    ax.bar(range(len(jobs)), values, color="#4c72b0")
    for i, value in enumerate(values):
        ax.annotate(f"{value:.3f}", (i, value), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(jobs)), _job_labels(jobs), fontsize=6)
    ax.set_ylabel(metric)
    return save_figure(fig, path)
