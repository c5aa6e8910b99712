"""Errors meant for the user, and the one way a command line ends on one: ``error: MESSAGE`` on stderr, exit
status 1, no traceback; Ctrl-C as a command notes it, to end on its stop line."""

from __future__ import annotations

import contextlib
import difflib
import math
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn


class AlternetError(Exception):
    """Base of errors whose message says what is wrong and how to fix it."""


class ConfigValueError(AlternetError, ValueError):
    """A configuration value that cannot work; the message names the key."""


class DataError(AlternetError, RuntimeError):
    """A data set that is missing, corrupt or inconsistent with the configuration."""


class CheckpointError(AlternetError, RuntimeError):
    """A checkpoint that is missing, unreadable or does not fit the model or data."""


# the config checks' one-line messages: every key's rule is one call of these, in the function that owns the key ----


def suggest(value: Any, choices: Iterable[Any]) -> str:
    """`` (did you mean 'x'?)`` for a near miss, else nothing."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_of(key: str, value: Any, choices: Iterable[Any], show: Callable[[Any], str] = repr) -> None:
    """``KEY=VALUE is not one of [...]`` (with the closest choice) unless ``value`` is one of ``choices``
    (compared as text, as a command line types them); ``show`` writes the value."""
    choices = list(choices)
    if str(value) not in [str(c) for c in choices]:
        raise ConfigValueError(f"{key}={show(value)} is not one of {choices}{suggest(value, choices)}")


def require(
    key: str, value: Any, check: Callable[[Any], Any], expectation: str, show: Callable[[Any], str] = repr
) -> None:
    """``KEY=VALUE is invalid: EXPECTATION`` unless ``check(value)`` holds (a check that cannot compare the value,
    e.g. a string against a number, fails it); ``show`` writes the value."""
    try:
        ok = check(value)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigValueError(f"{key}={show(value)} is invalid: {expectation}")


def check_option(option: str, value: object, ok: bool, what: str) -> None:
    """A command-line option's value checked before any work: ``--OPTION VALUE is invalid: it must be WHAT``."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or isinstance(value, bool) or (number and not math.isfinite(value)):
        raise ConfigValueError(f"{option} {value} is invalid: it must be {what}")


def is_integer(value: Any, minimum: int | None = None) -> bool:
    """An integer (not a bool), at least ``minimum`` if given."""
    return isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum)


def one_line(text: object) -> str:
    """``text`` (e.g. a library's exception) on one line: its runs of whitespace and line breaks as single spaces."""
    return " ".join(str(text).split())


_ENFORCE = re.compile(r"^\[enforce fail at [^\]]*\][\s.]*")


def brief_reason(error: BaseException) -> str:
    """The first line of a library's reason (torch's, for a file it cannot read: without its C++ source location),
    short enough for a one-line error."""
    text = str(error).strip()
    return _ENFORCE.sub("", text.splitlines()[0])[:200] if text else type(error).__name__


def error_line(error: BaseException | str) -> str:
    """The line a command prints for an error meant for the user: ``error: MESSAGE``."""
    return f"error: {error}"


class AlternetWarning(UserWarning):
    """A warning of alternet's about what the user asked for; a command shows it as it shows an error: one line,
    ``warning: MESSAGE`` (:func:`warnings_on_one_line`)."""


@contextlib.contextmanager
def warnings_on_one_line() -> Iterator[None]:
    """While a command runs, alternet's warnings print as ``warning: MESSAGE`` on stderr, the shape of its
    ``error: MESSAGE`` line (Python's default adds the file, line number and source line of the call); other
    libraries' warnings show as they do."""
    shown = warnings.showwarning

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None):
        if issubclass(category, AlternetWarning):
            print(f"warning: {message}", file=file or sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def exit_with_error(error: BaseException | str) -> NoReturn:
    """End a command line on ``error``: ``error: MESSAGE`` on stderr and exit status 1. It raises ``SystemExit``
    carrying the line, which the interpreter prints when nothing catches it (so the command's own ``finally`` blocks
    still run, and a test in the same process reads the line from ``.code``). Every command line ends this way
    (alternet/apps/cli.py and the commands it dispatches to); before a command's code has been imported, the
    licence check prints the same line itself (alternet/data/licence.py)."""
    raise SystemExit(error_line(error)) from None
