"""Bad inputs as a user types them, through the real command lines: each must fail before any work with one line
naming the key or file (exit status non-zero, no traceback), so no change can quietly turn one back into a
traceback deep inside training.

The catalogue runs ``train.py`` / ``evaluate.py`` as ``__main__`` in this process (their Hydra entry points,
argument parsing and error handling, as a user's command runs them; a fresh interpreter costs ~8 s a case); one case
of each also runs as a real subprocess to check the exit status and stderr end to end."""

import runpy
import sys

import pytest

from alternet.apps.train import train

from conftest import FAST, ROOT, compose_train, run_script

TRAIN = [
    # (arguments, what the error must say)
    (["recipe.epochs=-1"], "error: recipe.epochs=-1 is invalid: must be an integer >= 1"),
    (["recipe.batch_size=0"], "error: recipe.batch_size=0 is invalid: must be an integer >= 1"),
    (["data.val_size=5000"], "error: data.val_size=5000 is not smaller than the 1437 training images"),
    (["model.name=alternet_r9000"], "error: unknown model 'alternet_r9000'. alternet models: alternet_r101"),
    (["model=alternet_r9000"], "Available options in 'model':"),
    (["data=imagenet_21k"], "Available options in 'data':"),
    (["model.window=3"], "error: stage 2 ('CM'): window 3 does not divide the stage's 8x8 feature map"),
    (["data=cifar100", "data.root=/nonexistent"], "error: cifar100 not found: looked in /nonexistent/cifar-100-python"),
    (["ckpt_path=/nonexistent.ckpt"], "error: checkpoint /nonexistent.ckpt does not exist"),
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
    (["data.image_size=40"], "the automatic attention window 4 does not divide the stage's 10x10 feature map"),
]

EVALUATE = [
    (["ckpt=/nonexistent/model.ckpt"], "error: checkpoint /nonexistent/model.ckpt does not exist"),
    (["ckpt={run}", "data=cifar100"], "was trained on 10 classes (digits) but data=cifar100 has 100"),
    ([], "ckpt is required"),
]


def run_main(script: str, arguments: list[str], monkeypatch, capsys) -> tuple[str, str]:
    """(exit message or status, stderr) of ``python SCRIPT ARGUMENTS``, run in this process."""
    monkeypatch.setattr(sys, "argv", [script, *arguments])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    return str(exited.value.code), capsys.readouterr().err


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("digits-run")
    train(compose_train(*FAST, output_dir=run_dir))
    return run_dir


@pytest.mark.parametrize(("arguments", "message"), TRAIN, ids=[" ".join(a) for a, _ in TRAIN])
def test_bad_training_input_fails_in_one_line_before_work(arguments, message, tmp_path, monkeypatch, capsys):
    code, stderr = run_main("train.py", [*arguments, f"hydra.run.dir={tmp_path}"], monkeypatch, capsys)
    assert code != "0" and message in code + stderr
    assert "Traceback" not in stderr and "\n" not in code
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.json").exists()  # no training


@pytest.mark.parametrize(("arguments", "message"), EVALUATE, ids=[" ".join(a) or "no ckpt" for a, _ in EVALUATE])
def test_bad_evaluation_input_fails_in_one_line_before_work(
    arguments, message, digits_run, tmp_path, monkeypatch, capsys
):
    arguments = [a.format(run=digits_run) for a in arguments]
    code, stderr = run_main("evaluate.py", [*arguments, f"hydra.run.dir={tmp_path}"], monkeypatch, capsys)
    assert code != "0" and message in code + stderr
    assert "Traceback" not in stderr and "\n" not in code
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.parametrize(("script", "case"), [("train.py", TRAIN[-7]), ("evaluate.py", EVALUATE[0])])
def test_a_bad_input_exits_non_zero_with_one_line_on_stderr(script, case, tmp_path):
    arguments, message = case
    result = run_script(script, *arguments, f"hydra.run.dir={tmp_path}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and result.stderr.strip().splitlines()[-1].endswith(message)
