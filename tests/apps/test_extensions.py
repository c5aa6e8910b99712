"""The extension points, as a user's own package uses them from the command line: ``imports`` (a timm
``@register_model`` and a registered data module with its config option on ``hydra.searchpath``),
``callbacks.extra``, ``logger.extra`` and ``logger=tensorboard``; none of them in the checkpoint. Runs go through
fresh interpreters: the user's registrations stay out of this test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alternet.runs.checkpoints import read_checkpoint

from helpers import ROOT, assert_one_line_error, run_main

PACKAGE = {
    "__init__.py": "",
    "models.py": """
        import torch
        from timm.models import register_model

        class TinyNet(torch.nn.Module):
            def __init__(self, num_classes=1000, in_chans=3, **kwargs):
                super().__init__()
                self.num_classes = num_classes
                self.body = torch.nn.Sequential(torch.nn.Conv2d(in_chans, 8, 3, padding=1), torch.nn.ReLU(),
                                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
                self.head = torch.nn.Linear(8, num_classes)

            def forward(self, x):
                return self.head(self.body(x))

        @register_model
        def my_tiny_net(pretrained=False, **kwargs):
            return TinyNet(**kwargs)

        @register_model
        def my_net(pretrained=False, num_classes=1000, **kwargs):  # docs/training.md's example, as it is there
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, 32, 3, padding=1),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(32, num_classes),
            )

        @register_model
        def my_deaf_net(pretrained=False, **kwargs):  # ignores num_classes: always ten outputs
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(10))
    """,
    "data.py": '''
        import numpy as np
        from alternet.data import ArrayDataModule, register_datamodule

        @register_datamodule
        class Blobs(ArrayDataModule):
            """Three classes of random 16 px images."""
            name = "blobs"
            num_classes = 3
            default_mean = (0.5, 0.5, 0.5)
            default_std = (0.25, 0.25, 0.25)

            def load_split(self, train):
                rng = np.random.default_rng(int(train))
                n = 96 if train else 24
                return rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8), np.arange(n) % 3

            @property
            def class_names(self):
                return ["a", "b", "c"]
    ''',
    "callbacks.py": '''
        import json
        from lightning.pytorch.callbacks import Callback

        class Marker(Callback):
            """Writes how many training batches it saw."""
            def __init__(self, path):
                self.path, self.batches = path, 0

            def on_train_batch_end(self, *args):
                self.batches += 1

            def on_train_end(self, trainer, module):
                with open(self.path, "w") as f:
                    json.dump({"batches": self.batches}, f)
    ''',
    "conf/data/blobs.yaml": """
        defaults:
          - _base
          - _self_
        name: blobs
        image_size: 16
        mean: null
        std: null
        val_size: 0
        num_workers: 0
        pin_memory: false
    """,
    "conf/recipe/blobs.yaml": """
        defaults:
          - fast
          - _self_
        batch_size: 32
    """,
}


def user_package(root: Path) -> Path:
    for name, text in PACKAGE.items():
        path = root / "my_ext" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def alternet(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "alternet", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.xdist_group("extensions")
def test_a_users_model_data_callback_and_tensorboard_from_the_command_line(tmp_path, monkeypatch, capsys):
    root = user_package(tmp_path / "src")
    searchpath = f"hydra.searchpath=[file://{root / 'my_ext' / 'conf'}]"
    marker, run = tmp_path / "marker.json", tmp_path / "run"
    trained = alternet(
        root,
        "train",
        "imports=[my_ext.models,my_ext.data,my_ext.callbacks]",
        searchpath,
        "data=blobs",
        "model=timm",
        "model.name=my_tiny_net",
        "debug=fast",
        f"callbacks.extra=[{{_target_:my_ext.callbacks.Marker,path:{marker}}}]",
        "logger=tensorboard",
        f"hydra.run.dir={run}",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert json.loads(marker.read_text()) == {"batches": 3}  # debug=fast: three training batches
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    checkpoint = read_checkpoint(run / "checkpoints" / "last.ckpt")
    stored = json.dumps(checkpoint["hyper_parameters"], default=str)
    assert "my_ext.callbacks" not in stored and "TensorBoardLogger" not in stored  # the run's, not the weights'

    # the run recorded its imports=: evaluate and export import them again, the command line need not name them
    evaluated = alternet(root, "evaluate", f"ckpt={run}", f"out_dir={tmp_path / 'e'}")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())["data"] == "blobs"
    exported = alternet(root, "export", str(run), "--out", str(tmp_path / "export"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert json.loads((tmp_path / "export" / "config.json").read_text())["architecture"] == "my_tiny_net"
    # where the recorded modules cannot be imported: refused in one line naming them (in this process, which
    # never had the user's package on its path)
    code, stderr = run_main("evaluate.py", [f"ckpt={run}", f"hydra.run.dir={tmp_path / 'f'}"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, "imports: my_ext.models cannot be imported (ModuleNotFoundError")


@pytest.mark.xdist_group("extensions")
def test_the_docs_registered_function_trains_with_the_datas_class_count(tmp_path):
    """docs/training.md's my_net (a function returning nn.Sequential) is built with the data's three classes (its
    keywords are read from the function, where the class, nn.Sequential, names none); a function that ignores
    num_classes is refused in one line before any work."""
    root = user_package(tmp_path / "src")
    common = ["imports=[my_ext.models,my_ext.data]", f"hydra.searchpath=[file://{root / 'my_ext' / 'conf'}]"]
    common += ["data=blobs", "model=timm", "debug=fast"]
    trained = alternet(root, "train", *common, "model.name=my_net", f"hydra.run.dir={tmp_path / 'run'}")
    assert trained.returncode == 0, trained.stderr[-3000:]
    weights = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")["state_dict"]
    assert weights["model.4.weight"].shape == (3, 32)
    refused = alternet(root, "train", *common, "model.name=my_deaf_net", f"hydra.run.dir={tmp_path / 'deaf'}")
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    assert last.startswith("error: model.name=my_deaf_net ignores num_classes: asked for 2 classes, it builds a model")
    assert not (tmp_path / "deaf" / "checkpoints").exists()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["imports=[no_such_module_here]"], "imports: no_such_module_here cannot be imported (ModuleNotFoundError"),
        (["callbacks.extra=[1]"], "callbacks.extra[0] needs a _target_"),
        (
            ["callbacks.extra=[{_target_:no_such.Thing}]"],
            "callbacks.extra[0]._target_=no_such.Thing cannot be imported",
        ),
        (
            ["logger.extra=[{_target_:collections.OrderedDict}]"],
            "logger.extra[0] built OrderedDict, not a Lightning Logger",
        ),
    ],
)
def test_bad_extensions_are_one_line(arguments, says, tmp_path, monkeypatch, capsys):
    code, stderr = run_main(
        "train.py", [*arguments, "debug=fast", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys
    )
    assert_one_line_error(code, stderr, says)


def test_evaluate_refuses_training_loggers(digits_run, tmp_path, monkeypatch, capsys):
    args = [f"ckpt={digits_run}", "logger=tensorboard", f"hydra.run.dir={tmp_path / 'out'}"]
    code, stderr = run_main("evaluate.py", args, monkeypatch, capsys)
    assert_one_line_error(code, stderr, "logger.extra (and logger=tensorboard) apply to alternet train")
