"""The repository's scripts as a user runs them: in a fresh interpreter, or as ``__main__`` in this process."""

from __future__ import annotations

import gc
import io
import logging
import os
import runpy
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import pytest

from helpers.paths import ROOT

# what `import alternet`, the typed config and every `--help` must not load (seconds of imports: tests/test_lazy.py,
# tests/apps/test_cli.py)
HEAVY_IMPORTS = (
    "torch",
    "lightning",
    "timm",
    "torchvision",
    "scipy",
    "matplotlib",
    "cv2",
    "albumentations",
    "wandb",
    "litdata",
)


@contextmanager
def without_collection() -> Iterator[None]:
    """The garbage collector off inside: what a dropped object must do at once (end its loader workers) is not left
    to a collection that happens to run."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def run_script(script: str, *args: str, cwd=ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run one of the repository's scripts in a fresh interpreter, as a user would."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_module(module: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` from the repository's root in a fresh interpreter (``bench.NAME``, ``tools.NAME``)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_warm(script: str, *args: str, cwd=ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """:func:`run_script` in a process of its own forked from a warm interpreter (:mod:`helpers.warm`): the same
    command, exit status and streams, without ~8 s of imports (nor a fresh interpreter's import-time reads)."""
    from helpers import warm

    return warm.run(script, *args, cwd=cwd, timeout=timeout)


def run_main(script: str, arguments: list[str], monkeypatch, capsys) -> tuple[str, str]:
    """(exit message or status, stderr) of ``python SCRIPT ARGUMENTS``, run in this process (``main_output``)."""
    code, _, stderr = main_output(script, arguments, monkeypatch, capsys)
    return code, stderr


def assert_one_line_error(code: str, stderr: str, *fragments: str) -> None:
    """A command ended on one ``error:`` line holding every fragment, with no traceback."""
    assert code.startswith("error: ") and "\n" not in code, code
    assert "Traceback" not in stderr, stderr[-2000:]
    for fragment in fragments:
        assert fragment in code, code


def main_output(script: str, arguments: list[str], monkeypatch, capsys) -> tuple[str, str, str]:
    """(exit message or status, stdout, stderr) of ``python SCRIPT ARGUMENTS``, run in this process: the same entry
    point without a fresh interpreter's ~8 s of imports. A script that returns exits with "0"."""
    code = _exit_code(
        lambda: runpy.run_path(str(ROOT / script), run_name="__main__"), [script, *arguments], monkeypatch
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_command(arguments: list[str], monkeypatch, capsys) -> tuple[str, str]:
    """(exit message or status, stderr) of ``alternet ARGUMENTS``, run in this process."""
    from alternet.apps import cli

    code = _exit_code(lambda: cli.main(arguments), ["alternet", *arguments], monkeypatch)
    return code, capsys.readouterr().err


def module_output(module: str, arguments: list[str], monkeypatch, capsys) -> tuple[str, str, str]:
    """``main_output`` of ``python -m MODULE ARGUMENTS``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # runpy: the module was imported already (by this test run)
        code = _exit_code(
            lambda: runpy.run_module(module, run_name="__main__", alter_sys=True), [module, *arguments], monkeypatch
        )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def script_output(script: str, arguments: list[str]) -> tuple[str, str, str]:
    """``main_output`` for a fixture wider than one test (which has no ``capsys``): its own patch of ``sys.argv`` and
    its own captured streams."""
    with (
        pytest.MonkeyPatch.context() as patch,
        redirect_stdout(io.StringIO()) as out,
        redirect_stderr(io.StringIO()) as err,
    ):
        code = _exit_code(lambda: runpy.run_path(str(ROOT / script), run_name="__main__"), [script, *arguments], patch)
    return code, out.getvalue(), err.getvalue()


def _exit_code(run: Callable[[], object], argv: list[str], monkeypatch) -> str:
    """Run a command line's main in this process: its exit message or status ("0" when it returns). The logging
    handlers Hydra adds write to this test's captured stream: they go with it (a later test would read "--- Logging
    error ---" and its traceback from them)."""
    monkeypatch.setattr(sys, "argv", argv)
    before = list(logging.getLogger().handlers)
    try:
        run()
    except SystemExit as exited:
        return "0" if exited.code is None else str(exited.code)
    finally:
        for handler in set(logging.getLogger().handlers) - set(before):
            logging.getLogger().removeHandler(handler)
    return "0"
