"""One command surface: ``alternet COMMAND`` (alternet/apps/cli.py; ``python -m alternet`` is the same) runs every
command, ``--help`` works for each and a user's error ends every one of them in the same line. ``python train.py``
and ``python evaluate.py`` in a checkout run the same jobs; the older spellings (``alternet-train``,
``alternet-evaluate``, ``alternet-hub``, ``python -m alternet.hub`` / ``.report`` / ``.shards`` / ``.data.cifar_c`` /
``.apps.corruptions``) are retired (issue 52). What a job records and repeats, and Lightning's re-launch of each
further DDP rank, work from every kept spelling. In this process where possible (a fresh interpreter costs
seconds); real ``python -m`` runs (slow) check what runpy cannot."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import runpy
import shlex
import subprocess
import sys
import types
import warnings
import zipfile

import pytest
from hydra.core.hydra_config import HydraConfig

from alternet.apps import cli
from alternet.runs import records
from alternet.runs.directories import RunDir
from alternet.runs.summary import RunSummary

from helpers import ROOT

SUMMARY = RunSummary(model="m", data="d", test={})  # what a stand-in training job returns
ARGPARSE_COMMANDS = ("export", "push", "import-hdvw", "report", "buildup", "shards", "cifar-c")
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
    assert "alternet-train" not in text  # the retired spellings are not offered

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


@pytest.mark.parametrize("command", ["export", "push", "import-hdvw"])
def test_extra_words_are_named_by_the_command_they_follow(command, capsys):
    """argparse's subcommands report unknown arguments through their parent, whose usage line lists the hub's three
    commands as if they were all of alternet's: the command's own parser says it."""
    assert exit_code(cli.main, [command, "a", "b", "--out", "x", "c", "d", "--bogus"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"alternet {command}: error: unrecognized arguments: ")


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
        (["evaluate", "ckpt=/nonexistent/model.ckpt"], "error: /nonexistent/model.ckpt does not exist: expected"),
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
    "module",
    [
        "alternet.hub.__main__",
        "alternet.report.__main__",
        "alternet.shards",  # the command's home is alternet.data.files.cli
        "alternet.data.cifar_c",
        "alternet.apps.corruptions",
    ],
)
def test_the_retired_python_m_spellings_are_gone(module):
    assert importlib.util.find_spec(module) is None


def test_python_m_alternet_is_the_command(capsys, monkeypatch):
    assert exit_code(run_module, "alternet", ["shards", "--help"], monkeypatch) == 0
    assert capsys.readouterr().out.startswith("usage: alternet shards [-h]")


ALTERNET = "/venv/bin/alternet"  # the console script, as sys.argv[0] names it


def as_python_m_alternet(monkeypatch) -> None:
    """This process as ``python -m alternet``: its ``__main__`` is alternet's, argv[0] is alternet/__main__.py."""
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec("alternet.__main__", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "alternet" / "__main__.py")])


def test_every_spelling_of_train_and_evaluate_runs_the_same_job(tmp_path, monkeypatch):
    """``alternet train``, ``python -m alternet train`` and ``python train.py`` reach ``apps.train.train`` with the
    same config (likewise for evaluate), and the job records the command as typed (records.command_line): under the
    dispatcher Hydra parses the overrides alone, and the command word is the job's config name."""
    seen = []

    def job(result):
        return lambda cfg: seen.append((cfg.get("seed"), cfg.get("ckpt"), records.command_line())) or result

    monkeypatch.setattr("alternet.apps.train.train", job(SUMMARY))
    monkeypatch.setattr("alternet.apps.evaluate.run_evaluate", job([]))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "RUN").mkdir()  # a source that exists, an export by its files: the pre-flight checks it before the job
    (tmp_path / "RUN" / "config.json").write_text("{}")
    train_args = ["seed=3", f"hydra.run.dir={tmp_path / 'run'}", *QUIET]
    eval_args = ["ckpt=RUN", f"hydra.run.dir={tmp_path / 'eval'}", *QUIET]
    exe = sys.executable

    monkeypatch.setattr(sys, "argv", [ALTERNET])
    assert cli.main(["train", *train_args]) == 0
    assert cli.main(["evaluate", *eval_args]) == 0
    assert sys.argv == [ALTERNET]  # as it was
    for script, args in (("train.py", train_args), ("evaluate.py", eval_args)):
        monkeypatch.setattr(sys, "argv", [script, *args])
        runpy.run_path(str(ROOT / script), run_name="__main__")
    as_python_m_alternet(monkeypatch)
    assert cli.main(["train", *train_args]) == 0

    assert [(seed, ckpt) for seed, ckpt, _ in seen] == [(3, None), (None, "RUN")] * 2 + [(3, None)]
    assert seen[0][2] == [exe, ALTERNET, "train", *train_args]
    assert seen[1][2] == [exe, ALTERNET, "evaluate", *eval_args]
    script = str(ROOT / "train.py")  # runpy.run_path, as Python does, makes argv[0] the script's path
    assert seen[2][2] == [exe, script, *train_args] and seen[3][2] == [exe, str(ROOT / "evaluate.py"), *eval_args]
    assert seen[4][2] == [exe, "-m", "alternet", "train", *train_args]


def test_lightnings_relaunch_of_a_ddp_rank_reaches_the_same_job(tmp_path, monkeypatch):
    """Lightning's DDP launcher re-runs ``sys.argv`` for each further rank (lightning.fabric's
    ``_hydra_subprocess_cmd``, called here inside the job). Under ``python -m alternet train`` that is ``python -m
    alternet OVERRIDES hydra.job.name=train_ddp_process_1 ...``: with LOCAL_RANK set, the command reaches ``train``
    with the parent's overrides. (A real 2-process run of each spelling: tests/training/test_distributed.py.)"""
    from lightning.fabric.strategies.launchers.subprocess_script import _hydra_subprocess_cmd

    relaunch, seen = [], []

    def parent(cfg):
        relaunch.append(_hydra_subprocess_cmd(local_rank=1)[0])
        return SUMMARY

    monkeypatch.setattr("alternet.apps.train.train", parent)
    monkeypatch.chdir(tmp_path)
    as_python_m_alternet(monkeypatch)
    cli.main(["train", "seed=3", f"hydra.run.dir={tmp_path / 'run'}", *QUIET])
    (command,) = relaunch
    assert command[:3] == [sys.executable, "-m", "alternet.__main__"] and command[3] == "seed=3"  # python -m's spec

    monkeypatch.setattr("alternet.apps.train.train", lambda cfg: seen.append(cfg.seed) or SUMMARY)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert cli.main(command[3:]) == 0 and seen == [3]
    monkeypatch.delenv("LOCAL_RANK")  # the same words typed by hand are not a rank: an unknown command
    assert exit_code(cli.main, command[3:]).startswith("error: unknown command 'seed=3'")


def test_hydras_own_options_pass_through_the_command(tmp_path, monkeypatch, capsys):
    """``alternet train -m ...`` sweeps (one job per value, each seeing the command as typed) and
    ``alternet train --cfg job`` prints the composed config without running a job."""
    seen = []
    monkeypatch.setattr("alternet.apps.train.train", lambda cfg: seen.append((cfg.seed, list(sys.argv))) or SUMMARY)
    monkeypatch.chdir(tmp_path)
    sweep = ["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}", *QUIET]
    assert cli.main(["train", *sweep]) == 0
    assert [seed for seed, _ in seen] == [1, 2] and seen[0][1][1:] == sweep  # Hydra's arguments: the overrides

    assert cli.main(["train", "--cfg", "job", "seed=5"]) == 0
    assert "\nseed: 5\n" in capsys.readouterr().out and len(seen) == 2


def test_a_resume_command_repeats_the_command_that_started_the_run(tmp_path, monkeypatch):
    """Inside the job: the kept spelling that started it, the job's overrides, the run directory and the checkpoint."""
    seen = []
    done = SUMMARY
    monkeypatch.setattr(
        "alternet.apps.train.train", lambda cfg: seen.append(records.resume_command(RunDir("RUN"))) or done
    )
    monkeypatch.chdir(tmp_path)
    zipfile.ZipFile(tmp_path / "old.ckpt", "w").close()  # a checkpoint's archive, as the pre-flight can tell
    args = ["seed=3", "ckpt_path=old.ckpt", f"hydra.run.dir={tmp_path / 'run'}", *QUIET]
    monkeypatch.setattr(sys, "argv", [ALTERNET])
    cli.main(["train", *args])
    monkeypatch.setattr(sys, "argv", ["train.py", *args])
    runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
    tail = "seed=3 hydra.run.dir=RUN ckpt_path=last"
    with monkeypatch.context() as outside:  # outside a Hydra job (called from Python): the command line's overrides
        outside.setattr(HydraConfig.instance(), "cfg", None)
        outside.setattr(sys, "argv", ["train.py", "-m", "seed=3"])
        assert records.resume_command(RunDir("RUN")) == f"{sys.executable} train.py {tail}"
    as_python_m_alternet(monkeypatch)
    cli.main(["train", *args])
    heads = (f"{ALTERNET} train", ROOT / "train.py", "-m alternet train")
    assert seen == [f"{sys.executable} {head} {tail}" for head in heads]


def test_a_submitit_jobs_records_and_resume_command_name_alternet_not_submitits_script(tmp_path, monkeypatch):
    """A job of Hydra's submitit launcher runs ``python .../submitit/core/_submit.py FOLDER``: its resume command
    and environment.json named that script and folder."""
    from hydra import compose, initialize_config_dir

    from helpers import CONF

    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec("submitit.core._submit", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", ["/venv/lib/site-packages/submitit/core/_submit.py", "/sweep/.submitit/%j"])
    with initialize_config_dir(str(CONF), version_base="1.3"):
        config = compose("train", overrides=["seed=3"], return_hydra_config=True)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", config)
    assert records.command_line() == [sys.executable, "-m", "alternet", "train", "seed=3"]
    resumed = f"{sys.executable} -m alternet train seed=3 hydra.run.dir=RUN ckpt_path=last"
    assert records.resume_command(RunDir("RUN")) == resumed


@pytest.mark.slow  # ~8 s on 2 busy cores: the whole command imports every library
def test_python_m_alternet_ends_on_an_error_with_one_line_and_status_1(tmp_path):
    missing = tmp_path / "missing"
    failed = subprocess.run(
        [sys.executable, "-m", "alternet", "report", str(missing)], capture_output=True, text=True, timeout=120
    )
    assert failed.returncode == 1 and failed.stderr == f"error: sweep directory {missing} does not exist\n"


def test_a_resume_command_reads_back_a_run_directory_of_spaces_and_other_letters(monkeypatch):
    """The override was quoted for the shell alone: Hydra refused the pasted command ("cannot read the override")."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    run = "/tmp/sp ace/ünï cødé/it's/run2"
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)
    monkeypatch.setattr(sys, "argv", ["train.py", "seed=3"])
    words = shlex.split(records.resume_command(RunDir(run)))
    parsed = OverridesParser.create().parse_overrides([w for w in words if "=" in w])
    assert {o.key_or_group: o.value() for o in parsed}["hydra.run.dir"] == run


def test_the_line_that_ends_a_run_goes_to_its_log_file_and_a_log_file_gone_loses_only_the_line(tmp_path):
    """A run's train.log ends on its error or stop line; a refused run's directory is removed before that line is
    written, and a file handler opened late (Hydra's ``delay: true``) raised FileNotFoundError in its place."""
    import logging

    from alternet.apps.cli import _logged

    kept, gone = tmp_path / "run" / "train.log", tmp_path / "gone" / "train.log"
    kept.parent.mkdir()
    handlers = [logging.FileHandler(kept), logging.FileHandler(gone, delay=True)]
    root = logging.getLogger()
    for handler in handlers:
        root.addHandler(handler)
    try:
        error = ValueError("stopped by SIGTERM at global step 2")
        assert _logged(error) is error
    finally:
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()
    assert kept.read_text() == "stopped by SIGTERM at global step 2\n" and not gone.parent.exists()


def test_a_run_of_the_users_own_configs_resumes_with_the_command_it_prints(tmp_path, monkeypatch, capsys):
    """With --config-dir/--config-name and hydra.searchpath, the printed resume command named the config as the
    command word ('alternet mytrain': unknown command) and dropped what chose the config (its options unknown)."""
    import re
    import shlex

    from helpers.processes import run_command

    primary, options = tmp_path / "primary", tmp_path / "options"
    primary.mkdir()
    (options / "model").mkdir(parents=True)
    (primary / "mytrain.yaml").write_text("defaults:\n  - train\n  - _self_\n")
    (options / "model" / "my_tiny.yaml").write_text("defaults:\n  - alternet_tiny\n  - _self_\nwidths: [8, 16, 32]\n")
    stop = "callbacks.extra=[{_target_:helpers.callbacks.SignalBeforeStep,step:2}]"
    run = tmp_path / "run"
    arguments = [f"--config-dir={primary}", "--config-name=mytrain", f"hydra.searchpath=[file://{options}]"]
    arguments += ["model=my_tiny", "debug=fast", stop, f"hydra.run.dir={run}"]
    code, stderr = run_command(["train", *arguments], monkeypatch, capsys)
    printed = re.search(r"Resume with: (.+)$", code + "\n" + stderr, re.MULTILINE)
    assert printed, code
    words = shlex.split(printed.group(1))
    word = words.index("train")  # the command word, after the program (here: alternet, run in this process)
    assert words[word - 1].endswith("alternet") and "mytrain" not in words[:word], words
    assert f"--config-dir={primary}" in words and "--config-name=mytrain" in words
    assert f"hydra.searchpath=[file://{options}]" in words and "model=my_tiny" in words
    again = [w for w in words[word:] if not w.startswith("callbacks.extra=")]
    code, _ = run_command(again, monkeypatch, capsys)
    assert code == "0"
    environment = (run / "environment.json").read_text()
    assert "alternet mytrain" not in environment and '"train"' in environment


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_the_composed_config_prints_resolved(command, monkeypatch, capsys):
    """--cfg job --resolve ended in a 60-line traceback: paths.output_dir is Hydra's job directory, which a config
    printed without running a job has not."""
    from helpers.processes import main_output

    code, stdout, stderr = main_output(f"{command}.py", ["--cfg", "job", "--resolve"], monkeypatch, capsys)
    assert code == "0" and "Traceback" not in stderr and "output_dir: null" in stdout


def test_a_primary_config_not_built_on_alternets_is_one_line(tmp_path, monkeypatch, capsys):
    """Without train.yaml's paths group the run crashed on a TypeError."""
    from helpers.processes import assert_one_line_error, run_command

    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "bare.yaml").write_text("defaults:\n  - train_schema\n  - data: digits\n  - _self_\n")
    run = tmp_path / "run"
    code, stderr = run_command(
        ["train", f"--config-dir={tmp_path / 'conf'}", "--config-name=bare", f"hydra.run.dir={run}"],
        monkeypatch,
        capsys,
    )
    assert_one_line_error(code, stderr, "paths.output_dir is not set: a primary config of your own builds on")
