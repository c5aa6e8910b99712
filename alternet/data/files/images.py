"""Image files on disk: listing a class-folder split, decoding any common format to RGB, and datasets that decode
in the loader workers (memory grows with the file list, never with the image bytes).

Paths are held as one fixed-width byte array per split rather than a list of Python strings: forked loader
workers then share it without copy-on-write growth (reference counts would touch every page of a list).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from ...errors import AlternetWarning, DataError
from ...files import bytes_digest
from ...seeds import seed_generators
from ..workers import WorkerLedger
from .listing import IMAGE_EXTENSIONS, class_folders, images_under


@dataclass(frozen=True)
class FileList:
    """The images of one split: paths relative to ``root`` (bytes) and class indices."""

    root: Path
    paths: np.ndarray  # dtype S: relative paths, as the file system encodes them (os.fsencode)
    labels: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.paths)

    def take(self, indices: np.ndarray) -> FileList:
        return FileList(self.root, self.paths[indices], self.labels[indices])

    def digest(self) -> str:
        """A digest of the listing (each image's relative path and class): what a seeded hold-out is drawn from."""
        labels = np.ascontiguousarray(self.labels, dtype="<i8").tobytes()
        return bytes_digest(b"\0".join(self.paths.tolist()) + labels)[:16]

    def __getitem__(self, index: int) -> tuple[Path, int, Path]:
        """(what to decode, label, name for messages) of one image."""
        path = self.root / os.fsdecode(self.paths[index])
        return path, int(self.labels[index]), path


def scan_split(directory: Path, classes: Sequence[str] | None = None) -> FileList:
    """Every image of ``directory/<class>/**``; a class's index is its position in ``classes`` (default: the
    split's own sorted class folders). An empty class folder, or a class that ``classes`` lacks, is an error."""
    folders = class_folders(directory)
    classes = list(classes) if classes is not None else folders
    index = {name: i for i, name in enumerate(classes)}
    unknown = [name for name in folders if name not in index]
    if unknown:
        raise DataError(
            f"{directory} has class folders the training split lacks: {unknown[:5]}"
            f"{' ...' if len(unknown) > 5 else ''}; every evaluation class must also be a folder under train/"
        )
    paths: list[str] = []
    labels: list[int] = []
    for name in folders:
        files = images_under(directory / name)
        if not files:
            raise DataError(
                f"class folder {directory / name} holds no images ({', '.join(IMAGE_EXTENSIONS)}): "
                "add images or remove the folder"
            )
        paths += files
        labels += [index[name]] * len(files)
    encoded = np.array([os.fsencode(path) for path in paths], dtype=np.bytes_)  # any name the disk holds
    return FileList(directory, encoded, np.array(labels, dtype=np.int64))


class UnreadableImage(DataError):
    """An image file that cannot be read or decoded, named in one line wherever it is raised.

    Raised in a loader worker, torch re-raises it in the main process as ``UnreadableImage("Caught UnreadableImage
    in DataLoader worker process N.\nOriginal Traceback ...")``; the message is cut back to the original line.
    ``reason`` is what is wrong with the file, ``advice`` what the message ends on (none for a file that is gone).
    """

    def __init__(self, reason: str, advice: str = ""):
        if reason.startswith("Caught ") and "\nOriginal Traceback" in reason:
            reason = reason.rstrip().rsplit("\n", 1)[-1].split(": ", 1)[-1]
        self.reason, self.advice = reason, advice
        super().__init__(f"{reason}. {advice}" if advice else reason)

    def advising(self, advice: str) -> UnreadableImage:
        """The same file's reason with another reader's advice (a worker's message holds training's)."""
        return UnreadableImage(self.reason.removesuffix(f". {SKIP_ADVICE}"), advice)


SIXTEEN_BIT = {"I;16", "I;16L", "I;16B", "I;16N"}  # Pillow's 16-bit greyscale modes


def to_rgb(image: Image.Image, name: Any) -> Image.Image:
    """A decoded image as 8-bit RGB. Pillow's own ``convert("RGB")`` is right for the 8-bit modes (greyscale,
    bilevel, palette, CMYK, YCbCr, and alpha, which is dropped as timm and torchvision drop it) but clips wider
    greyscale to 255: 16-bit greyscale is scaled (``round(v / 257)``, 65535 -> 255); a PNG's 32-bit ``I`` mode holds
    16-bit samples and is scaled alike; other 32-bit integer and floating-point images have no range the file
    states, so they are refused rather than saturated."""
    mode = image.mode
    if mode in SIXTEEN_BIT or (mode == "I" and image.format == "PNG"):
        samples = np.asarray(image, dtype=np.float64)
        grey = Image.fromarray(np.rint(np.clip(samples, 0, 65535) / 257).astype(np.uint8), mode="L")
        return grey.convert("RGB")
    if mode in ("I", "F"):
        kind = "32-bit integer" if mode == "I" else "floating-point"
        raise UnreadableImage(
            f"image {name} is {kind} greyscale ({image.format or 'unknown format'} mode {mode}), whose range the file "
            "does not state: convert it to 8- or 16-bit (e.g. PNG), or delete it"
        )
    return image.convert("RGB")


def _opened(source: Any, name: Any) -> Image.Image:
    """``Image.open``, Pillow's warning of a possible decompression bomb (an image of 89-179 megapixels; larger ones
    it refuses) said with the file's name and what it costs, where Pillow names neither; other warnings as they
    were. ~3 us an image (a 32-px JPEG decodes in ~50)."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        image = Image.open(source)
    for warning in said:
        if issubclass(warning.category, Image.DecompressionBombWarning):
            width, height = image.size
            warnings.warn(
                f"image {name} is {width}x{height} ({width * height:,} pixels), above Pillow's "
                f"{Image.MAX_IMAGE_PIXELS:,}-pixel guard against decompression bombs: every read of it decodes "
                f"{width * height * 3 / 2**20:,.0f} MiB; downscale such files once, before training",
                AlternetWarning,
                stacklevel=3,
            )
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return image


def decode_rgb(
    source: Path | bytes | memoryview, name: str | Path | None = None, crop: Callable | None = None
) -> Image.Image:
    """An image file (path or encoded bytes) as 8-bit RGB, whatever its format (greyscale of 1, 8 or 16 bits, CMYK,
    palette, alpha: :func:`to_rgb`) and whatever its file name claims (a PNG named ``.JPEG`` decodes as the PNG it
    is). ``crop`` (``data.decode=fast``: :class:`~alternet.data.files.transforms.DraftedCrop`) is handed the opened,
    not yet decoded image and returns its crop, decoding no more of it than the crop needs."""
    try:
        encoded = isinstance(source, (bytes, bytearray, memoryview))
        with _opened(io.BytesIO(source) if encoded else source, name or source) as image:
            if crop is not None:
                return crop(image, name or source)
            image.load()
            return to_rgb(image, name or source)
    except FileNotFoundError as error:
        if isinstance(source, (str, os.PathLike)) and os.path.islink(source):  # listed: its target never was there
            raise UnreadableImage(
                f"image {name or source} is a link to {os.readlink(source)}, which does not exist: restore its "
                "target, or delete the link"
            ) from None
        raise UnreadableImage(
            f"image {name or source} is gone ({error.strerror}): it was moved or deleted after the run listed it; "
            "restore it, or start the run again to list the folder afresh"
        ) from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        reason = re.sub(r" ?<_io\.BytesIO object at 0x[0-9a-f]+>", "", str(error))  # Pillow names the buffer
        raise UnreadableImage(f"cannot decode image {name or source}: {reason}", SKIP_ADVICE) from None


SKIP_ADVICE = (  # how training goes on past an unreadable image (other readers say their own)
    "Replace or delete the file, or set data.skip_corrupt=true to skip unreadable images (they are counted and "
    "reported)"
)


class SkipCounter:
    """Unreadable images skipped so far, counted across the loader workers of this process (shared memory)."""

    def __init__(self) -> None:
        self._value = multiprocessing.get_context().Value("q", 0)

    def add(self, name: Any, error: DataError) -> None:
        with self._value.get_lock():
            self._value.value += 1
        reason = str(getattr(error, "reason", error))
        said = (
            f"skipped an unreadable image ({reason})"
            if str(name) in reason
            else f"skipped unreadable image {name}: {reason}"
        )
        warnings.warn(said, AlternetWarning, stacklevel=2)

    @property
    def count(self) -> int:
        return int(self._value.value)


class DecodingDataset(Dataset):
    """Samples decoded on access from ``items[index] -> (path or encoded bytes, label, name)``, then transformed.

    A key may be an index or ``(index, seed)``; the seed fixes that sample's augmentation (a ``crop`` made while
    decoding among it: the same box as the whole pipeline would draw). With a ``skipped`` counter an unreadable image
    is replaced by the next readable one (deterministically) and counted; without one it raises a
    :class:`DataError` naming the file.
    """

    def __init__(
        self,
        items: Any,
        transform: Callable[[Image.Image], torch.Tensor],
        skipped: SkipCounter | None = None,
        ledger: WorkerLedger | None = None,
        crop: Callable | None = None,
    ):
        self.items, self.transform, self.skipped, self.ledger = items, transform, skipped, ledger
        self.crop = crop
        self.size = len(items)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, int]:
        index, seed = key if isinstance(key, tuple) else (key, None)
        for attempt in range(self.size):
            source, label, name = self.items[(index + attempt) % self.size]
            if self.ledger is not None:
                self.ledger.reading(name or source)  # a worker that dies now is reported by this sample
            if seed is not None:
                seed_generators(seed)  # before the decode, which may draw the crop
            try:
                image = decode_rgb(source, name, self.crop)
                break
            except DataError as error:
                if self.skipped is None:
                    raise
                self.skipped.add(name, error)
        else:
            raise DataError(f"no readable image among the {self.size} of this split")
        if self.ledger is not None:
            self.ledger.done()
        return self.transform(image), int(label)
