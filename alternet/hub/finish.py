"""What a finished training run does with its weights (config section ``export``): export them into
``<run_dir>/export`` and, with the W&B logger, log the best checkpoint and the export as model artifacts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .artifacts import artifact_notice, log_model_artifacts
from .export import export


def _wandb_run(config: dict[str, Any]) -> Any:
    """The W&B run of the ``logger=wandb`` logger, if one is active and not disabled."""
    if not (config.get("logger") or {}).get("wandb"):
        return None
    import wandb

    run = wandb.run
    return None if run is None or run.disabled else run


def after_training(config: dict[str, Any], summary: dict[str, Any]) -> Path | None:
    """Export (``export.after_training``) and log W&B model artifacts (``export.wandb_artifacts``) as configured;
    returns the export directory, if any."""
    options = config.get("export") or {}
    run_dir = Path(summary["run_dir"])
    export_dir = None
    if options.get("after_training"):
        export_dir = export(run_dir, run_dir / "export", ema=bool(options.get("ema")))
        print(f"Export:          {export_dir}", flush=True)
    run = _wandb_run(config)
    if run is not None and options.get("wandb_artifacts"):
        checkpoint = Path(summary["best_checkpoint"] or summary["last_checkpoint"])
        metadata = {key: summary.get(key) for key in ("model", "data", "test", "epochs")}
        logged = log_model_artifacts(run, checkpoint, export_dir, metadata)
        print(artifact_notice(run, logged), file=sys.stdout, flush=True)
    return export_dir
