"""Loggers: CSV always, Weights & Biases on request, falling back to offline mode when it cannot sync."""

from __future__ import annotations

import netrc
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info

WANDB_HOST = "api.wandb.ai"


def _wandb_host() -> str:
    return urlparse(os.environ.get("WANDB_BASE_URL", f"https://{WANDB_HOST}")).hostname or WANDB_HOST


def _has_api_key(host: str) -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def _reachable(host: str, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def wandb_offline_reason(requested_offline: bool) -> str | None:
    """Why the run must be offline (``None`` when it can sync): asked for, no API key, or no network."""
    if requested_offline or os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return "requested"
    host = _wandb_host()
    if not _has_api_key(host):
        return "no W&B API key (set WANDB_API_KEY or run `wandb login`)"
    if not _reachable(host):
        return f"{host} is unreachable"
    return None


def build_loggers(config: Mapping[str, Any], run_dir: Path, run_config: dict) -> list[Logger]:
    """CSV logger into ``<run_dir>/logs``, plus W&B when ``config.wandb`` is set."""
    loggers: list[Logger] = [CSVLogger(save_dir=str(run_dir), name="", version="logs")]
    wandb_cfg = config.get("wandb")
    if not wandb_cfg:
        return loggers
    reason = wandb_offline_reason(bool(wandb_cfg.get("offline")))
    offline = reason is not None
    if offline and reason != "requested":
        rank_zero_info(f"W&B: {reason}; logging offline to {run_dir}/wandb (sync later with `wandb sync`).")
    loggers.append(
        WandbLogger(
            project=wandb_cfg.get("project", "alternet"),
            entity=wandb_cfg.get("entity"),
            group=wandb_cfg.get("group"),
            tags=list(wandb_cfg.get("tags") or []),
            name=wandb_cfg.get("name") or run_dir.name,
            save_dir=str(run_dir),
            offline=offline,
            log_model=bool(wandb_cfg.get("log_model")) and not offline,
            config=run_config,
            settings={"init_timeout": 30, "silent": True} if offline else {"init_timeout": 60},
        )
    )
    return loggers


def finish_wandb(exit_code: int = 0) -> None:
    """Close the active W&B run, if any (also after a failure, and between multirun jobs)."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)
