"""Errors meant for the user, and the one way a command line ends on one: ``error: MESSAGE`` on stderr, exit
status 1, no traceback."""

from __future__ import annotations

from typing import NoReturn


class AlternetError(Exception):
    """Base of errors whose message says what is wrong and how to fix it."""


class ConfigValueError(AlternetError, ValueError):
    """A configuration value that cannot work; the message names the key."""


class DataError(AlternetError, RuntimeError):
    """A data set that is missing, corrupt or inconsistent with the configuration."""


class CheckpointError(AlternetError, RuntimeError):
    """A checkpoint that is missing, unreadable or does not fit the model or data."""


def error_line(error: BaseException | str) -> str:
    """The line a command prints for an error meant for the user: ``error: MESSAGE``."""
    return f"error: {error}"


def exit_with_error(error: BaseException | str) -> NoReturn:
    """End a command line on ``error``: ``error: MESSAGE`` on stderr and exit status 1. It raises ``SystemExit``
    carrying the line, which the interpreter prints when nothing catches it (so the command's own ``finally`` blocks
    still run, and a test in the same process reads the line from ``.code``). Every command line ends this way
    (alternet/apps/cli.py and the commands it dispatches to); before a command's code has been imported, the
    licence check prints the same line itself (alternet/data/licence.py)."""
    raise SystemExit(error_line(error)) from None
