"""Evaluation results to Weights & Biases: summary numbers, the per-corruption table, the plots."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def flatten(metrics: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """Nested numbers as ``prefix/a/b`` keys (lists and strings are left out)."""
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, name)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = value
    return flat


def log_report(run: Any, report: Mapping[str, Any], prefix: str = "eval") -> None:
    """Put ``report`` (an evaluation's metrics.json) into ``run``: summary, tables, images."""
    import wandb

    for section in ("test", "temperature_scaling"):
        if section in report:
            run.summary.update(flatten(report[section], f"{prefix}/{section}"))
    payload: dict[str, Any] = {}
    robustness = report.get("robustness")
    if robustness:
        run.summary.update(flatten(robustness["summary"], f"{prefix}/robustness"))
        table = robustness["table"]
        columns = list(table[0])
        payload[f"{prefix}/robustness_table"] = wandb.Table(
            columns=columns, data=[[r[c] for c in columns] for r in table]
        )
    for path in map(Path, report.get("files", [])):
        if path.suffix == ".png":
            payload[f"{prefix}/{path.stem}"] = wandb.Image(str(path))
    for name, result in (report.get("analysis") or {}).items():
        run.summary.update(flatten({k: v for k, v in result.items() if k != "files"}, f"{prefix}/analysis/{name}"))
        for path in map(Path, result.get("files", [])):
            if path.suffix == ".png":
                payload[f"{prefix}/analysis/{path.stem}"] = wandb.Image(str(path))
    if payload:
        run.log(payload)
