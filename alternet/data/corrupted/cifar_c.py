"""CIFAR-C on disk: load and validate the real Hendrycks files, or generate (and cache) the same layout.

The layout, shared by the real archives and :func:`generate_cifar_c` (so a generated directory is also an export
that other CIFAR-C tools read)::

    <root>/<corruption>.npy   uint8 (S*N, H, W, 3); severity s occupies rows N*(s-1) .. N*s (S = 5 severities)
    <root>/labels.npy         (S*N,) integer labels: the N test labels once per severity
    <root>/manifest.json      generated directories only: provenance (source, seed, constants) and the cache key

Real archives: CIFAR-10-C https://zenodo.org/record/2535967, CIFAR-100-C https://zenodo.org/record/3555552.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import cv2
import numpy as np
from threadpoolctl import threadpool_limits

from ...errors import DataError
from ...files import (
    WRITE_FIX,
    WriteError,
    atomic_write,
    bytes_digest,
    check_output_dir,
    die_with_parent,
    file_digest,
    os_error_reason,
    stale_temporaries,
    write_json,
    writing,
)
from ...progress import Progress
from ...seeds import derive_seed
from .corruptions import (
    CONSTANTS_VERSION,
    IMPLEMENTATION_VERSION,
    check_corruption,
    check_images,
    corrupt,
    frost_source,
)
from .names import CORRUPTIONS, EXTRA_CORRUPTIONS, SEVERITIES

log = logging.getLogger(__name__)

DOWNLOADS = {
    "CIFAR-10-C": "https://zenodo.org/record/2535967",
    "CIFAR-100-C": "https://zenodo.org/record/3555552",
}
MANIFEST = "manifest.json"
LABELS = "labels.npy"
HOW_TO_GET = (  # the fix for missing CIFAR-C files
    f"Download and untar the real files ({', '.join(f'{name}: {url}' for name, url in DOWNLOADS.items())}) and point "
    "at the folder holding the .npy files, or generate them: alternet cifar-c --data cifar10|cifar100 --root DATA_DIR "
    "--export DIR."
)
FORMAT_VERSION = 1
CHUNK_SIZE = 1000  # images per generation task; part of the cache key because it fixes the random streams


# ---------------------------------------------------------------- loading


@dataclass(frozen=True)
class CifarC:
    """A validated CIFAR-C directory; image arrays are read-only memory maps."""

    root: Path
    source: str  # "real" (Hendrycks files, no manifest) or "generated" (from the manifest)
    corruptions: tuple[str, ...]  # the requested ones, then any extra ones found on disk
    severities: tuple[int, ...]
    n_per_severity: int
    image_shape: tuple[int, int, int]
    synthetic_frost: bool
    frost_source: str | None  # generated frost: "photographs" (the reference's) or "synthetic"; None otherwise
    manifest: Mapping[str, Any] | None = field(repr=False)
    labels: np.ndarray = field(repr=False)
    arrays: Mapping[str, np.ndarray] = field(repr=False)

    def get(self, corruption: str, severity: int) -> tuple[np.ndarray, np.ndarray]:
        """(images (N, H, W, 3) uint8, labels (N,)) of one corruption at one severity, as memory-mapped views."""
        if corruption not in self.arrays:
            raise ValueError(f"corruption {corruption!r} not loaded from {self.root}; loaded: {self.corruptions}")
        if severity not in self.severities:
            raise ValueError(f"severity {severity!r} not in {self.root}; it holds severities {self.severities}")
        start = self.severities.index(severity) * self.n_per_severity
        rows = slice(start, start + self.n_per_severity)
        return self.arrays[corruption][rows], self.labels[rows]

    def sets(self) -> Iterator[tuple[str, int]]:
        """Every (corruption, severity) pair held, corruption-major."""
        return itertools.product(self.corruptions, self.severities)


def load_cifar_c(
    root: str | os.PathLike[str],
    corruptions: Sequence[str] = CORRUPTIONS,
    num_classes: int | None = None,
) -> CifarC:
    """Open and validate a CIFAR-C directory (real or generated); raise :class:`DataError` naming any problem."""
    root = Path(root).expanduser()
    for name in corruptions:
        if name not in CORRUPTIONS + EXTRA_CORRUPTIONS:
            raise ValueError(f"unknown corruption {name!r}; valid: {', '.join(CORRUPTIONS + EXTRA_CORRUPTIONS)}")
    wanted = list(dict.fromkeys(corruptions))
    _require_files(root, [f"{name}.npy" for name in wanted] + [LABELS])
    manifest = read_manifest(root)
    severities = tuple(manifest["severities"]) if manifest else SEVERITIES
    listed = set(manifest.get("files", {})) if manifest else None  # generated: its complete files only
    unlisted = [f"{name}.npy" for name in wanted if listed is not None and f"{name}.npy" not in listed]
    if unlisted:
        raise DataError(
            f"{root} lists no complete {', '.join(unlisted)} in its {MANIFEST} (a generation stopped before it); "
            "generate it again (alternet cifar-c, or an evaluation with this directory as robustness.cache_dir)"
        )
    extras = [
        name
        for name in EXTRA_CORRUPTIONS
        if name not in wanted and (root / f"{name}.npy").is_file() and (listed is None or f"{name}.npy" in listed)
    ]
    names = tuple(wanted + extras)
    entries = (manifest or {}).get("files", {})
    read = [f"{name}.npy" for name in names] + [LABELS]
    changed = [name for name in read if name in entries and not _holds_what_was_written(root / name, entries[name])]
    if changed:
        raise DataError(
            f"{root}: {', '.join(changed)} no longer holds what was generated (its bytes differ from {MANIFEST}'s "
            "digest: replaced or damaged since); generate it again (alternet cifar-c, or an evaluation with this "
            "directory as robustness.cache_dir)"
        )
    arrays = {name: _open_images(root / f"{name}.npy", len(severities)) for name in names}
    _check_same_shape(arrays, root)
    rows, *image_shape = next(iter(arrays.values())).shape
    labels = _open_labels(root / LABELS, rows, num_classes, next(iter(arrays)))
    return CifarC(
        root=root,
        source=manifest.get("source", "generated") if manifest else "real",
        corruptions=names,
        severities=severities,
        n_per_severity=rows // len(severities),
        image_shape=tuple(image_shape),
        synthetic_frost=bool(manifest and manifest.get("synthetic_frost") and "frost" in names),
        frost_source=manifest.get("frost_source", "synthetic") if manifest and "frost" in names else None,
        manifest=manifest,
        labels=labels,
        arrays=arrays,
    )


def _require_files(root: Path, files: list[str]) -> None:
    """Raise one DataError listing every missing file of ``files`` under ``root``."""
    if not root.is_dir():
        kind = "is not a directory" if root.exists() else "does not exist"
        raise DataError(f"CIFAR-C directory {root.resolve()} {kind}. {HOW_TO_GET}")
    missing = [name for name in files if not (root / name).is_file()]
    if not missing:
        return
    said = f"CIFAR-C files missing in {root.resolve()}: {', '.join(missing)} ({len(missing)} of {len(files)} expected)"
    if (root / MANIFEST).is_file():  # a generated directory whose generation stopped before these
        raise DataError(
            f"{said}; its {MANIFEST} says alternet generated it: the same alternet cifar-c --export command (or an "
            "evaluation with this directory as robustness.cache_dir) completes it"
        )
    held = [name.removesuffix(".npy") for name in files if name != LABELS and name not in missing]
    scores = held and LABELS not in missing  # without the labels no corruption can be scored
    scores_these = f" robustness.corruptions=[{','.join(held)}] scores the ones it holds;" if scores else ""
    raise DataError(f"{said}.{scores_these} {HOW_TO_GET}")


def read_manifest(root: Path) -> dict[str, Any] | None:
    """The directory's manifest.json, or None when there is none."""
    path = root / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise DataError(f"cannot read {path}: {error}. Delete it (and regenerate the directory).") from error
    if not isinstance(manifest, dict) or not isinstance(manifest.get("severities"), list):
        raise DataError(f"{path} is not a CIFAR-C manifest (no 'severities' list). Delete it and regenerate.")
    return manifest


def _open(path: Path) -> np.ndarray:
    """Memory-map an .npy file read-only, as a DataError when it is not one."""
    try:
        return np.load(path, mmap_mode="r")
    except (OSError, ValueError) as error:
        raise DataError(f"cannot read {path} as a .npy array: {error}") from error


def _open_images(path: Path, severities: int) -> np.ndarray:
    """Memory-map one corruption file and check it is uint8 (severities*N, H, W, 3)."""
    images = _open(path)
    expected = f"uint8 array of shape ({severities}*N, H, W, 3)"
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        raise DataError(f"{path}: expected a {expected}, found {images.dtype} {images.shape}")
    if images.shape[0] == 0 or images.shape[0] % severities:
        raise DataError(
            f"{path}: expected a {expected}, found {images.shape[0]} rows, not a positive multiple of {severities}"
        )
    return images


def _check_same_shape(arrays: Mapping[str, np.ndarray], root: Path) -> None:
    """Raise a DataError naming the first file whose shape differs from the first one's."""
    first_name, first = next(iter(arrays.items()))
    for name, images in arrays.items():
        if images.shape != first.shape:
            raise DataError(
                f"{root / f'{name}.npy'}: shape {images.shape} differs from {root / f'{first_name}.npy'} "
                f"{first.shape}; all corruption files must hold the same images"
            )


def _open_labels(path: Path, rows: int, num_classes: int | None, reference: str) -> np.ndarray:
    """Memory-map labels.npy and check it has one integer label in [0, num_classes) per image row."""
    labels = _open(path)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"{path}: expected a 1-D integer array, found {labels.dtype} {labels.shape}")
    if len(labels) != rows:
        raise DataError(
            f"{path}: expected {rows} labels (one per row of {reference}.npy), found {len(labels)}. "
            "The labels file does not belong to these images."
        )
    low, high = int(labels.min()), int(labels.max())
    if low < 0 or (num_classes is not None and high >= num_classes):
        bound = f"[0, {num_classes})" if num_classes is not None else ">= 0"
        raise DataError(f"{path}: labels must be {bound}, found range [{low}, {high}]. Wrong data set?")
    return labels


# ---------------------------------------------------------------- generation


class _Task(NamedTuple):
    """Corrupt images[start:stop] at ``severity`` into rows ``row``.. of the partial file ``path``."""

    path: Path
    name: str
    severity: int
    row: int
    start: int
    stop: int
    seed: int


def task_seed(seed: int, name: str, severity: int, chunk: int) -> int:
    """The seed of one generation chunk: independent of worker count and scheduling."""
    return derive_seed(seed, name, severity, chunk)


def generate_cifar_c(
    images: np.ndarray,
    labels: np.ndarray | Sequence[int],
    out_dir: str | os.PathLike[str],
    corruptions: Sequence[str] = CORRUPTIONS,
    severities: Sequence[int] = SEVERITIES,
    seed: int = 0,
    workers: int | None = None,
) -> Path:
    """Write ``corruptions`` x ``severities`` of ``images`` (uint8 (N, H, W, 3)) in the CIFAR-C layout; the
    severities, sorted, occupy consecutive blocks of N rows (all five: exactly the real files' layout).

    Chunks of CHUNK_SIZE images run in ``workers`` processes (default: all CPUs; 1 runs in this process); each file
    is written to a hidden partial file and renamed when complete, and the manifest (rewritten atomically) lists only
    complete files. A later call with the same inputs reuses the listed files, so an interrupted run resumes; any
    other input (seed, images, labels, severities, implementation) regenerates them. A directory holding CIFAR-C
    files but no manifest (real CIFAR-C, say) is never written to. Returns ``out_dir``.
    """
    with _generated(images, labels, out_dir, corruptions, severities, seed, workers) as out:
        return out


def generate_and_load(
    images: np.ndarray,
    labels: np.ndarray,
    out_dir: str | os.PathLike[str],
    corruptions: Sequence[str],
    severities: Sequence[int],
    seed: int = 0,
    workers: int | None = None,
    num_classes: int | None = None,
    option: str | None = None,
) -> CifarC:
    """:func:`generate_cifar_c`, then :func:`load_cifar_c` under the same lock, so another evaluation sharing the
    directory cannot regenerate it for other settings between the two. ``option``: the setting that chose
    ``out_dir``'s place, named by a refusal of it."""
    with _generated(images, labels, out_dir, corruptions, severities, seed, workers, option) as out:
        return load_cifar_c(out, corruptions, num_classes=num_classes)


@contextlib.contextmanager
def _generated(
    images: np.ndarray,
    labels: np.ndarray,
    out_dir: str | os.PathLike[str],
    corruptions: Sequence[str],
    severities: Sequence[int],
    seed: int,
    workers: int | None,
    option: str | None = None,
) -> Iterator[Path]:
    """The directory, its missing files generated, while this process holds its lock."""
    labels = np.asarray(labels)
    names, severities = _check_generation_inputs(images, labels, corruptions, severities, seed)
    out = check_cifar_c_output(out_dir, option)
    with contextlib.ExitStack() as locked:
        with _naming_write_errors(out):
            out.mkdir(parents=True, exist_ok=True)
            locked.enter_context(writing(out, "CIFAR-C directory", wait=functools.partial(_wait_for, out)))
            _generate_missing(out, images, labels, names, severities, seed, workers)
        yield out  # what the caller reads under the lock is no write: its errors stay its own


def _wait_for(out: Path, owner: str) -> None:
    """A second generation into the same cache (two evaluations sharing it) waits for the first, then reuses what
    it wrote: two writers would fill the same partial files and rewrite each other's manifest."""
    log.warning("CIFAR-C directory %s is being generated by another command (%s); waiting for it", out, owner)


def check_cifar_c_output(out_dir: str | os.PathLike[str], option: str | None = None) -> Path:
    """A directory generated CIFAR-C may be written into: new, empty, or holding an earlier generation (its
    manifest). Real CIFAR-C (files, no manifest) and anything of the user's stay untouched."""
    return check_output_dir(out_dir, "CIFAR-C directory", _has_manifest, "CIFAR-C generated by alternet", option)


def _has_manifest(out: Path) -> bool:
    """An earlier generation's manifest (:func:`read_manifest`'s rule, plus the files it lists); a manifest.json of
    anything else is not one."""
    try:
        manifest = read_manifest(out)
    except DataError:
        return False
    return manifest is not None and "files" in manifest


@contextlib.contextmanager
def _naming_write_errors(out: Path) -> Iterator[None]:
    """A file system failure while the cache is written (a full disk, a read-only directory) in one line naming
    it; the files finished before stay listed in the manifest and are reused next time."""
    try:
        yield
    except WriteError:
        raise
    except OSError as error:
        raise WriteError(
            f"could not write the CIFAR-C cache {out}: {os_error_reason(error)}; the files it completed before are "
            f"kept and reused. {WRITE_FIX}"
        ) from error


def _generate_missing(
    out: Path,
    images: np.ndarray,
    labels: np.ndarray,
    names: list[str],
    severities: tuple[int, ...],
    seed: int,
    workers: int | None,
) -> None:
    """Reuse the files a previous call completed with the same inputs; generate the others."""
    for stale in [*stale_temporaries(out), *out.glob(".*.npy.partial")]:  # what a generation killed mid-write
        stale.unlink(missing_ok=True)  # left (the manifest lists none of it)
    key = _cache_key(images, labels, severities, seed)
    previous = read_manifest(out)
    files = _reusable_files(out, previous, key)
    todo = [name for name in names if f"{name}.npy" not in files]
    if not todo and LABELS in files:
        log.info("CIFAR-C cache hit in %s", out)
        return
    _discard_stale(out, previous, keep=files)
    manifest = {**key, "files": files}
    _write_manifest(out, manifest)
    if LABELS not in files:
        _record(out, manifest, LABELS, _write_labels(out, labels, len(severities)))
    on_file = functools.partial(_record, out, manifest)
    _generate_files(out, images, todo, severities, seed, workers or os.cpu_count() or 1, on_file)


def _check_generation_inputs(
    images: np.ndarray, labels: np.ndarray, corruptions: Sequence[str], severities: Sequence[int], seed: int
) -> tuple[list[str], tuple[int, ...]]:
    """Validate the arguments of generate_cifar_c; return the corruption names (deduplicated) and sorted severities."""
    check_images(images)
    if labels.shape != (len(images),) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be {len(images)} integers, got {labels.dtype} {labels.shape}")
    if len(images) == 0:
        raise ValueError("images is empty")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    names = list(dict.fromkeys(corruptions))
    levels = tuple(sorted(set(severities)))
    if not names or not levels:
        raise ValueError("corruptions and severities must not be empty")
    for name in names:
        for severity in levels:
            check_corruption(name, severity)
    return names, levels


def _cache_key(images: np.ndarray, labels: np.ndarray, severities: tuple[int, ...], seed: int) -> dict[str, Any]:
    """Everything the generated files depend on; a manifest with a different key is stale."""
    return {
        "format": FORMAT_VERSION,
        "source": "generated",
        "constants": CONSTANTS_VERSION,
        "implementation": IMPLEMENTATION_VERSION,
        "chunk_size": CHUNK_SIZE,
        "seed": int(seed),
        "severities": list(severities),
        "n_per_severity": len(images),
        "image_shape": list(images.shape[1:]),
        "images_sha256": bytes_digest(np.ascontiguousarray(images).data),
        "labels_sha256": bytes_digest(np.ascontiguousarray(labels, dtype=np.int64).data),
    }


def _reusable_files(out: Path, manifest: Mapping[str, Any] | None, key: Mapping[str, Any]) -> dict[str, Any]:
    """Manifest entries of files that are still valid: same key, file present with the recorded size, and frost
    made of what frost is made of now (photographs installed since a synthetic frost was written replace it)."""
    if manifest is None or any(manifest.get(k) != v for k, v in key.items()):
        return {}
    stale_frost = manifest.get("frost_source", "synthetic") != frost_source()
    return {
        name: entry
        for name, entry in manifest.get("files", {}).items()
        if (out / name).is_file()
        and (out / name).stat().st_size == entry.get("bytes")
        and _holds_what_was_written(out / name, entry)
        and not (name == "frost.npy" and stale_frost)
    }


def _holds_what_was_written(path: Path, entry: Mapping[str, Any]) -> bool:
    """The file's bytes are those its manifest entry's digest records (a file copied over another, or damaged, is
    not: it was scored as the corruption it replaced); each file is read once per process and state."""
    if entry.get("sha256") is None:  # a manifest from before digests were kept: not checked
        return True
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_digest(path)
    return entry["sha256"] == _DIGESTS[key]


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _discard_stale(out: Path, manifest: Mapping[str, Any] | None, keep: Mapping[str, Any]) -> None:
    """Delete the files the old manifest lists that are not kept, so no stale file outlives a regeneration."""
    for name in (manifest or {}).get("files", {}):
        if name not in keep and Path(name).name == name:
            (out / name).unlink(missing_ok=True)


def _file_entry(path: Path) -> dict[str, Any]:
    """Size and sha256 of a finished file, for the manifest (remembered: reading it back hashes it no more)."""
    stat, digest = path.stat(), file_digest(path)
    _DIGESTS[(str(path), stat.st_size, stat.st_mtime_ns)] = digest
    return {"bytes": stat.st_size, "sha256": digest}


def _write_manifest(out: Path, manifest: dict[str, Any]) -> None:
    """Write manifest.json atomically; ``frost_source`` says what its frost file is made of, ``synthetic_frost``
    whether it is the stand-in texture."""
    manifest["frost_source"] = frost_source()
    manifest["synthetic_frost"] = manifest["frost_source"] == "synthetic" and "frost.npy" in manifest["files"]
    write_json(out / MANIFEST, manifest, sort_keys=True)


def _record(out: Path, manifest: dict[str, Any], file: str, entry: dict[str, Any]) -> None:
    """Add a finished file to the manifest and rewrite it."""
    manifest["files"][file] = entry
    _write_manifest(out, manifest)


def _write_labels(out: Path, labels: np.ndarray, severities: int) -> dict[str, Any]:
    """Write labels.npy (labels repeated per severity; uint8 when they fit, as in the real files)."""
    dtype = np.uint8 if labels.min() >= 0 and labels.max() < 256 else np.int64

    def write(tmp: Path) -> None:
        with tmp.open("wb") as handle:  # a handle, so np.save does not append ".npy" to the temporary name
            np.save(handle, np.tile(labels.astype(dtype), severities))

    atomic_write(out / LABELS, write)
    return _file_entry(out / LABELS)


def _plan(
    out: Path, images: np.ndarray, names: list[str], severities: tuple[int, ...], seed: int
) -> dict[str, list[_Task]]:
    """Create each corruption's partial file (uint8 memmap) and list the chunk tasks that fill it."""
    n = len(images)
    plan: dict[str, list[_Task]] = {}
    for name in names:
        partial = out / f".{name}.npy.partial"
        np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8, shape=(len(severities) * n, *images.shape[1:]))
        plan[name] = [
            _Task(
                path=partial,
                name=name,
                severity=severity,
                row=level * n + start,
                start=start,
                stop=min(start + CHUNK_SIZE, n),
                seed=task_seed(seed, name, severity, chunk),
            )
            for level, severity in enumerate(severities)
            for chunk, start in enumerate(range(0, n, CHUNK_SIZE))
        ]
    return plan


def _run_task(task: _Task, images: np.ndarray) -> None:
    """Corrupt one chunk and write it into its rows of the partial file."""
    out = np.load(task.path, mmap_mode="r+")
    out[task.row : task.row + task.stop - task.start] = corrupt(
        images[task.start : task.stop], task.name, task.severity, seed=task.seed
    )
    out.flush()


_WORKER_IMAGES = np.empty((0, 0, 0, 3), np.uint8)


def _init_worker(images: np.ndarray) -> None:
    """Keep the source images in the worker (sent once, not per task); one cv2 and one BLAS thread per process
    (the processes already fill the cores; multi-threaded BLAS on busy cores made zoom blur 10x slower)."""
    global _WORKER_IMAGES
    die_with_parent()  # its server's end (the command's) ends it: no generation goes on writing after a kill
    _WORKER_IMAGES = images
    cv2.setNumThreads(1)
    threadpool_limits(1)


def _run_task_in_worker(task: _Task) -> None:
    """:func:`_run_task` on the images given to :func:`_init_worker`."""
    _run_task(task, _WORKER_IMAGES)


OnFile = Callable[[str, dict[str, Any]], None]


def _finish(out: Path, name: str, on_file: OnFile) -> None:
    """Rename a completed partial file into place and report its manifest entry."""
    final = out / f"{name}.npy"
    os.replace(out / f".{name}.npy.partial", final)
    log.info("CIFAR-C: wrote %s", final)
    on_file(final.name, _file_entry(final))


def _generate_files(
    out: Path,
    images: np.ndarray,
    names: list[str],
    severities: tuple[int, ...],
    seed: int,
    workers: int,
    on_file: OnFile,
) -> None:
    """Generate the files of ``names``, reporting each finished one to ``on_file``. Partial files never survive."""
    try:
        plan = _plan(out, images, names, severities, seed)
        chunks = sum(len(tasks) for tasks in plan.values())
        with Progress(chunks, f"generating {len(names)} CIFAR-C files in {out}", unit="chunks", every=30.0) as shown:
            if workers <= 1:
                _generate_serially(out, images, plan, on_file, shown)
            else:
                _generate_in_pool(out, images, plan, workers, on_file, shown)
    finally:
        for name in names:
            (out / f".{name}.npy.partial").unlink(missing_ok=True)


def _generate_serially(
    out: Path, images: np.ndarray, plan: dict[str, list[_Task]], on_file: OnFile, shown: Progress
) -> None:
    """Run every task in this process."""
    for name, tasks in plan.items():
        for task in tasks:
            _run_task(task, images)
            shown.update(note=f"{task.name}/{task.severity}")
        _finish(out, name, on_file)


def _pool_context() -> multiprocessing.context.BaseContext:
    """Fork-server workers where the platform has them (Linux, macOS), the server importing the main module (as a
    spawned worker would: ``evaluate.py``, the ``alternet`` script) and this one before its first fork; spawned
    workers elsewhere (Windows)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", __name__])
    return context


def _generate_in_pool(
    out: Path, images: np.ndarray, plan: dict[str, list[_Task]], workers: int, on_file: OnFile, shown: Progress
) -> None:
    """Run the tasks in worker processes; finish each file as soon as its last chunk is in. On the first failure
    the queued tasks are cancelled and the error re-raised.

    Workers are not forked from this process: a forked child inherits cv2's thread pool from a parent that has used
    cv2 and can deadlock in it (seen with ``cv2.setNumThreads`` after fork). They are forked from a fresh server
    process that imports this module once (:func:`_pool_context`), not spawned, each importing it anew (~7 s of CPU
    a worker, one worker per core by default)."""
    tasks = [task for name_tasks in plan.values() for task in name_tasks]
    remaining = {name: len(name_tasks) for name, name_tasks in plan.items()}
    pool = ProcessPoolExecutor(
        min(workers, len(tasks)),
        mp_context=_pool_context(),
        initializer=_init_worker,
        initargs=(images,),
    )
    try:
        pending: dict[Future[None], str] = {pool.submit(_run_task_in_worker, task): task.name for task in tasks}
        while pending:
            done, _ = wait(pending, return_when=FIRST_EXCEPTION)
            for future in done:
                name = pending.pop(future)
                future.result()
                shown.update(note=name)
                remaining[name] -= 1
                if remaining[name] == 0:
                    _finish(out, name, on_file)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
