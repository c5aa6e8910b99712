"""``data.loader=dali``: the training split of image files decoded and augmented by NVIDIA DALI (the ``alternet[dali]``
extra): on the GPU when training on one (nvJPEG through DALI's ``mixed`` decoder), on DALI's CPU backend otherwise.

The images, their order and their sharding are the torch loader's: :class:`~alternet.data.base.EpochSampler` orders
an epoch by (seed, epoch), gives each rank its share and skips what a resumed run has seen; the files' bytes are fed
to DALI in that order. DALI draws the augmentation, in a pipeline built per epoch and seeded by (seed, epoch, rank);
the loader's state holds DALI's checkpoint of its random state, so a run resumed mid-epoch sees exactly the batches
it would have seen. Random erasing runs after DALI, on the batch's device, drawn from (seed, epoch, rank, batch).

The pipeline is timm's ImageNet training pipeline (:func:`~alternet.data.files.transforms.file_transform`) as DALI
provides it; docs/training.md ("Decoding on the GPU") lists where it differs.
"""

from __future__ import annotations

import contextlib
import io
import math
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from ...errors import ConfigValueError, DataError
from ...seeds import derive_seed
from ..augment import FilesAugment, fill_from_mean, rand_sections
from ..base import EpochSampler
from .images import DecodingDataset, UnreadableImage, decode_rgb

LEVELS = 10  # timm's RandAugment magnitude is a level of 10 (its _LEVEL_DENOM): DALI's bins 0..10
ERASE_AREA = (0.02, 1 / 3)  # timm's RandomErasing: the box's share of the image,
ERASE_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))  # its aspect ratio,
ERASE_ATTEMPTS = 10  # and the draws it makes for a box that fits
PREFETCH = 2  # batches DALI prepares ahead of the one handed out


def randaugment_levels(spec: str) -> tuple[int, int]:
    """(ops per image, magnitude level of 10) of timm's RandAugment string (``rand-m9-n2-mstd0.5``) as DALI runs it.
    ``mstd`` is read and not applied: DALI's magnitudes do not vary; ``inc0`` is timm's default. Anything else of
    timm's (``inc1``, ``mmax``, an op set...) is refused."""
    sections = rand_sections(spec)  # timm's grammar, checked with the config
    kept = ("m", "n", "mstd")
    other = next((f"{k}{v}" for k, v in sections if k not in kept and (k, v) != ("inc", 0)), None)
    if other is not None:
        raise ConfigValueError(
            f"recipe.augment.files.randaugment={spec}: data.loader=dali runs timm's rand-m<M>-n<N>[-mstd<S>] "
            f"only, not {other}; train with data.loader=torch for it"
        )
    values = {"n": 2, "m": LEVELS} | {key: value for key, value in sections if key in ("m", "n")}  # timm's defaults
    if not 0 <= values["m"] <= LEVELS:
        raise ConfigValueError(
            f"recipe.augment.files.randaugment={spec}: data.loader=dali takes a whole m in 0..{LEVELS}"
        )
    return values["n"], values["m"]


def check_dali_augment(augment: FilesAugment | None) -> None:
    """A training augmentation DALI's pipeline can run, refused in one line before any work otherwise."""
    if augment is None:
        raise ConfigValueError(
            "data.loader=dali runs the augmenting training pipeline, and recipe.augment.files is null: choose an "
            "augmenting recipe (e.g. recipe=imagefolder), or data.loader=torch"
        )
    if augment.randaugment:
        randaugment_levels(augment.randaugment)


def erase(images: torch.Tensor, probability: float, seed: int) -> torch.Tensor:
    """timm's RandomErasing (``mode="const"``, one box: the paper's code's, HDVW ``ops/datasets.py``) on a normalised
    batch, on its device: each image, with ``probability``, gets a box of 2-33% of its area with aspect 0.3-3.3 (the
    first of 10 draws that fits; none if none fits), filled with 0 (the mean colour); every draw from ``seed``, on
    the device (no host sync)."""
    if probability <= 0:
        return images
    batch, _, height, width = images.shape
    generator, device = torch.Generator(images.device).manual_seed(seed), images.device

    def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
        return low + (high - low) * torch.rand(shape, generator=generator, device=device)

    area = height * width * uniform(*ERASE_AREA, batch, ERASE_ATTEMPTS)
    aspect = uniform(*ERASE_LOG_ASPECT, batch, ERASE_ATTEMPTS).exp()
    tall, wide = (area * aspect).sqrt().round(), (area / aspect).sqrt().round()  # halves to even, as Python's round
    fits = (tall < height) & (wide < width)
    first = fits.int().argmax(dim=1, keepdim=True)  # the first draw that fits
    tall, wide = tall.gather(1, first).squeeze(1), wide.gather(1, first).squeeze(1)
    erased = fits.any(dim=1) & (uniform(0, 1, batch) < probability)
    top = (uniform(0, 1, batch) * (height - tall + 1)).floor()
    left = (uniform(0, 1, batch) * (width - wide + 1)).floor()
    rows = torch.arange(height, device=device)[None, :, None]
    cols = torch.arange(width, device=device)[None, None, :]
    inside = (rows >= top[:, None, None]) & (rows < (top + tall * erased)[:, None, None])
    inside = (inside & (cols >= left[:, None, None]) & (cols < (left + wide * erased)[:, None, None]))[:, None]
    return images.masked_fill(inside, 0)


class DaliLoader:
    """The training loader of ``data.loader=dali``: batches of (normalised CHW float images on ``device``, labels),
    the order and share of ``sampler``, augmented by DALI as ``augment`` asks.

    Like :class:`~alternet.data.base.ResumableLoader` it counts the batches of the epoch it delivered; its
    :meth:`state_dict` (saved by Lightning in every checkpoint) adds DALI's checkpoint of the pipeline's random state
    mid-epoch, and :meth:`load_state_dict` resumes from both.
    """

    def __init__(
        self,
        dataset: DecodingDataset,
        sampler: EpochSampler,
        *,
        batch_size: int,
        drop_last: bool,
        augment: FilesAugment,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        threads: int,
        device: torch.device,
        seed: int,
    ):
        check_dali_augment(augment)
        self.dataset, self.sampler, self.batch_size, self.drop_last = dataset, sampler, batch_size, drop_last
        self.augment, self.image_size, self.mean, self.std = augment, image_size, tuple(mean), tuple(std)
        self.threads, self.device, self.seed = max(1, threads), device, seed
        self.delivered = 0
        self._resume: dict[str, Any] | None = None
        self._pipeline: Any = None

    def __len__(self) -> int:
        samples = len(self.sampler)
        return samples // self.batch_size if self.drop_last else -(-samples // self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        resume, self._resume = self._resume, None
        epoch, last = self.sampler.epoch, len(self)
        skip = resume["batches"] if resume and resume["epoch"] == epoch and resume["batches"] < last else 0
        self.sampler.skip = skip * self.batch_size
        indices = [key[0] if isinstance(key, tuple) else key for key in self.sampler]  # DALI draws its own
        batches = [indices[i : i + self.batch_size] for i in range(0, len(indices), self.batch_size)][: last - skip]
        self._pipeline = self._build(epoch, iter(batches), self._checkpoint_of(resume) if skip else None)
        self.delivered = skip
        stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
        for number, batch in enumerate(batches):
            try:
                images, labels = self._pipeline.run(stream)  # ready on torch's stream
            except (RuntimeError, OSError) as error:  # DALI's, or the feed's for a file gone since the listing
                raise self._unreadable(error, batches[number : number + PREFETCH + 1]) from None
            self.delivered += 1
            seed = derive_seed(self.seed, "erase", epoch, self.sampler.rank, skip + number)
            yield erase(self._torch(images), self.augment.random_erasing, seed), self._labels(labels, len(batch))
        self._pipeline = None

    def state_dict(self) -> dict[str, Any]:
        """The epoch and the batches delivered; mid-epoch, also DALI's random state after the last batch handed out,
        of every rank (Lightning writes global rank 0's checkpoint, and every rank resumes from it): each rank calls
        this, as Lightning's checkpoints do, and the states are gathered."""
        state: dict[str, Any] = {"epoch": self.sampler.epoch, "batches": self.delivered, "of": len(self)}
        if self._pipeline is None or not 0 < self.delivered < len(self):
            return state
        ranks = [self._pipeline.checkpoint()]
        if self.sampler.world_size > 1 and torch.distributed.is_initialized():
            own, ranks = ranks[0], [None] * self.sampler.world_size
            torch.distributed.all_gather_object(ranks, own)
        return state | {"dali": ranks, "graph": self._graph()}

    def one_batch_back(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` one batch earlier (a checkpoint written inside a step, before its batch trained): the same
        images; DALI's random state is the one after that batch, so the epoch's rest draws afresh."""
        earlier = {key: value for key, value in state.items() if key not in ("dali", "graph")}
        return earlier | {"batches": max(int(state["batches"]) - 1, 0)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._resume = dict(state)

    def _checkpoint_of(self, resume: dict[str, Any] | None) -> str | None:
        """This rank's DALI state in a resumed run's, where it was saved for this pipeline and these ranks (else
        none: the epoch continues with the same images and fresh augmentation draws)."""
        ranks = (resume or {}).get("dali")
        if not ranks or len(ranks) != self.sampler.world_size or resume.get("graph") != self._graph():
            return None
        return ranks[self.sampler.rank]

    def _graph(self) -> str:
        """What DALI's state belongs to: the device kind, the image size and the augmentation."""
        return f"{self.device.type} {self.image_size} {self.augment}"

    # DALI ------------------------------------------------------------------------------------------------

    def _build(self, epoch: int, batches: Iterator[list[int]], checkpoint: str | None) -> Any:
        from nvidia.dali import fn, pipeline_def, types

        on_gpu = self.device.type == "cuda"
        augment, size = self.augment, self.image_size
        crop = augment.random_resized_crop
        scale = list(crop.scale) if crop and crop.scale else [0.08, 1.0]  # timm's defaults
        ratio = list(crop.ratio) if crop and crop.ratio else [3 / 4, 4 / 3]
        items = self.dataset.items

        def feed() -> tuple[list[np.ndarray], list[np.ndarray]]:
            indices = next(batches)  # StopIteration ends the epoch
            samples = [items[i] for i in indices]
            return [np.fromfile(source, dtype=np.uint8) for source, _, _ in samples], [
                np.array(label, dtype=np.int64) for _, label, _ in samples
            ]

        @pipeline_def(
            batch_size=self.batch_size,
            num_threads=self.threads,
            device_id=(self.device.index or 0) if on_gpu else None,
            seed=derive_seed(self.seed, "dali", epoch, self.sampler.rank) % 2**31,
            prefetch_queue_depth=PREFETCH,
            enable_conditionals=bool(augment.randaugment),
            enable_checkpointing=True,
        )
        def pipeline() -> tuple[Any, Any]:
            kinds = [types.UINT8, types.INT64]
            encoded, labels = fn.external_source(source=feed, num_outputs=2, batch=True, dtype=kinds)
            images = fn.decoders.image_random_crop(
                encoded,
                device="mixed" if on_gpu else "cpu",
                output_type=types.RGB,
                random_area=scale,
                random_aspect_ratio=ratio,
                num_attempts=10,
                adjust_orientation=False,  # the pixels as stored, as Pillow, timm and every other path read them
            )
            if augment.interpolation == "random":  # timm's: bilinear or bicubic, drawn per image
                choice = fn.random.choice([int(types.INTERP_LINEAR), int(types.INTERP_CUBIC)])
                interpolation = fn.cast(choice, dtype=types.INTERP_TYPE)
            else:
                interpolation = {"bilinear": types.INTERP_LINEAR, "bicubic": types.INTERP_CUBIC}[augment.interpolation]
            images = fn.resize(images, resize_x=size, resize_y=size, interp_type=interpolation)
            if augment.hflip:  # before RandAugment, as timm's (a vertical shear does not commute with a flip)
                images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
            if augment.randaugment:
                images = self._randaugment(images, *randaugment_levels(augment.randaugment))
            images = fn.crop_mirror_normalize(
                images,
                dtype=types.FLOAT,
                output_layout="CHW",
                mean=[255 * m for m in self.mean],
                std=[255 * s for s in self.std],
            )
            return images, labels

        with warnings.catch_warnings():  # the state of the source DALI cannot checkpoint is the sampler's skip
            warnings.filterwarnings("ignore", "Checkpointing enabled in a pipeline with external source")
            built = pipeline(checkpoint=checkpoint)
            built.build()
        return built

    def _randaugment(self, images: Any, ops: int, level: int) -> Any:
        """timm's RandAugment as DALI's operations: timm's 15 operations at timm's magnitudes (its non-increasing
        flavour, ``rand_augment_transform``'s default), each chosen with probability 1/2 of being applied (timm's
        ``prob=0.5``: 15 identities beside them), filling with the data set's mean grey."""
        from nvidia.dali import fn
        from nvidia.dali.auto_aug import augmentations as ops_
        from nvidia.dali.auto_aug import rand_augment
        from nvidia.dali.auto_aug.core import augmentation

        # DALI's suite calls fn.experimental.equalize and .filter, deprecated names of these two
        @augmentation
        def equalize(images: Any, _: Any) -> Any:
            return fn.equalize(images)

        @augmentation(mag_range=(0.1, 1.9), mag_to_param=ops_.sharpness_kernel_shifted, param_device="auto")
        def sharpness(images: Any, kernel: Any) -> Any:
            return fn.filter(images, kernel)

        suite = rand_augment.get_rand_augment_non_monotonic_suite(use_shape=True, max_translate_rel=0.45)
        replaced = ("identity", "posterize", "solarize", "equalize", "sharpness")
        suite = [op for op in suite if op.name not in replaced] + [
            equalize,
            sharpness,
            ops_.posterize.augmentation((0, 4), False, _posterize_mask),
            ops_.solarize.augmentation((0, 256), False, _solarize_threshold),
            ops_.solarize_add.augmentation((0, 110), False),
            ops_.invert,
        ]
        return rand_augment.apply_rand_augment(
            suite + [ops_.identity] * len(suite),
            images,
            n=ops,
            m=level,
            num_magnitude_bins=LEVELS + 1,
            shape=(self.image_size, self.image_size),
            fill_value=round(float(np.mean(fill_from_mean(self.mean)))),
        )

    def _torch(self, images: Any) -> torch.Tensor:
        """The batch as a tensor on the loader's device: DALI's dynamic executor (its default) hands each output's
        buffer over, so no copy; else a copy on torch's stream, as DALI's own PyTorch iterator does."""
        from nvidia.dali.plugin.pytorch import feed_ndarray

        tensor = images.as_tensor()
        if self._pipeline.exec_dynamic:
            with self.device:
                return torch.from_dlpack(tensor)
        out = torch.empty(tensor.shape(), dtype=torch.float32, device=self.device)
        feed_ndarray(tensor, out, cuda_stream=torch.cuda.current_stream(self.device) if out.is_cuda else None)
        return out

    def _labels(self, labels: Any, count: int) -> torch.Tensor:
        return torch.from_numpy(np.array(labels.as_tensor(), dtype=np.int64).reshape(count))

    def _unreadable(self, error: Exception, batches: list[list[int]]) -> DataError:
        """The image DALI could not read, named in one line: the first of the batches it was given that Pillow
        cannot read either (the torch loader's message), or DALI's own first line."""
        for index in (i for batch in batches for i in batch):
            source, _, name = self.dataset.items[index]
            try:
                decode_rgb(source, name)
            except UnreadableImage as unreadable:
                advice = ". Replace or delete the file, or train with data.loader=torch data.skip_corrupt=true, which "
                advice += "skips unreadable images"
                return DataError(f"data.loader=dali: {unreadable.reason}{advice if unreadable.advice else ''}")
        for index in (i for batch in batches for i in batch):  # one Pillow reads and nvImageCodec does not
            source, _, name = self.dataset.items[index]
            with contextlib.suppress(OSError, ValueError), Image.open(_opened(source)) as image:
                if image.format not in DALI_FORMATS:
                    return DataError(
                        f"data.loader=dali: {name} is a {image.format} image, which DALI does not decode (it reads "
                        f"{', '.join(sorted(DALI_FORMATS))}): convert it, or train with data.loader=torch"
                    )
        text = str(error).partition("encountered:")[2] or str(error)  # DALI's reason follows its operator's name
        first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
        return DataError(f"data.loader=dali: DALI stopped on the training split: {first}")


# nvImageCodec's formats by Pillow's names (MPO: a JPEG with more frames, its first decoded)
DALI_FORMATS = frozenset({"JPEG", "MPO", "PNG", "TIFF", "BMP", "PPM", "JPEG2000", "WEBP"})


def _opened(source: Any) -> Any:
    return io.BytesIO(source) if isinstance(source, (bytes, bytearray, memoryview)) else source


def _solarize_threshold(magnitude: float) -> np.float32:
    """timm's Solarize: inverts from ``int(magnitude)`` up (230 at level 9 of 10; DALI's own keeps 230.4)."""
    return np.float32(int(magnitude))


def _posterize_mask(magnitude: float) -> np.ndarray:
    """timm's non-increasing Posterize: keep ``int(magnitude)`` bits (3 at level 9 of 10), as a mask."""
    bits = int(magnitude)
    return np.array(np.uint8(255) ^ np.uint8(2 ** (8 - bits) - 1), dtype=np.uint8)
