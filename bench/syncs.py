"""Counting the calls that make the host wait for the device, on any machine.

On a GPU, ``torch.cuda.set_sync_debug_mode`` reports the syncs themselves. A CPU has no queue to drain, so there the
calls that *would* wait on a GPU are counted instead: reading a tensor's value on the host (``item``, ``tolist``,
``bool``/``int``/``float``, i.e. ``aten._local_scalar_dense``), copies to the host (``.cpu()``, ``.numpy()`` and
``.to("cpu")`` spelled as a string: code that moves a tensor to the run's device passes a ``torch.device``, which
on a CPU run is the CPU too) and tensors built from Python numbers on a device (``torch.tensor(0.1,
device=...)``: a host-to-device copy on a GPU; built without a device they stay on the host, as a collated batch's
labels do until the batch moves). A training loop with none of these on a step that logs nothing keeps a GPU
busy.

The non-finite guard's deferred read (:class:`alternet.training.guard.HostFlags`) is left out by design: it reads a
flag a step old, copied into pinned memory behind an event, so on a GPU it waits for that flag only, not for the
work queued after it.

    with HostSyncs() as syncs:
        ...
    syncs.count, syncs.calls  # how many, and which (name, caller) pairs

    with HostSyncs() as syncs, per_step(syncs) as steps:  # trainer.fit(...) inside
        ...
    steps  # the calls between consecutive training batches' starts, one list per window

:class:`EagerOperators` counts the other host cost of a step the same way: the operators dispatched outside compiled
code (on a GPU, each is a kernel launch with its Python and dispatcher time around it).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import sys
from collections.abc import Iterator
from types import CodeType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from alternet.training.guard import HostFlags

_READS = ("item", "tolist", "__bool__", "__int__", "__float__", "numpy", "cpu")
_EXEMPT = frozenset({HostFlags.read.__code__})


class HostSyncs:
    """While open, counts each host read of a tensor, copy to the host and tensor built from Python numbers.
    ``calls`` holds ``(what, file:line of the caller)`` per call; ``count`` is their number."""

    def __init__(self, exempt: frozenset[CodeType] = _EXEMPT):
        self.exempt = exempt
        self.calls: list[tuple[str, str]] = []
        self._saved: list[tuple[Any, str, Any]] = []  # (owner, name, original) of each patched function

    @property
    def count(self) -> int:
        return len(self.calls)

    def by_kind(self) -> collections.Counter[str]:
        return collections.Counter(what for what, _ in self.calls)

    def _note(self, what: str) -> None:
        frame = sys._getframe(2)
        if frame.f_code in self.exempt:
            return
        self.calls.append((what, f"{frame.f_code.co_filename}:{frame.f_lineno}"))

    def __enter__(self) -> HostSyncs:
        counter = self
        for name in _READS:
            original = getattr(torch.Tensor, name)
            self._saved.append((torch.Tensor, name, original))

            def read(tensor: torch.Tensor, *args: Any, _name: str = name, _original: Any = original, **kwargs: Any):
                counter._note(f"Tensor.{_name}")
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, read)
        to = torch.Tensor.to
        self._saved.append((torch.Tensor, "to", to))

        def to_host(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            target = kwargs.get("device", args[0] if args else None)
            if isinstance(target, str) and torch.device(target).type == "cpu":
                counter._note("Tensor.to(cpu)")
            return to(tensor, *args, **kwargs)

        torch.Tensor.to = to_host
        build = torch.tensor
        self._saved.append((torch, "tensor", build))

        def from_numbers(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            if not isinstance(data, torch.Tensor) and kwargs.get("device") is not None:
                counter._note("torch.tensor")
            return build(data, *args, **kwargs)

        torch.tensor = from_numbers
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in self._saved:
            setattr(owner, name, original)
        self._saved.clear()


class EagerOperators(TorchDispatchMode):
    """While open, records each aten operator dispatched outside compiled code as ``(operator, file:line of the
    caller)`` in ``calls``. Operators that compiled code dispatches itself (inductor's calls into aten for
    convolutions and matrix products, a graph that dynamo's ``eager`` backend runs) are left out: their Python stack
    holds generated code (inductor's cache directory, FX's ``<eval_with_key>`` modules). ``torch.compile`` compiles
    under this mode (``ignore_compile_internals``); under a plain one it would fall back to eager."""

    def __init__(self) -> None:
        super().__init__()
        from torch._inductor.runtime.cache_dir_utils import cache_dir  # deferred: inductor loads on first use

        self.calls: list[tuple[str, str]] = []
        self._generated = (cache_dir(), "<eval_with_key>")

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    @property
    def count(self) -> int:
        return len(self.calls)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        caller = frame = sys._getframe(1)
        while frame is not None and not frame.f_code.co_filename.startswith(self._generated):
            frame = frame.f_back
        if frame is None:
            self.calls.append((str(func), f"{caller.f_code.co_filename}:{caller.f_lineno}"))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def per_step(syncs: HostSyncs | EagerOperators) -> Iterator[list[list[tuple[str, str]]]]:
    """While open, mark ``syncs``'s count (a :class:`HostSyncs` or :class:`EagerOperators`) at each training batch's
    start (the module's own hook, after the callbacks'); the list it yields then holds the calls between consecutive
    marks: a step, its callbacks and logging, and the next batch's fetch."""
    from alternet.training.module import ClassificationModule

    marks: list[int] = []
    windows: list[list[tuple[str, str]]] = []
    hook = ClassificationModule.on_train_batch_start

    def mark(module: ClassificationModule, batch: Any, batch_idx: int) -> None:
        marks.append(syncs.count)
        hook(module, batch, batch_idx)

    ClassificationModule.on_train_batch_start = mark
    try:
        yield windows
    finally:
        ClassificationModule.on_train_batch_start = hook
        windows += [syncs.calls[a:b] for a, b in itertools.pairwise(marks)]
