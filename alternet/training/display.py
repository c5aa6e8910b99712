"""What a training run shows while it works: a tqdm bar on a terminal, one-line updates in a log file (a SLURM
``.out`` or CI log stays readable instead of thousands of carriage-return frames), and the training throughput."""

from __future__ import annotations

import logging
import sys
import time
import warnings
from typing import Any, TextIO

import lightning as L
import torch
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

from ..progress import duration


class _NoAdvertising(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


def quiet_lightning() -> None:
    """Drop what tells a user nothing about their run: Lightning's product tip, its own internal deprecation
    warning (from Lightning's code, not the user's), its guess that a loader with fewer than two workers is a
    bottleneck (``data.num_workers=auto`` starts at the fewest and grows while the step waits for batches), its
    false word to a resumed run that its CSV log's earlier rows will be deleted, and its word that the run's
    checkpoint folder is not empty (the run directory's own checks allowed it: a resume, ``reuse_run_dir``)."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _NoAdvertising) for f in logger.filters):
        logger.addFilter(_NoAdvertising())
    if logging.getLogger().handlers:  # Hydra's job logging: the console and the run's log file, through the root
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):  # whose own console handlers (added at
            own = logging.getLogger(name)  # import, when the root had none) printed every line a second time
            for handler in [h for h in own.handlers if type(h) is logging.StreamHandler]:
                own.removeHandler(handler)
            own.propagate = True
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=Warning)
    warnings.filterwarnings("ignore", message=r"The '\w+' does not have many workers", category=Warning)
    # the CSV logger of a resumed run: it keeps the earlier rows (its metrics.csv is rewritten with them)
    warnings.filterwarnings(
        "ignore", message=r".*Previous log files in this directory will be deleted", category=Warning
    )
    warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty", category=Warning)


def _shown(metrics: dict[str, Any], pl_module: L.LightningModule) -> dict[str, Any]:
    """What a bar shows: the training loss read from the device (:class:`RunningLoss`) first, then Lightning's
    progress-bar metrics without the logger's version (``v_num``: noise in a run that has its own directory)."""
    metrics.pop("v_num", None)
    running = getattr(pl_module, "running_loss", None)
    value = running.read() if isinstance(running, RunningLoss) else None
    return metrics if value is None else {RunningLoss.KEY: value, **metrics}


class TerminalBar(TQDMProgressBar):
    """Lightning's tqdm bar without the logger version, the training loss read from the device (``RunningLoss``),
    its rate and ETA after a mid-epoch resume counted from the resume (tqdm counts from the bar's ``initial``)."""

    _first_batch_pending: bool = False

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        return _shown(super().get_metrics(trainer, pl_module), pl_module)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._first_batch_pending = True  # until the first batch says where this process starts

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._first_batch_pending:
            self._first_batch_pending = False
            bar = self.train_progress_bar
            bar.initial = bar.n = bar.last_print_n = batch_idx  # 0 unless resumed mid-epoch
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


class RunningLoss:
    """The training loss for the progress display, kept on the device: each step adds its loss there (no host sync),
    and a bar reads the mean since its last read at most every ``max_age`` seconds (one sync then, not per step).
    Lightning would otherwise turn a ``prog_bar=True`` value into a Python number after every batch."""

    KEY = "train/loss"
    EPOCH_KEY = "train/nll_epoch"  # an epoch's mean, as the module logs it (HDVW's training NLL)

    def __init__(self, max_age: float = 1.0):
        self.max_age = max_age
        self._sum: torch.Tensor | None = None
        self._count = 0
        self._value: float | None = None
        self._read_at = -float("inf")

    def add(self, loss: torch.Tensor) -> None:
        loss = loss.detach().float()
        if self._sum is None:
            self._sum, self._count = loss.clone(), 1
        else:
            self._sum = self._sum.to(loss.device).add_(loss)  # a restored sum (state) moves to the loss's device once
            self._count += 1

    def state(self) -> tuple[float, int]:
        """The sum and count since the last read (one sync): what a checkpoint saved inside an epoch carries."""
        return (float(self._sum) if self._count else 0.0), self._count

    def restore(self, total: float, count: int) -> None:
        self._sum, self._count = (torch.tensor(float(total)), int(count)) if count else (None, 0)

    def read(self) -> float | None:
        """The mean loss of the steps since the last read (the last value when no step was added since, or when it
        was read less than ``max_age`` seconds ago)."""
        now = time.monotonic()
        if self._count and now - self._read_at >= self.max_age:
            self._value = (self._sum / self._count).item()
            self._sum, self._count, self._read_at = None, 0, now
        return self._value

    def mean(self) -> float | None:
        """The mean loss of the steps since the last read, left to read again (one sync); None without a step."""
        return (self._sum / self._count).item() if self._count else None


class Hits:
    """Correct predictions on the training batches, summed on the device (no host sync) and read once, at an epoch's
    end: the training accuracy of unmixed batches."""

    def __init__(self) -> None:
        self._correct: torch.Tensor | None = None
        self._seen = 0

    def add(self, correct: torch.Tensor, seen: int) -> None:
        correct = correct.detach()
        self._correct = correct.clone() if self._correct is None else self._correct.to(correct.device).add_(correct)
        self._seen += seen

    def state(self) -> tuple[float, int]:
        """The count correct and seen since the last read (one sync): what a checkpoint saved inside an epoch
        carries."""
        return (float(self._correct) if self._seen else 0.0), self._seen

    def restore(self, correct: float, seen: int) -> None:
        self._correct, self._seen = (torch.tensor(float(correct)), int(seen)) if seen else (None, 0)

    def read(self) -> float | None:
        """The accuracy since the last read (None when nothing was added), then start again."""
        if not self._seen:
            return None
        accuracy = self._correct.item() / self._seen
        self._correct, self._seen = None, 0
        return accuracy


def _value(value: Any) -> str:
    value = value.item() if isinstance(value, torch.Tensor) else value
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class ProgressLines(ProgressBar):
    """A line every ``interval`` seconds of training (epoch, batch, rate, ETA of the epoch, the bar's metrics) and
    one at the end of each epoch with its validation metrics; evaluation loops report when they finish."""

    def __init__(self, interval: float = 30.0, stream: TextIO | None = None):
        super().__init__()
        self.interval = float(interval)
        self.stream = stream
        self._enabled = True
        self._epoch_start = self._last = self._test_start = 0.0
        self._first_batch: int | None = None  # the first batch this process trained in this epoch

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self._enabled:
            print(*args, file=self.stream or sys.stderr, flush=True, **kwargs)

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        return _shown(super().get_metrics(trainer, pl_module), pl_module)

    def _metrics(self, trainer: L.Trainer, pl_module: L.LightningModule, epoch_loss: float | None = None) -> str:
        """The bar's metrics in one line; with ``epoch_loss`` (an epoch's mean) in place of the running loss, under
        the name it is logged by (train/loss is a step's value in the logs)."""
        metrics = self.get_metrics(trainer, pl_module)
        if epoch_loss is not None:
            metrics = {k: v for k, v in metrics.items() if k != RunningLoss.KEY} | {RunningLoss.EPOCH_KEY: epoch_loss}
        return "  ".join(f"{k} {_value(v)}" for k, v in metrics.items())

    def _epoch(self, trainer: L.Trainer) -> str:
        total = "" if trainer.max_epochs in (None, -1) else f"/{trainer.max_epochs}"
        return f"epoch {trainer.current_epoch + 1}{total}"

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self._start_clock()  # a run resumed mid-epoch gets no on_train_epoch_start for that epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start_clock()

    def _start_clock(self) -> None:
        self._epoch_start = self._last = time.monotonic()
        self._first_batch = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.monotonic()
        if self._first_batch is None:
            self._first_batch = batch_idx  # after a mid-epoch resume, batch_idx starts where the checkpoint left off
        if now - self._last < self.interval:
            return
        self._last = now
        done, total = batch_idx + 1, self.total_train_batches
        rate = (done - self._first_batch) / max(now - self._epoch_start, 1e-9)  # the batches this process trained
        eta = f", epoch ETA {duration((total - done) / rate)}" if total != float("inf") else ""
        metrics = self._metrics(trainer, pl_module)
        self.print(f"{self._epoch(trainer)}  batch {done}/{total}  {rate:.2f} batch/s{eta}  {metrics}")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        elapsed = time.monotonic() - self._epoch_start
        epoch = getattr(pl_module, "epoch_loss", None)  # the epoch's mean loss, not the last line's steps'
        mean = epoch.mean() if isinstance(epoch, RunningLoss) else None
        self.print(f"{self._epoch(trainer)} done in {duration(elapsed)}  {self._metrics(trainer, pl_module, mean)}")

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._test_start = time.monotonic()

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.print(f"testing done in {duration(time.monotonic() - self._test_start)}")


def progress_bar(interval: float, stream: TextIO | None = None) -> ProgressBar:
    """The bar for this output: tqdm on a terminal, one-line updates otherwise."""
    return TerminalBar() if (stream or sys.stderr).isatty() else ProgressLines(interval, stream)


class Throughput(L.Callback):
    """Training images per second of the training loop alone (validation excluded), logged per epoch as
    ``train/images_per_sec`` and totalled for the end-of-run summary. The first batch of a run (or of a resumed
    run) is left out, its images and its seconds: it compiles (``performance.compile``: a minute on a GPU, where an
    H100 run of 300 steps reported 377 images/s with it counted), autotunes and starts the workers."""

    def __init__(self) -> None:
        self.images = 0
        self.seconds = 0.0
        self.started = time.monotonic()  # this session's start (the command's: apps.train sets it)
        self.earlier_wall = 0.0  # the wall time of the run's earlier sessions, from the checkpoint it resumed
        self._epoch_images = 0
        self._epoch_seconds = 0.0
        self._mark = 0.0
        self._warming_up = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._mark = time.monotonic()  # a run resumed mid-epoch gets no on_train_epoch_start for that epoch
        self._warming_up = True

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_images, self._epoch_seconds, self._mark = 0, 0.0, time.monotonic()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._mark = time.monotonic()  # the next training batch's clock starts after validation

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        now = time.monotonic()
        if self._warming_up:
            self._warming_up, self._mark = False, now
            return
        images = batch[0] if isinstance(batch, (list, tuple)) else batch
        count = int(images.shape[0]) * trainer.world_size if isinstance(images, torch.Tensor) else 0
        self._epoch_images += count
        self._epoch_seconds += now - self._mark
        self._mark = now

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.images += self._epoch_images
        self.seconds += self._epoch_seconds
        if self._epoch_seconds > 0:
            rate = self._epoch_images / self._epoch_seconds  # all ranks' images, by this rank's clock
            pl_module.log("train/images_per_sec", rate, on_epoch=True, sync_dist=True)  # the ranks' clocks' mean

    def state_dict(self) -> dict[str, Any]:  # a resumed run's images per second count its earlier sessions too
        return {"images": self.images, "seconds": self.seconds, "wall": self.wall_seconds()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.images, self.seconds = int(state_dict["images"]), float(state_dict["seconds"])
        self.earlier_wall = float(state_dict.get("wall", 0.0))  # none in checkpoints of earlier versions

    def wall_seconds(self) -> float:
        """The run's wall time so far: its earlier sessions' and this one's."""
        return self.earlier_wall + time.monotonic() - self.started

    @property
    def images_per_sec(self) -> float | None:
        return self.images / self.seconds if self.seconds > 0 else None
