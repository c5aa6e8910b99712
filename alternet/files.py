"""Files the framework writes and checks: atomic writes, strict JSON, CSV tables, figures, content hashes.

Every writer goes through :func:`atomic_write`, so a reader (or a run killed mid-write) never sees half a file.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import errno
import glob
import hashlib
import json
import math
import multiprocessing
import os
import platform
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import AlternetError, one_line

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

CHUNK = 1 << 22


class WriteError(AlternetError, OSError):
    """A file could not be written (a full disk, a read-only directory, a quota); its previous version is intact."""


def atomic_write(path: str | Path, write: Callable[[Path], Any]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place (same file system, so
    the rename is atomic). The temporary file never survives a failure, and the file's previous version stays as it
    was: a failure of the file system (ENOSPC, EROFS, EACCES, EDQUOT, ...) raises :class:`WriteError` naming the path
    and the error in one line."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as error:
        raise _write_error(path, error) from error
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, _mode(path))  # mkstemp's file is private (0600); the file it replaces, or a new one, is not
        os.replace(tmp, path)
    except WriteError:
        raise
    except OSError as error:
        raise _write_error(path, error) from error
    finally:
        with contextlib.suppress(OSError):  # a directory that turned read-only keeps its temporary file
            tmp.unlink(missing_ok=True)
    return path


def _mode(path: Path) -> int:
    """The permissions ``path`` keeps (a new file: what ``open`` gives it under this process's umask, 0644 under
    the usual 022), so an export or a report stays readable by the others on a shared machine."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        return 0o666 & ~_UMASK


# the process's umask, read once at import (reading it means setting it: no thread may create a file then)
_UMASK = os.umask(0o022)
os.umask(_UMASK)


OUTPUT_MARKER = ".alternet-output"  # the command that writes a folder (report, shards, an evaluation's out_dir)
OUTPUT_LOCK = ".alternet-writing"  # locked by the command writing the folder now (a run directory has RunDir.lock)


class LockBusy(AlternetError):
    """Another process holds the lock; ``owner`` is what it wrote there (its pid and host)."""

    def __init__(self, owner: str):
        super().__init__(owner)
        self.owner = owner


def lock_owner(path: Path) -> str | None:
    """Who holds ``path``'s lock (:func:`lock_file`), or None: asked with a shared lock on the file opened for reading,
    so that asking changes nothing."""
    if fcntl is None or not path.is_file():
        return None
    with open(path) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return handle.read().strip() or "another process"
    return None


def lock_file(path: Path, wait: Callable[[str], None] | None = None) -> Any:
    """``path`` opened and locked exclusively for as long as the returned handle stays open (the OS releases it when
    the process dies, so a killed holder leaves no stale lock), this process's pid and host written into it.
    When another process holds it: raises :class:`LockBusy`, or with ``wait`` calls ``wait(owner)`` once and blocks
    until the holder is done. None where ``fcntl`` is missing (Windows: no lock)."""
    if fcntl is None:
        return None
    handle = open(path, "a+")  # noqa: SIM115 - held open by the caller
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "another process"
        if wait is None:
            handle.close()
            raise LockBusy(owner) from None
        wait(owner)
        fcntl.flock(handle, fcntl.LOCK_EX)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {platform.node()}\n")
    handle.flush()
    return handle


@contextlib.contextmanager
def writing(directory: Path, what: str, wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold ``directory``'s :data:`OUTPUT_LOCK` while a command writes it: a second command into the same folder
    stops in one line instead of writing beside the first, or with ``wait`` (a cache both may fill) waits for the
    first to finish, ``wait(owner)`` called once (the folder must exist)."""
    try:
        handle = lock_file(Path(directory) / OUTPUT_LOCK, wait)
    except LockBusy as busy:
        raise WriteError(
            f"{what} {directory} is being written by another command ({busy.owner}); wait for it, or choose another "
            "directory"
        ) from None
    try:
        yield
    finally:
        if handle is not None:
            handle.close()


@contextlib.contextmanager
def removed_unless_written(directory: Path, made: bool) -> Iterator[None]:
    """A command's output folder that it ``made``, removed again where the command fails before writing into it (a
    full disk, a stop): nothing left but the writing lock, so no empty folder stays behind."""
    try:
        yield
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                left = list(directory.iterdir())
                if all(path.name == OUTPUT_LOCK for path in left):
                    for path in left:
                        path.unlink()
                    directory.rmdir()
        raise


def mark_output(directory: str | Path, command: str) -> None:
    """Say in ``directory`` that ``command`` writes it: :func:`check_output_dir` lets the command write there again."""
    write_text(Path(directory) / OUTPUT_MARKER, f"{command}\n")


def is_output_of(directory: Path, command: str) -> bool:
    """Whether ``directory`` holds ``command``'s own earlier output (:func:`mark_output`)."""
    try:
        return (Path(directory) / OUTPUT_MARKER).read_text().strip() == command
    except (OSError, UnicodeDecodeError):
        return False


def check_output_dir(
    out: str | Path,
    what: str,
    own: Callable[[Path], bool],
    own_name: str,
    option: str | None = None,
    error: type[Exception] = WriteError,
    whole: Callable[[str], bool] | None = None,
) -> Path:
    """Before a command reads any input: ``out`` is a directory that can be made, an empty one, or one holding the
    command's own earlier output (``own``: a marker the command wrote, never a common file name alone), and it can
    be written. ``whole``: the folder is written by :func:`whole_directory`, which builds the new folder beside
    ``out`` and puts it in ``out``'s place (``out``'s parent must be writable, ``out`` no mount point), and names
    the entries the command writes: an earlier output beside anything else (a clone's ``.git``, a user's notes) is
    refused, as putting the new folder in its place would delete them. Anything else raises ``error`` in one line,
    so no command writes into, or deletes from, a folder of the user's. Returns ``out`` (``~`` expanded)."""
    where = f" with {option}" if option else ""
    out = through_links(Path(out).expanduser(), what, where, error)
    if out.exists() and not out.is_dir():
        raise error(f"{what} {out} is a file; choose a directory{where}")
    blocked = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise error(f"{what} {out} cannot be made: {blocked} is a file; choose another directory{where}")
    if out.is_dir():
        names = sorted(path.name for path in out.iterdir() if path.name != OUTPUT_LOCK)  # the lock: a writer's own
        if names and not own(out):
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            raise error(
                f"{what} {out} holds files that are not {own_name} ({shown}); nothing there was changed. Choose a new "
                f"or empty directory{where}"
            )
        others = [name for name in names if whole is not None and not whole(name)]
        if others:
            shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
            raise error(
                f"{what} {out} holds {own_name} and files it did not write ({shown}), which writing it anew would "
                f"delete; nothing there was changed. Move them out, or choose a new or empty directory{where}"
            )
    existing = next(p for p in [out, *out.parents] if p.exists())
    if whole is not None and existing == out and os.path.ismount(out):
        raise error(
            f"{what} {out} is a mount point, which a folder written whole cannot replace; choose a folder inside "
            f"it{where}"
        )
    for needed in [existing, out.parent] if whole is not None and existing == out else [existing]:  # built beside
        if not os.access(needed, os.W_OK | os.X_OK):
            raise error(
                f"{what} {out} cannot be written: {needed} is not writable (or read-only); choose another "
                f"directory{where}"
            )
    return out


def through_links(out: Path, what: str, where: str = "", error: type[Exception] = WriteError) -> Path:
    """``out`` with a link in it followed to the folder it names, so a command writes into that folder (a whole
    folder put in a link's place replaced the link, and the output never reached its target); a link to nothing,
    or one that leads back to itself, raises ``error`` in one line."""
    linked = False
    for path in [*reversed(out.parents), out]:
        if not path.is_symlink():
            continue
        linked = True
        try:
            path.resolve(strict=True)
        except FileNotFoundError:
            raise error(
                f"{what} {out} cannot be made: {path} is a link to {os.readlink(path)}, which does not exist; make "
                f"that folder, or choose another directory{where}"
            ) from None
        except (RuntimeError, OSError):  # a loop of links (RuntimeError before Python 3.13)
            raise error(
                f"{what} {out} cannot be made: {path} is a link that leads back to itself; choose another "
                f"directory{where}"
            ) from None
    return out.resolve() if linked else out


def why_missing(path: Path) -> str:
    """Why ``path``, which does not exist as far as ``Path.exists`` tells, names nothing: "does not exist", or the
    link in it that leads nowhere or back to itself."""
    for part in [*reversed(path.parents), path]:
        if not part.is_symlink() or part.exists():
            continue
        try:
            part.resolve(strict=True)
        except FileNotFoundError:
            why = f"a link to {os.readlink(part)}, which does not exist"
        except (RuntimeError, OSError):  # a loop of links (RuntimeError before Python 3.13)
            why = "a link that leads back to itself"
        else:
            continue
        return f"is {why}" if part == path else f"does not exist: {part} is {why}"
    return "does not exist"


def stale_temporaries(directory: Path) -> list[Path]:
    """The temporary files :func:`atomic_write` leaves in ``directory`` when its process dies mid-write (SIGKILL, a
    power cut: no ``finally`` runs); the files they were to replace are intact. Only the directory's one writer, which
    holds its lock, may remove them."""
    return sorted(path for path in Path(directory).glob(".*.*.tmp") if path.is_file())


def _write_error(path: Path, error: OSError, shown: Path | None = None) -> WriteError:
    """``error`` writing ``path`` in one line, naming ``shown`` (the file ``path`` stands for: its place in the
    folder a :func:`whole_directory` replaces), which is intact; ``.reason`` keeps the system's words."""
    shown = shown or path
    kept = "its previous version is intact" if shown.is_file() else "nothing was written"
    written = WriteError(f"could not write {shown}: {os_error_reason(error)}; {kept}. {WRITE_FIX}")
    written.path, written.reason = path, error
    return written


WRITE_FIX = "Free space, or make the directory writable"


def os_error_reason(error: OSError) -> str:
    """What went wrong, in the words of the system and its code: ``No space left on device (ENOSPC)``."""
    code = errno.errorcode.get(error.errno or 0)
    return f"{error.strerror} ({code})" if error.strerror and code else str(error)


# what a file system refuses, said in one line with what to do about it (any other OSError keeps its traceback)
FILE_SYSTEM_ADVICE = {
    errno.ENAMETOOLONG: "shorten it: a name holds at most 255 bytes, a path 4,096",
    errno.ENOSPC: "free space there (or write elsewhere) and run the command again",
    errno.EDQUOT: "free space within your quota (or write elsewhere) and run the command again",
    errno.ENOTDIR: "a part of it is a file, not a folder: choose another path",
    errno.EROFS: "that file system is read-only: write elsewhere",
    errno.EACCES: "check its permissions, or choose another path",
    errno.EPERM: "check its permissions, or choose another path",
    errno.ELOOP: "its links form a loop: mend them, or name what they should point to",
}
SHOWN_PATH = 160  # characters of a path an error line shows (its start and its end)


class FileSystemError(AlternetError):
    """An OSError of :data:`FILE_SYSTEM_ADVICE`, in one line naming the path."""


def file_system_error(error: BaseException) -> FileSystemError | None:
    """``error`` as a :class:`FileSystemError` where it is one the file system raised (a name too long, a full disk,
    a file where a folder is needed, a read-only mount ...); None for any other error."""
    if not isinstance(error, OSError) or error.errno not in FILE_SYSTEM_ADVICE:
        return None
    paths = [str(name) for name in (error.filename, error.filename2) if name is not None]
    shown = [p if len(p) <= SHOWN_PATH else f"{p[: SHOWN_PATH // 2]}...{p[-SHOWN_PATH // 2 :]}" for p in paths]
    where = " -> ".join(shown) or "a file"
    return FileSystemError(f"{where}: {os_error_reason(error)}; {FILE_SYSTEM_ADVICE[error.errno]}")


@contextlib.contextmanager
def file_system_errors_said() -> Iterator[None]:
    """Inside it, an OSError of the file system (:func:`file_system_error`) is raised as its one-line
    :class:`FileSystemError`, which the commands end on like any of their refusals."""
    try:
        yield
    except OSError as error:
        said = file_system_error(error)
        if said is None:
            raise
        raise said from error


def write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text))


# stop signals, and folders written whole -------------------------------------------------------

# What schedulers and terminals send to stop a run (the pre-emption callback's choices)
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")
STOPS = frozenset(getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name))  # those this OS has


def die_with_parent() -> None:
    """In a worker process (Linux): it is killed when the process that started it ends. A command killed outright
    (SIGKILL, the OOM killer) otherwise left workers running for minutes, writing into its output and holding its
    folder's lock under the dead command's pid. A worker whose parent ended before this call ends at once. (The
    kernel ties the request to the thread that forked the worker: alternet starts its workers from the main thread.)
    Elsewhere: nothing."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        return
    parent = multiprocessing.parent_process()  # its liveness is the parent's own pipe: no race with the fork
    if parent is not None and not parent.is_alive():
        os._exit(1)


PR_SET_PDEATHSIG = 1  # prctl(2)


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """The stop signals blocked in this thread while the body runs (one sent meanwhile waits; another thread of
    the process takes it if one can). Processes forked or spawned here start with them blocked in every thread."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


STAGING_SUFFIX = ".partial"  # a folder being written, beside the one it will replace: .NAME.XXXXXXXX.partial


class StoppedWhenWritten(AlternetError):
    """A stop signal that came while a folder was put in place: the command stops, its folder complete."""


def _stop_if_sent(out: Path) -> None:
    """With the stop signals still blocked, once ``out`` is in place: a Ctrl-C (SIGINT) sent meanwhile is taken here
    and raised as :class:`StoppedWhenWritten` (unblocked, it would raise as a stop before the folder was written).
    A scheduler's signals (SIGTERM, SIGUSR1/2) stay pending for their handlers, which may requeue the job."""
    if not hasattr(signal, "sigtimedwait") or signal.SIGINT not in signal.sigpending():
        return
    if signal.sigtimedwait({signal.SIGINT}, 0) is not None:
        raise StoppedWhenWritten(f"stopped by SIGINT once {out} was written: it is complete")


@contextlib.contextmanager
def whole_directory(out: str | Path) -> Iterator[Path]:
    """Write a folder whole or not at all: the body writes into a new temporary sibling of ``out`` (yielded), which
    then takes ``out``'s place in one step; an earlier ``out`` is removed only after. An exception or a stop
    signal in the body leaves ``out`` as it was and the sibling removed; a process killed outright (SIGKILL) leaves
    ``out`` intact too, and a hidden ``.NAME.*.partial`` sibling (:func:`stale_directories`) that the next writer
    removes. A reader therefore sees the earlier folder or the new one complete, never a mix. (Where the system has
    no atomic exchange, not Linux, a SIGKILL landing between the fallback's two renames leaves the earlier folder
    beside ``out`` as ``.NAME.*.partial.old``, which nothing removes.) The caller holds the folder's lock
    (:func:`writing`): one writer at a time."""
    out = Path(out)
    for stale in stale_directories(out):
        shutil.rmtree(stale, ignore_errors=True)
    with _staging(out, out.parent, f".{out.name}.") as staging:  # removed after: the earlier folder, or the new one
        yield staging
        os.chmod(staging, 0o777 & ~_UMASK)  # mkdtemp's folder is private (0700); the folder it replaces is not
        with stop_signals_blocked():  # no Ctrl-C between the two renames of a system without an exchange
            try:
                _swap(staging, out)
            except OSError as error:  # e.g. EBUSY: out is a mount point
                raise WriteError(
                    f"could not put the new {out} in place: {os_error_reason(error)}; the earlier one is unchanged. "
                    f"{WRITE_FIX}"
                ) from None
            _stop_if_sent(out)


@contextlib.contextmanager
def whole_products(out: str | Path, is_product: Callable[[Path], bool], *, says_stop: bool = True) -> Iterator[Path]:
    """Write a command's products into ``out`` whole or not at all, where ``out`` also holds what they must not
    replace (a run directory's records and log, its lock and marker): the body writes into a hidden staging folder
    inside ``out`` (yielded); then, stop signals blocked, the earlier products (the entries of ``out`` that
    ``is_product`` names, never a hidden one) are moved aside, the new ones moved in, and the earlier ones removed.
    An exception or a stop signal in the body leaves ``out`` as it was; a process killed outright (SIGKILL) leaves
    ``out`` intact and a hidden ``.products.*.partial`` folder that the next writer removes (only a kill during the
    moves, a few renames long, leaves a mix). The caller holds ``out``'s lock (:func:`writing`, a run directory's):
    one writer at a time. ``says_stop``: a Ctrl-C during the moves is said as :class:`StoppedWhenWritten` (else it
    raises once they are done, for the caller to word)."""
    out = Path(out)
    for stale in sorted(out.glob(f"{_PRODUCTS}*{STAGING_SUFFIX}")) if out.is_dir() else []:
        shutil.rmtree(stale, ignore_errors=True)
    with _staging(out, out, _PRODUCTS) as staging:
        yield staging
        with stop_signals_blocked():
            try:
                aside = Path(tempfile.mkdtemp(prefix=_PRODUCTS, suffix=STAGING_SUFFIX, dir=out))
                _move([entry for entry in out.iterdir() if entry.name[0] != "." and is_product(entry)], aside)
                _move(sorted(staging.iterdir()), out, undo=(aside, out))
            except OSError as error:
                with contextlib.suppress(OSError):
                    os.rmdir(aside)  # empty once the earlier products are back
                raise WriteError(
                    f"could not put the new files in {out}: {os_error_reason(error)}; the earlier ones are unchanged. "
                    f"{WRITE_FIX}"
                ) from None
            shutil.rmtree(aside, ignore_errors=True)
            if says_stop:  # else a Ctrl-C raises once unblocked, for the caller's own words (training's)
                _stop_if_sent(out)


@contextlib.contextmanager
def _staging(out: Path, where: Path, prefix: str) -> Iterator[Path]:
    """A new hidden folder in ``where`` for what will be ``out`` (:func:`whole_directory`, :func:`whole_products`),
    removed when the body ends, whatever ends it; a :class:`WriteError` of a file in it is named by the file's place
    in ``out``, where the earlier one is intact."""
    try:
        where.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=prefix, suffix=STAGING_SUFFIX, dir=where))
    except OSError as error:
        raise WriteError(f"could not write {out}: {os_error_reason(error)}; nothing was changed. {WRITE_FIX}") from None
    try:
        yield staging
    except WriteError as error:
        path = getattr(error, "path", None)
        if path is None or staging not in Path(path).parents:
            raise
        raise _write_error(path, error.reason, out / Path(path).relative_to(staging)) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


_PRODUCTS = ".products."  # whole_products' staging folders inside the folder they fill: .products.XXXXXXXX.partial


def _move(entries: list[Path], into: Path, undo: tuple[Path, Path] | None = None) -> None:
    """Each entry renamed into ``into``; on a failure those moved go back, and so do ``undo``'s (its first folder's
    entries into its second), before the error is raised."""
    moved = []
    try:
        for entry in entries:
            os.rename(entry, into / entry.name)
            moved.append(entry)
    except OSError:
        for entry in moved:
            os.rename(into / entry.name, entry)
        if undo is not None:
            _move(sorted(undo[0].iterdir()), undo[1])
        raise


def stale_directories(out: str | Path) -> list[Path]:
    """The unfinished siblings a killed :func:`whole_directory` left beside ``out`` (``out`` itself is intact). Only
    its one writer, which holds the folder's lock, may remove them."""
    out = Path(out)
    own = re.compile(rf"\.{re.escape(out.name)}\.[^.]+{re.escape(STAGING_SUFFIX)}")  # not those of an OUT named NAME.X
    candidates = out.parent.glob(f".{glob.escape(out.name)}.*{STAGING_SUFFIX}")
    return sorted(p for p in candidates if own.fullmatch(p.name) and p.is_dir())


def _swap(staging: Path, out: Path) -> None:
    """``staging`` renamed to ``out``; an existing ``out`` exchanged with it in one step (Linux's ``renameat2``),
    else moved aside first: the earlier folder then lies in ``staging`` for the caller to remove."""
    if not out.exists():
        os.rename(staging, out)
        return
    if _exchange(staging, out):
        return
    aside = staging.with_name(staging.name + ".old")
    os.rename(out, aside)
    try:
        os.rename(staging, out)
    except BaseException:  # a failure, or a signal a thread took despite the mask: the earlier folder back
        if staging.exists():  # (a signal landing just after the rename finds the new folder in place)
            os.rename(aside, out)
        raise
    os.rename(aside, staging)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with ``renameat2(RENAME_EXCHANGE)``; False where the system or file system has
    no such call."""
    if platform.system() != "Linux":
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    call = getattr(libc, "renameat2", None)
    if call is None:
        return False
    at_cwd, rename_exchange = -100, 2
    if call(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EPERM):  # a file system (or sandbox) without the exchange
        return False
    raise OSError(code, os.strerror(code), str(b))


# JSON ------------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """JSON-safe, recursively: tensors, arrays and numpy scalars to Python values, NaN/inf to None."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | Path, payload: Mapping[str, Any], *, sort_keys: bool = False) -> Path:
    """Write strictly valid JSON (NaN/inf as null), atomically."""
    return write_text(path, json.dumps(plain(payload), indent=2, allow_nan=False, sort_keys=sort_keys) + "\n")


def read_json(path: str | Path, *, error: type[Exception] = AlternetError, kind: type = dict) -> Any:
    """A JSON object (``kind=list``: an array) from a file; an unreadable file or another JSON type raises ``error``
    naming the file."""
    try:
        payload = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise error(f"{path} does not exist") from None
    except IsADirectoryError:
        raise error(f"{path} is a directory, not a JSON file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path} is unreadable or not valid JSON: {exc}") from exc
    if not isinstance(payload, kind):
        expected = "a JSON array" if kind is list else "a JSON object"
        raise error(f"{path} should hold {expected}, found {type(payload).__name__}")
    return payload


def read_yaml(path: str | Path, *, error: type[Exception] = AlternetError) -> dict[str, Any]:
    """A YAML mapping from a file; an unreadable file or another YAML type raises ``error`` naming the file."""
    import yaml

    try:
        payload = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise error(f"{path} is unreadable or not valid YAML: {one_line(exc)}") from exc  # PyYAML's spans lines
    if not isinstance(payload, dict):
        raise error(f"{path} should hold a mapping, found {type(payload).__name__}")
    return payload


def update_json(path: str | Path, updates: Mapping[str, Any]) -> Path:
    """Merge ``updates`` into the top level of a JSON file (created if absent)."""
    path = Path(path)
    current = read_json(path) if path.is_file() else {}
    return write_json(path, {**current, **updates})


# CSV -------------------------------------------------------------------------------------------


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> Path:
    """A CSV table with a header: ``columns``, or every key of every row in first-seen order (missing cells
    empty); no rows only with ``columns``."""
    if not rows and columns is None:
        raise ValueError(f"no rows to write to {path}")
    fields = list(columns) if columns is not None else list(dict.fromkeys(key for row in rows for key in row))

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)

    return atomic_write(path, write)


# hashes ----------------------------------------------------------------------------------------


def file_digest(path: str | Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file's bytes, read in chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def bytes_digest(data: Any, algorithm: str = "sha256") -> str:
    """Hex digest of a bytes-like object (e.g. a contiguous array's ``.data``)."""
    return hashlib.new(algorithm, data).hexdigest()


# figures ---------------------------------------------------------------------------------------

DPI = 150


def save_figure(fig: Any, path: str | Path, dpi: int = DPI) -> Path:
    """Render a :class:`matplotlib.figure.Figure` with the Agg canvas (no pyplot, no window) into a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    return atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format=Path(path).suffix.lstrip(".") or "png"))
