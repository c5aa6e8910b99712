"""The whole training step compiled: what ``performance.compile`` compiles on a run that allows it
(:func:`whole_step_refusal` says which do not; they compile the backbone alone).

Lightning stays the loop (manual optimisation); a step is three compiled regions, the fewest torch allows around
Lightning's backward and optimizer hooks:

1. **forward**: the batch's mixup/cutmix (its parameters drawn on the host exactly as timm's ``Mixup`` draws them, the
   mixing itself on the device), a progressive resize, the forward pass and the smoothed loss;
2. **backward**: compiled autograd, the gradients' accumulation into ``.grad`` included (an eager backward would
   dispatch one operator per parameter to store its gradient);
3. **update**: the non-finite flag, clipping, the optimizer (AdamW or SGD computed over torch's own optimizer state, so
   a checkpoint is the same in both paths and either resumes the other), a non-finite step's update masked out on the
   device (weights, optimizer state and EMA untouched: the guard's skip), and the EMA.

The numbers that change from step to step (the schedule's learning rates, the EMA's weight, the mixing parameters)
reach the device as one tensor per step (pinned, copied without a sync), never as Python numbers baked into a graph:
the schedule, the EMA warm-up and a resume never recompile. One graph per region and input shape (``dynamic=False``,
as :meth:`~alternet.training.module.ClassificationModule.compile_model`). Validation, the clean training subset and
testing run the network through one more compiled graph, each batch padded to the largest (:meth:`WholeStep.predict`),
so an epoch's end does not fall back to eager launches.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from timm.data.mixup import Mixup, cutmix_bbox_and_lam

if TYPE_CHECKING:
    from .module import ClassificationModule

MIX_FIELDS = 6  # per image: the target's weight, the pixels' weight, the cut box (top, bottom, left, right)
BACKEND = "inductor"  # torch.compile's backend (tests trace with "eager": dynamo's graphs without inductor's code)


def whole_step_refusal(precision: str, accumulate: int, devices: int | None, clip_algorithm: str | None) -> str | None:
    """Why a run cannot compile the whole step (it then compiles the backbone alone and the banner says why), or
    None. ``devices``: the processes the run trains on (None when unknown)."""
    if str(precision).startswith("16"):
        return "fp16 scales its loss through Lightning's GradScaler"
    if accumulate != 1:
        return "gradient accumulation is Lightning's, in automatic optimisation"
    if devices != 1:
        return "a compiled step across processes is not yet measured"
    if clip_algorithm not in (None, "norm", "value"):
        return f"gradient_clip_algorithm={clip_algorithm} is not one the step knows"
    return None


def mixing_rows(mixup: Mixup, batch: int, height: int, width: int) -> np.ndarray:
    """Per image, ``MIX_FIELDS`` numbers: the weight of its own label in the target, of its own pixels outside the
    cut box, and the box (rows ``[top, bottom)``, columns ``[left, right)``) pasted from its partner, the image at the
    mirrored position (timm's pairing). Drawn from NumPy's global generator in timm's order, so a seeded batch mixes
    exactly as timm's ``Mixup`` would mix it (``tests/training/test_step.py`` compares them)."""
    if batch % 2:
        raise ValueError(f"mixup/cutmix pairs the images of a batch: its size must be even, not {batch}")
    rows = np.zeros((batch, MIX_FIELDS), dtype=np.float32)
    rows[:, :2] = 1.0  # no mixing
    if mixup.mode == "batch":
        lam, cut = mixup._params_per_batch()
        rows[:] = _row(mixup, lam, cut, height, width)
        return rows
    pairs = mixup.mode == "pair"
    lams, cuts = mixup._params_per_elem(batch // 2 if pairs else batch)
    for i, (lam, cut) in enumerate(zip(lams, cuts, strict=True)):
        rows[i] = _row(mixup, float(lam), bool(cut), height, width)
        if pairs:
            rows[batch - 1 - i] = rows[i]
    return rows


def _row(mixup: Mixup, lam: float, cut: bool, height: int, width: int) -> list[float]:
    if lam == 1.0:
        return [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    if not cut:
        return [lam, lam, 0.0, 0.0, 0.0, 0.0]
    shape = (height, width)
    (top, bottom, left, right), lam = cutmix_bbox_and_lam(shape, lam, mixup.cutmix_minmax, mixup.correct_lam)
    return [lam, 1.0, top, bottom, left, right]


def mix(images: torch.Tensor, labels: torch.Tensor, rows: torch.Tensor, num_classes: int, smoothing: float):
    """The mixed images and their soft targets (timm's ``mixup_target``: label smoothing, then the two labels
    weighted), from :func:`mixing_rows` on the device: fixed shapes, no host number, so it compiles into the step."""
    partner = images.flip(0)
    own, pixels = rows[:, 0:1], rows[:, 1:2].view(-1, 1, 1, 1)
    top, bottom, left, right = (rows[:, k].view(-1, 1, 1, 1) for k in range(2, 6))
    y = torch.arange(images.shape[-2], device=images.device, dtype=rows.dtype).view(1, 1, -1, 1)
    x = torch.arange(images.shape[-1], device=images.device, dtype=rows.dtype).view(1, 1, 1, -1)
    box = (y >= top) & (y < bottom) & (x >= left) & (x < right)
    weight = pixels.to(images.dtype)
    mixed = torch.where(box, partner, images * weight + partner * (1.0 - weight))
    off = smoothing / num_classes
    target = torch.full((len(labels), num_classes), off, device=images.device).scatter_(
        1, labels.long().view(-1, 1), 1.0 - smoothing + off
    )
    return mixed, target * own + target.flip(0) * (1.0 - own)


class WholeStep:
    """The compiled step of one :class:`~alternet.training.module.ClassificationModule`, whose ``training_step``
    hands each batch to :meth:`run`. ``clip``: the gradients' max norm (max value with ``clip_algorithm="value"``)."""

    def __init__(self, module: ClassificationModule, mode: str, clip: float | None, clip_algorithm: str | None):
        self.module = module
        self.clip, self.clip_by_value = clip or None, clip_algorithm == "value"
        self.mixing = module.mixup is not None
        self.smoothing, self.num_classes = module.recipe.label_smoothing, module.num_classes
        compile_ = functools.partial(torch.compile, backend=BACKEND, dynamic=False, **_mode(mode))
        # CUDA graphs for the backward too: compiled autograd moves the backward's CPU scalars to the GPU only when
        # inductor's global switch is on, which a mode (a patch during compilation) does not turn on
        self._graphs = BACKEND == "inductor" and mode in ("reduce-overhead", "max-autotune")
        self._forward = compile_(self._forward_loss)
        self._update = compile_(self._apply_update)
        self._backward_compiler = compile_
        self._predict = {False: compile_(_logits), True: compile_(_ema_logits)}
        self._eval_batch = 0
        self._gathered: tuple[list[dict[str, Any]], list[list[tuple[torch.Tensor, dict]]], Any] | None = None

    def run(
        self, images: torch.Tensor, labels: torch.Tensor, batch_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Forward, backward and update of one batch: its loss, and its correct predictions (None when it is
        mixed)."""
        module = self.module
        optimizer = module.optimizers()
        size = module.training_size()
        height, width = (size, size) if size is not None else images.shape[-2:]
        packed = self._numbers(optimizer.optimizer, len(labels), height, width).to(images.device, non_blocking=True)
        torch.compiler.cudagraph_mark_step_begin()  # CUDA graphs: a new step, the last one's outputs consumed
        loss, correct = self._forward(images, labels, packed, size)
        # a copy for the guard and the displays: a CUDA graph's outputs are overwritten when it runs again
        kept = loss.detach().clone()
        module.guard.check_loss(kept, batch_idx)  # remembered: the update flags the step (deferred mode)
        backward = torch._dynamo.compiled_autograd._enable(self._backward_compiler, dynamic=False)
        graphs = {"triton.cudagraphs": True} if self._graphs and images.device.type == "cuda" else {}
        with torch._inductor.config.patch(graphs), backward:
            module.manual_backward(loss)
        optimizer.optimizer.run_update = functools.partial(self._step, packed)
        optimizer.step()  # Lightning's optimizer hooks and step count, then the compiled update (_step)
        module.lr_schedulers().step()
        return kept, None if correct is None else correct.clone()

    def _step(self, packed: torch.Tensor) -> None:
        _, trained, ema = self._tensors()
        groups = []
        for group in trained:  # torch's optimizers leave a parameter without a gradient alone
            present = [(p, state) for p, state in group if p.grad is not None]
            groups.append(([p for p, _ in present], [p.grad for p, _ in present], [state for _, state in present]))
        self.module.guard.record(self._update(packed, groups, ema))
        for group in trained:  # consumed: the next backward stores fresh ones (and a CUDA graph's outputs go stale)
            for p, _ in group:
                p.grad = None

    @staticmethod
    def evaluation_starts() -> None:
        """A validation or test loop begins: a new CUDA-graph generation, so that its graphs are not recorded as
        children of the training step's (not per batch: a flip-averaged prediction holds its first output while it
        makes the second)."""
        torch.compiler.cudagraph_mark_step_begin()

    def predict(self, net: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
        """``net``'s logits (the backbone or its EMA, in eval mode) through one compiled graph each: a batch is
        padded to the evaluation's batch size (the data module's; else the largest seen), so a short last batch, or
        a split smaller than a batch, runs the same graph (an eval-mode network computes each image alone: the
        padding changes no logit)."""
        if self.module.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        count = len(images)
        datamodule = getattr(self.module.trainer, "datamodule", None)
        self._eval_batch = max(self._eval_batch, count, getattr(datamodule, "eval_batch_size", 0))
        if count < self._eval_batch:
            images = torch.cat([images, images.new_zeros((self._eval_batch - count, *images.shape[1:]))])
        return self._predict[net is self.module.ema](net, images)[:count]

    def reset(self) -> None:
        """Gather the tensors again at the next step: a fit starts (the module may have moved, a checkpoint may have
        replaced the optimizer's state)."""
        self._gathered = None

    # what crosses from the host ------------------------------------------------------------------------------------

    def _numbers(self, optimizer: torch.optim.Optimizer, batch: int, height: int, width: int) -> torch.Tensor:
        """This step's learning rate per parameter group, the EMA's weight and the mixing rows, in one host tensor
        (pinned where a GPU will read it)."""
        module = self.module
        lrs = [group["lr"] for group in optimizer.param_groups]
        ema = 1.0 - module.ema_decay(module.global_step + 1) if module.ema is not None else 0.0
        rows = mixing_rows(module.mixup, batch, height, width).ravel().tolist() if self.mixing else []
        return torch.tensor([*lrs, ema, *rows], dtype=torch.float32, pin_memory=module.device.type == "cuda")

    def _tensors(self) -> tuple[list[dict[str, Any]], list[list[tuple[torch.Tensor, dict]]], Any]:
        """Each group's hyperparameters, its trained parameters with their optimizer state (created as torch's
        optimizer creates it, so that the checkpoint is torch's), and the EMA's tensor pairs; once per fit."""
        if self._gathered is None:
            module = self.module
            optimizer = module.optimizers().optimizer
            adamw = isinstance(optimizer, torch.optim.AdamW)
            keys = ("betas", "eps", "weight_decay") if adamw else ("momentum", "nesterov", "weight_decay")
            hyper = [{"adamw": adamw, **{k: group[k] for k in keys}} for group in optimizer.param_groups]
            trained = [
                [(p, init_state(optimizer, group, p)) for p in group["params"] if p.requires_grad]
                for group in optimizer.param_groups
            ]
            ema = module._ema_pairs() if module.ema is not None else None
            static = [t for _, state in itertools.chain(*trained) for t in state.values()]
            if ema is not None:
                static += [*ema[0], *ema[1], *itertools.chain(*ema[2])]
            for tensor in static:  # updated in place or read every step: CUDA graphs keep their addresses
                torch._dynamo.mark_static_address(tensor)
            self._gathered = hyper, trained, ema
        return self._gathered

    # the compiled regions -------------------------------------------------------------------------------------------

    def _forward_loss(self, images: torch.Tensor, labels: torch.Tensor, packed: torch.Tensor, size: int | None):
        module = self.module
        if size is not None:
            images = F.interpolate(images, size=size, mode="area")  # progressive resizing
        targets = labels
        if self.mixing:
            rows = packed[-len(labels) * MIX_FIELDS :].view(len(labels), MIX_FIELDS)
            images, targets = mix(images, labels, rows, self.num_classes, self.smoothing)
        logits = module(images)
        loss = module.train_loss(logits, targets)
        return loss, None if self.mixing else (logits.argmax(-1) == labels).sum()

    @torch.no_grad()
    def _apply_update(self, packed: torch.Tensor, groups: list, ema: Any) -> torch.Tensor:
        hyper = self._gathered[0]
        grads = [g for _, group_grads, _ in groups for g in group_grads]
        found = ~torch.isfinite(torch.stack(torch._foreach_norm(grads, float("inf"))).max())
        keep = (~found).float()
        safe = [torch.where(found, 0.0, g) for g in grads]  # a skipped step moves nothing (NaN x 0 is NaN)
        scale = keep
        if self.clip and self.clip_by_value:
            safe = torch._foreach_clamp_max(torch._foreach_clamp_min(safe, -self.clip), self.clip)
        elif self.clip:  # torch.nn.utils.clip_grad_norm_
            total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(safe)))
            scale = keep * torch.clamp(self.clip / (total + 1e-6), max=1.0)
        safe = torch._foreach_mul(safe, scale)
        start = 0
        for index, (group, (params, _, states)) in enumerate(zip(hyper, groups, strict=True)):
            group_grads, start = safe[start : start + len(params)], start + len(params)
            update = adamw_update if group["adamw"] else sgd_update
            update(group, params, group_grads, states, packed[index], keep)
        if ema is not None:
            ema_update_(*ema, packed[len(hyper)] * keep)
        return found.float()


def ema_update_(
    averaged: list[torch.Tensor], current: list[torch.Tensor], others: list[tuple[torch.Tensor, torch.Tensor]], weight
) -> None:
    """averaged += (current - averaged) * weight, a float or a device tensor (0 on a skipped step: nothing moves, as
    no Python branch could say inside a graph); the other (integer) tensors copied. Not ``_foreach_lerp_``: it has no
    tensor-weight form, and a device tensor read as its Scalar would be a host sync every step."""
    if averaged:
        torch._foreach_add_(averaged, torch._foreach_mul(torch._foreach_sub(current, averaged), weight))
    for e, p in others:
        e.copy_(p)


def _logits(net: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    return net(images)


def _ema_logits(net: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """:func:`_logits` under another name: dynamo caches graphs per function, and the EMA's graph is its own (its
    parameters do not require gradients)."""
    return net(images)


def _mode(mode: str) -> dict[str, Any]:
    return {"mode": mode} if BACKEND == "inductor" else {}  # the eager backend takes no mode


def init_state(optimizer: torch.optim.Optimizer, group: dict, param: torch.Tensor) -> dict[str, torch.Tensor]:
    """``param``'s state as torch's optimizer creates it on its first step (capturable: the step count a device
    tensor), unless a checkpoint or an earlier step has created it."""
    state = optimizer.state[param]
    if isinstance(optimizer, torch.optim.AdamW):
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=param.device)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        state["step"] = state["step"].to(param.device)
    elif group["momentum"] and state.get("momentum_buffer") is None:
        state["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    return state


def adamw_update(group: dict, params: list, grads: list, states: list[dict], lr: torch.Tensor, keep: torch.Tensor):
    """torch's AdamW (decoupled weight decay, bias-corrected moments), each change times ``keep`` (0 on a skipped
    step, whose ``grads`` are zeros: nothing moves)."""
    if not params:
        return
    beta1, beta2 = group["betas"]
    steps = [state["step"] for state in states]
    torch._foreach_add_(steps, [keep] * len(steps))  # (a tensor scalar would break the graph, torch 2.14)
    counted = torch._foreach_clamp_min(steps, 1.0)  # a skipped first step divides by no zero
    first = torch._foreach_add(torch._foreach_neg(torch._foreach_pow(beta1, counted)), 1.0)  # 1 - beta1^t
    second = torch._foreach_sqrt(torch._foreach_add(torch._foreach_neg(torch._foreach_pow(beta2, counted)), 1.0))
    torch._foreach_mul_(params, 1.0 - lr * group["weight_decay"] * keep)
    averages, squares = [state["exp_avg"] for state in states], [state["exp_avg_sq"] for state in states]
    torch._foreach_add_(averages, torch._foreach_mul(torch._foreach_sub(grads, averages), (1.0 - beta1) * keep))
    torch._foreach_mul_(squares, 1.0 - (1.0 - beta2) * keep)
    torch._foreach_addcmul_(squares, grads, grads, value=1.0 - beta2)
    denominators = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(squares), second), group["eps"])
    updates = torch._foreach_mul(torch._foreach_div(averages, denominators), lr * keep)
    torch._foreach_sub_(params, torch._foreach_div(updates, first))


def sgd_update(group: dict, params: list, grads: list, states: list[dict], lr: torch.Tensor, keep: torch.Tensor):
    """torch's SGD (weight decay added to the gradient, momentum, Nesterov), each change times ``keep``."""
    if not params:
        return
    directions = torch._foreach_mul(torch._foreach_add(grads, params, alpha=group["weight_decay"]), keep)
    momentum = group["momentum"]
    if momentum:
        buffers = [s["momentum_buffer"] for s in states]
        torch._foreach_mul_(buffers, 1.0 + (momentum - 1.0) * keep)
        torch._foreach_add_(buffers, directions)
        directions = torch._foreach_add(directions, buffers, alpha=momentum) if group["nesterov"] else buffers
    torch._foreach_sub_(params, torch._foreach_mul(directions, lr * keep))


@functools.cache
def stepped(optimizer_class: type[torch.optim.Optimizer]) -> type[torch.optim.Optimizer]:
    """``optimizer_class`` whose ``step`` runs the whole step's compiled update (set per step by :class:`WholeStep`)
    after Lightning's closure (its ``on_before_optimizer_step`` hooks); its state and checkpoints are the class's."""

    class Stepped(optimizer_class):
        run_update: Callable[[], None] | None = None

        def step(self, closure: Callable[[], Any] | None = None) -> Any:
            loss = closure() if closure is not None else None
            self.run_update()
            return loss

    Stepped.__name__ = Stepped.__qualname__ = optimizer_class.__name__
    return Stepped
