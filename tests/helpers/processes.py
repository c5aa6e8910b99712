"""The repository's scripts as a user runs them: in a fresh interpreter, or as ``__main__`` in this process."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys

import pytest

from helpers.paths import ROOT


def run_script(script: str, *args: str, cwd=ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run one of the repository's scripts in a fresh interpreter, as a user would."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def run_main(script: str, arguments: list[str], monkeypatch, capsys) -> tuple[str, str]:
    """(exit message or status, stderr) of ``python SCRIPT ARGUMENTS``, run in this process."""
    monkeypatch.setattr(sys, "argv", [script, *arguments])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    return str(exited.value.code), capsys.readouterr().err
