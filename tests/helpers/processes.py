"""The repository's scripts as a user runs them: in a fresh interpreter, or as ``__main__`` in this process."""

from __future__ import annotations

import logging
import os
import runpy
import subprocess
import sys

from helpers.paths import ROOT


def run_script(script: str, *args: str, cwd=ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run one of the repository's scripts in a fresh interpreter, as a user would."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_main(script: str, arguments: list[str], monkeypatch, capsys) -> tuple[str, str]:
    """(exit message or status, stderr) of ``python SCRIPT ARGUMENTS``, run in this process (``main_output``)."""
    code, _, stderr = main_output(script, arguments, monkeypatch, capsys)
    return code, stderr


def main_output(script: str, arguments: list[str], monkeypatch, capsys) -> tuple[str, str, str]:
    """(exit message or status, stdout, stderr) of ``python SCRIPT ARGUMENTS``, run in this process: the same entry
    point without a fresh interpreter's ~8 s of imports. A script that returns exits with "0". The logging handlers
    Hydra adds write to this test's captured stream: they go with it (a later test would read "--- Logging error ---"
    and its traceback from them)."""
    monkeypatch.setattr(sys, "argv", [script, *arguments])
    before = list(logging.getLogger().handlers)
    code = "0"
    try:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    except SystemExit as exited:
        code = "0" if exited.code is None else str(exited.code)
    finally:
        for handler in set(logging.getLogger().handlers) - set(before):
            logging.getLogger().removeHandler(handler)
    captured = capsys.readouterr()
    return code, captured.out, captured.err
