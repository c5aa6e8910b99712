"""What a run directory records about its run: the resolved config (``config.yaml``), the environment
(``environment.json``: git commit, versions, the command), each resume (``resumes.json``), and the command that
resumes it."""

from __future__ import annotations

import functools
import importlib
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig

from ..errors import CheckpointError, ConfigValueError, one_line
from ..files import read_json, write_json, write_text
from .directories import RunDir

PACKAGES = (
    "alternet",
    "torch",
    "torchvision",
    "lightning",
    "timm",
    "hydra-core",
    "torchmetrics",
    "albumentations",
    "numpy",
    "wandb",
    "scikit-learn",
)


def git_commit(directory: Path) -> str | None:
    """The commit of the checkout holding ``directory`` (with ``-dirty`` when modified), if any."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=directory, capture_output=True, text=True, timeout=5)

    try:
        commit = git("rev-parse", "HEAD")
        if commit.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return commit.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def code_commit() -> str | None:
    """The commit of alternet's own checkout, read once a process, at its first run record: the code a process runs is
    the code it imported, so a sweep's jobs in one process all record it, however the tree changes meanwhile."""
    return git_commit(Path(__file__).resolve().parent)


def environment() -> dict[str, Any]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "git_commit": code_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "command": command_line(),
        "packages": versions,
    }


def write_run_records(run: RunDir, config: dict[str, Any]) -> None:
    """``config.yaml`` (fully resolved) and ``environment.json``."""
    write_text(run.config, yaml.safe_dump(config, sort_keys=False))
    write_json(run.environment, environment())


def record_resume(run: RunDir, checkpoint: str, step: int, changes: dict[str, list[Any]]) -> None:
    """Append this resume to ``resumes.json``: config.yaml says what the run uses from now on; this file says what
    an earlier part of it used instead."""
    path = run.resumes
    history = read_json(path, error=CheckpointError, kind=list) if path.is_file() else []
    write_json(path, [*history, {"global_step": step, "checkpoint": checkpoint, "changed": changes}])


def command_words() -> list[str]:
    """How this process was started, up to its overrides: ``python SCRIPT`` (``train.py``, the ``alternet`` console
    script) or ``python -m alternet``, then, for the ``alternet`` command, the command word: inside a Hydra job it
    is the job's name (``train``, ``evaluate``: train.yaml and evaluate.yaml set it, and a user's primary config
    built on them keeps it; a DDP rank's is ``train_ddp_process_N``), as the dispatcher hands Hydra the overrides
    alone (:mod:`alternet.apps.cli`)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    package = __name__.split(".")[0]
    if spec is not None and spec.name.split(".")[0] == package:
        head = ["-m", spec.name.removesuffix(".__main__")]
    elif _launched_by_submitit():  # a job of Hydra's submitit launcher: its script is submitit's own
        head = ["-m", package]
    else:
        head = [sys.argv[0]]
    dispatched = head[-1] == package or Path(head[-1]).stem == package
    try:
        job = HydraConfig.get().job
        word = [next((w for w in COMMANDS if job.name == w or job.name.startswith(f"{w}_")), job.config_name)]
        word = word if dispatched else []
    except ValueError:  # not inside a Hydra job (called from Python)
        word = []
    return [sys.executable, *head, *word]


COMMANDS = ("train", "evaluate")  # the Hydra commands, as their configs name their jobs


def composed_from() -> list[str]:
    """The options that chose a Hydra job's config besides its overrides: the user's primary config
    (``--config-name``), its folder (``--config-dir``) and the folders on ``hydra.searchpath``; none outside a job."""
    try:
        hydra = HydraConfig.get()
    except ValueError:
        return []
    words = [
        f"--config-dir={source.path}" for source in hydra.runtime.config_sources if source.provider == "command-line"
    ]
    if hydra.job.config_name not in COMMANDS:
        words.append(f"--config-name={hydra.job.config_name}")
    return words + [o for o in hydra.overrides.hydra if o.lstrip("+").startswith("hydra.searchpath=")]


def command_line() -> list[str]:
    """The whole command this process runs, as :func:`command_words` and the arguments after them (a submitit job's
    own overrides, where its arguments are submitit's folder)."""
    if _launched_by_submitit():
        try:
            return [*command_words(), *HydraConfig.get().overrides.task]
        except ValueError:
            pass
    return [*command_words(), *sys.argv[1:]]


def _launched_by_submitit() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return (spec is not None and spec.name.startswith("submitit")) or "submitit" in Path(sys.argv[0]).parts


def hydra_quoted(value: str) -> str:
    """``value`` for Hydra's single quotes: a quote escaped, and backslashes doubled where they would escape a quote
    (before one, or at the end); Hydra reads other backslashes as they are."""
    return re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), value)


def override(key: str, value: object) -> str:
    """``key=value`` as Hydra reads it: a value beyond plain path characters (a space, a non-ASCII letter, a symbol
    of Hydra's grammar) in Hydra's single quotes; ``shlex`` then quotes the word for the shell. A ``+`` after the
    first character needs no quotes (a number's exponent: ``1e+29``)."""
    text = str(value)
    plain = re.fullmatch(r"[A-Za-z0-9_./-][A-Za-z0-9_./+-]*", text)
    return f"{key}={text}" if plain else f"{key}='{hydra_quoted(text)}'"


def shell_word(text: str) -> str:
    """``text`` as one shell word, in double quotes where the shell would read it otherwise (Hydra's own single
    quotes kept inside)."""
    if re.fullmatch(r"[\w.=/+,-]+", text):
        return text
    return '"' + re.sub(r'(["$`\\])', r"\\\1", text) + '"'


def resume_command(run: RunDir, checkpoint: str | Path = "last", **changes: Any) -> str:
    """The shell command that resumes this run in its own directory: the command that started it
    (:func:`command_words`), the job's own overrides (Hydra's record of them, else the command line), its run
    directory, ``ckpt_path`` and any ``changes`` (``key=value``)."""
    command = command_words()
    try:
        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # not inside a Hydra job (called from Python)
        overrides = [a for a in sys.argv[1:] if a not in ("-m", "--multirun")]
    dropped = ("ckpt_path=", "hydra.run.dir=", *(f"{k}=" for k in changes))
    kept = [a for a in overrides if not a.lstrip("+").startswith(dropped)]
    extra = [override("hydra.run.dir", run.path), override("ckpt_path", checkpoint)]
    extra += [override(key, value) for key, value in changes.items()]
    return shlex.join([*command, *composed_from(), *kept, *extra])


# the user's modules (imports=) -------------------------------------------------------------------------


def import_modules(names: Sequence[Any] | None) -> None:
    """Import each of ``imports``; one line naming the module and why when one cannot be."""
    for name in names or ():
        if not isinstance(name, str) or not name:
            raise ConfigValueError(f"imports: {name!r} is not a module name: e.g. imports=[my_pkg.models]")
        try:
            importlib.import_module(name)
        except Exception as error:  # whatever the module raises on import: its own code
            missing = isinstance(error, ModuleNotFoundError) and name.startswith(str(error.name))  # it, or a parent
            hint = "is its package installed, or its folder on PYTHONPATH?" if missing else "its own code raised it"
            raise ConfigValueError(
                f"imports: {name} cannot be imported ({type(error).__name__}: {one_line(error)}); {hint}"
            ) from None


def import_recorded(source: str | Path) -> list[str]:
    """Import the modules a run was trained with (its recorded ``imports=``), given the run directory or one of its
    checkpoints, so that evaluating or exporting it finds the models and data sets they register without the
    command line naming them again; returns their names (none for any other source)."""
    path = Path(source).expanduser()
    run = RunDir.of_checkpoint(path) if path.is_file() else RunDir(path) if RunDir(path).is_run_dir() else None
    recorded = (run.recorded_config() or {}).get("imports") if run is not None else None
    import_modules(recorded)
    return list(recorded or [])
