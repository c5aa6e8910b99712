"""Batched inference on the accelerator: every visible GPU, loader workers sized to the machine."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext

import numpy as np
import torch
from torch import nn
from torch.utils.data import ConcatDataset, Dataset, Sampler

from ..data.workers import PlainLoader, end_workers, init_loader_worker
from ..errors import ConfigValueError
from ..hardware import cpu_native_bf16, cuda_bf16
from ..progress import progress


def choose_device(device: str = "auto", key: str = "device") -> torch.device:
    """``auto`` (a GPU when there is one), ``cpu``, ``cuda`` or ``cuda:N``; a GPU this machine lacks is an error
    (``key``: the setting's name in the messages, e.g. ``evaluate.device`` in a training config)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigValueError(f"{key}={device!r} is invalid: use auto, cpu, cuda or cuda:N") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise ConfigValueError(f"{key}={device} but this machine has no usable CUDA GPU; use {key}=cpu or auto")
    if chosen.type == "cuda" and chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise ConfigValueError(f"{key}={device} but only {torch.cuda.device_count()} GPU(s) are visible")
    return chosen


AUTOCAST = {"32": None, "bf16": torch.bfloat16, "16": torch.float16}  # config.PRECISIONS -> autocast dtype


def fast_precision(device: torch.device) -> str:
    """``bf16`` where the hardware computes it natively (a bf16-capable GPU; a CPU with AVX512-BF16 or AMX, which
    oneDNN uses), else ``32``: reduced precision that would be emulated costs time instead of saving it."""
    native = cuda_bf16() if device.type == "cuda" else cpu_native_bf16()
    return "bf16" if native else "32"


@contextmanager
def memory_format(model: nn.Module, channels_last: bool) -> Iterator[None]:
    """The model in channels_last (NHWC: what oneDNN and tensor cores run fastest) for the duration, then back."""
    if not channels_last:
        yield
        return
    model.to(memory_format=torch.channels_last)
    try:
        yield
    finally:
        model.to(memory_format=torch.contiguous_format)


def device_count(device: torch.device) -> int:
    """How many devices inference on ``device`` uses: every visible GPU for a plain ``cuda``, else one."""
    if device.type == "cuda" and device.index is None:
        return max(torch.cuda.device_count(), 1)
    return 1


def on_devices(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` on ``device``, replicated over every visible GPU (DataParallel) when :func:`device_count` > 1."""
    model.to(device).eval()
    return nn.DataParallel(model) if device_count(device) > 1 else model


class _BatchesPerSet(Sampler[list[int]]):
    """Index batches over concatenated datasets that never span two of them (built lazily: ImageNet-C has 3.75M
    indices)."""

    def __init__(self, sizes: Sequence[int], batch_size: int):
        self.sizes, self.batch_size = list(sizes), batch_size

    def __len__(self) -> int:
        return sum(math.ceil(size / self.batch_size) for size in self.sizes)

    def __iter__(self) -> Iterator[list[int]]:
        offset = 0
        for size in self.sizes:
            for start in range(0, size, self.batch_size):
                yield list(range(offset + start, offset + min(start + self.batch_size, size)))
            offset += size


@torch.no_grad()
def predict_sets(
    model: nn.Module,
    datasets: Sequence[Dataset],
    *,
    device: torch.device,
    batch_size: int = 512,
    autocast: torch.dtype | None = None,
    num_workers: int = 0,
    labels: Sequence[str] | None = None,
    final_lines: bool = True,
    channels_last: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Float32 logits and integer labels of each dataset in turn, in order. One loader reads them all, so its
    workers start once and stay busy across datasets; ``labels`` name the datasets in the progress updates
    (``final_lines=False``: no line when a set ends — the caller reports each set itself); ``channels_last``
    runs model and inputs in NHWC."""
    sizes = [len(dataset) for dataset in datasets]
    if not sizes or min(sizes) == 0:
        raise ValueError("predict_sets needs at least one dataset and no empty ones")
    names = list(labels) if labels is not None else [f"set {i + 1}/{len(sizes)}" for i in range(len(sizes))]
    net = on_devices(model, device)
    loader = PlainLoader(
        ConcatDataset(datasets),
        batch_sampler=_BatchesPerSet(sizes, batch_size),
        num_workers=num_workers,
        pin_memory=device.type == "cuda",
        worker_init_fn=init_loader_worker,
    )
    layout = torch.channels_last if channels_last else torch.contiguous_format
    batches = iter(loader)
    try:
        with memory_format(model, channels_last):
            for name, size in zip(names, sizes):
                count = math.ceil(size / batch_size)
                logits, targets = [], []
                with torch.autocast(device.type, dtype=autocast) if autocast is not None else nullcontext():
                    for images, labels_ in progress(itertools.islice(batches, count), count, name, final=final_lines):
                        inputs = images.to(device, non_blocking=True).contiguous(memory_format=layout)
                        logits.append(net(inputs).float().cpu())
                        targets.append(labels_)
                yield torch.cat(logits).numpy(), torch.cat(targets).numpy()
    finally:  # an unreadable image's error, or a caller that stops early: the workers end now
        end_workers(batches)
