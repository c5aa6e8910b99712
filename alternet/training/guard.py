"""The non-finite guard: stop at the first NaN/inf training step, save a checkpoint that resumes before it, name the
step, and cost the hot path neither a host sync nor a collective.

Deferred mode (a fused optimizer, no fp16 GradScaler, one device or DDP): each step computes a non-finite flag of its
gradients on the device and hands it to the fused optimizer as ``found_inf``, which then skips the update on the
device (weights and optimizer state untouched). The flag is read one step later, when the next step's forward and
backward are already queued, so reading it never drains the device's queue; the last step of an epoch is read at
once (one sync per epoch). Under DDP every rank holds the same all-reduced gradients, so every rank reaches the same
decision without a collective. Otherwise (fp16 with a GradScaler, other strategies or optimizers) the loss is checked
on every step, synchronously, across ranks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from lightning.fabric.utilities.types import _Stateful
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from ..errors import AlternetError
from ..runs.directories import RunDir
from ..runs.records import resume_command
from .callbacks import written_before_any_rank_ends

if TYPE_CHECKING:
    import lightning as L


class NonFiniteLossError(AlternetError, FloatingPointError):
    """The training loss or its gradients became NaN or infinite."""


def fused_optimizer_supported(device: torch.device, precision: str) -> bool:
    """Fused AdamW/SGD (which can skip a step on the device) exist for CPUs and CUDA; Lightning refuses gradient
    clipping with a fused optimizer under an fp16 GradScaler, so fp16 keeps the multi-tensor ones."""
    return device.type in ("cpu", "cuda") and not str(precision).startswith("16")


def uses_grad_scaler(trainer: Any) -> bool:
    """fp16 training: Lightning's precision plugin scales the loss, and gradients stay scaled until the step."""
    return getattr(trainer.precision_plugin, "scaler", None) is not None


class BufferSnapshots:
    """The buffers (BatchNorm running statistics) of the model and its EMA as each of the last two steps found them: a
    forward pass that went non-finite has already changed the model's, the step's EMA update carried them into the
    EMA's, and the guard may learn of it only during the next step."""

    def __init__(self) -> None:
        self._slots: dict[int, tuple[int, list[torch.Tensor]]] = {}

    def take(self, modules: list[torch.nn.Module], step: int) -> None:
        buffers = [buffer for module in modules for buffer in module.buffers()]
        if not buffers:  # e.g. a ViT: nothing a forward pass could have changed
            return
        slot = self._slots.get(step % 2)
        if slot is not None and slot[0] == step:  # a later micro-batch of the same optimizer step
            return
        copies = slot[1] if slot is not None else None
        if copies is None or len(copies) != len(buffers) or copies[0].device != buffers[0].device:
            copies = [b.detach().clone() for b in buffers]
        else:
            torch._foreach_copy_(copies, buffers)
        self._slots[step % 2] = (step, copies)

    def restore(self, modules: list[torch.nn.Module], step: int) -> None:
        slot = self._slots.get(step % 2)
        if slot is not None and slot[0] == step:
            torch._foreach_copy_([buffer for module in modules for buffer in module.buffers()], slot[1])


class HostFlags:
    """Device flags on their way to the host. A CUDA flag is copied into pinned memory behind an event, so reading it
    a step later waits for that step's flag only, not for the work queued after it (``.item()`` would wait for all
    of it); two pinned slots alternate by step. A CPU flag is read directly (a CPU has no queue to drain)."""

    def __init__(self) -> None:
        self._pinned: list[torch.Tensor] = []

    def send(self, found: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        if found.device.type != "cuda":
            return found, None
        if not self._pinned:
            self._pinned = [torch.zeros((), pin_memory=True) for _ in range(2)]
        host = self._pinned[step % 2]
        host.copy_(found, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        return host, event

    @staticmethod
    def read(copied: tuple[torch.Tensor, torch.cuda.Event | None]) -> bool:
        host, event = copied
        if event is not None:
            event.synchronize()
        return bool(host.item())


@dataclass
class _Step:
    """One optimizer step as the guard remembers it until its flag is read."""

    step: int
    epoch: int
    batch: int
    loss: torch.Tensor
    found: torch.Tensor | None = None  # 1.0 when a gradient was non-finite (deferred mode), on the device
    copied: tuple[torch.Tensor, torch.cuda.Event | None] | None = None  # ``found`` on its way to the host
    fresh_optimizer: bool = False  # no optimizer state before it: a skipped first fused-SGD step leaves
    # uninitialised momentum buffers, so the state is cleared instead


class NonFiniteGuard:
    """Owned by a :class:`~alternet.training.module.ClassificationModule`, driven by its hooks."""

    def __init__(self, module: L.LightningModule):
        self.module = module
        self.snapshots = BufferSnapshots()
        self.deferred = False
        self._current: _Step | None = None
        self._pending: _Step | None = None
        self.flags = HostFlags()
        self.found: torch.Tensor | None = None  # the eager step's flag, which the EMA update reads (deferred mode)

    def _watched(self) -> list[torch.nn.Module]:
        """The modules whose buffers a bad step can change before the guard knows: the model's forward pass, and in
        deferred mode the EMA's update after it (the synchronous check stops the step before any update)."""
        ema = self.module.ema
        return [self.module.model, ema] if ema is not None and self.deferred else [self.module.model]

    def on_train_start(self) -> None:
        trainer = self.module.trainer
        optimizers = trainer.optimizers
        self.deferred = self.module.whole_step is not None or (
            self.module.automatic_optimization
            and len(optimizers) == 1
            and all(group.get("fused") for group in optimizers[0].param_groups)  # as restored from a checkpoint
            and not uses_grad_scaler(trainer)
            and type(trainer.strategy) in (SingleDeviceStrategy, DDPStrategy)
        )
        self._pending = None

    def on_train_batch_start(self) -> None:
        self.found = None
        self.snapshots.take(self._watched(), self.module.global_step)

    def check_loss(self, loss: torch.Tensor, batch_idx: int) -> None:
        """Remember the step's loss; in synchronous mode check it now, on every rank, before backward."""
        module = self.module
        self._current = _Step(module.global_step, module.current_epoch, batch_idx, loss.detach())
        if self.deferred:
            return
        bad = not torch.isfinite(loss).item()
        if module.trainer.strategy.reduce_boolean_decision(bad, all=False):
            self._trip(self._current, skipped=False)

    def before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Deferred mode: act on the previous step's flag, then flag this step's gradients for the fused optimizer
        to skip on the device (read at once on an epoch's or the run's last step). The compiled whole step
        (:mod:`alternet.training.step`) flags and skips inside its update, which hands the flag to :meth:`record`."""
        if not self.deferred or self._current is None:
            return
        self.settle(inside_step=True)
        if self.module.whole_step is not None:
            return
        found = non_finite_flag(optimizer)
        self._current.fresh_optimizer = not any(optimizer.state.values())
        optimizer.found_inf = self.found = found
        self.record(found)

    def record(self, found: torch.Tensor) -> None:
        """This step's non-finite flag (1.0 on the device when it was skipped): read at once on an epoch's or the
        run's last step, else sent to the host and read during the next step."""
        current, self._current = self._current, None
        current.found = found
        if self._is_last_step(current.batch):
            if current.found.item():
                self._trip(current, skipped=False)
        else:
            current.copied = self.flags.send(current.found, current.step)
            self._pending = current

    def settle(self, inside_step: bool = False) -> None:
        """Read a flag still pending: the previous step's from inside the next one, or before validation, a
        checkpoint or an epoch's end (a mid-epoch validation; a loader of unknown length has no known last step)."""
        pending, self._pending = self._pending, None
        if pending is not None and HostFlags.read(pending.copied):
            self._trip(pending, skipped=True, inside_step=inside_step)

    def _is_last_step(self, batch_idx: int) -> bool:
        trainer = self.module.trainer
        max_steps = trainer.max_steps or 0  # -1 (or None): no limit
        return batch_idx + 1 >= trainer.num_training_batches or 0 < max_steps <= self.module.global_step + 1

    def _trip(self, bad: _Step, *, skipped: bool, inside_step: bool = True) -> None:
        """Save the state before the step now running and raise. ``skipped``: the bad step is the previous one,
        whose update the fused optimizer skipped, so that state is the one before the bad step, one batch on."""
        module = self.module
        self.snapshots.restore(self._watched(), bad.step)
        if skipped and bad.fresh_optimizer:
            for optimizer in module.trainer.optimizers:
                optimizer.state.clear()
        run = RunDir(module.trainer.default_root_dir)
        path = run.nonfinite_checkpoint(bad.step)
        if inside_step:
            save_before_step(module.trainer, path)
        else:
            module.trainer.save_checkpoint(path, weights_only=False)
        with written_before_any_rank_ends(module.trainer, "nonfinite checkpoint written"):
            pass
        lower = module.recipe.optimizer.lr / 10
        command = resume_command(run, path, **{"recipe.optimizer.lr": f"{lower:g}"})
        loss = bad.loss.item()
        what = f"gradients (training loss {loss})" if bad.found is not None else f"training loss ({loss})"
        where = f"at global step {bad.step}, epoch {bad.epoch}, batch {bad.batch}"
        if skipped:
            saved = (
                f"its update was skipped and the state at step {module.global_step} (weights, optimizer and "
                f"BatchNorm statistics as they were before step {bad.step}) was saved to {path}. Resume from it "
                f"(it goes on with the next batch)"
            )
        else:
            saved = f"the state before this step was saved to {path}. Resume from it (it retries this batch)"
        remedies = (
            [f"resume from {run.last_checkpoint.relative_to(run.path)} instead"]
            if run.last_checkpoint.is_file()
            else []
        )
        if not str(module.trainer.precision).startswith("32"):
            remedies.append("add trainer.precision=32-true")
        clip = module.recipe.grad_clip
        if clip is None or clip > 1.0:  # advice never repeats a setting already in force; a resume keeps the recipe
            remedies.append("start a new run with recipe.grad_clip=1.0")
        raise NonFiniteLossError(
            f"non-finite {what} {where}; {saved} with a lower learning rate: "
            f"{command}"
            + (f"  — if the loss had been growing for a while, {', or '.join(remedies)}" if remedies else "")
        )


def non_finite_flag(optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """A 0-d float tensor on the parameters' device, 1.0 when any gradient holds a NaN or inf (no host sync)."""
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                groups[(param.grad.device, param.grad.dtype)].append(param.grad)
    device = next(iter(groups))[0] if groups else torch.device("cpu")
    found = torch.zeros((), device=device)
    one = torch.ones((), device=device)
    for (grad_device, _), grads in groups.items():
        target = found if grad_device == device else torch.zeros((), device=grad_device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, target, one.to(grad_device))  # x1: only checks
        if target is not found:
            found = torch.maximum(found, target.to(device))
    return found


def save_before_step(trainer: Any, path: Path) -> None:
    """``trainer.save_checkpoint`` from inside a step. Lightning assumes a checkpoint follows a finished step and
    counts one more logged step on restart; this one precedes its step, so its count is one lower. The training
    loader has delivered the step's batch too: its position goes back by that batch, so that the resumed run trains
    it (else it went on with the next, every later batch one index off its seeds, the epoch a step short)."""
    checkpoint = trainer._checkpoint_connector.dump_checkpoint()
    fit = checkpoint["loops"]["fit_loop"]
    fit["epoch_loop.state_dict"]["_batches_that_stepped"] -= 1
    if states := fit["state_dict"].get("combined_loader"):  # one per stateful loader, in Lightning's order
        loaders = [loader for loader in trainer.fit_loop._combined_loader.flattened if isinstance(loader, _Stateful)]
        fit["state_dict"]["combined_loader"] = [
            loader.one_batch_back(state) if hasattr(loader, "one_batch_back") else state
            for loader, state in zip(loaders, states, strict=True)
        ]
    trainer.strategy.save_checkpoint(checkpoint, path)
