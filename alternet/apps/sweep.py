"""Hydra callback: at the end of a multirun, one CSV row per job with its overrides and final metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ..files import write_csv
from ..report.figures import sweep_comparison
from ..runs import run_metrics


def job_row(job_dir: Path) -> dict[str, Any]:
    """The overrides and final test metrics of one job directory (status ``failed`` without metrics)."""
    overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
    row: dict[str, Any] = {"job": job_dir.name, "overrides": " ".join(overrides)}
    row.update(override.split("=", 1) for override in overrides if "=" in override)
    metrics = run_metrics(job_dir)
    if not metrics:
        return row | {"status": "failed"}
    row.update(status="ok", epochs=metrics.get("epochs"), best_val_score=metrics.get("best_val_score"))
    optimized = metrics.get("optimized_metric")
    if optimized:
        row[optimized["name"]] = optimized["value"]
        row["optimized_metric"] = optimized["name"]
    row.update({f"test/{name}": value for name, value in metrics["test"].items()})
    return row


def write_sweep_summary(sweep_dir: Path) -> Path | None:
    """Collect every job under ``sweep_dir`` into ``sweep_dir/summary.csv``, and draw ``summary.png`` beside it:
    one bar per job for the optimised metric (``test/acc`` when the sweep names none)."""
    jobs = sorted(
        (p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")),
        key=lambda p: (len(p.name), p.name),
    )
    if not jobs:
        return None
    rows = [job_row(job) for job in jobs]
    path = write_csv(sweep_dir / "summary.csv", rows)
    optimized = [r.get("optimized_metric") for r in rows if r.get("optimized_metric")]
    sweep_comparison(rows, optimized[0] if optimized else "test/acc", sweep_dir / "summary.png")
    return path


class SweepSummary(Callback):
    """Registered in ``alternet/conf/hydra/default.yaml``; runs in the launching process after all jobs."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        path = write_sweep_summary(Path(config.hydra.sweep.dir))
        if path is not None:
            print(f"Sweep summary: {path} (plot: {path.with_suffix('.png')})", flush=True)
