"""Training as a library: the LightningModule, its optimiser and schedules, callbacks, and builders that turn a
composed config into Lightning objects. The training *application* (data + model + trainer + records + what runs
after training) is :mod:`alternet.apps.train`."""

from __future__ import annotations

from ..lazy import exports

__getattr__, __dir__ = exports(
    __name__,
    {
        "ClassificationModule": "module",
        "NonFiniteLossError": "guard",
        "PrecisionChoice": "precision",
        "build_callbacks": "builders",
        "build_module": "builders",
        "build_trainer": "builders",
        "checkpoint_callback": "builders",
        "choose_precision": "precision",
        "throughput_callback": "builders",
    },
)
