"""Run ``train.py`` or ``evaluate.py`` with a decoder that kills the loader worker reading one image (SIGKILL, as a
decoder's segfault or the kernel's OOM killer would), in a process of its own so that nothing a test process has
done before (its handlers, its multiprocessing start method) changes how the workers start and die.

``crashing_decoder.py MODULE FATAL WHEN SCRIPT [override ...]``: MODULE is the alternet module whose ``decode_rgb``
is replaced (``alternet.data.files.images``, ``alternet.data.files.shards``); a worker dies on the first image whose
name holds FATAL, ``always`` or only once ``testing`` has started. Used by ``tests/test_faults.py``.
"""

import importlib
import os
import runpy
import signal
import sys
import tempfile
from pathlib import Path

import lightning as L
from torch.utils.data import get_worker_info

from alternet.training import builders

module_name, fatal, when, script, *overrides = sys.argv[1:]
module = importlib.import_module(module_name)
armed = Path(tempfile.mkdtemp()) / "armed"
if when == "always":
    armed.touch()
decode = module.decode_rgb


def crashing_decoder(source, name=None, crop=None):
    if get_worker_info() is not None and fatal in str(name) and armed.exists():
        os.kill(os.getpid(), signal.SIGKILL)
    return decode(source, name, crop)


class ArmWhenTestingStarts(L.Callback):
    def on_test_start(self, trainer, pl_module):
        armed.touch()


module.decode_rgb = crashing_decoder  # the forked loader workers inherit it
build = builders.build_callbacks
builders.build_callbacks = lambda *args, **kwargs: [ArmWhenTestingStarts(), *build(*args, **kwargs)]
root = Path(__file__).resolve().parents[2]
sys.argv = [str(root / script), *overrides]
runpy.run_path(str(root / script), run_name="__main__")
