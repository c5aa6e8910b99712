"""alternet.data.arrays.transforms.BatchPipeline: the arrays' crop, flip and normalisation of a whole batch at once,
which the in-memory data sets use where the augmentation is crop and flip alone."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from alternet.data import DigitsDataModule, EpochSampler
from alternet.data.arrays.transforms import BatchPipeline, build_transform
from alternet.data.augment import ArraysAugment
from alternet.typed import build

MEAN, STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
CROP_FLIP = ArraysAugment(crop_padding=4, hflip=True)


def images(count: int = 64, size: int = 32) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (count, size, size, 3), dtype=np.uint8)


def test_normalisation_equals_the_per_image_pipeline_exactly():
    batch = images()
    per_image = torch.stack([build_transform(MEAN, STD, 32)(image=image)["image"] for image in batch])

    together = BatchPipeline(MEAN, STD, 32)(batch)

    assert together.dtype == per_image.dtype and together.shape == (64, 3, 32, 32)
    assert torch.equal(together, per_image)


def test_each_sample_is_its_padded_crop_flipped_or_not_as_its_seed_draws():
    batch, seeds = images(), np.arange(64, dtype=np.uint64) * 7919 + 5
    pipeline = BatchPipeline(MEAN, STD, 32, CROP_FLIP)
    plain = BatchPipeline(MEAN, STD, 32)

    out = pipeline(batch, seeds)

    dy, dx, flip = pipeline.offsets(seeds)
    for i in range(len(batch)):
        padded = np.pad(batch[i], ((4, 4), (4, 4), (0, 0)))
        crop = padded[dy[i] : dy[i] + 32, dx[i] : dx[i] + 32]
        crop = crop[:, ::-1] if flip[i] else crop
        assert torch.equal(out[i], plain(np.ascontiguousarray(crop)[None])[0])
    assert torch.equal(pipeline(batch, seeds), out)  # a pure function of the seeds
    assert not torch.equal(pipeline(batch, seeds + 1), out)


def test_offsets_and_flips_are_uniform():
    pipeline = BatchPipeline(MEAN, STD, 32, CROP_FLIP)
    dy, dx, flip = pipeline.offsets(np.arange(90_000, dtype=np.uint64))

    for offsets in (dy, dx):
        assert offsets.min() == 0 and offsets.max() == 8
        np.testing.assert_allclose(np.bincount(offsets) / len(offsets), 1 / 9, atol=0.005)
    assert abs(flip.mean() - 0.5) < 0.01
    assert abs(np.corrcoef(dy, dx)[0, 1]) < 0.02
    assert (
        not BatchPipeline(MEAN, STD, 32, ArraysAugment(crop_padding=4))
        .offsets(np.arange(100, dtype=np.uint64))[2]
        .any()
    )


@pytest.mark.parametrize(
    ("augment", "served"),
    [
        (None, True),
        ({"crop_padding": 4, "hflip": True, "randaugment": None, "cutout": None}, True),
        ({"crop_padding": 4, "hflip": True, "randaugment": "rand-m9-n2-mstd1.0"}, False),
        ({"crop_padding": 4, "cutout": {"holes": 1, "size": 8}}, False),
    ],
)
def test_the_batch_pipeline_serves_crop_and_flip_alone(augment, served):
    section = build(ArraysAugment, augment) if augment is not None else None
    assert BatchPipeline.serves(section) is served


def digits(**kwargs) -> DigitsDataModule:
    module = DigitsDataModule(**({"image_size": 16, "val_size": 180, "batch_size": 32} | kwargs))
    module.setup()
    return module


def test_array_data_modules_batch_their_splits_where_the_augmentation_allows():
    batched = digits(augment={"crop_padding": 2, "hflip": True})
    per_image = digits(augment={"crop_padding": 2, "hflip": True, "randaugment": "rand-m9-n2-mstd1.0"})

    assert all(split.batch is not None for split in batched.splits.values())
    assert per_image.splits["train"].batch is None and per_image.splits["test"].batch is not None
    test = batched.splits["test"]
    keys = [0, 5, 7]
    assert torch.equal(
        torch.stack([image for image, _ in test.__getitems__(keys)]), torch.stack([test[key][0] for key in keys])
    )
    assert [label for _, label in test.__getitems__(keys)] == [int(test.labels[key]) for key in keys]


def test_batched_training_loads_alike_with_and_without_workers():
    dataset = digits(augment={"crop_padding": 2, "hflip": True}).splits["train"]

    def batches(workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        sampler = EpochSampler(len(dataset), 0, shuffle=True)
        return list(DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=workers))[:3]

    serial, parallel = batches(0), batches(2)
    for (a, la), (b, lb) in zip(serial, parallel, strict=True):
        assert a.shape == (64, 3, 16, 16) and a.dtype == torch.float32
        assert torch.equal(a, b) and torch.equal(la, lb)


class _Stored16(DigitsDataModule):
    """Digits stored at 16 px whatever ``image_size`` asks, as CIFAR's arrays are stored at 32."""

    def load_split(self, train: bool) -> tuple[np.ndarray, np.ndarray]:
        asked, self.image_size = self.image_size, 16
        try:
            return super().load_split(train)
        finally:
            self.image_size = asked


def test_arrays_stored_at_another_size_are_resized_to_data_image_size_in_every_split():
    """data.image_size=24 on 16-px arrays: every split's images are 24 px, the evaluation's the stored image resized
    (bilinear) then normalised; the training crop pads the resized image (it trained on the stored picture inside a
    black canvas, and evaluated at the stored size)."""
    module = _Stored16(image_size=24, batch_size=4, val_size=8, augment=CROP_FLIP)
    module.setup()
    for split in ("train", "val", "test"):
        assert module.splits[split][0][0].shape == (3, 24, 24), split
    test = module.splits["test"]
    expected = build_transform(module.mean, module.std, 24)(image=cv2.resize(test.images[0], (24, 24)))["image"]
    torch.testing.assert_close(test[0][0], expected)
