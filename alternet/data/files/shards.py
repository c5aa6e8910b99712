"""LitData shards of an image folder, for streaming the training split to many nodes.

:func:`write_shards` stores each image's encoded bytes as they are on disk (no re-encode: the stored file decodes
to the same pixels as the original), in a file order shuffled with a seed (an image folder lists files class by
class, and LitData shuffles chunks plus a small in-chunk window, so an unshuffled chunk would hold one class).
Class names are written beside LitData's ``index.json``. :class:`StreamingImages` reads them back through
``litdata.StreamingDataset``, which shares the chunks out among ranks, nodes and workers, disjoint and equally long
(``drop_last``); its loader saves its position in checkpoints for mid-epoch resume.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import re
import signal
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import litdata
import numpy as np
import torch
from litdata import StreamingDataLoader, StreamingDataset
from litdata.processing.data_processor import DataProcessor
from litdata.utilities.env import _DistributedEnv

from ...errors import DataError
from ...files import (
    OUTPUT_LOCK,
    OUTPUT_MARKER,
    check_output_dir,
    die_with_parent,
    file_digest,
    is_output_of,
    mark_output,
    os_error_reason,
    read_json,
    write_json,
    writing,
)
from ...hardware import cpu_cores
from ...seeds import derive_seed, seed_generators
from ..workers import FILE_WORKERS, StartsWorkersSafely, WorkerLedger
from .images import FileList, UnreadableImage, decode_rgb, scan_split

CLASSES_FILE = "classes.json"
SHARDS_COMMAND = "shards"  # the output marker of alternet shards (files.mark_output)
# litdata starts its writer workers with spawn: each a fresh interpreter that imports torch again (seconds per worker).
# On Linux they fork instead, as the training loaders' workers do: the reader they run holds no thread or lock. Other
# systems keep litdata's choice (fork is unsafe on macOS).
WRITER_START_METHOD = "fork" if sys.platform.startswith("linux") else None


def source_split(src: Path) -> Path:
    """The class-folder directory to convert: ``SRC/train`` when SRC is a data set root, else SRC itself."""
    return src / "train" if (src / "train").is_dir() else src


SHARDS_ADVICE = "Replace or delete the file, or pass --skip-corrupt to leave unreadable images out of the shards"


class _ReadImage:
    """One shard record from (relative path, label): the file's bytes, checked to decode (picklable for
    litdata's worker processes)."""

    def __init__(self, root: Path, skip_corrupt: bool):
        self.root, self.skip_corrupt = root, skip_corrupt

    def __call__(self, item: tuple[str, int]) -> Any:
        if not self.__dict__.get("_bound"):  # once per worker process: it ends with the command (writing its OUT)
            self._bound = die_with_parent() or True
        name, label = item
        path = self.root / name
        try:
            data = path.read_bytes()
            decode_rgb(data, path)
        except (OSError, DataError) as error:  # unreadable, gone since the scan, or not an image it can decode
            if self.skip_corrupt:
                return None  # litdata writes nothing for None
            if isinstance(error, OSError):
                raise UnreadableImage(f"cannot read image {path}: {error.strerror or error}", SHARDS_ADVICE) from None
            if isinstance(error, UnreadableImage):
                raise error.advising(SHARDS_ADVICE) from None
            raise
        # a name that is not UTF-8 (a file system's bytes, held as surrogates) as text litdata can store: \xff
        return {"image": data, "label": int(label), "name": os.fsencode(name).decode("utf-8", "backslashreplace")}


def write_shards(
    src: str | Path,
    out: str | Path,
    *,
    seed: int = 0,
    chunk_bytes: str = "64MB",
    num_workers: int | None = None,
    skip_corrupt: bool = False,
) -> dict[str, Any]:
    """Convert the class folders under ``src`` (a data set root with ``train/``, or a split directory) into LitData
    chunks in ``out``; returns what was written (images, classes, chunks, skipped)."""
    source = Path(src).expanduser().resolve()
    if Path(out).expanduser().resolve().is_relative_to(source):
        raise DataError(
            f"OUT {out} is inside the source {src}: the shards would become a class folder of the data set they are "
            "written from; choose a directory outside it"
        )
    own = functools.partial(is_output_of, command=SHARDS_COMMAND)
    out = check_output_dir(out, "shards output", own, "shards written by alternet shards", "OUT")
    if (out / "index.json").exists():
        raise DataError(f"{out} already holds shards (index.json); choose an empty directory or delete it first")
    split = source_split(Path(src).expanduser())
    files: FileList = scan_split(split)
    classes = sorted({os.fsdecode(p).split(os.sep, 1)[0] for p in files.paths})
    if len(classes) < 2:  # written whole before, then refused by the training they were written for
        raise DataError(
            f"{split} holds one class folder ({classes[0]}); a classifier needs at least two, and training refuses "
            "a data set of one: add a folder per class, then write the shards"
        )
    order = np.random.default_rng(seed).permutation(len(files))
    inputs = [(os.fsdecode(files.paths[i]), int(files.labels[i])) for i in order]
    workers = num_workers or min(cpu_cores(), FILE_WORKERS)  # the affinity mask's CPUs; the main process idles
    existed = out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"shards output {out} cannot be made: {os_error_reason(error)}; choose another OUT") from None
    with writing(out, "shards output"):  # a second alternet shards into OUT stops here
        mark_output(out, SHARDS_COMMAND)  # first: an interrupted writing is this command's to redo
        # before the shards: litdata's index.json, written last, makes them readable, and they need this file
        record = {
            "classes": classes,
            "source": str(split.resolve()),
            "seed": seed,
            "listed": len(files),
            "listing": files.digest(),  # which files: a folder of as many other ones is another
        }
        write_json(out / CLASSES_FILE, record)
        try:
            with _start_method_kept(), _stops_raised():
                litdata.optimize(
                    fn=_ReadImage(split, skip_corrupt),
                    inputs=inputs,
                    output_dir=str(out),
                    chunk_bytes=chunk_bytes,
                    num_workers=workers,
                    reorder_files=False,  # keep the shuffled order (litdata would sort the inputs by file size)
                    mode="overwrite",  # OUT exists (made above)
                    verbose=False,
                    start_method=WRITER_START_METHOD,
                )
        except RuntimeError as error:  # litdata re-raises a worker's error with its traceback as text
            reasons = re.findall(r"^[\w.]*(?:UnreadableImage|DataError): (.+)$", str(error), re.MULTILINE)
            if not reasons:
                raise
            raise DataError(reasons[-1]) from None
        written = shard_images(out)
    if not written:  # every image skipped: an empty index would read as shards and fail in training
        for name in ("index.json", CLASSES_FILE):
            (out / name).unlink(missing_ok=True)
        if not existed:
            for name in (OUTPUT_MARKER, OUTPUT_LOCK):
                (out / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                out.rmdir()
        raise DataError(
            f"none of the {len(inputs)} images under {split} decodes (all skipped by --skip-corrupt): no shards were "
            "written; check the folder's files"
        )
    return {"images": written, "classes": len(classes), "skipped": len(inputs) - written, "out": str(out)}


@contextlib.contextmanager
def _stops_raised() -> Iterator[None]:
    """litdata's ``optimize`` sets its own SIGINT handler, which stops its writers and ends the whole process with
    ``os._exit(0)`` (Ctrl-C: status 0, no word, the shards half-written), and leaves it in place after (a script or
    notebook that wrote shards then ended silently on any Ctrl-C). Here the handler stops the writers and raises
    ``KeyboardInterrupt``; the process's own handler is put back after."""
    before, parent = signal.getsignal(signal.SIGINT), os.getpid()
    litdata_handler = DataProcessor._signal_handler

    def stop(processor: DataProcessor, signum: int, frame: Any) -> None:
        if os.getpid() != parent:  # a writer forked with the handler: it ends as litdata ends it, silently
            os._exit(0)
        for queue in getattr(processor, "stop_queues", None) or []:
            queue.put(None)
        for worker in getattr(processor, "workers", None) or []:
            worker.join(0)
        raise KeyboardInterrupt

    DataProcessor._signal_handler = stop
    try:
        yield
    finally:
        DataProcessor._signal_handler = litdata_handler
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def _start_method_kept() -> Iterator[None]:
    """litdata's ``optimize`` sets the process's multiprocessing start method to the one it starts its writers with
    (``force=True``) and leaves it so: every later DataLoader of the process (training after ``write_shards`` in one
    script or notebook) would start its workers that way too. Put it back."""
    before = multiprocessing.get_start_method(allow_none=True)
    try:
        yield
    finally:
        multiprocessing.set_start_method(before, force=True)


def is_remote(shards: str | Path) -> bool:
    """An object-store URL (``s3://``, ``gs://``...): LitData reads it directly; there is no local file to check."""
    return "://" in str(shards)


def read_shard_classes(shards: str | Path) -> dict[str, Any] | None:
    """What ``alternet shards`` wrote beside the shards: ``classes``, and (absent from older shards) the folder they
    were written from (``source``) and how many images it listed (``listed``); None for object-store URLs (not
    readable without their SDK)."""
    if is_remote(shards):
        return None
    path = Path(shards).expanduser() / CLASSES_FILE
    if not path.is_file():
        where = "does not exist" if not path.parent.exists() else f"holds no {CLASSES_FILE} (not alternet's shards)"
        raise DataError(f"data.train_shards={shards} {where}: write the shards with alternet shards SRC {shards}")
    return read_json(path, error=DataError)


def shard_images(shards: str | Path) -> int | None:
    """How many images the shards hold (their LitData index); None for object-store URLs."""
    if is_remote(shards):
        return None
    return sum(int(chunk["chunk_size"]) for chunk in read_index(shards)["chunks"])


def read_index(shards: str | Path) -> dict[str, Any]:
    """The shards' LitData ``index.json`` (written last: a writing that stopped has none)."""
    path = Path(shards).expanduser() / "index.json"
    if not path.is_file():
        where = "does not exist" if not Path(shards).expanduser().exists() else "holds no LitData index.json"
        raise DataError(
            f"data.train_shards={shards} {where}: write the shards with alternet shards SRC {shards} (the same command "
            "completes a writing that was stopped)"
        )
    return read_json(path, error=DataError)


SHARDS_DIGEST = "alternet_shards_digest"  # in the streaming loader's saved position: which shards it is a position in


def shards_digest(shards: str | Path) -> str | None:
    """A digest of the shards' LitData index (their chunks, each one's images and bytes): shards written again hold
    other chunks, even from the same folder with the same seed; None for object-store URLs or no index."""
    if is_remote(shards):
        return None
    try:
        return file_digest(Path(shards).expanduser() / "index.json")[:16]
    except OSError:
        return None


def check_chunks(path: Path, shards: str | Path) -> None:
    """Every chunk the index lists is there, whole (a missing one stopped the run mid-epoch with LitData's
    ``ChunkWaitTimeoutError``, saying it was not a missing object)."""
    index = read_index(path)
    sized = not (index.get("config") or {}).get("compression")  # a compressed chunk's index gives its raw size

    def whole(chunk: dict[str, Any]) -> bool:
        file = path / chunk["filename"]
        return file.is_file() and (not sized or file.stat().st_size == chunk["chunk_bytes"])

    bad = [chunk["filename"] for chunk in index.get("chunks", []) if not whole(chunk)]
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise DataError(
            f"data.train_shards={shards} lacks {shown} (missing, or of another size than its index.json says): "
            "write the shards again with alternet shards"
        )


class StreamingImages(StreamingDataset):
    """Shuffled, rank-sharded image records decoded and transformed in the loader workers. Each sample's
    augmentation is seeded by (seed, epoch, its index in the shards), as on the folder path. A record that does
    not decode stops the run naming it, ``data.skip_corrupt`` or not: every record decoded when it was written."""

    def __init__(
        self,
        shards: str | Path,
        transform: Callable,
        *,
        seed: int,
        ledger: WorkerLedger | None = None,
        crop: Callable | None = None,
    ):
        source = str(shards)
        if not is_remote(shards):
            path = Path(shards).expanduser()
            check_chunks(path, shards)
            source = str(path.resolve())
        super().__init__(input_dir=source, shuffle=True, drop_last=True, seed=seed)
        self.image_transform, self.base_seed, self.ledger = transform, seed, ledger
        self.crop = crop  # data.decode=fast: the random-resized crop, made while decoding

    def __getitem__(self, index: Any) -> tuple[torch.Tensor, int]:
        record = super().__getitem__(index)
        name = f"{record['name']} in {self.input_dir.path}"
        if self.ledger is not None:
            self.ledger.reading(name)  # a worker that dies now is reported by this sample
        seed_generators(  # before the decode, which may draw the crop
            derive_seed(self.base_seed, "augment", int(self.current_epoch), int(getattr(index, "index", 0)))
        )
        image = decode_rgb(record["image"], name, self.crop)
        if self.ledger is not None:
            self.ledger.done()
        return self.image_transform(image), int(record["label"])

    def share(self, world_size: int, global_rank: int, num_nodes: int) -> None:
        """Read this rank's share of ``world_size`` processes. LitData reads the ranks from torch.distributed when
        the data set is built; a data set built before the process group (to count a resume's batches) took every
        rank for the only one: each read all the chunks (the ranks trained on the same images) and counted twice
        the batches."""
        self.distributed_env = _DistributedEnv(world_size, global_rank, num_nodes)


class StreamingLoader(StartsWorkersSafely, StreamingDataLoader):
    """LitData's loader: it hands each worker its chunks and saves/restores its position (``state_dict``); its
    workers leave the group's SIGTERM to this process (``data.workers``).

    LitData ends a restored epoch (``restore``) only when its iterator runs out, and Lightning stops an epoch at the
    loader's length without asking for more: the next epoch then replayed the restored one's position and, in one
    process (``data.num_workers=0``), trained no step. An iteration after the restored one that yielded batches is
    a new epoch here."""

    _resumed_batches = 0  # batches yielded since load_state_dict

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {SHARDS_DIGEST: shards_digest(self.dataset.input_dir.path or "")}

    def one_batch_back(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` one batch earlier (a checkpoint written inside a step, before its batch trained): LitData's
        position is the samples yielded and the worker that yielded the last batch (round robin)."""
        if not state.get("num_samples_yielded"):
            return state
        batch, workers = int(self.batch_size or 1), max(int(self.num_workers), 1)
        if state["num_samples_yielded"] <= batch:  # the epoch's first: LitData restores no position of 0 samples
            return state | {"current_epoch": int(state["current_epoch"]) - 1, "num_samples_yielded": 0}  # its next
        dataset = dict(state["dataset"])
        dataset["num_samples_yielded"] = dataset["num_samples_yielded"] - batch
        dataset["sample_in_epoch"] = dataset["sample_in_epoch"] - batch * int(dataset.get("world_size") or 1)
        return state | {
            "dataset": dataset,
            "num_samples_yielded": state["num_samples_yielded"] - batch,
            "latest_worker_idx": (int(state["latest_worker_idx"]) - 1) % workers,
        }

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """The saved position, in these shards: moved to another folder (a copy, another mount), the same shards
        (the resume's check compared their digests: :func:`alternet.training.resume.check_resume_loader`) are read
        where they are now."""
        obj = dict(obj)
        saved, here = obj.pop(SHARDS_DIGEST, None), self.dataset.input_dir.path
        position = dict(obj.get("dataset") or {})
        if here and position.get("input_dir_path") not in (None, here):
            if saved is None or saved != shards_digest(here):
                raise DataError(
                    f"data.train_shards={here}: the run stopped streaming {position['input_dir_path']}, which these "
                    "shards cannot be shown to be; resume with data.train_shards set to those, or start a new run "
                    "from its weights (model.pretrained=CHECKPOINT)"
                )
            obj["dataset"] = position | {"input_dir_path": here}
        super().load_state_dict(obj)
        self._resumed_batches = 0

    def _get_iterator(self) -> Any:
        """LitData's iterator over workers holds its loader, and the loader holds it (persistent workers, as the
        training loader's are): a dropped loader waited for the garbage collector, and each worker then cost 5 s
        (:func:`alternet.data.workers.end_workers` says why) in whatever ran at that moment. Holding its loader
        weakly, the iterator ends with it."""
        iterator = super()._get_iterator()
        if isinstance(getattr(iterator, "_loader", None), StreamingDataLoader):
            iterator._loader = weakref.proxy(self)
        return iterator

    def __iter__(self) -> Any:
        if self.restore and self._resumed_batches:  # the restored epoch has run: this is the next one
            self.restore = False
        for batch in super().__iter__():
            self._resumed_batches += 1
            yield batch


__all__ = ["CLASSES_FILE", "StreamingImages", "StreamingLoader", "read_shard_classes", "write_shards"]
