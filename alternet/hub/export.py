"""Export a trained checkpoint as a self-contained model directory that timm and :func:`alternet.hub.load` read:
``model.safetensors`` (timm key names), ``config.json`` (timm's hub format plus an ``alternet`` section) and a
``README.md`` model card."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import nn

from .. import __version__
from ..checkpoints import DIGEST_KEY, weights_digest
from ..data import build_datamodule
from ..errors import AlternetError, CheckpointError
from ..files import atomic_write, write_text
from ..models import create_model
from ..runs import find_checkpoint, run_config, run_metrics
from .card import model_card
from .loading import apply_weights
from .sources import CONFIG_FILE, EXPORT_FORMAT, WEIGHTS_FILE, Source, read_lightning

PAPER = dict(paper_name="How Do Vision Transformers Work?", paper_ids="arXiv:2202.06709")


def export(source: str | Path, out: str | Path, *, ema: bool = False) -> Path:
    """Export a run directory (its best checkpoint, else ``last``) or a Lightning checkpoint into ``out``."""
    path, out = Path(source).expanduser(), Path(out).expanduser()
    if not path.exists():
        raise CheckpointError(f"{path} does not exist: pass a run directory or a Lightning checkpoint (.ckpt)")
    checkpoint, run_dir = find_checkpoint(path)
    opened = read_lightning(checkpoint, ema=ema, run_dir=run_dir)
    model = create_model(opened.require_architecture(), num_classes=opened.num_classes, **opened.model_args)
    apply_weights(model, opened, strict=True)  # the weights must rebuild their architecture exactly
    trained = _run_config(opened)
    labels, label_note = label_names(trained, opened.num_classes, opened.hyper_parameters["data"].get("class_names"))
    config = export_config(opened, model, trained, labels, label_note, run_metrics(run_dir))
    _prepare(out)
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    metadata = {"format": "pt", DIGEST_KEY: weights_digest(weights)}  # checked by every alternet load
    atomic_write(out / WEIGHTS_FILE, lambda tmp: save_file(weights, str(tmp), metadata=metadata))
    write_text(out / CONFIG_FILE, json.dumps(config, indent=2, allow_nan=False) + "\n")
    write_text(out / "README.md", model_card(config))
    return out


def _run_config(opened: Source) -> dict[str, Any]:
    """The run's resolved data and recipe: its config.yaml when present, else the checkpoint's hyperparameters."""
    resolved = run_config(opened.run_dir) or {}
    if isinstance(resolved.get("data"), dict) and isinstance(resolved.get("recipe"), dict):
        return resolved
    return {"data": opened.hyper_parameters["data"], "recipe": opened.hyper_parameters.get("recipe") or {}}


def label_names(
    run_config: dict[str, Any], num_classes: int, saved: list[str] | None = None
) -> tuple[list[str], str | None]:
    """The class names the checkpoint saved (its data facts), else the data set's, else class indices with a note
    saying why."""
    if saved and len(saved) == num_classes:
        return [str(name) for name in saved], None
    try:
        recipe = {"batch_size": 1, **run_config["recipe"]}
        names = [str(name) for name in build_datamodule(run_config["data"], recipe, seed=0).class_names]
    except (AlternetError, OSError, KeyError, TypeError) as error:
        return _indices(num_classes), f"class indices: the data set's class names are unavailable ({error})"
    if len(names) != num_classes:
        return _indices(num_classes), f"class indices: the data set names {len(names)} classes, not {num_classes}"
    return names, None


def _indices(num_classes: int) -> list[str]:
    return [str(i) for i in range(num_classes)]


def export_config(
    opened: Source,
    model: nn.Module,
    run_config: dict[str, Any],
    labels: list[str],
    label_note: str | None,
    metrics: dict[str, Any],
) -> dict[str, Any]:
    """``config.json``: timm's keys (``architecture``, ``num_classes``, ``num_features``, ``label_names``,
    ``model_args``, ``pretrained_cfg``) and an ``alternet`` section describing training and results."""
    data = opened.hyper_parameters["data"] | {"val_size": run_config["data"].get("val_size")}
    description = f"{opened.architecture} trained on {data['name']} with alternet"
    return {
        "architecture": opened.architecture,
        "num_classes": opened.num_classes,
        "num_features": int(getattr(model, "num_features", 0)) or None,
        "label_names": labels,
        "model_args": opened.model_args,
        "pretrained_cfg": {**opened.pretrained_cfg, "description": description, **PAPER},
        "alternet": {
            "format": EXPORT_FORMAT,
            "version": __version__,
            "weights": WEIGHTS_FILE,
            "checkpoint": opened.checkpoint.name if opened.checkpoint else None,
            "ema": opened.ema,
            "num_params": sum(p.numel() for p in model.parameters()),
            "label_names_note": label_note,
            "model": opened.hyper_parameters["model"],
            "data": {k: data.get(k) for k in ("name", "num_classes", "image_size", "mean", "std", "val_size")},
            "recipe": run_config["recipe"],
            "epochs": metrics.get("epochs"),
            "tested_checkpoint": Path(metrics["tested_checkpoint"]).name if metrics.get("tested_checkpoint") else None,
            "test": metrics.get("test"),
            "test_ema": metrics.get("test_ema"),
            "robustness": (metrics.get("robustness") or {}).get("summary"),
        },
    }


def _prepare(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise CheckpointError(f"export destination {out} is a file; choose a directory with --out")
    if out.is_dir() and any(out.iterdir()) and not (out / CONFIG_FILE).is_file():
        raise CheckpointError(f"export destination {out} is a non-empty directory but not an export; choose another")
    out.mkdir(parents=True, exist_ok=True)
