"""Checks of composed configs that fail before any work starts, naming the offending key.

Each key has one check. A key that only the config has (``recipe.epochs``, ``recipe.optimizer.lr`` ...) is checked
here, in the tables :data:`CHOICES` and :func:`validate_train_config`; a key that a constructor also takes as a
Python API (``data.name``, ``model.attention``, ``recipe.batch_size``, ``recipe.augment``, the evaluation settings,
W&B's ...) is checked by that code's own ``check_*`` function, which the constructor calls too and these checks call
before any work (:data:`DELEGATED` and the calls below). Either way the message is one line: the key, its value, what
it must be (:func:`alternet.errors.one_of`, :func:`alternet.errors.require`).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch

from .. import tracking
from ..data import check_name
from ..data.augment import check_augment
from ..data.base import check_batch_sizes, check_subset, check_val_size
from ..data.workers import check_workers
from ..errors import AlternetWarning, ConfigValueError, is_integer, one_of, require, suggest
from ..evaluation import check_settings
from ..models import MODEL_NAMES
from ..models.attention import check_attention
from ..models.backbone import check_drop_path_rate, choose_stem
from ..models.blocks import check_block, check_stem
from ..models.byob import ByobSpec, check_byob
from ..models.config import check_builds
from ..models.external import check_name as check_model_name
from ..models.external import require_pretrained
from ..models.layout import buildup_violations
from ..models.maxxvit import check_maxxvit
from ..models.zoo import HYBRIDS, hybrid_spec, spec_kwargs
from ..training import EVALUATED_METRICS
from ..training.callbacks import check_preemption, parse_interval
from ..training.optim import check_lr_scale_rule, check_optimizer, check_schedule

# enumerated settings that only the config has, checked before any data is loaded (the choices are the code's own)
CHOICES: dict[str, tuple[str, ...]] = {
    "data.interpolation": ("bilinear", "bicubic"),
    "model.buildup_rules": ("warn", "off"),
    "performance.ddp_compression": ("bf16",),
    "performance.compile_mode": ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
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
# enumerated settings that code also takes as a Python API: checked by that code's own function (the constructor
# calls it too); a hybrid family's own choices (model.self_attn_layer, model.msa_block ...) by check_model
DELEGATED: dict[str, Callable[[Any, str], None]] = {
    "data.name": check_name,
    "recipe.optimizer.name": check_optimizer,
    "recipe.schedule.name": check_schedule,
    "recipe.lr_scale_rule": check_lr_scale_rule,
    "model.attention": check_attention,
    "model.block": check_block,
    "model.stem": check_stem,
}
TRAINER_ARGS = frozenset(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
INTEGER_1 = "must be an integer >= 1"


def check_choices(cfg: Mapping[str, Any]) -> None:
    """Each enumerated key holds one of its values, and the trainer section only Trainer arguments."""
    for key, choices in CHOICES.items():
        value = _get(cfg, key)
        if value is not None:
            one_of(key, value, choices)
    for key, check in DELEGATED.items():
        value = _get(cfg, key)
        if value is not None:
            check(value, key)
    unknown = sorted(set(_get(cfg, "trainer") or {}) - TRAINER_ARGS)
    if unknown:
        key = unknown[0]
        raise ConfigValueError(
            f"trainer.{key} is not an argument of lightning.Trainer{suggest(key, TRAINER_ARGS)}; "
            "see https://lightning.ai/docs/pytorch/stable/common/trainer.html#trainer-flags"
        )
    seed = _get(cfg, "seed")
    if not is_integer(seed):
        raise ConfigValueError(f"seed={seed!r} is invalid: must be an integer (e.g. seed=0)")


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _require(cfg: Mapping[str, Any], key: str, check: Callable[[Any], Any], expectation: str) -> None:
    """:func:`alternet.errors.require` of a key that is set (null: the key's own default behaviour)."""
    value = _get(cfg, key)
    if value is not None:
        require(key, value, check, expectation)


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
    # keys only the config has: their one check
    _require(cfg, "recipe.epochs", lambda v: is_integer(v, 1), INTEGER_1)
    _require(cfg, "trainer.max_epochs", lambda v: is_integer(v, 1), INTEGER_1)
    _require(cfg, "recipe.optimizer.lr", lambda v: v > 0, "must be > 0")
    _require(
        cfg,
        "recipe.lr_scale_batch",
        lambda v: is_integer(v, 1),
        "must be an integer >= 1: the global batch recipe.optimizer.lr was tuned for",
    )
    _require(cfg, "recipe.optimizer.weight_decay", lambda v: v >= 0, "must be >= 0")
    _require(cfg, "recipe.label_smoothing", lambda v: 0 <= v < 1, "must be in [0, 1)")
    _require(cfg, "recipe.grad_clip", lambda v: v > 0, "must be > 0 (or null to disable clipping)")
    _require(cfg, "data.image_size", lambda v: is_integer(v, 1), INTEGER_1)
    _require(cfg, "recipe.warmup_epochs", lambda v: v >= 0, "must be >= 0")
    _require(cfg, "recipe.test_flip", lambda v: isinstance(v, bool), "must be true or false")
    _require(cfg, "performance.allow_emulated_precision", lambda v: isinstance(v, bool), "must be true or false")
    _require(cfg, "performance.channels_last", lambda v: v in (True, False, "auto"), "must be auto, true or false")
    _require(cfg, "performance.async_checkpoint", lambda v: v in (True, False, "auto"), "must be auto, true or false")
    _require(cfg, "performance.compile", lambda v: v in (True, False, "auto"), "must be auto, true or false")
    _require(cfg, "recipe.layer_decay", lambda v: 0 < v <= 1, "must be in (0, 1] (or null: no layer-wise decay)")
    # keys a constructor also takes: the constructor's own check, called here before any work
    check_batch_sizes(_get(cfg, "recipe.batch_size"), _get(cfg, "recipe.eval_batch_size"))
    check_augment(_get(cfg, "recipe.augment"))  # every recipe.augment key: its sections, their keys and values
    if _get(cfg, "recipe.drop_path_rate") is not None:
        check_drop_path_rate(_get(cfg, "recipe.drop_path_rate"), "recipe.drop_path_rate")
    if _get(cfg, "data.val_size") is not None:
        check_val_size(_get(cfg, "data.val_size"))
    repeat, clean = _get(cfg, "data.subset_repeat"), _get(cfg, "data.train_clean_size")
    check_subset(_get(cfg, "data.subset"), False if repeat is None else repeat, 0 if clean is None else clean)
    check_workers(_get(cfg, "data.num_workers"), "data.num_workers")
    if _get(cfg, "evaluate") is not None:
        check_settings(_get(cfg, "evaluate"), "evaluate.")
    tracking.wandb_settings(_get(cfg, "logger.wandb"))
    preemption = _get(cfg, "callbacks.preemption")
    if preemption:
        check_preemption(preemption["signals"] or [], preemption["sync_every_n_steps"])
    epochs, warmup = _get(cfg, "trainer.max_epochs"), _get(cfg, "recipe.warmup_epochs")
    if warmup and epochs and warmup > epochs:
        warnings.warn(
            f"recipe.warmup_epochs={warmup} exceeds trainer.max_epochs={epochs}: the learning rate never reaches "
            "its base value (fine for a smoke test, not for a real run)",
            AlternetWarning,
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
        lambda v: is_integer(v, 1),
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
    check_model_builds(cfg)


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
    check_model_name(name, MODEL_NAMES)
    built = spec_kwargs(name) | _overrides(model)  # the architecture as this config builds it
    if built.get("attention") is not None:  # a kind and its bias tables, named by their full keys
        check_attention(built["attention"], "model.attention", bool(built.get("bias_per_head")))
    if model.get("pretrained") is True:
        require_pretrained(name)
    if name in HYBRIDS:
        spec = hybrid_spec(HYBRIDS[name], _overrides(model))
        img_size = int(_get(cfg, "data.image_size") or 32)
        check = check_byob if isinstance(spec, ByobSpec) else check_maxxvit
        check(spec, img_size, choose_stem(spec.stem, img_size))


def check_model_builds(cfg: Mapping[str, Any]) -> None:
    """Last, once the keys it reads are checked: one of our architectures built as this config builds it, on the
    meta device (:func:`alternet.models.config.check_builds`). The class count is the data's, unknown before they
    are read; it sizes only the head, so any count does here."""
    model = _get(cfg, "model") or {}
    if not isinstance(model.get("name"), str) or model["name"] == "???":
        return
    check_builds(
        model,
        num_classes=int(model.get("num_classes") or 2),
        img_size=int(_get(cfg, "data.image_size") or 32),
        drop_path_rate=_get(cfg, "recipe.drop_path_rate"),
    )


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
        warnings.warn(f"{violation} (model.buildup_rules=off for a deliberate contrast)", AlternetWarning, stacklevel=3)


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
