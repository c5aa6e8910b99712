"""Checks of composed configs that fail before any work starts, naming the offending key."""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch

from ..data import DATAMODULES
from ..errors import ConfigValueError
from ..evaluation.inference import AUTOCAST
from ..models import ATTENTION_KINDS, MODEL_NAMES
from ..models.backbone import choose_stem
from ..models.blocks import BLOCK_TYPES, STEMS
from ..models.byob import SELF_ATTN_LAYERS, ByobSpec, check_byob
from ..models.external import check_name, require_pretrained
from ..models.layout import buildup_violations
from ..models.maxxvit import CONV_BLOCKS, MSA_BLOCKS, check_maxxvit
from ..models.zoo import HYBRIDS, hybrid_spec, spec_kwargs
from ..training import EVALUATED_METRICS
from ..training.callbacks import parse_interval
from ..training.optim import OPTIMIZERS, SCHEDULES

# every enumerated setting, checked before any data is loaded (one place: the choices are the code's own)
CHOICES: dict[str, tuple[str, ...]] = {
    "data.name": tuple(DATAMODULES),
    "recipe.optimizer.name": OPTIMIZERS,  # lower case, as written in the recipes
    "recipe.schedule.name": SCHEDULES,
    "recipe.augment.interpolation": ("bilinear", "bicubic", "random"),
    "data.interpolation": ("bilinear", "bicubic"),
    "model.attention": ATTENTION_KINDS,
    "model.block": tuple(BLOCK_TYPES),
    "model.stem": ("auto", *STEMS),
    "model.self_attn_layer": SELF_ATTN_LAYERS,  # ByobNet hybrids (model=byob)
    "model.msa_block": MSA_BLOCKS,  # MaxxVit hybrids (model=maxxvit)
    "model.conv_block": CONV_BLOCKS,
    "model.buildup_rules": ("warn", "off"),
    "evaluate.precision": tuple(AUTOCAST),  # what evaluate_after_training runs at
    "evaluate.robustness.precision": (*AUTOCAST, "auto"),
    "trainer.precision": (
        "auto",
        "32-true",
        "32",
        "16-mixed",
        "bf16-mixed",
        "16-true",
        "bf16-true",
        "64-true",
        "64",
        "transformer-engine",
        "16",
        "bf16",
    ),
}
TRAINER_ARGS = frozenset(inspect.signature(L.Trainer.__init__).parameters) - {"self"}


def suggest(value: Any, choices: Any) -> str:
    """`` (did you mean 'x'?)`` for a near miss, else nothing."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_choices(cfg: Mapping[str, Any]) -> None:
    """Each enumerated key holds one of its values, and the trainer section only Trainer arguments."""
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        if value is not None and str(value) not in choices:
            raise ConfigValueError(f"{key}={value!r} is not one of {list(choices)}{suggest(value, choices)}")
    unknown = sorted(set(_get(cfg, "trainer") or {}) - TRAINER_ARGS)
    if unknown:
        key = unknown[0]
        raise ConfigValueError(
            f"trainer.{key} is not an argument of lightning.Trainer{suggest(key, TRAINER_ARGS)}; "
            "see https://lightning.ai/docs/pytorch/stable/common/trainer.html#trainer-flags"
        )
    seed = _get(cfg, "seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ConfigValueError(f"seed={seed!r} is invalid: must be an integer (e.g. seed=0)")


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
    except (TypeError, ValueError):
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
            f"{', '.join(missing)} must be set: e.g. alternet train {' '.join(f'{k}=...' for k in missing)}"
        )
    check_choices(cfg)
    check_model(cfg)
    warn_buildup(cfg)
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
    _require(
        cfg, "data.num_workers", lambda v: v == "auto" or (int(v) == v and v >= 0), "must be auto or an integer >= 0"
    )
    _require(cfg, "data.image_size", lambda v: int(v) == v and v >= 1, "must be an integer >= 1")
    _require(cfg, "recipe.warmup_epochs", lambda v: v >= 0, "must be >= 0")
    _require(cfg, "recipe.test_flip", lambda v: isinstance(v, bool), "must be true or false")
    _require(cfg, "performance.allow_emulated_precision", lambda v: isinstance(v, bool), "must be true or false")
    _require(cfg, "recipe.layer_decay", lambda v: 0 < v <= 1, "must be in (0, 1] (or null: no layer-wise decay)")
    _require(cfg, "evaluate.calibration.n_bins", lambda v: int(v) == v and v >= 1, "must be an integer >= 1")
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
    check_monitor(cfg)
    check_accelerator(cfg)
    _require(
        cfg,
        "callbacks.checkpoint.every_n_train_steps",
        lambda v: int(v) == v and v >= 1,
        "must be an integer >= 1 (or null: checkpoints at epoch ends only)",
    )
    _require(
        cfg,
        "callbacks.checkpoint.train_time_interval",
        lambda v: parse_interval(v) > 0,
        'must be seconds or "DD:HH:MM:SS", e.g. "00:00:30:00" (or null)',
    )
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


def check_model(cfg: Mapping[str, Any]) -> None:
    """Before any work: a model name alternet or timm knows (with the closest names), a hybrid family's own hard
    constraints at the data's image size (one line each), and, with ``model.pretrained=true``, timm's weights
    cached here or reachable."""
    model = _get(cfg, "model") or {}
    name = model.get("name")
    if not isinstance(name, str) or name == "???":
        return
    check_name(name, MODEL_NAMES)
    if model.get("pretrained") is True:
        require_pretrained(name)
    if name in HYBRIDS:
        spec = hybrid_spec(HYBRIDS[name], _overrides(model))
        img_size = int(_get(cfg, "data.image_size") or 32)
        check = check_byob if isinstance(spec, ByobSpec) else check_maxxvit
        check(spec, img_size, choose_stem(spec.stem, img_size))


def _overrides(model: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model.items() if k not in ("name", "pretrained", "buildup_rules") and v is not None}


def layout_and_heads(model: Mapping[str, Any]) -> tuple[str | None, Any]:
    """The layout a model config builds and its heads per stage (a hybrid's from its family: MaxxVit's are width /
    dim_head), for the build-up rules; ``(None, None)`` for a model without a layout."""
    name = str(model.get("name"))
    if name in HYBRIDS:
        spec = hybrid_spec(HYBRIDS[name], _overrides(model))
        return spec.layout, spec.msa_heads()
    zoo = spec_kwargs(name)
    return model.get("layout") or zoo.get("layout"), model.get("heads") or zoo.get("heads")


def warn_buildup(cfg: Mapping[str, Any]) -> None:
    """One warning per build-up rule the layout breaks (AlterNet's and every hybrid family's), unless
    ``model.buildup_rules=off``."""
    model = _get(cfg, "model") or {}
    if model.get("buildup_rules", "off") != "warn":
        return
    layout, heads = layout_and_heads(model)
    for violation in buildup_violations(layout, heads) if layout else []:
        warnings.warn(f"{violation} (model.buildup_rules=off for a deliberate contrast)", stacklevel=3)


def check_monitor(cfg: Mapping[str, Any]) -> None:
    """The checkpoint monitor names a validation metric the module logs at epoch end (found missing by Lightning
    only after the first epoch's validation otherwise)."""
    monitor = _get(cfg, "callbacks.checkpoint.monitor")
    splits = ["val", "val_ema"] if _get(cfg, "recipe.ema") else ["val"]
    logged = [f"{split}/{metric}" for split in splits for metric in EVALUATED_METRICS]
    if monitor is not None and monitor not in logged:
        raise ConfigValueError(
            f"callbacks.checkpoint.monitor={monitor} is not a metric the run logs at epoch end; choose one of "
            f"{logged}{suggest(monitor, logged)}"
        )


def check_accelerator(cfg: Mapping[str, Any]) -> None:
    """An accelerator this machine has, and a device count Lightning accepts."""
    accelerator = str(_get(cfg, "trainer.accelerator") or "auto")
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigValueError(
            f"trainer.accelerator={accelerator} but this machine has no usable CUDA GPU (torch.cuda.is_available() "
            "is False); use trainer.accelerator=cpu or auto"
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise ConfigValueError("trainer.accelerator=mps but MPS is not available here; use trainer.accelerator=cpu")
    _require(
        cfg,
        "trainer.devices",
        lambda v: v in ("auto", -1, "-1") or (isinstance(v, int) and v >= 1) or isinstance(v, list | str),
        "must be auto, -1 (all), a count >= 1 or a list of device indices",
    )
