"""The extension points, as a user's own package uses them from the command line: ``imports`` (a timm
``@register_model`` and a registered data module with its config option on ``hydra.searchpath``),
``callbacks.extra``, ``logger.extra`` and ``logger=tensorboard``; none of them in the checkpoint. Runs go through
fresh interpreters: the user's registrations stay out of this test process."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from alternet.runs.checkpoints import read_checkpoint

from helpers import assert_one_line_error, run_main, run_warm

PACKAGE = {
    "__init__.py": "",
    "models.py": """
        import torch
        from timm.models import register_model

        @register_model
        def my_net(pretrained=False, num_classes=1000, **kwargs):  # docs/training.md's example, as it is there
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, 32, 3, padding=1),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(32, num_classes),
            )
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


def alternet_warm(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``alternet ARGS`` with the user's package importable (as a user's ``PYTHONPATH`` makes it), as a warm child
    (helpers.warm: a process of its own that has not imported the package, without a fresh interpreter's imports;
    alternet's own import-time behaviour is tests/test_lazy.py's, in a fresh interpreter)."""
    driver = root / "alternet_with_my_ext.py"
    driver.write_text(
        f"import sys\nsys.path.insert(0, {str(root)!r})\nfrom alternet.apps.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return run_warm(str(driver), *args)


@pytest.mark.xdist_group("extensions")
def test_a_users_model_data_callback_and_tensorboard_from_the_command_line(tmp_path, monkeypatch, capsys):
    root = user_package(tmp_path / "src")
    searchpath = f"hydra.searchpath=[file://{root / 'my_ext' / 'conf'}]"
    marker, run = tmp_path / "marker.json", tmp_path / "run"
    trained = alternet_warm(
        root,
        "train",
        "imports=[my_ext.models,my_ext.data,my_ext.callbacks]",
        searchpath,
        "data=blobs",
        "model=timm",
        "model.name=my_net",  # docs/training.md's example: an nn.Sequential from a function taking num_classes
        "debug=fast",
        f"callbacks.extra=[{{_target_:my_ext.callbacks.Marker,path:{marker}}}]",
        "logger=tensorboard",
        f"hydra.run.dir={run}",
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert json.loads(marker.read_text()) == {"batches": 3}  # debug=fast: three training batches
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    checkpoint = read_checkpoint(run / "checkpoints" / "last.ckpt")
    assert checkpoint["state_dict"]["model.4.weight"].shape == (3, 32)  # built for the data's three classes
    stored = json.dumps(checkpoint["hyper_parameters"], default=str)
    assert "my_ext.callbacks" not in stored and "TensorBoardLogger" not in stored  # the run's, not the weights'

    # the run recorded its imports=: evaluate and export import them again, the command line need not name them
    evaluated = alternet_warm(root, "evaluate", f"ckpt={run}", f"out_dir={tmp_path / 'e'}")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads((tmp_path / "e" / "metrics.json").read_text())["data"] == "blobs"
    exported = alternet_warm(root, "export", str(run), "--out", str(tmp_path / "export"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert config["architecture"] == "my_net"
    # its function builds a model without loading weights: timm's local-dir path (a random 1000-class model) is not
    # offered, on the console or in the card, and alternet.hub.load is
    assert config["alternet"]["timm_loads"] is False
    imported = "import my_ext.models; import my_ext.data; import my_ext.callbacks; "  # the printed line works pasted
    assert f'Load: {imported}alternet.hub.load("' in exported.stdout, exported.stdout
    assert (
        "local-dir" not in exported.stdout and "local-dir:path" not in (tmp_path / "export" / "README.md").read_text()
    )
    # where the recorded modules cannot be imported: refused in one line naming them (in this process, which
    # never had the user's package on its path)
    code, stderr = run_main("evaluate.py", [f"ckpt={run}", f"hydra.run.dir={tmp_path / 'f'}"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, "imports: my_ext.models cannot be imported (ModuleNotFoundError")
    # the export records them too: scored without them, it names them, not a list of alternet's 30 models
    modules = "my_ext.models,my_ext.data,my_ext.callbacks"
    assert config["alternet"]["imports"] == modules.split(",")
    code, stderr = run_main(
        "evaluate.py", [f"ckpt={tmp_path / 'export'}", f"hydra.run.dir={tmp_path / 'g'}"], monkeypatch, capsys
    )
    assert_one_line_error(
        code, stderr, f"export holds a my_net, a model its run registered with imports=[{modules}]: import them first"
    )


def test_a_model_function_that_ignores_num_classes_is_refused_in_one_line():
    """A registered function that builds its head for a fixed count, whatever num_classes it is given, is caught by
    the built model's output width (on the meta device, before any work)."""
    from alternet.errors import ConfigValueError
    from alternet.models.external import check_output_width

    ignores = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    ignores.append(torch.nn.Linear(4, 10))
    with torch.device("meta"):
        fixed = ignores.to("meta")
    says = "model.name=my_net ignores num_classes: asked for 3 classes, it builds a model with 10 outputs"
    with pytest.raises(ConfigValueError, match=f"^{says}"):
        check_output_width("my_net", fixed, num_classes=3, img_size=16)
    check_output_width("my_net", fixed, num_classes=10, img_size=16)  # the count it was asked for


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
        (  # refused before W&B starts its run (its files kept the run directory)
            ["logger=wandb", "logger.extra=[{_target_:collections.OrderedDict}]"],
            "logger.extra[0] built OrderedDict, not a Lightning Logger",
        ),
        (  # found by Lightning after the first epoch, in a traceback
            ["callbacks.extra=[{_target_:lightning.pytorch.callbacks.EarlyStopping,monitor:val/accc,mode:max}]"],
            "callbacks.extra[0] (EarlyStopping) monitors val/accc, which the run does not log; choose one of",
        ),
    ],
)
def test_bad_extensions_are_one_line(arguments, says, tmp_path, monkeypatch, capsys):
    code, stderr = run_main(
        "train.py", [*arguments, "debug=fast", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys
    )
    assert_one_line_error(code, stderr, says)
    assert not (tmp_path / "run").exists()


def test_evaluate_refuses_training_loggers(digits_run, tmp_path, monkeypatch, capsys):
    args = [f"ckpt={digits_run}", "logger=tensorboard", f"hydra.run.dir={tmp_path / 'out'}"]
    code, stderr = run_main("evaluate.py", args, monkeypatch, capsys)
    assert_one_line_error(code, stderr, "logger.extra (and logger=tensorboard) apply to alternet train")


def test_a_target_that_cannot_be_imported_is_said_once(monkeypatch, caplog):
    """Hydra's ``get_object`` logged the import error in three lines of its own (``[hydra.utils][ERROR] ...``)
    before the command's one line said it again."""
    import logging

    from alternet.apps.extensions import check_targets
    from alternet.errors import ConfigValueError

    monkeypatch.setattr(logging.getLogger("hydra.utils"), "disabled", False)  # as in a fresh command
    with pytest.raises(ConfigValueError, match=r"^callbacks.extra\[0\]._target_=no_such.Thing cannot be imported"):
        check_targets([{"_target_": "no_such.Thing"}], "callbacks.extra")
    assert [r.getMessage() for r in caplog.records if r.name == "hydra.utils"] == []
    assert not logging.getLogger("hydra.utils").disabled  # as it was
