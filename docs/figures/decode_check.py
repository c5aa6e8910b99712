"""The short real check of ``data.decode=fast`` against ``exact`` (issue 75; docs/training.md): the laptop AlterNet
trained on an image folder with each decode, 3 seeds, and the difference in test accuracy with its interval.

CIFAR-100 is the only data set here, and a DCT-scaled decode only differs from the exact one on images larger than
the crop's output, so the folder holds CIFAR-100's images upscaled 4x (bicubic) to 128x128 JPEGs (quality 90), and
the models train at 32 px: timm's random-resized crop then leaves 1/2- and 1/4-scale decodes to most boxes. These are
not photos: an upscaled image has little of a photo's fine detail, where the two decodes' resampling differs most.

    python docs/figures/decode_check.py make ROOT          # ROOT/train/<class>/*.jpg (50,000), ROOT/test/ (10,000)
    alternet train -m model=alternet_laptop data=imagefolder data.root=ROOT data.image_size=32 data.val_size=0 \\
        recipe=imagefolder recipe.epochs=10 recipe.warmup_epochs=1 seed=0,1,2 data.decode=exact \\
        hydra.sweep.dir=SWEEP/exact ckpt_path=last                    # and data.decode=fast into SWEEP/fast
    python docs/figures/decode_check.py read SWEEP --save  # the difference; --save keeps what it needs (10 kB)
    python docs/figures/decode_check.py read               # from docs/figures/decode_check.npz

The two arms share each seed's initial weights, data order and crop boxes (``data.decode=fast`` draws the same box
for the same seed), so the difference is seed-paired, with the test images' own term (the report's estimator).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a file: its sibling scripts

from arms import keyed, scored

from alternet.report.statistics import bootstrap_variance, difference

SCALE, QUALITY = 4, 90
DRAWS = 1000  # the report's bootstrap draws, seed 0
SAVED = Path(__file__).resolve().parent / "decode_check.npz"
ARMS = ("exact", "fast")


def make(root: Path, cifar: Path) -> None:
    """CIFAR-100's train and test splits as class folders of upscaled JPEGs."""
    from PIL import Image

    names = pickle.loads((cifar / "meta").read_bytes(), encoding="latin1")["fine_label_names"]
    for split in ("train", "test"):
        batch = pickle.loads((cifar / split).read_bytes(), encoding="latin1")
        images = batch["data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        for name in names:
            (root / split / name).mkdir(parents=True, exist_ok=True)
        for index, (image, label) in enumerate(zip(images, batch["fine_labels"], strict=True)):
            big = Image.fromarray(image).resize((32 * SCALE, 32 * SCALE), Image.Resampling.BICUBIC)
            big.save(root / split / names[label] / f"{index:05d}.jpg", quality=QUALITY)


def read(arrays: dict[str, np.ndarray]) -> None:
    acc = {arm: {str(s): float(a) for s, a in zip(arrays[f"{arm}/seed"], arrays[f"{arm}/acc"])} for arm in ARMS}
    for arm in ARMS:
        values = 100 * arrays[f"{arm}/acc"]
        print(f"data.decode={arm}: test top-1 {values.mean():.2f}% (sd {values.std(ddof=1):.2f}; {values.round(2)})")
    correct = {arm: [c.astype(np.float64) for c in arrays[f"{arm}/correct"]] for arm in ARMS}
    term = bootstrap_variance(correct["fast"], correct["exact"], DRAWS, paired=True)
    d = difference(acc["fast"], acc["exact"], paired=True, extra_variance=term)
    print(
        f"fast - exact, test top-1: {100 * d.delta:+.2f} pp [{100 * d.low:+.2f}, {100 * d.high:+.2f}] (seed-paired, "
        f"df {d.df:.1f}, p {d.p:.3f}; the test images' term sd {100 * term**0.5:.3f} pp)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("make", help="write the upscaled folder")
    made.add_argument("root", type=Path)
    made.add_argument("--cifar", type=Path, default=Path("../shared/data/cifar-100-python"))
    reading = commands.add_parser("read", help="the difference, from SWEEP/exact and SWEEP/fast or the saved numbers")
    reading.add_argument("sweep", nargs="?", type=Path)
    reading.add_argument("--save", action="store_true", help=f"keep what the numbers need in {SAVED}")
    args = parser.parse_args()
    if args.command == "make":
        make(args.root, args.cifar)
        return
    if args.sweep:  # SWEEP/exact and SWEEP/fast
        arrays = keyed({arm: scored([args.sweep / arm]) for arm in ARMS}, ("seed", "acc", "correct"))
    else:
        arrays = dict(np.load(SAVED))
    if args.save:
        np.savez_compressed(SAVED, **arrays)
    read(arrays)


if __name__ == "__main__":
    main()
