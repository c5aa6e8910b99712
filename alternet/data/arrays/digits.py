"""scikit-learn's bundled handwritten digits (1,797 8x8 grey images), the embedded default data set.

Ships with scikit-learn, so ``alternet train`` works on any machine without a download. Images are
scaled from 0..16 to 0..255, upsampled to ``image_size`` and repeated to three channels; the test
split is a fixed, stratified 20% (the same whatever ``data.split_seed``, which draws the validation split).
"""

from __future__ import annotations

import cv2
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from .base import ArrayDataModule

TEST_FRACTION = 0.2
TEST_SEED = 0  # one test split for every run: data.split_seed=N draws the validation split alone


class DigitsDataModule(ArrayDataModule):
    name = "digits"
    num_classes = 10
    reads_files = False  # bundled with scikit-learn: data.root is not used
    default_mean = (0.3053, 0.3053, 0.3053)
    default_std = (0.3187, 0.3187, 0.3187)

    def load_split(self, train: bool) -> tuple[np.ndarray, np.ndarray]:
        digits = load_digits()
        grey = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)  # 0..16 -> 0..255
        size = (self.image_size, self.image_size)
        resized = np.stack([cv2.resize(img, size, interpolation=cv2.INTER_LINEAR) for img in grey])
        images = np.repeat(resized[..., None], 3, axis=-1)
        train_idx, test_idx = train_test_split(
            np.arange(len(images)), test_size=TEST_FRACTION, random_state=TEST_SEED, stratify=digits.target
        )
        idx = np.sort(train_idx if train else test_idx)
        return images[idx], digits.target[idx]
