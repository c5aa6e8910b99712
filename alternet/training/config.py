"""The typed sections training takes: the recipe (``recipe=``), the callbacks, the performance switches and the
export after training. Keys and types only; every default is in ``conf`` (:mod:`alternet.typed`).

The schema imports no torch, so that the command line's help answers at once: what needs torch or Lightning to check
(the Trainer's arguments, the model's build) is checked by :mod:`alternet.apps.checks` before any work."""

from __future__ import annotations

import ast
import functools
import importlib.util
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..data.augment import AugmentConfig
from ..errors import ConfigValueError, is_integer, suggest
from ..typed import SECTION, Section, integer
from .stopping import check_preemption

OPTIMIZERS = ("adamw", "sgd")  # lower case, as written in the recipes (built by alternet.training.optim)
SCHEDULES = ("cosine", "step", "constant")
LR_SCALE_RULES = ("linear", "sqrt", "none")


def parse_interval(value: float | str | None) -> float | None:
    """Seconds from a number or ``"DD:HH:MM:SS"`` / ``"HH:MM:SS"`` (Lightning's ``max_time`` format)."""
    if value is None or isinstance(value, bool):  # (a boolean is no number of seconds: refused by the check)
        return None if value is None else float("nan")
    if isinstance(value, int | float):
        return float(value)
    parts = [float(p) for p in str(value).split(":")]
    if len(parts) > 4 or any(not 0 <= part < math.inf for part in parts):  # five fields, -30, inf: refused
        return float("nan")
    return sum(part * unit for part, unit in zip(reversed(parts), (1, 60, 3600, 86400)))


COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def needed(section: Section, keys: dict[str, dict[str, str]]) -> None:
    """The keys the section's chosen ``name`` needs (name -> key -> an example), each set."""
    for key, example in keys.get(section.name, {}).items():
        if getattr(section, key) is None:
            raise ConfigValueError(f"{key} must be set with name={section.name} (e.g. {example})")


@dataclass(kw_only=True)
class OptimizerConfig(Section):
    """``{name: adamw, lr, weight_decay, betas}`` or ``{name: sgd, lr, momentum, nesterov, weight_decay}``."""

    name: str
    lr: float
    weight_decay: float
    betas: list[float] | None = None  # adamw's
    momentum: float | None = None  # sgd's
    nesterov: bool | None = None  # sgd's

    def check(self) -> None:
        self.one_of("name", OPTIMIZERS)
        self.require("lr", lambda v: v > 0, "must be > 0")
        self.require("weight_decay", lambda v: v >= 0, "must be >= 0")
        self.require("betas", lambda v: len(v) == 2 and all(0 <= b < 1 for b in v), "must be two numbers in [0, 1)")
        self.require("momentum", lambda v: 0 <= v < 1, "must be in [0, 1)")
        needed(self, {"adamw": {"betas": "[0.9, 0.999]"}, "sgd": {"momentum": "0.9"}})
        if self.name == "sgd" and self.nesterov and not self.momentum:  # torch refuses it when the optimizer is built
            raise ConfigValueError("nesterov=true needs momentum > 0 (e.g. momentum=0.9), or set nesterov=false")


@dataclass(kw_only=True)
class ScheduleConfig(Section):
    """``{name: cosine, min_lr}`` (per step, reaching min_lr at ``total_steps``, the step after the last),
    ``{name: step, milestones, gamma}`` or ``{name: constant}``."""

    name: str
    min_lr: float | None = None  # cosine's
    milestones: list[int] | None = None  # step's
    gamma: float | None = None  # step's

    def check(self) -> None:
        self.one_of("name", SCHEDULES)
        self.require("min_lr", lambda v: v >= 0, "must be >= 0")
        self.require("milestones", lambda v: all(m >= 0 for m in v), "must be epochs after warm-up, each >= 0")
        self.require("gamma", lambda v: 0 < v <= 1, "must be in (0, 1]")
        needed(self, {"cosine": {"min_lr": "0.0"}, "step": {"milestones": "[60, 120, 160]", "gamma": "0.2"}})


@dataclass(kw_only=True)
class EmaConfig(Section):
    """An exponential moving average of the weights, updated once per optimizer step; ``decay: null``: none."""

    OFF: ClassVar[str] = "decay=null"  # the settings that switch it off

    decay: float | None
    warmup: bool  # decay min(decay, (1 + t) / (10 + t)): TensorFlow's num_updates rule (not timm's V3 warm-up)

    @property
    def enabled(self) -> bool:
        return self.decay is not None

    def check(self) -> None:
        self.require("decay", lambda v: 0 < v < 1, "must be in (0, 1)")


@dataclass(kw_only=True)
class MixupConfig(Section):
    """timm's ``Mixup`` arguments (label smoothing comes from the recipe); both alphas 0: no mixing."""

    OFF: ClassVar[str] = "mixup_alpha=0 cutmix_alpha=0"  # the settings that switch it off

    mixup_alpha: float
    cutmix_alpha: float
    prob: float
    switch_prob: float
    mode: str

    @property
    def enabled(self) -> bool:
        return bool(self.mixup_alpha or self.cutmix_alpha)

    def check(self) -> None:
        self.require("mixup_alpha", lambda v: v >= 0, "must be >= 0")
        self.require("cutmix_alpha", lambda v: v >= 0, "must be >= 0")
        self.require("prob", lambda v: 0 <= v <= 1, "must be in [0, 1]")
        self.require("switch_prob", lambda v: 0 <= v <= 1, "must be in [0, 1]")
        self.one_of("mode", ("batch", "pair", "elem"))


@dataclass(kw_only=True)
class ProgressiveResizeConfig(Section):
    """Training in stages of growing size: the first ``epochs[0]`` epochs on batches downsampled to ``sizes[0]``
    px, the next ``epochs[1]`` at ``sizes[1]`` ..., the rest at the data's own size (checked against the model and
    the training size when the module is built); no sizes: none."""

    OFF: ClassVar[str] = "sizes=[] epochs=[]"  # the settings that switch it off

    sizes: list[int]
    epochs: list[int]

    @property
    def enabled(self) -> bool:
        return bool(self.sizes)

    def check(self) -> None:
        self.require("sizes", _ascending_sizes, "a list of integers >= 1, each larger than the one before")
        self.require("epochs", lambda v: all(is_integer(e, 1) for e in v), "a list of integers >= 1")
        if len(self.sizes) != len(self.epochs):
            raise ConfigValueError(
                f"epochs={list(self.epochs)!r} is invalid: one number of epochs per size in sizes={list(self.sizes)!r}"
            )


def _ascending_sizes(sizes: list[int]) -> bool:
    return all(is_integer(s, 1) for s in sizes) and all(a < b for a, b in itertools.pairwise(sizes))


@dataclass(kw_only=True)
class FinetuneConfig(Section):
    """With ``model.pretrained=SOURCE``: a linear probe, or the backbone at a fraction of the head's rate."""

    freeze_backbone: bool
    backbone_lr_scale: float

    def check(self) -> None:
        self.require("backbone_lr_scale", lambda v: v >= 0, "must be >= 0")


@dataclass(kw_only=True)
class RecipeConfig(Section):
    """A training recipe (``recipe=``): conf/recipe/_base.yaml says what each key does."""

    name: str
    epochs: int
    warmup_epochs: float
    batch_size: int  # per device
    eval_batch_size: int | None
    optimizer: OptimizerConfig
    lr_scale_batch: int
    lr_scale_rule: str
    no_decay_norm_bias: bool
    schedule: ScheduleConfig
    grad_clip: float | None
    drop_path_rate: float
    label_smoothing: float
    mixup: MixupConfig
    augment: Any = field(metadata={SECTION: AugmentConfig})  # a section per data family (alternet.data.augment)
    ema: EmaConfig
    progressive_resize: ProgressiveResizeConfig
    test_flip: bool
    layer_decay: float | None
    finetune: FinetuneConfig

    def check(self) -> None:
        self.require("epochs", integer(1), "must be an integer >= 1")
        self.require("warmup_epochs", lambda v: v >= 0, "must be >= 0")
        self.require("batch_size", integer(1), "must be an integer >= 1")
        self.require("eval_batch_size", integer(1), "must be an integer >= 1")
        self.require(
            "lr_scale_batch", integer(1), "must be an integer >= 1: the global batch recipe.optimizer.lr was tuned for"
        )
        self.one_of("lr_scale_rule", LR_SCALE_RULES)
        self.require("grad_clip", lambda v: v > 0, "must be > 0 (or null to disable clipping)")
        self.require("drop_path_rate", lambda v: 0 <= v < 1, "must be in [0, 1)")  # as AlterNet's constructor
        self.require("label_smoothing", lambda v: 0 <= v < 1, "must be in [0, 1)")
        self.require("layer_decay", lambda v: 0 < v <= 1, "must be in (0, 1] (or null: no layer-wise decay)")
        self.require(
            "batch_size", lambda v: not self.mixup.enabled or v % 2 == 0, "mixup/cutmix needs an even batch size"
        )
        if self.layer_decay is not None and (self.finetune.freeze_backbone or self.finetune.backbone_lr_scale != 1):
            raise ConfigValueError(
                "layer_decay sets every block's learning rate itself: drop recipe.finetune.freeze_backbone / "
                "backbone_lr_scale, or recipe.layer_decay"
            )


@dataclass(kw_only=True)
class CheckpointConfig(Section):
    """Lightning's ``ModelCheckpoint`` settings (``best`` needs a validation split)."""

    monitor: str | None
    mode: str | None  # None: the monitor's own direction (val/acc: max, val/nll: min)
    save_top_k: int
    save_last: bool
    every_n_epochs: int
    every_n_train_steps: int | None
    train_time_interval: Any  # seconds or "DD:HH:MM:SS"

    def check(self) -> None:
        self.require("mode", lambda v: v in ("min", "max"), "must be min, max or null (the monitored metric's own)")
        self.require("save_top_k", integer(-1), "must be an integer >= -1 (-1: every checkpoint, 0: none but last)")
        self.require("every_n_epochs", integer(1), "must be an integer >= 1")
        self.require(
            "every_n_train_steps", integer(1), "must be an integer >= 1 (or null: checkpoints at epoch ends only)"
        )
        self.require(
            "train_time_interval",
            lambda v: 0 < parse_interval(v) < math.inf,
            'must be seconds or "DD:HH:MM:SS", e.g. "00:00:30:00" (or null)',
        )


@dataclass(kw_only=True)
class PreemptionConfig(Section):
    """On these signals: finish the step, save a resumable ``last.ckpt``, stop (and requeue under SLURM)."""

    signals: list[str]
    requeue: bool
    sync_every_n_steps: int

    def check(self) -> None:
        check_preemption(self.signals, self.sync_every_n_steps, key="")


@dataclass(kw_only=True)
class ProgressConfig(Section):
    interval: float  # seconds between progress lines when the output is not a terminal

    def check(self) -> None:
        self.require("interval", lambda v: v >= 0, "must be seconds >= 0 (0: a line after every step)")


@dataclass(kw_only=True)
class CallbacksConfig(Section):
    checkpoint: CheckpointConfig
    early_stopping: Any  # Lightning's EarlyStopping arguments, or null
    preemption: PreemptionConfig | None
    progress: ProgressConfig
    extra: list[Any]  # the user's Lightning callbacks, each a _target_ (apps.extensions)


@dataclass(kw_only=True)
class PerformanceConfig(Section):
    """How a run computes, never what (train.yaml says what each switch does)."""

    grad_checkpointing: bool
    channels_last: Any  # auto | true | false
    allow_emulated_precision: bool
    compile: Any  # auto | true | false | backbone
    compile_mode: str
    matmul_precision: str | None
    ddp_compression: str | None
    async_checkpoint: Any  # auto | true | false

    def check(self) -> None:
        for key in ("channels_last", "async_checkpoint"):
            self.require(key, lambda v: v == "auto" or isinstance(v, bool), "must be auto, true or false")
        self.require(
            "compile",
            lambda v: v in ("auto", "backbone") or isinstance(v, bool),
            "must be auto, true, false or backbone",
        )
        self.one_of("compile_mode", COMPILE_MODES)
        self.one_of("matmul_precision", ("highest", "high", "medium"))
        self.one_of("ddp_compression", ("bf16",))


@dataclass(kw_only=True)
class ExportConfig(Section):
    after_training: bool
    ema: bool
    wandb_artifacts: bool


@dataclass(kw_only=True)
class TrainerConfig(Section):
    """``trainer``: lightning.Trainer's arguments (``conf/trainer/*.yaml``). The keys alternet reads are typed here;
    any other Trainer argument (``+trainer.KEY=VALUE``) is kept in ``extra``, its name checked here against the
    Trainer's source (:func:`trainer_arguments`); Lightning's own tables (its signature, its precisions) are read by
    :func:`alternet.apps.checks.check_trainer`, before any work."""

    OPEN = True
    accelerator: str  # auto | cpu | gpu | cuda | mps ...
    devices: int | str | list[int]  # a count, auto, -1 (all) or device indices
    num_nodes: int
    precision: str | int  # auto, or one of Lightning's (16-mixed, bf16-mixed, 32-true ...)
    max_epochs: int
    max_steps: int  # -1: max_epochs
    accumulate_grad_batches: int  # batches per optimizer step: the global batch and the schedule's length hold it
    enable_progress_bar: bool
    extra: dict[str, Any] = field(default_factory=dict)  # Lightning's other arguments

    def check(self) -> None:
        self.require("max_epochs", integer(1), "must be an integer >= 1")
        self.require("max_steps", lambda v: v == -1 or is_integer(v, 1), "must be an integer >= 1, or -1 (no limit)")
        self.require("accumulate_grad_batches", integer(1), "must be an integer >= 1")
        self.require(
            "devices",
            lambda v: v in ("auto", -1, "-1") or (isinstance(v, int) and v >= 1) or isinstance(v, list | str),
            "must be auto, -1 (all), a count >= 1 or a list of device indices",
        )
        known = trainer_arguments()
        if known is not None:  # else the command asks Lightning itself (apps.checks.check_trainer)
            check_trainer_keys(self.extra, known)


@functools.cache
def trainer_arguments() -> frozenset[str] | None:
    """``lightning.Trainer``'s argument names, read from its source file without importing Lightning (and torch);
    ``None`` where the file is not where Lightning keeps it or does not say."""
    spec = importlib.util.find_spec("lightning")  # finds the package without running it
    try:
        source = Path(spec.origin).parent / "pytorch" / "trainer" / "trainer.py"  # type: ignore[union-attr, arg-type]
        tree = ast.parse(source.read_text(encoding="utf-8"))
        trainer = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
        init = next(n for n in trainer.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    except (AttributeError, TypeError, OSError, SyntaxError, StopIteration):
        return None
    arguments = init.args
    if arguments.kwarg is not None:  # **kwargs: any name would do
        return None
    return frozenset(a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]) - {"self"}


def check_trainer_keys(extra: dict[str, Any], known: frozenset[str]) -> None:
    """Each other argument (``+trainer.KEY=VALUE``) is one of Lightning's ``Trainer``'s."""
    for key in extra:
        if key not in known:
            raise ConfigValueError(
                f"trainer.{key} is not an argument of lightning.Trainer{suggest(key, known)}; "
                "see https://lightning.ai/docs/pytorch/stable/common/trainer.html#trainer-flags"
            )
