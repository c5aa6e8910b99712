"""Optimisers and per-step learning-rate schedules from a recipe (which parameters decay:
:func:`alternet.models.params.decay_groups`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ..errors import ConfigValueError, one_of
from .config import SCHEDULES, OptimizerConfig, RecipeConfig, ScheduleConfig
from .step import stepped as stepped_class


def scaled_lr(recipe: RecipeConfig, global_batch: int) -> float:
    """The learning rate for ``global_batch`` images per optimizer step (per-device batch x devices x accumulated
    batches): ``recipe.optimizer.lr`` was tuned for ``recipe.lr_scale_batch`` and follows the actual global batch by
    ``recipe.lr_scale_rule``: ``linear`` (Goyal et al. 2017), ``sqrt`` (for adaptive optimisers, where a recipe says
    so) or ``none`` (the rate as written, at any batch)."""
    rule, lr, reference = recipe.lr_scale_rule, recipe.optimizer.lr, recipe.lr_scale_batch
    if rule == "none" or global_batch == reference:
        return lr
    ratio = global_batch / float(reference)
    return lr * (ratio if rule == "linear" else math.sqrt(ratio))


def check_min_lr(recipe: RecipeConfig, global_batch: int) -> None:
    """The cosine's floor below the rate it decays from, the recipe's scaled to the global batch: above it, the
    "decay" climbs to it."""
    min_lr = recipe.schedule.min_lr if recipe.schedule.name == "cosine" else None
    lr = scaled_lr(recipe, global_batch)
    if min_lr is not None and min_lr > lr:
        scaled = (
            ""
            if lr == recipe.optimizer.lr
            else f" (recipe.optimizer.lr={recipe.optimizer.lr:g} scaled {recipe.lr_scale_rule} from "
            f"recipe.lr_scale_batch={recipe.lr_scale_batch} to the global batch {global_batch})"
        )
        raise ConfigValueError(
            f"recipe.schedule.min_lr={min_lr:g} is above the learning rate the cosine decays from, {lr:g}{scaled}: "
            "set min_lr below it (0.0: to zero)"
        )


def build_optimizer(
    groups: list[dict[str, Any]], config: OptimizerConfig, lr: float, *, fused: bool = False, stepped: bool = False
) -> torch.optim.Optimizer:
    """AdamW or SGD; each group's ``lr_scale`` multiplies the base learning rate. ``fused``: torch's single-kernel
    implementation, which can also skip a step on the device (:mod:`alternet.training.guard`). ``stepped``: the
    compiled whole step computes the update (:func:`alternet.training.step.stepped`); the state is the same."""
    for group in groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
    if config.name == "adamw":
        kind, options = torch.optim.AdamW, {"betas": tuple(config.betas)}
    else:
        kind, options = torch.optim.SGD, {"momentum": config.momentum, "nesterov": bool(config.nesterov)}
    return (stepped_class(kind) if stepped else kind)(groups, lr=lr, fused=fused or None, **options)


def lr_factor(
    step: int,
    *,
    total_steps: int,
    warmup_steps: int,
    schedule: str = "cosine",
    milestones: Sequence[int] = (),
    gamma: float = 0.1,
    min_lr_ratio: float = 0.0,
) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based).

    Linear warm-up reaches 1 at the last warm-up step; then ``cosine`` decays to ``min_lr_ratio`` at
    ``total_steps``, ``step`` multiplies by ``gamma`` at each milestone (steps counted from the start),
    ``constant`` stays at 1.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "cosine":
        progress = min((step - warmup_steps) / max(total_steps - warmup_steps, 1), 1.0)
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "step":
        return gamma ** sum(step >= m for m in milestones)
    one_of("recipe.schedule.name", schedule, SCHEDULES)  # constant is what is left
    return 1.0


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    config: ScheduleConfig,
    *,
    steps_per_epoch: int,
    epochs: int,
    warmup_epochs: float,
    base_lr: float,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step LambdaLR; step milestones are given in epochs after warm-up."""
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    name = config.name  # each schedule's keys: cosine {min_lr}, step {milestones, gamma}, constant {}
    milestones = [warmup_steps + int(m * steps_per_epoch) for m in config.milestones] if name == "step" else []
    gamma = config.gamma if name == "step" else 1.0
    min_lr = config.min_lr if name == "cosine" else 0.0

    def factor(step: int) -> float:
        return lr_factor(
            step,
            total_steps=epochs * steps_per_epoch,
            warmup_steps=warmup_steps,
            schedule=name,
            milestones=milestones,
            gamma=gamma,
            min_lr_ratio=min_lr / base_lr if base_lr else 0.0,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def rescale_learning_rates(optimizer: torch.optim.Optimizer, scheduler: Any, ratio: float) -> None:
    """Multiply the base rates of a restored optimizer's schedule by ``ratio``: a resumed run with a new
    ``recipe.optimizer.lr`` continues the same schedule from the new base (its floor, ``recipe.schedule.min_lr``,
    stays: with none, every rate is ``ratio`` times the saved one). The current rates are the schedule's at the
    restored step, so the first step after the resume follows the same rule as the rest."""
    for group in optimizer.param_groups:
        if "initial_lr" in group:
            group["initial_lr"] *= ratio
        if scheduler is None:
            group["lr"] *= ratio
    if scheduler is not None:
        scheduler.base_lrs = [lr * ratio for lr in scheduler.base_lrs]
        for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
            group["lr"] = base * factor(scheduler.last_epoch)  # the schedule's rate, not the restored one x ratio
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
