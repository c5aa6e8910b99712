"""The augmentation library must be the MIT-licensed ``albumentations`` 2.0.x, checked before it is first imported.

AlbumentationsX (AGPL-3.0) installs under the same import name, ``albumentations``, and silently replaces the pinned
MIT 2.0.8: alternet would then run, and be distributed, with AGPL code without anyone noticing. Importing this module
(``alternet.data`` does, before anything imports albumentations) fails in one line saying so and how to fix it. The
installed distributions are read from their metadata (``importlib.metadata``), not by importing the module.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib import metadata

from ..errors import AlternetError, error_line

MODULE = "albumentations"
MIT_DISTRIBUTION = "albumentations"
AGPL_DISTRIBUTIONS = ("albumentationsx",)  # ship the same import name
PINNED = "2.0.8"  # pyproject.toml; the 2.0.x series is MIT
FIX = f"pip uninstall -y {' '.join(AGPL_DISTRIBUTIONS)} {MIT_DISTRIBUTION} && pip install {MIT_DISTRIBUTION}=={PINNED}"


class LicenceError(AlternetError, ImportError):
    """A dependency installed under the expected import name is not the expected (permissively licensed) one."""


def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, None when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def albumentations_problem() -> str | None:
    """Why the ``albumentations`` this interpreter would import is not the MIT 2.0.x, or None when it is."""
    for name in AGPL_DISTRIBUTIONS:
        version = installed_version(name)
        if version is not None:
            return (
                f"{name} {version} (AGPL-3.0) is installed and provides the '{MODULE}' module in place of the "
                f"MIT-licensed {MIT_DISTRIBUTION} {PINNED} that alternet is built and licensed with"
            )
    version = installed_version(MIT_DISTRIBUTION)
    if version is None:
        if importlib.util.find_spec(MODULE) is None:
            return f"{MIT_DISTRIBUTION} is not installed"
        return f"the '{MODULE}' module here belongs to no installed distribution, so its licence is unknown"
    if not version.startswith("2.0."):
        return f"{MIT_DISTRIBUTION} {version} is installed; alternet needs the MIT-licensed 2.0.x ({PINNED})"
    return None


def require_mit_albumentations() -> None:
    """Raise :class:`LicenceError` in one line (what is wrong, the command that fixes it) unless the MIT
    albumentations 2.0.x is what ``import albumentations`` would load."""
    problem = albumentations_problem()
    if problem is not None:
        raise LicenceError(f"{problem}. Fix: {FIX}")


def one_line_when_uncaught(previous):
    """An excepthook that prints an uncaught :class:`LicenceError` as ``error: ...`` (exit status 1) and leaves
    every other exception to ``previous``: the check runs while a command line imports its code, before the command's
    own one-line error handling exists, and a traceback through the import chain would bury the fix."""

    def hook(kind, value, traceback):
        if isinstance(value, LicenceError):
            print(error_line(value), file=sys.stderr)
            return
        previous(kind, value, traceback)

    return hook


os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # albumentations asks PyPI for a newer version otherwise
try:  # before alternet.data imports albumentations
    require_mit_albumentations()
except LicenceError:
    sys.excepthook = one_line_when_uncaught(sys.excepthook)
    raise
