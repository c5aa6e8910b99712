"""What a run directory records besides checkpoints: resolved config, environment, final metrics."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from ..jsonio import plain, write_json

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
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict[str, Any]:
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "git_commit": git_commit(Path(__file__).resolve().parent),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "command": sys.argv,
        "packages": versions,
    }


def write_run_records(run_dir: Path, config: dict[str, Any]) -> None:
    """``config.yaml`` (fully resolved) and ``environment.json``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    write_json(run_dir / "environment.json", environment())


def metric_values(metrics: dict[str, Any]) -> dict[str, float | None]:
    return plain(dict(metrics))
