"""Small image folders synthesized for tests: a few classes of distinct colours in every format a user's folder
may hold (JPEG, PNG, greyscale, CMYK, a PNG named .JPEG), optionally a corrupt file; and the DALI loader of one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

COLOURS = {"ant": (220, 40, 40), "bee": (40, 200, 60), "cat": (50, 70, 230)}


def _image(colour: tuple[int, int, int], size: int, rng: np.random.Generator) -> Image.Image:
    noise = rng.integers(-25, 26, size=(size, size, 3))
    return Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8))


def make_image_folder(
    root: Path,
    per_class: int = 12,
    *,
    size: int = 32,
    splits: dict[str, int] | None = None,
    odd_formats: bool = True,
    corrupt: bool = False,
    seed: int = 0,
) -> Path:
    """``root/<split>/<class>/*.JPEG``; ``splits`` maps split names to images per class (default train only)."""
    rng = np.random.default_rng(seed)
    for split, count in (splits or {"train": per_class}).items():
        for name, colour in COLOURS.items():
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                _image(colour, size, rng).save(folder / f"{name}_{i:03d}.JPEG", format="JPEG", quality=95)
    if odd_formats:
        train = root / "train"
        _image(COLOURS["ant"], size, rng).save(train / "ant" / "png_named.JPEG", format="PNG")
        _image(COLOURS["bee"], size, rng).convert("L").save(train / "bee" / "grey.jpg", format="JPEG")
        _image(COLOURS["cat"], size, rng).convert("CMYK").save(train / "cat" / "cmyk.jpeg", format="JPEG")
        _image(COLOURS["cat"], size + 9, rng).save(train / "cat" / "larger.png", format="PNG")
    if corrupt:
        (root / "train" / "bee" / "broken.JPEG").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG" * 4)
    return root


def dali_loader(module, *, device: str = "cpu", rank: int = 0, world: int = 1, seed: int = 3, epoch: int = 0):
    """The ``data.loader=dali`` loader of an image-folder module's training split (set up; image size 16, batches of
    8, one DALI thread) on ``device``, as rank ``rank`` of ``world`` in ``epoch``."""
    import torch

    from alternet.data.base import EpochSampler
    from alternet.data.files.dali import DaliLoader

    sampler = EpochSampler(len(module.splits["train"]), seed, shuffle=True, rank=rank, world_size=world)
    sampler.set_epoch(epoch)
    return DaliLoader(
        module.splits["train"],
        sampler,
        batch_size=8,
        drop_last=True,
        augment=module.augment,
        image_size=16,
        mean=module.mean,
        std=module.std,
        threads=1,
        device=torch.device(device),
        seed=seed,
    )
