"""One command surface: ``alternet COMMAND`` (alternet/apps/cli.py) runs every command, ``--help`` works for each, a
user's error ends every one of them in the same line, and every older spelling (``alternet-train``,
``alternet-evaluate``, ``alternet-hub``, ``python train.py``, ``python evaluate.py``, ``python -m alternet.hub`` /
``.report`` / ``.shards`` / ``.data.cifar_c`` / ``.apps.corruptions``) still runs the same function. In this process
where possible (a fresh interpreter costs seconds); real ``python -m`` runs (slow) check what runpy cannot. By
default fresh interpreters run ``python train.py`` and ``python evaluate.py`` (tests/apps/test_train.py,
test_evaluate.py, test_bad_inputs.py)."""

from __future__ import annotations

import importlib.machinery
import runpy
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig

from alternet import runs
from alternet.apps import cli

from helpers import ROOT

ARGPARSE_COMMANDS = ("export", "push", "import-hdvw", "report", "shards", "cifar-c")
HYDRA_COMMANDS = ("train", "evaluate")
# Hydra without its logging set-up or .hydra/ records: a job in this process leaves nothing behind
QUIET = ["hydra/job_logging=none", "hydra/hydra_logging=none", "hydra.output_subdir=null"]


def exit_code(run, *args) -> object:
    with pytest.raises(SystemExit) as exited:
        run(*args)
    return exited.value.code


def run_module(module: str, argv: list[str], monkeypatch) -> None:
    """``python -m MODULE ARGV``, in this process."""
    monkeypatch.setattr(sys, "argv", [module, *argv])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported already (by this test run)
        runpy.run_module(module, run_name="__main__", alter_sys=True)


def test_the_command_lists_every_command_in_one_line_each(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: alternet COMMAND [ARGS ...]")
    listed = [line.split()[0] for line in text.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert listed == list(cli.COMMANDS) == [*HYDRA_COMMANDS, *ARGPARSE_COMMANDS]
    assert "alternet-train" in text and "python train.py" in text  # the older spellings, named once

    assert cli.main([]) == 2  # no command: the list, on stderr
    assert capsys.readouterr().err.startswith("usage: alternet COMMAND")


def test_an_unknown_command_is_one_error_line():
    message = exit_code(cli.main, ["model=alternet_r50"])
    assert message.startswith("error: unknown command 'model=alternet_r50' (overrides follow a command: alternet ")
    assert "\n" not in message and "train, evaluate, export" in message


@pytest.mark.parametrize("command", ARGPARSE_COMMANDS)
def test_every_command_explains_itself(command, capsys):
    assert exit_code(cli.main, [command, "--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: alternet {command} ")


@pytest.mark.parametrize("command", HYDRA_COMMANDS)
def test_the_hydra_commands_explain_themselves(command, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    argv = list(sys.argv)
    assert exit_code(cli.main, [command, "--help"]) in (0, None)
    text = capsys.readouterr().out
    assert text.startswith(f"alternet {command}: ") and f"alternet {command} " in text and "== Config groups ==" in text
    assert sys.argv == argv and not list(tmp_path.iterdir())  # sys.argv as it was; nothing written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "recipe.epochs=-1"], "error: recipe.epochs=-1 is invalid: must be an integer >= 1"),
        (["evaluate", "ckpt=/nonexistent/model.ckpt"], "error: checkpoint /nonexistent/model.ckpt does not exist"),
        (["export", "/nonexistent/run", "--out", "OUT"], "error: /nonexistent/run does not exist"),
        (["report", "/nonexistent/sweep"], "error: sweep directory /nonexistent/sweep does not exist"),
        (["shards", "/nonexistent/images", "OUT"], "error: "),
        (
            ["cifar-c", "--export", "OUT", "--data", "nonexistent"],
            "error: --data nonexistent is invalid: it must be cifar10 or cifar100",
        ),
    ],
)
def test_every_command_ends_on_a_users_error_in_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hydra = [f"hydra.run.dir={tmp_path / 'run'}", *QUIET] if args[0] in HYDRA_COMMANDS else []
    code = exit_code(cli.main, [*args, *hydra])
    assert isinstance(code, str) and code.startswith(message) and "\n" not in code, code


@pytest.mark.parametrize(
    ("command", "spellings"),
    [
        ("export", ["alternet-hub", "alternet.hub"]),
        ("push", ["alternet-hub", "alternet.hub"]),
        ("import-hdvw", ["alternet-hub", "alternet.hub"]),
        ("report", ["alternet.report"]),
        ("shards", ["alternet.shards"]),
        ("cifar-c", ["alternet.data.cifar_c", "alternet.apps.corruptions"]),
    ],
)
def test_every_old_spelling_runs_the_same_command(command, spellings, capsys, monkeypatch):
    """The same parser (the same function) behind each spelling: the same help, but for the name it gives."""
    assert exit_code(cli.main, [command, "--help"]) == 0
    expected = capsys.readouterr().out.split("\n\n", 1)[1]  # after the usage, whose wrapping follows the name
    hub = command in ("export", "push", "import-hdvw")
    for spelling in spellings:
        argv = [command, "--help"] if hub else ["--help"]
        if spelling == "alternet-hub":  # the console script
            prog, code = "alternet-hub", exit_code(cli.hub_main, argv)
        else:  # python -m MODULE
            prog, code = f"python -m {spelling}", exit_code(run_module, spelling, argv, monkeypatch)
        assert code == 0, spelling
        usage, rest = capsys.readouterr().out.split("\n\n", 1)
        assert usage.startswith(f"usage: {prog} {command} " if hub else f"usage: {prog} ") and rest == expected


def test_python_m_alternet_is_the_command(capsys, monkeypatch):
    assert exit_code(run_module, "alternet", ["shards", "--help"], monkeypatch) == 0
    assert capsys.readouterr().out.startswith("usage: alternet shards [-h]")


def test_every_spelling_of_train_and_evaluate_runs_the_same_job(tmp_path, monkeypatch):
    """``alternet train``, ``alternet-train`` and ``python train.py`` reach ``apps.train.train`` with the same
    config (likewise for evaluate); under the dispatcher Hydra parses only the overrides, while the job sees the
    command as typed (what the run records, a resume command repeats and DDP re-executes per rank)."""
    seen = []

    def job(result):
        return lambda cfg: seen.append((cfg.get("seed"), cfg.get("ckpt"), list(sys.argv))) or result

    monkeypatch.setattr(cli, "train", job({"optimized_metric": None}))
    monkeypatch.setattr(cli, "run_evaluate", job([]))
    monkeypatch.chdir(tmp_path)
    train_args = ["seed=3", f"hydra.run.dir={tmp_path / 'run'}", *QUIET]
    eval_args = ["ckpt=RUN", f"hydra.run.dir={tmp_path / 'eval'}", *QUIET]
    before = list(sys.argv)

    assert cli.main(["train", *train_args]) == 0
    assert cli.main(["evaluate", *eval_args]) == 0
    assert sys.argv == before
    for main, argv in ((cli.train_main, ["alternet-train", *train_args]), (cli.evaluate_main, ["x", *eval_args])):
        monkeypatch.setattr(sys, "argv", argv)
        main()
    for script, args in (("train.py", train_args), ("evaluate.py", eval_args)):
        monkeypatch.setattr(sys, "argv", [script, *args])
        runpy.run_path(str(ROOT / script), run_name="__main__")

    assert [(seed, ckpt) for seed, ckpt, _ in seen] == [(3, None), (None, "RUN")] * 3
    assert seen[0][2] == [before[0], "train", *train_args]  # the command as typed, subcommand included
    assert seen[1][2] == [before[0], "evaluate", *eval_args]
    assert seen[2][2] == ["alternet-train", *train_args] and seen[4][2][1:] == train_args


def test_hydras_own_options_pass_through_the_command(tmp_path, monkeypatch, capsys):
    """``alternet train -m ...`` sweeps (one job per value, each seeing the command as typed) and
    ``alternet train --cfg job`` prints the composed config without running a job."""
    seen = []
    monkeypatch.setattr(cli, "train", lambda cfg: seen.append((cfg.seed, list(sys.argv))) or {"optimized_metric": None})
    monkeypatch.chdir(tmp_path)
    sweep = ["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}", *QUIET]
    assert cli.main(["train", *sweep]) == 0
    assert [seed for seed, _ in seen] == [1, 2] and seen[0][1][1:] == ["train", *sweep]

    assert cli.main(["train", "--cfg", "job", "seed=5"]) == 0
    assert "\nseed: 5\n" in capsys.readouterr().out and len(seen) == 2


def test_a_resume_command_repeats_the_command_that_started_the_run(monkeypatch):
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # outside a Hydra job (one in this process left its own)
    monkeypatch.setattr(sys, "argv", ["/venv/bin/alternet", "train", "-m", "seed=3", "ckpt_path=old"])
    expected = "/venv/bin/alternet train seed=3 hydra.run.dir=RUN ckpt_path=last"
    assert runs.resume_command(Path("RUN")) == f"{sys.executable} {expected}"

    monkeypatch.setattr(sys, "argv", ["train.py", "seed=3"])  # the old spelling: no subcommand
    assert runs.resume_command(Path("RUN")) == f"{sys.executable} train.py seed=3 hydra.run.dir=RUN ckpt_path=last"

    main = types.ModuleType("__main__")  # python -m alternet train ...: argv[0] is alternet/__main__.py
    main.__spec__ = importlib.machinery.ModuleSpec("alternet.__main__", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "alternet" / "__main__.py"), "train", "seed=3"])
    assert runs.resume_command(Path("RUN")).endswith("-m alternet train seed=3 hydra.run.dir=RUN ckpt_path=last")


@pytest.mark.slow  # 7-10 s on 2 busy cores (the import of alternet.data); runpy covers the same module in-process
def test_a_data_floor_module_runs_its_command_in_a_fresh_interpreter():
    """``python -m alternet.data.cifar_c`` as a user runs it: the module of the data floor holds its command (what
    runpy in this process cannot show: a fresh import of the package, then the module run as __main__)."""
    helped = subprocess.run(
        [sys.executable, "-m", "alternet.data.cifar_c", "--help"], capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m alternet.data.cifar_c [-h] --export")


@pytest.mark.slow  # ~8 s on 2 busy cores: the whole command imports every library
def test_python_m_alternet_ends_on_an_error_with_one_line_and_status_1(tmp_path):
    missing = tmp_path / "missing"
    failed = subprocess.run(
        [sys.executable, "-m", "alternet", "report", str(missing)], capture_output=True, text=True, timeout=120
    )
    assert failed.returncode == 1 and failed.stderr == f"error: sweep directory {missing} does not exist\n"
