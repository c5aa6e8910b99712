"""Callbacks and plugins that make runs reproducible, resumable mid-epoch, and their checkpoints safe."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO

from ..files import atomic_write
from ..runs.directories import RunDir
from ..seeds import derive_seed, seed_generators


class BatchSeed(L.Callback):
    """Reseed Python, NumPy and torch before every training batch from (seed, epoch, batch, rank).

    Dropout, stochastic depth and mixup then depend only on the batch's position, so a run resumed from any
    checkpoint — at an epoch boundary or mid-epoch — replays exactly what an uninterrupted run would have done,
    with no generator state to save. (Data order and augmentation are seeded per sample by the data module.)
    """

    def __init__(self, seed: int):
        self.seed = seed

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        seed = derive_seed(self.seed, "batch", trainer.current_epoch, batch_idx, trainer.global_rank)
        seed_generators(seed, pl_module.device)


def ends_optimizer_step(trainer: L.Trainer, batch_idx: int) -> bool:
    """A checkpoint taken mid-accumulation would lose the accumulated gradients: save only after a step."""
    return (batch_idx + 1) % trainer.accumulate_grad_batches == 0


def epochs_last_batch(trainer: L.Trainer) -> bool:
    """The epoch's last batch: its validation and epoch end come after this batch's hooks, and a checkpoint saved
    here resumes with the next epoch, without them (Lightning counts the epoch as done)."""
    return bool(trainer.fit_loop.epoch_loop.batch_progress.is_last_batch)


def max_steps_cut_the_epoch(trainer: L.Trainer, batches_done: int) -> bool:
    """``trainer.max_steps`` reached with the epoch's batches not all done: Lightning ends the epoch there and counts
    it as done, though a resumed run goes on with its other batches."""
    return 0 < (trainer.max_steps or 0) <= trainer.global_step and batches_done < trainer.num_training_batches


def _moved(state: dict[str, Any], saved: Path, now: Path) -> dict[str, Any]:
    """A checkpoint callback's state with its files' paths under ``now`` in place of ``saved``; a file not found
    there (or never in the folder) is dropped, and the best score with the best file."""

    def here(path: Any) -> str:
        try:
            moved = now / Path(str(path)).relative_to(saved)
        except ValueError:
            return ""
        return str(moved) if path and moved.is_file() else ""

    state = dict(state)
    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        state[key] = here(state.get(key))
    state["best_k_models"] = {moved: v for k, v in (state.get("best_k_models") or {}).items() if (moved := here(k))}
    if not state["best_model_path"]:
        state["best_model_score"] = None
    if not state["kth_best_model_path"]:
        state.pop("kth_value", None)  # Lightning's own start value, as for a run with no checkpoint yet
    return state


class BestAndLastCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint``, with ``last.ckpt`` written at every epoch end it checks, as this project
    promises (and Lightning did before 2.6): Lightning 2.6 writes ``last.ckpt`` only when a top-k checkpoint was saved
    at the same step, so with ``save_top_k: 1`` it held the best epoch's weights whenever a later epoch was worse, and
    ``ckpt_path=last`` went back to that epoch. Its state is saved under ``ModelCheckpoint``'s key, so checkpoints of
    either class resume with their best-so-far."""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """``trainer.max_steps`` reached inside an epoch: ``last.ckpt`` is saved here, where ``ckpt_path=last``
        resumes with the epoch's other batches (Lightning ends the epoch there and counts it as done, so its own
        save at the epoch's end would go on with the next epoch; it is skipped, as saved at this step)."""
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        cut = max_steps_cut_the_epoch(trainer, batch_idx + 1)
        self.stopped_inside_epoch = cut and ends_optimizer_step(trainer, batch_idx)
        if self.stopped_inside_epoch and self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    stopped_inside_epoch = False  # the run's last epoch was cut by trainer.max_steps (it counts as done in Lightning)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A run resumed in another folder (moved, or copied) reads its best-so-far there: Lightning kept the saved
        absolute best path alone, so a copy tested its original's best checkpoint (and published its number) and a
        moved run failed to find it after training; the others it dropped, so a worse epoch became the best."""
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and Path(saved) != Path(self.dirpath):
            state_dict = _moved(state_dict, Path(saved), Path(self.dirpath)) | {"dirpath": self.dirpath}
        super().load_state_dict(state_dict)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)

    def _save_last_if_missed(self, trainer: L.Trainer) -> None:
        # skipped when nothing is to be saved now, or when a checkpoint (top-k, and last with it) was saved at this step
        if self.save_last and not self._should_skip_saving_checkpoint(trainer) and self._epoch_due(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _epoch_due(self, trainer: L.Trainer) -> bool:
        """``every_n_epochs`` (N > 1: a fast GPU epoch's end is mostly its checkpoint) holds for ``last.ckpt`` too,
        and the run's last epoch is always saved; mid-epoch and pre-emption checkpoints cover resuming between."""
        every = self._every_n_epochs
        epoch = trainer.current_epoch + 1
        last = trainer.should_stop or (trainer.max_epochs is not None and epoch >= trainer.max_epochs)
        last = last or (trainer.max_steps is not None and 0 < trainer.max_steps <= trainer.global_step)
        return every <= 1 or epoch % every == 0 or last

    @property
    def state_key(self) -> str:
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)


class ResumedEarlyStopping(EarlyStopping):
    """Lightning's ``EarlyStopping``, whose decision a resume keeps: a checkpoint saved once it had stopped the run
    (its epoch's end; a stop signal in that epoch's last batch; a requeue killed while testing) restored its counts
    but not the stop, and the resumed run trained on past it. Its state is saved under ``EarlyStopping``'s key."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        if self.stopped_epoch > 0:  # it stopped the run before the checkpoint was saved
            trainer.should_stop = True

    @property
    def state_key(self) -> str:
        return super().state_key.replace(type(self).__qualname__, EarlyStopping.__qualname__, 1)


INTERVAL_SYNC_STEPS = 10  # how often the ranks agree whether train_time_interval has passed


class MidEpochCheckpoint(L.Callback):
    """Write ``checkpoints/last.ckpt`` every ``every_n_train_steps`` optimizer steps and/or every
    ``train_time_interval`` seconds, mid-epoch; it holds the train loader's position, so ``ckpt_path=last`` resumes
    with exactly the samples not yet seen."""

    def __init__(self, dirpath: Path, every_n_train_steps: int | None = None, train_time_interval: float | None = None):
        self.path = Path(dirpath) / RunDir.LAST
        self.every = int(every_n_train_steps or 0)
        self.interval = train_time_interval
        self._last_save = time.monotonic()
        self._last_step = -1

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not ends_optimizer_step(trainer, batch_idx) or epochs_last_batch(trainer):  # the epoch's end saves next
            return
        step = trainer.global_step
        due = bool(self.every and step % self.every == 0)
        if self.interval is not None and step % INTERVAL_SYNC_STEPS == 0:  # each rank's own clock: rank 0 decides
            # for all (a save waits at a barrier), every few steps (a broadcast is a collective and a host sync)
            due = trainer.strategy.broadcast(due or time.monotonic() - self._last_save >= self.interval)
        if due and step != self._last_step and step > 0:
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state: exactly resumable
            self._last_save, self._last_step = time.monotonic(), step


@contextlib.contextmanager
def written_before_any_rank_ends(trainer: L.Trainer, name: str) -> Iterator[None]:
    """For a stop after a save: the background write drained (on rank 0, the one that writes), then what the body
    does (rank 0's requeue), then every rank waits for the others, even where the write or the body failed (its error
    is raised after). One rank's exit ends them all (Lightning's launcher kills every process when one exits
    non-zero; srun --kill-on-bad-exit; torchrun): the others exiting first killed rank 0 while it wrote."""
    try:
        trainer.strategy.checkpoint_io.teardown()
        yield
    finally:
        trainer.strategy.barrier(name)


class OrderedAsyncCheckpointIO(AsyncCheckpointIO):
    """Lightning's writer of checkpoints in a background thread, whose removals wait for the writes queued before
    them: it removed the old best at once while the new best was still being written, so a run killed in between
    (or a write that failed) was left with neither."""

    def remove_checkpoint(self, path: str | Path) -> None:
        self._ensure_setup()
        assert self._executor is not None

        def remove() -> None:
            try:
                super(OrderedAsyncCheckpointIO, self).remove_checkpoint(path)
            except BaseException as error:  # said at the next save or at teardown, as a failed write is
                self._error = error

        self._executor.submit(remove)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint through a temporary file renamed into place: a run killed while saving never
    leaves a truncated file under the final name. Read them as plain data only (``weights_only=True``): a resumed
    checkpoint is a file a user hands in, and ours hold nothing else."""

    def load_checkpoint(self, path: str | Path, map_location: Any = None, weights_only: bool | None = None) -> Any:
        # Lightning's default map_location: tensors stay where they were loaded (the CPU)
        location = map_location or (lambda storage, _: storage)
        return super().load_checkpoint(path, map_location=location, weights_only=True)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        atomic_write(
            path, lambda tmp: super(AtomicCheckpointIO, self).save_checkpoint(checkpoint, tmp, storage_options)
        )
