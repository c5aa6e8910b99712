"""Optimisers, parameter groups and per-step learning-rate schedules from a recipe."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("cosine", "step", "constant")


def parameter_groups(
    named_params: Iterable[tuple[str, nn.Parameter]],
    weight_decay: float,
    *,
    no_decay_names: set[str] = frozenset(),
    exclude_norm_bias: bool = False,
    lr_scale: float = 1.0,
) -> list[dict[str, Any]]:
    """Split trainable parameters into a decayed and an undecayed group.

    With ``exclude_norm_bias``, 1-D parameters (norm scales/shifts, biases) and ``no_decay_names``
    (e.g. relative position bias tables) get no weight decay.
    """
    decay, no_decay = [], []
    for name, param in named_params:
        if not param.requires_grad:
            continue
        skip = exclude_norm_bias and (param.ndim <= 1 or name in no_decay_names)
        (no_decay if skip else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay, "lr_scale": lr_scale}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0, "lr_scale": lr_scale})
    return groups


def build_optimizer(groups: list[dict[str, Any]], config: Mapping[str, Any], lr: float) -> torch.optim.Optimizer:
    """AdamW or SGD; each group's ``lr_scale`` multiplies the base learning rate."""
    name = str(config["name"]).lower()
    for group in groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=lr, betas=tuple(config.get("betas", (0.9, 0.999))))
    if name == "sgd":
        return torch.optim.SGD(
            groups, lr=lr, momentum=config.get("momentum", 0.9), nesterov=bool(config.get("nesterov", False))
        )
    raise ValueError(f"unknown recipe.optimizer.name={config['name']!r}; choose one of {list(OPTIMIZERS)}")


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
    if schedule == "constant":
        return 1.0
    raise ValueError(f"unknown recipe.schedule.name={schedule!r}; choose one of {list(SCHEDULES)}")


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    config: Mapping[str, Any],
    *,
    steps_per_epoch: int,
    epochs: int,
    warmup_epochs: float,
    base_lr: float,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step LambdaLR; step milestones are given in epochs after warm-up."""
    warmup_steps = round(warmup_epochs * steps_per_epoch)
    milestones = [warmup_steps + int(m * steps_per_epoch) for m in config.get("milestones") or ()]
    min_lr = float(config.get("min_lr", 0.0))

    def factor(step: int) -> float:
        return lr_factor(
            step,
            total_steps=epochs * steps_per_epoch,
            warmup_steps=warmup_steps,
            schedule=config.get("name", "cosine"),
            milestones=milestones,
            gamma=float(config.get("gamma", 0.1)),
            min_lr_ratio=min_lr / base_lr if base_lr else 0.0,
        )

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
