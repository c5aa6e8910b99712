"""Checks of composed configs that fail before any work starts, naming the offending key."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigValueError
from ..training import EVALUATED_METRICS


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _require(cfg: Mapping[str, Any], key: str, check: Any, expectation: str) -> None:
    value = _get(cfg, key)
    if value is None:
        return
    try:
        ok = check(value)
    except TypeError:
        ok = False
    if not ok:
        raise ConfigValueError(f"{key}={value!r} is invalid: {expectation}")


def missing_values(cfg: Any, prefix: str = "") -> list[str]:
    """Keys still at OmegaConf's mandatory marker ``???`` (e.g. ``data.root`` of ``data=imagefolder``)."""
    if isinstance(cfg, Mapping):
        return [key for k, v in cfg.items() for key in missing_values(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if cfg == "???" else []


def validate_train_config(cfg: Mapping[str, Any]) -> None:
    """Static checks of a resolved training config (data-dependent checks happen in the DataModule)."""
    missing = [key for key in missing_values(cfg) if not key.startswith("hydra")]
    if missing:
        raise ConfigValueError(
            f"{', '.join(missing)} must be set: e.g. python train.py {' '.join(f'{k}=...' for k in missing)}"
        )
    _require(cfg, "recipe.epochs", lambda v: int(v) == v and v >= 1, "must be an integer >= 1")
    _require(cfg, "trainer.max_epochs", lambda v: int(v) == v and v >= 1, "must be an integer >= 1")
    _require(cfg, "recipe.batch_size", lambda v: int(v) == v and v >= 1, "must be an integer >= 1")
    _require(cfg, "recipe.eval_batch_size", lambda v: int(v) == v and v >= 1, "must be an integer >= 1")
    _require(cfg, "recipe.optimizer.lr", lambda v: v > 0, "must be > 0")
    _require(cfg, "recipe.optimizer.weight_decay", lambda v: v >= 0, "must be >= 0")
    _require(cfg, "recipe.label_smoothing", lambda v: 0 <= v < 1, "must be in [0, 1)")
    _require(cfg, "recipe.drop_path_rate", lambda v: 0 <= v < 1, "must be in [0, 1)")
    _require(cfg, "recipe.grad_clip", lambda v: v > 0, "must be > 0 (or null to disable clipping)")
    _require(cfg, "data.val_size", lambda v: v >= 0, "must be a count >= 0 or a fraction in (0, 1)")
    _require(cfg, "data.num_workers", lambda v: int(v) == v and v >= 0, "must be an integer >= 0")
    _require(cfg, "data.image_size", lambda v: int(v) == v and v >= 1, "must be an integer >= 1")
    _require(cfg, "recipe.warmup_epochs", lambda v: v >= 0, "must be >= 0")
    epochs, warmup = _get(cfg, "trainer.max_epochs"), _get(cfg, "recipe.warmup_epochs")
    if warmup and epochs and warmup > epochs:
        warnings.warn(
            f"recipe.warmup_epochs={warmup} exceeds trainer.max_epochs={epochs}: the learning rate never reaches "
            "its base value (fine for a smoke test, not for a real run)",
            stacklevel=2,
        )
    mixup = _get(cfg, "recipe.mixup") or {}
    if (mixup.get("mixup_alpha") or mixup.get("cutmix_alpha")) and int(_get(cfg, "recipe.batch_size")) % 2:
        raise ConfigValueError(
            f"recipe.batch_size={_get(cfg, 'recipe.batch_size')} is invalid: mixup/cutmix needs an even batch size"
        )
    check_optimized_metric(cfg)
    export = _get(cfg, "export") or {}
    if export.get("after_training") and export.get("ema") and not _get(cfg, "recipe.ema"):
        raise ConfigValueError(
            "export.ema=true needs EMA weights: set recipe.ema.decay (e.g. +recipe.ema.decay=0.9999)"
        )


def reported_metrics(cfg: Mapping[str, Any]) -> list[str]:
    """The metrics a run with this config reports at its end: every test metric (and its EMA twin with
    ``recipe.ema``) and, with a validation split, the best value of the checkpoint monitor."""
    splits = ["test", "test_ema"] if _get(cfg, "recipe.ema") else ["test"]
    names = [f"{split}/{metric}" for split in splits for metric in EVALUATED_METRICS]
    monitor = _get(cfg, "callbacks.checkpoint.monitor")
    if _get(cfg, "data.val_size") and monitor:
        names.insert(0, monitor)
    return names


def check_optimized_metric(cfg: Mapping[str, Any]) -> None:
    """``optimized_metric`` (what ``train.py`` returns to a Hydra sweeper) must name a metric the run reports."""
    name = _get(cfg, "optimized_metric")
    if name is None or name in reported_metrics(cfg):
        return
    hint = (
        " A validation metric needs a validation split (data.val_size > 0) and must be the checkpoint monitor "
        f"(callbacks.checkpoint.monitor={name} callbacks.checkpoint.mode=min|max)."
        if str(name).startswith("val")
        else ""
    )
    raise ConfigValueError(
        f"optimized_metric={name} is not a metric this run reports; choose one of {reported_metrics(cfg)}.{hint}"
    )
