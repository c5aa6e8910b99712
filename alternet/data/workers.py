"""How many loader worker processes a machine can feed: one home for ``num_workers: auto``."""

from __future__ import annotations

import os

from ..errors import ConfigValueError

MAX_AUTO_WORKERS = 8  # num_workers=auto: enough to decode JPEGs for one GPU; more only contend for the CPUs


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a SLURM allocation), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def loader_workers(setting: int | str | None, key: str = "num_workers") -> int:
    """DataLoader workers for the setting ``key``: ``auto`` (or null) is min(available CPUs, 8); a number is capped
    at the available CPUs (more workers than CPUs only slow each other down)."""
    cpus = available_cpus()
    if setting is None or setting == "auto":
        return min(cpus, MAX_AUTO_WORKERS)
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise ConfigValueError(f"{key}={setting!r} is invalid: use auto or an integer >= 0")
    return min(setting, cpus)
