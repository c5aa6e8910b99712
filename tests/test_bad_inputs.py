"""Bad inputs as a user types them, through the real command line: each must fail before any work with one line
naming the key or file (exit status non-zero, no traceback), so no change can quietly turn one back into a
traceback deep inside training.

The catalogue runs ``train.py`` as ``__main__`` in this process (its Hydra entry point, argument parsing and error
handling, as a user's command runs them; a fresh interpreter costs ~8 s each); one case also runs as a real
subprocess to check the exit status and stderr end to end."""

import runpy
import sys

import pytest

from conftest import ROOT, run_script

CATALOGUE = [
    # (arguments, what the one-line error must say)
    (
        ["recipe.optimizer.name=adam"],
        "recipe.optimizer.name='adam' is not one of ['adamw', 'sgd'] (did you mean 'adamw'?)",
    ),
    (["recipe=fast", "recipe.schedule.name=cosin"], "recipe.schedule.name='cosin' is not one of"),
    (
        ["++trainer.max_epoch=1"],
        "trainer.max_epoch is not an argument of lightning.Trainer (did you mean 'max_epochs'?)",
    ),
    (["seed=abc"], "seed='abc' is invalid: must be an integer"),
    (["data=imagefolder"], "data.root must be set"),
    (["model.attention=windows"], "model.attention='windows' is not one of ['window', 'global', 'focused_linear']"),
]


@pytest.mark.parametrize(("arguments", "message"), CATALOGUE, ids=[" ".join(a) for a, _ in CATALOGUE])
def test_bad_training_input_fails_in_one_line_before_work(arguments, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train.py", *arguments, f"hydra.run.dir={tmp_path}"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
    error = str(exited.value.code)
    assert error.startswith("error: ") and "\n" not in error and message in error
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "logs").exists() and not (tmp_path / "checkpoints").exists()  # nothing started


def test_a_bad_input_exits_non_zero_with_one_line_on_stderr(tmp_path):
    arguments, message = CATALOGUE[0]
    result = run_script("train.py", *arguments, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and result.stderr.strip().splitlines()[-1] == f"error: {message}"
