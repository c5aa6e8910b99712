"""The command line: ``alternet COMMAND [ARGS]``, one command per job (:data:`COMMANDS`; ``alternet --help`` lists
them), and the Hydra apps ``train`` and ``evaluate`` (:func:`train_main`, :func:`evaluate_main`; their run
directories under ``paths.log_dir``, ``alternet train --help`` from the template ``hydra.help`` in
``conf/hydra/default.yaml``). How the dispatcher hands Hydra its ``sys.argv``, how a DDP rank comes back through
:func:`main` (:func:`lightning_rank`) and how every command ends on a user's error: docs/architecture.md, "Entry
points".
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ..errors import AlternetError, error_line, exit_with_error, warnings_on_one_line
from ..files import file_system_error, file_system_errors_said
from ..runs.directories import SweepDir
from ..training.stopping import (
    COMMAND_INTERRUPTED,
    EVALUATION_INTERRUPTED,
    TRAINING_INTERRUPTED,
    Preempted,
    StoppedWithoutSaving,
    ends_on_its_stop_line,
    raised_by_a_stop,
)
from . import config as _schemas  # noqa: F401 - registers train.yaml's and evaluate.yaml's schemas
from .hydra.composition import one_line_composition_errors, warn_shadowed_options

CONFIG_PATH = "pkg://alternet.conf"
PROG = "alternet"
DDP_JOB_NAME = "hydra.job.name=train_ddp_process_"  # what Lightning adds to a rank it launches under Hydra


class SweepJobFailed(AlternetError, RuntimeError):
    """A sweep job's own error (a diverged learning rate, a refusal only the job can find), said at once in one
    line: Hydra records the job as failed and the sweep goes on with its other jobs, then ends on one line
    (:func:`_swept`)."""


FAILED: list[SweepJobFailed] = []  # the failed jobs of the sweep this process runs, said as each failed


def check_working_directory() -> None:
    """A shell left in a folder deleted since (or moved away): Hydra's ``os.getcwd()`` ended in a 40-line traceback,
    and torch's import in ``Intel oneMKL FATAL ERROR: Cannot load libtorch_cpu.so``."""
    try:
        os.getcwd()
    except OSError as error:
        exit_with_error(
            f"the current directory cannot be read ({error.strerror}): it was deleted or moved after this shell "
            "entered it; cd to an existing directory and run the command again"
        )


def _command_main(message: str, command: str) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """A Hydra app's main as a command runs it: warnings and composition errors on one line, a sweep whose jobs
    failed ending on one line after its other jobs ran, and Ctrl-C ending on the command's stop line (``message``;
    the policy: :mod:`alternet.training.stopping`)."""

    def wrap(main: Callable[[], Any]) -> Callable[[], Any]:
        @ends_on_its_stop_line(message)
        @functools.wraps(main)
        def run() -> Any:
            check_working_directory()  # python train.py / evaluate.py come here without main()
            sys.argv[1:] = [_home_expanded(arg) for arg in sys.argv[1:]]
            _forget_failed_jobs()  # this command's sweep's only (an earlier command's in this process: a test's)
            with warnings_on_one_line(), one_line_composition_errors(command):
                try:
                    result = main()
                except ValueError as error:  # Hydra's refusal of two modes, as a traceback
                    if str(error).startswith("Only one of --run, --multirun, --cfg"):
                        exit_with_error(
                            f"{error}: --cfg prints one job's composed config; drop -m (its overrides as one job's: "
                            "a=1, not a=1,2)"
                        )
                    raise
                except OSError as error:  # the file system's refusal (a name too long, a full disk ...) in one line
                    if (said := file_system_error(error)) is None:
                        _swept(error)
                        raise
                    exit_with_error(said)
                except Exception as error:
                    _swept(error)
                    raise
                if FAILED:  # a search's sweeper went on past failed jobs (max_failure_rate) and ended without error
                    _swept(FAILED[0])
                _failed_elsewhere()
                return result

        return run

    return wrap


RUN_DIRS = ("hydra.run.dir", "hydra.sweep.dir")  # Hydra's own folders, which it takes as written


def _home_expanded(arg: str) -> str:
    """``hydra.run.dir='~/x'`` with ``~`` as the home folder, as every path option of alternet reads it (Hydra made a
    folder named ``~`` in the working directory)."""
    key, equals, value = arg.partition("=")
    return f"{key}={_home(value)}" if equals and key.lstrip("+") in RUN_DIRS else arg


def _home(value: str) -> str:
    """An override's value with a leading ``~`` as the home folder, quoted as it was (Hydra reads an unquoted ``~``
    as its delete operator)."""
    quote = value[0] if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0] else ""
    inner = value[1:-1] if quote else value
    return f"{quote}{os.path.expanduser(inner)}{quote}" if inner.startswith("~") else value


def _swept(error: Exception) -> None:
    """End a sweep whose jobs failed (Hydra raises the first failure once every job ran) on one line, its summary
    written now that all jobs are done; a job that failed under the submitit launcher raised in its own process."""
    submitit = type(error).__module__.startswith("submitit")
    if not isinstance(error, SweepJobFailed) and not submitit:
        return
    ran = (_sum_up_the_sweep() or ("",))[0]
    if submitit:  # a job that crashed (its message: the job's traceback); the launcher stopped waiting for the rest
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        cause = next((line for line in reversed(lines) if "Error" in line or line.startswith("error:")), lines[0])
        exit_with_error(
            f"a sweep job crashed under the submitit launcher ({cause}); jobs still running may have been "
            f"cancelled, each job's log is under its .submitit/ folder{ran}"
        )
    exit_with_error(f"a sweep job failed (the first: {error}){ran}")


def _failed_elsewhere() -> None:
    """End a search whose sweeper went on past jobs that failed in a launcher's worker process (joblib's), which the
    record of failed jobs (``FAILED``) cannot see, on one line and a failure's exit status."""
    unfinished = _forget_failed_jobs()
    if unfinished:
        jobs = ", ".join(unfinished)
        plural = "s" * (len(unfinished) > 1)
        exit_with_error(
            f"search job{plural} {jobs} failed in the launcher's worker process (the search went on past "
            f"{'them' if plural else 'it'}): each job's train.log ends on why"
        )


def _forget_failed_jobs() -> list[str]:
    """Clear the records of failed jobs; the unfinished jobs of the search that ended, as they were."""
    FAILED.clear()
    sweep = sys.modules.get("alternet.apps.hydra.sweep")  # imported for a multirun's callback only (matplotlib)
    unfinished = list(sweep.SEARCH_JOBS_UNFINISHED) if sweep is not None else []
    if sweep is not None:
        sweep.SEARCH_JOBS_UNFINISHED.clear()
    return unfinished


def _sum_up_the_sweep() -> tuple[str, str] | None:
    """Write the summary of the sweep this process launched, now that its jobs ran or it was stopped; the jobs line
    with the summary's path, and how to go on after a stop (None outside a sweep)."""
    from .hydra.sweep import RUNNING, write_sweep_summary  # deferred: matplotlib

    if not RUNNING:
        return None
    sweep, search = RUNNING.pop()  # this sweep's end: a later command in this process (a test's) launched no sweep
    path = write_sweep_summary(sweep)
    ran = f"; {SweepDir(sweep).jobs().describe()}" + (f" (summary: {path})" if path else "")
    go_on = (
        "its finished jobs are kept; a new search goes to a new hydra.sweep.dir (its values are drawn anew: Optuna "
        "continues a study from hydra.sweeper.storage)"
        if search
        else "its command again with ckpt_path=last completes it"
    )
    return ran, go_on


def _sweep_job() -> str | None:
    """``sweep job N (overrides)`` inside a multirun's job, else None."""
    from hydra.types import RunMode  # deferred: as above

    try:
        hydra_config = HydraConfig.get()
    except ValueError:  # not inside a Hydra job (train() from Python)
        return None
    if hydra_config.mode != RunMode.MULTIRUN:
        return None
    return f"sweep job {hydra_config.job.num} ({' '.join(hydra_config.overrides.task)})"


@_command_main(TRAINING_INTERRUPTED, "train")
@hydra.main(config_path=CONFIG_PATH, config_name="train", version_base="1.3")
def train_main(cfg: DictConfig) -> float | None:
    """``alternet train [group=option ...] [key=value ...]``: train one model (or, with ``-m``, a sweep)."""
    warn_shadowed_options()
    from .train import train  # deferred: `alternet train --help` answers without torch

    try:
        summary = train(cfg)
    except (Preempted, StoppedWithoutSaving) as error:  # a stop signal stops the whole sweep
        _logged(error)
        if _sweep_job() is not None and (summed := _sum_up_the_sweep()) is not None:  # the job's line, the sweep's
            print(error_line(error), file=sys.stderr, flush=True)
            exit_with_error(f"the sweep stopped{summed[0]}; {summed[1]}")
        exit_with_error(error)
    except AlternetError as error:
        _logged(error)
        if (job := _sweep_job()) is not None:  # said now; the sweep goes on with its other jobs
            print(error_line(f"{job}: {error}"), file=sys.stderr, flush=True)
            FAILED.append(failed := SweepJobFailed(f"{job}: {error}"))
            raise failed from None
        exit_with_error(error)
    except Exception as error:  # a stop signal's error, raised inside code that put another in its place
        if (stop := raised_by_a_stop(error)) is None:
            raise
        exit_with_error(_logged(stop))
    optimized = summary.optimized_metric  # the value a Hydra sweeper (e.g. Optuna) optimises, if configured
    return (math.nan if optimized.value is None else optimized.value) if optimized else None


def _logged(error: BaseException | str) -> BaseException | str:
    """``error``'s line, as the command line ends on it, also at the end of the job's log file (``train.log``):
    a sweep's job, or a run looked at later, says there why it stopped. Hydra's console handler is left out (the
    line is printed once, by the command's end)."""
    record = logging.LogRecord(__name__, logging.ERROR, __file__, 0, str(error), None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and os.path.isdir(os.path.dirname(handler.baseFilename)):
            with contextlib.suppress(OSError):  # a log file that cannot be written loses the line, not the error
                handler.handle(record)
    return error


def run_dir_follows_out_dir(main: Callable[[], Any]) -> Callable[[], Any]:
    """``evaluate out_dir=DIR`` is the evaluation's directory, its records (.hydra/, evaluate.log) and lock
    included, so nothing goes to ./outputs/: the command line gains ``hydra.run.dir=DIR`` unless it sets one or
    sweeps (``-m``: each job's folder is its ``out_dir``, which the sweep's pre-flight checks is its own)."""

    @functools.wraps(main)
    def run() -> Any:
        given = [arg.split("=", 1) for arg in sys.argv[1:] if "=" in arg]
        out = next((value for key, value in given if key.lstrip("+") == "out_dir"), None)
        sweeps = any(arg in ("-m", "--multirun") for arg in sys.argv[1:])
        if out not in (None, "null") and not sweeps and not any(key.lstrip("+") == "hydra.run.dir" for key, _ in given):
            sys.argv.append(f"hydra.run.dir={_home(out)}")  # as out_dir is read: ~ is the home folder
        run_dir = next((value for key, value in given if key.lstrip("+") == "hydra.run.dir"), out)
        with _records_kept_unless_done(run_dir):
            return main()

    return run


@contextlib.contextmanager
def _records_kept_unless_done(run_dir: str | None) -> Iterator[None]:
    """An evaluation's folder keeps the earlier one's ``.hydra/`` records when this one does not end (refused,
    stopped, failed): Hydra rewrites them as a job starts, and they would name a command that wrote none of the
    files there. Put back as they were, their times too."""
    from ..runs.directories import RunDir  # deferred: the commands' --help answers without the kernel

    records = RunDir(Path(run_dir).expanduser()).hydra if run_dir else None
    try:
        before = {path: (path.read_bytes(), path.stat()) for path in records.iterdir() if path.is_file()}
    except (OSError, AttributeError):  # no earlier records
        before = {}
    try:
        yield
    except BaseException as error:
        if before and not (isinstance(error, SystemExit) and error.code in (None, 0)):
            with contextlib.suppress(OSError):
                for path in set(records.iterdir()) - set(before):
                    path.unlink()
                for path, (content, stat) in before.items():
                    if not path.is_file() or path.read_bytes() != content:
                        path.write_bytes(content)
                        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        raise


@run_dir_follows_out_dir
@_command_main(EVALUATION_INTERRUPTED, "evaluate")
@hydra.main(config_path=CONFIG_PATH, config_name="evaluate", version_base="1.3")
def evaluate_main(cfg: DictConfig) -> None:
    """``alternet evaluate ckpt=SOURCE [data=...] [key=value ...]``: score models."""
    warn_shadowed_options()
    from ..runs.directories import RunDir  # deferred: `alternet evaluate --help` answers without torch
    from ..runs.ownership import discard_unused_run_dir  # deferred: as above
    from .evaluate import run_evaluate  # deferred: as above

    try:
        with file_system_errors_said():
            run_evaluate(cfg)
    except AlternetError as error:
        discard_unused_run_dir(RunDir(HydraConfig.get().runtime.output_dir))  # as a training run's (apps.train)
        exit_with_error(_logged(error))


def _hydra_app(main: Callable[[], Any]) -> Callable[[list[str]], int]:
    def run(args: list[str]) -> int:
        parsed, sys.argv = sys.argv, [sys.argv[0], *args]  # Hydra reads its overrides from sys.argv[1:]
        try:
            main()
        finally:
            sys.argv = parsed
        return 0

    return run


def _hub(command: str) -> Callable[[list[str]], int]:
    """A command of :mod:`alternet.hub.cli` (whose ``main`` returns nothing: status 0), imported when it runs."""
    return lambda args: importlib.import_module("alternet.hub.cli").main([command, *args], prog=PROG) or 0


def _argparse_app(module: str, command: str) -> Callable[[list[str]], int]:
    """A command whose ``main(args, prog)`` is in ``module``, imported when the command runs: the list of commands
    (``alternet --help``) imports none of them."""
    return lambda args: importlib.import_module(module).main(args, prog=f"{PROG} {command}")


class Command(NamedTuple):
    summary: str
    run: Callable[[list[str]], int]  # its arguments -> exit status


COMMANDS: dict[str, Command] = {
    "train": Command(
        "train a model, or a sweep with -m (Hydra overrides: model=... data=... key=value)", _hydra_app(train_main)
    ),
    "evaluate": Command(
        "score models: calibration, corruption robustness, analyses (ckpt=RUN, timm:NAME ...)",
        _hydra_app(evaluate_main),
    ),
    "export": Command("a run or checkpoint as a timm-loadable directory with a model card", _hub("export")),
    "push": Command("upload an export (or a run, exported first) to the Hugging Face Hub", _hub("push")),
    "import-hdvw": Command("a checkpoint of the paper's authors (HDVW) as an export directory", _hub("import-hdvw")),
    "report": Command(
        "a sweep directory as the paper's figures, a table and verdicts", _argparse_app("alternet.report.cli", "report")
    ),
    "buildup": Command(
        "the paper's build-up rules as a search: an AlterNet layout for your data and budget",
        _argparse_app("alternet.apps.buildup", "buildup"),
    ),
    "shards": Command(
        "an image folder as LitData shards for streaming training", _argparse_app("alternet.data.files.cli", "shards")
    ),
    "cifar-c": Command(
        "a CIFAR-C-layout directory generated from a data set's test split",
        _argparse_app("alternet.data.corrupted.cli", "cifar-c"),
    ),
}


def usage() -> str:
    """What ``alternet --help`` prints: the commands, one line each."""
    width = max(map(len, COMMANDS)) + 2
    return "\n".join(
        [
            f"usage: {PROG} COMMAND [ARGS ...]",
            "",
            "Train, evaluate, analyse and publish hybrid Conv + MSA image classifiers. "
            f"`{PROG} COMMAND --help` explains a command.",
            "",
            "commands:",
            *(f"  {name:<{width}}{command.summary}" for name, command in COMMANDS.items()),
        ]
    )


def lightning_rank(args: Sequence[str]) -> bool:
    """Whether ``args`` are Lightning's re-run of a ``train`` job for one more rank: its DDP launcher starts each
    further process with the parent's ``sys.argv`` (the job's overrides, without the command word) and its own
    ``hydra.job.name=train_ddp_process_N``, with ``LOCAL_RANK`` set."""
    return "LOCAL_RANK" in os.environ and any(arg.startswith(DDP_JOB_NAME) for arg in args)


def main(argv: Sequence[str] | None = None) -> int:
    """``alternet COMMAND [ARGS]`` (``argv``: the command and its arguments; default: the process's)."""
    args = sys.argv[1:] if argv is None else list(argv)
    check_working_directory()
    if not args or args[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS and lightning_rank(args):
        name, rest = "train", args
    if name not in COMMANDS:
        hint = f" (overrides follow a command: {PROG} train {name})" if "=" in name else ""
        exit_with_error(f"unknown command {name!r}{hint}; the commands are {', '.join(COMMANDS)} ({PROG} --help)")
    run = functools.partial(COMMANDS[name].run, rest)
    if name in COMMAND_INTERRUPTED:  # train and evaluate end on their own stop lines
        run = ends_on_its_stop_line(COMMAND_INTERRUPTED[name])(run)
    with warnings_on_one_line():
        try:
            return run()
        except OSError as error:  # a command's file system refusal (export, report, shards, buildup ...) in one line
            if (said := file_system_error(error)) is None:
                raise
            exit_with_error(said)
