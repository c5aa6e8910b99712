"""Training as a library: the LightningModule, its optimiser and schedules, callbacks, and builders that turn a
composed config into Lightning objects. The training *application* (data + model + trainer + records + what runs
after training) is :mod:`alternet.apps.train`."""

from .builders import build_callbacks, build_module, build_trainer, checkpoint_callback, throughput_callback
from .guard import NonFiniteLossError
from .module import EVALUATED_METRICS, ClassificationModule
from .precision import PrecisionChoice, choose_precision

__all__ = [
    "EVALUATED_METRICS",
    "ClassificationModule",
    "NonFiniteLossError",
    "PrecisionChoice",
    "build_callbacks",
    "build_module",
    "build_trainer",
    "checkpoint_callback",
    "choose_precision",
    "throughput_callback",
]
