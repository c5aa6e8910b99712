"""Generated CIFAR-C corruptions (alternet.data.corrupted.corruptions) and the CIFAR-C directory layout
(alternet.data.corrupted.cifar_c).

Reference formulas (hendrycks/robustness make_cifar_c.py) are re-computed here independently where they are
deterministic: colorsys for brightness, per-channel loops for contrast, PIL for pixelate and JPEG, scipy for zoom and
defocus, and the reference's own pixel walk for the glass-blur shuffle.
"""

from __future__ import annotations

import colorsys
import hashlib
import importlib
import io
import itertools
import json
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from alternet.data.corrupted import cifar_c, corruptions
from alternet.data.corrupted.cifar_c import CifarC, generate_and_load, generate_cifar_c, load_cifar_c, task_seed
from alternet.data.corrupted.corruptions import (
    FROST_PHOTOGRAPHS,
    SEVERITY_PARAMS,
    corrupt,
    defocus_kernel,
    elastic_fields,
    glass_shuffle,
    motion_blur_batch,
)
from alternet.data.corrupted.names import CORRUPTIONS, EXTRA_CORRUPTIONS, FAMILIES, SEVERITIES
from alternet.errors import DataError
from alternet.files import OUTPUT_LOCK, WriteError, lock_file

RANDOM = {
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "glass_blur",
    "motion_blur",
    "snow",
    "frost",
    "fog",
    "elastic_transform",
}
DETERMINISTIC = set(CORRUPTIONS) - RANDOM


def natural_images(n: int, seed: int, h: int = 32, w: int = 32) -> np.ndarray:
    """Image-like test data: smooth colour fields with hard-edged rectangles, values well inside 0..255."""
    rng = np.random.default_rng(seed)
    fields = ndimage.gaussian_filter(rng.normal(size=(n, h, w, 3)), sigma=(0, 3, 3, 0))
    fields = (fields - fields.min()) / (fields.max() - fields.min())
    images = 40 + 170 * fields
    for image in images:
        for _ in range(3):
            top, left = rng.integers(0, h - 8), rng.integers(0, w - 8)
            image[top : top + rng.integers(4, 9), left : left + rng.integers(4, 9)] = rng.uniform(20, 235, 3)
    return images.astype(np.uint8)


@pytest.fixture(scope="session")
def images() -> np.ndarray:
    return natural_images(48, seed=0)


def distance(clean: np.ndarray, corrupted: np.ndarray) -> float:
    """Mean absolute difference from the clean images, in grey levels."""
    return float(np.abs(corrupted.astype(float) - clean).mean())


def increasing(values: list[float]) -> bool:
    return all(a < b for a, b in itertools.pairwise(values))


def decreasing(values: list[float]) -> bool:
    return all(a > b for a, b in itertools.pairwise(values))


def gradient_energy(clean: np.ndarray, corrupted: np.ndarray) -> float:
    """Mean squared difference of neighbouring pixels of ``corrupted``: the high-frequency energy blurs remove."""
    x = corrupted.astype(float)
    return float((np.diff(x, axis=1) ** 2).mean() + (np.diff(x, axis=2) ** 2).mean())


def retained_detail(clean: np.ndarray, corrupted: np.ndarray) -> float:
    """Share of the clean images' high-pass signal still present (projection of high-pass onto high-pass)."""
    high_clean, high_corrupted = (x - ndimage.gaussian_filter(x, (0, 1, 1, 0)) for x in (clean / 1.0, corrupted / 1.0))
    return float((high_clean * high_corrupted).sum() / (high_clean**2).sum())


def correlation(clean: np.ndarray, corrupted: np.ndarray) -> float:
    """Mean per-image Pearson correlation between clean and corrupted pixels."""
    a, b = (x.reshape(len(x), -1).astype(float) for x in (clean, corrupted))
    a, b = a - a.mean(axis=1, keepdims=True), b - b.mean(axis=1, keepdims=True)
    return float(((a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))).mean())


# Per corruption, a statistic that should move monotonically with severity, and whether it rises (+1) or falls (-1).
# Distance suits corruptions that add or remove a growing amount; blurs lose high-frequency energy; glass blur loses
# clean detail (severity 3 -> 4 trades blur sigma for a second shuffle pass, so distance ties there); frost mixes in a
# growing share of texture (frost weight / image weight: 0.2, 0.3, 0.44, 0.47, 0.6), so correlation with the clean
# image falls, while the distance depends on the texture's brightness.
MONOTONE = {
    **dict.fromkeys(
        FAMILIES["noise"] + ("snow", "fog", "brightness", "contrast", "pixelate", "jpeg_compression"), (distance, +1)
    ),
    **dict.fromkeys(["defocus_blur", "motion_blur", "zoom_blur"], (gradient_energy, -1)),
    "glass_blur": (retained_detail, -1),
    "frost": (correlation, -1),
}


# ---------------------------------------------------------------- constants and API


def test_constants_cover_the_fifteen_in_four_families() -> None:
    assert len(CORRUPTIONS) == 15 and len(set(CORRUPTIONS)) == 15
    assert set(FAMILIES) == {"noise", "blur", "weather", "digital"}
    assert all(len(SEVERITY_PARAMS[name]) == 5 for name in CORRUPTIONS)
    assert not set(EXTRA_CORRUPTIONS) & set(CORRUPTIONS)


def test_cifar_constants_not_imagenet_ones() -> None:
    # CIFAR-C values that differ from ImageNet-C's (e.g. ImageNet-C noise std starts at 0.08, JPEG quality at 25).
    assert SEVERITY_PARAMS["gaussian_noise"] == (0.04, 0.06, 0.08, 0.09, 0.10)
    assert SEVERITY_PARAMS["jpeg_compression"] == (80, 65, 58, 50, 40)
    assert SEVERITY_PARAMS["shot_noise"] == (500, 250, 100, 75, 50)
    assert SEVERITY_PARAMS["contrast"] == (0.75, 0.5, 0.4, 0.3, 0.15)
    assert SEVERITY_PARAMS["glass_blur"][-1] == (0.4, 1, 2)


@pytest.mark.parametrize("name", CORRUPTIONS)
@pytest.mark.parametrize("shape", [(5, 32, 32, 3), (3, 24, 40, 3)])
def test_shape_and_dtype(name: str, shape: tuple[int, ...]) -> None:
    clean = natural_images(shape[0], seed=1, h=shape[1], w=shape[2])
    for severity in SEVERITIES:
        out = corrupt(clean, name, severity, seed=3)
        assert out.shape == clean.shape and out.dtype == np.uint8
    assert corrupt(clean[:0], name, 1).shape == (0, *shape[1:])


@pytest.mark.parametrize("name", CORRUPTIONS)
def test_deterministic_under_a_seed(images: np.ndarray, name: str) -> None:
    clean = images[:16]
    first = corrupt(clean, name, 3, seed=7)
    np.testing.assert_array_equal(first, corrupt(clean, name, 3, seed=7))
    other = corrupt(clean, name, 3, seed=8)
    if name in RANDOM:
        assert not np.array_equal(first, other)
    else:
        np.testing.assert_array_equal(first, other)
    np.testing.assert_array_equal(clean, images[:16])  # input untouched


@pytest.mark.parametrize("name", sorted(MONOTONE))
def test_severity_is_monotone(images: np.ndarray, name: str) -> None:
    statistic, direction = MONOTONE[name]
    values = [direction * statistic(images, corrupt(images, name, s, seed=11)) for s in SEVERITIES]
    clean = direction * statistic(images, images)
    if name == "motion_blur":
        # (radius 6, sigma 2) and (radius 8, sigma 2): the extra taps weigh < 1e-7, so severities 3 and 4 coincide
        # in the reference too.
        assert values[2] == pytest.approx(values[3], rel=1e-3)
        del values[3]
    assert increasing([clean, *values]), values


def test_elastic_severity(images: np.ndarray) -> None:
    """CIFAR-C trades affine jitter (shrinking) for smooth elastic displacement (growing) as severity rises."""
    jitters, displacements = [], []
    for severity in SEVERITIES:
        params = SEVERITY_PARAMS["elastic_transform"][severity - 1]
        targets, rows, cols = elastic_fields((64, 32, 32), params, np.random.default_rng(0))
        jitters.append(float(np.abs(targets - cifar_c_anchor_points()).mean()))
        displacements.append(float(np.hypot(rows, cols).mean()))
    assert decreasing(jitters), jitters
    assert displacements[0] == 0 and increasing(displacements), displacements
    assert all(distance(images, corrupt(images, "elastic_transform", s)) > 0.5 for s in SEVERITIES)


def cifar_c_anchor_points() -> np.ndarray:
    """The reference's affine anchors for 32x32: centre 16 +- 32 // 3."""
    return np.float32([[26, 26], [26, 6], [6, 6]])


@pytest.mark.parametrize("bad", ["fog_blur", "Gaussian Noise", ""])
def test_unknown_name_lists_the_valid_ones(images: np.ndarray, bad: str) -> None:
    with pytest.raises(ValueError, match=r"unknown corruption.*gaussian_noise.*jpeg_compression"):
        corrupt(images, bad, 1)


@pytest.mark.parametrize("severity", [0, 6, -1, 2.0, True, "3"])
def test_bad_severity(images: np.ndarray, severity: object) -> None:
    with pytest.raises(ValueError, match=r"severity must be an integer in 1\.\.5"):
        corrupt(images, "fog", severity)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad",
    [np.zeros((2, 32, 32, 3), np.float32), np.zeros((32, 32, 3), np.uint8), np.zeros((2, 32, 32, 1), np.uint8)],
)
def test_bad_images(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match=r"uint8 array of shape \(N, H, W, 3\)"):
        corrupt(bad, "contrast", 1)


# ---------------------------------------------------------------- independent re-computations


@pytest.mark.parametrize("severity", SEVERITIES)
def test_brightness_matches_colorsys_hsv(images: np.ndarray, severity: int) -> None:
    shift = SEVERITY_PARAMS["brightness"][severity - 1]
    clean = images[:6]
    expected = np.empty(clean.shape)
    for index in np.ndindex(clean.shape[:3]):
        hue, saturation, value = colorsys.rgb_to_hsv(*(clean[index] / 255.0))
        expected[index] = colorsys.hsv_to_rgb(hue, saturation, min(value + shift, 1.0))
    expected = (np.clip(expected, 0, 1) * 255).astype(np.uint8)
    out = corrupt(clean, "brightness", severity)
    diff = np.abs(out.astype(int) - expected)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.005  # float rounding before truncation only


def test_brightness_turns_black_grey() -> None:
    black = np.zeros((1, 8, 8, 3), np.uint8)
    assert (corrupt(black, "brightness", 5) == int(0.3 * 255)).all()


@pytest.mark.parametrize("severity", SEVERITIES)
def test_contrast_matches_formula(images: np.ndarray, severity: int) -> None:
    factor = SEVERITY_PARAMS["contrast"][severity - 1]
    expected = np.empty_like(images)
    for i, image in enumerate(images):
        for channel in range(3):
            plane = image[..., channel] / 255.0
            mean = plane.sum() / plane.size
            expected[i, ..., channel] = np.floor(np.clip((plane - mean) * factor + mean, 0, 1) * 255)
    diff = np.abs(corrupt(images, "contrast", severity).astype(int) - expected)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.001


@pytest.mark.parametrize("severity", SEVERITIES)
def test_pixelate_matches_pil_box(images: np.ndarray, severity: int) -> None:
    factor = SEVERITY_PARAMS["pixelate"][severity - 1]
    small = int(32 * factor)
    expected = np.stack(
        [np.array(Image.fromarray(im).resize((small, small), Image.BOX).resize((32, 32), Image.BOX)) for im in images]
    )
    np.testing.assert_array_equal(corrupt(images, "pixelate", severity), expected)


@pytest.mark.parametrize("severity", SEVERITIES)
def test_jpeg_matches_pil_encoder(images: np.ndarray, severity: int) -> None:
    quality = SEVERITY_PARAMS["jpeg_compression"][severity - 1]
    expected = []
    for image in images:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=quality)
        expected.append(np.array(Image.open(buffer)))
    diff = np.abs(corrupt(images, "jpeg_compression", severity).astype(int) - np.stack(expected))
    assert diff.max() <= 1


@pytest.mark.parametrize("severity", SEVERITIES)
def test_zoom_blur_matches_scipy_zoom(images: np.ndarray, severity: int) -> None:
    clean = images[:8]
    x = (clean / 255.0).astype(np.float32)
    factors = np.arange(1, SEVERITY_PARAMS["zoom_blur"][severity - 1], 0.01)
    total = x.copy()
    for factor in factors:
        crop = int(np.ceil(32 / factor))
        top = (32 - crop) // 2
        for i, image in enumerate(x):
            zoomed = ndimage.zoom(image[top : top + crop, top : top + crop], (factor, factor, 1), order=1)
            trim = (zoomed.shape[0] - 32) // 2
            total[i] += zoomed[trim : trim + 32, trim : trim + 32]
    expected = (np.clip(total / (len(factors) + 1), 0, 1) * 255).astype(np.uint8)
    diff = np.abs(corrupt(clean, "zoom_blur", severity).astype(int) - expected)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


@pytest.mark.parametrize("severity", SEVERITIES)
def test_defocus_matches_disk_correlation(images: np.ndarray, severity: int) -> None:
    radius, alias = SEVERITY_PARAMS["defocus_blur"][severity - 1]
    kernel = defocus_kernel(radius, alias).astype(float)
    assert kernel.sum() == pytest.approx(1, abs=1e-5)
    support = np.argwhere(kernel > 1e-6)
    assert (support.max(axis=0) - support.min(axis=0) + 1 <= 5).all()  # CIFAR radii 0.3..1.5 -> at most 5x5
    x = images[:8] / 255.0
    expected = np.stack([ndimage.correlate(x[..., c], kernel[None], mode="mirror") for c in range(3)], axis=-1)
    expected = (np.clip(expected, 0, 1) * 255).astype(np.uint8)
    diff = np.abs(corrupt(images[:8], "defocus_blur", severity).astype(int) - expected)
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


def test_glass_shuffle_equals_the_reference_pixel_walk() -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, size=(3, 12, 10, 3), dtype=np.uint8)
    dy, dx = rng.integers(-1, 1, size=(2, 3, 10, 8))
    expected = x.copy()
    for n, image in enumerate(expected):
        for h in range(12 - 1, 1, -1):
            for w in range(10 - 1, 1, -1):
                hp, wp = h + dy[n, h - 2, w - 2], w + dx[n, h - 2, w - 2]
                image[h, w], image[hp, wp] = image[hp, wp], image[h, w]  # numpy views: a copy, not a swap
    np.testing.assert_array_equal(glass_shuffle(x, dy, dx, 1), expected)
    assert not np.array_equal(expected, x)


def test_motion_blur_matches_imagemagick_formula() -> None:
    rng = np.random.default_rng(2)
    image = rng.integers(0, 256, size=(1, 9, 11, 3), dtype=np.uint8)
    radius, sigma, angle = 6, 2.0, 30.0
    taps = np.arange(2 * radius + 1)
    weights = np.exp(-(taps**2) / (2 * sigma**2))
    weights /= weights.sum()
    expected = np.zeros((9, 11, 3))
    for y in range(9):
        for x in range(11):
            for tap, weight in enumerate(weights):
                dx = int(np.ceil(tap * np.cos(np.radians(angle)) - 0.5))
                dy = int(np.ceil(tap * np.sin(np.radians(angle)) - 0.5))
                expected[y, x] += weight * image[0, min(max(y + dy, 0), 8), min(max(x + dx, 0), 10)]
    out = motion_blur_batch(image, radius, sigma, np.array([angle]))
    np.testing.assert_array_equal(out[0], np.rint(expected).astype(np.uint8))


@pytest.mark.parametrize("name", ["gaussian_noise", "shot_noise", "impulse_noise"])
def test_noise_strength_matches_constants(name: str) -> None:
    grey = np.full((64, 32, 32, 3), 128, np.uint8)
    for severity, c in zip(SEVERITIES, SEVERITY_PARAMS[name]):
        noise = corrupt(grey, name, severity, seed=severity).astype(float) / 255 - 128 / 255
        if name == "gaussian_noise":
            assert noise.std() == pytest.approx(c, rel=0.03)
        elif name == "shot_noise":
            assert noise.std() == pytest.approx(np.sqrt(128 / 255 / c), rel=0.05)
        else:
            assert (np.abs(noise) > 0.4).mean() == pytest.approx(c, rel=0.1)


FROST_COLOUR = (100, 150, 200)


@pytest.fixture
def no_frost_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(corruptions, "frost_folder", lambda: None)


@pytest.fixture
def frost_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A package named imagecorruptions laid out as its wheel (frost/frost1.png ... frost5.jpg), each photograph one
    colour; importing it fails, as the real one does without scikit-image: the photographs must be read, not
    imported."""
    package = tmp_path / "site" / "imagecorruptions"
    (package / "frost").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('needs scikit-image')\n")
    for name in FROST_PHOTOGRAPHS:
        Image.new("RGB", (400, 300), FROST_COLOUR).save(package / "frost" / name, quality=100)
    monkeypatch.syspath_prepend(str(package.parent))
    importlib.invalidate_caches()
    corruptions.frost_photographs.cache_clear()
    yield package
    corruptions.frost_photographs.cache_clear()


def test_frost_blends_the_references_photographs_when_imagecorruptions_is_installed(frost_package: Path) -> None:
    assert corruptions.frost_source() == "photographs" and corruptions.frost_folder() == frost_package / "frost"
    assert {p.shape for p in corruptions.frost_photographs()} == {(60, 80, 3)}  # shrunk to a fifth, as make_cifar_c
    black = np.zeros((8, 32, 32, 3), np.uint8)
    for severity in SEVERITIES:
        weight = SEVERITY_PARAMS["frost"][severity - 1][1]
        frost = corrupt(black, "frost", severity, seed=3).astype(int)
        expected = np.floor(weight * np.array(FROST_COLOUR))  # RGB in, RGB out: the BGR decode is turned back
        assert np.abs(frost - expected).max() <= 1
    assert "imagecorruptions" not in sys.modules


def test_frost_blends_the_synthetic_texture(no_frost_package: None) -> None:
    assert corruptions.frost_source() == "synthetic"
    black = np.zeros((16, 32, 32, 3), np.uint8)
    weight = SEVERITY_PARAMS["frost"][4][1]
    frost = corrupt(black, "frost", 5, seed=1)
    assert frost.max() <= int(weight * 255) and frost.mean() > 10
    assert (frost[..., 2] >= frost[..., 0]).all()  # tinted pale blue


# ---------------------------------------------------------------- loading real-layout directories


def write_fake_cifar_c(root: Path, n: int = 4, names: tuple[str, ...] = (*CORRUPTIONS, "spatter")) -> np.ndarray:
    """A tiny directory in the Hendrycks layout: row i of every file is filled with i % 256."""
    root.mkdir(parents=True, exist_ok=True)
    rows = np.arange(5 * n)
    images = np.broadcast_to((rows % 256).astype(np.uint8)[:, None, None, None], (5 * n, 32, 32, 3))
    for name in names:
        np.save(root / f"{name}.npy", np.ascontiguousarray(images))
    labels = np.tile(np.arange(n) % 10, 5).astype(np.uint8)
    np.save(root / "labels.npy", labels)
    return labels


def test_load_real_layout(tmp_path: Path) -> None:
    labels = write_fake_cifar_c(tmp_path, n=4)
    data = load_cifar_c(tmp_path, num_classes=10)
    assert isinstance(data, CifarC)
    assert data.source == "real" and not data.synthetic_frost and data.manifest is None
    assert data.corruptions == (*CORRUPTIONS, "spatter")  # the extra one found on disk
    assert data.severities == SEVERITIES and data.n_per_severity == 4 and data.image_shape == (32, 32, 3)
    images, severity_labels = data.get("fog", 3)
    assert images.shape == (4, 32, 32, 3) and isinstance(images, np.memmap)
    np.testing.assert_array_equal(images[:, 0, 0, 0], [8, 9, 10, 11])  # rows N*(s-1) .. N*s
    np.testing.assert_array_equal(severity_labels, labels[8:12])
    assert len(list(data.sets())) == 16 * 5
    with pytest.raises(ValueError, match="severity 6"):
        data.get("fog", 6)
    with pytest.raises(ValueError, match="saturate"):
        data.get("saturate", 1)


def test_load_a_subset(tmp_path: Path) -> None:
    write_fake_cifar_c(tmp_path, names=("fog",))
    assert load_cifar_c(tmp_path, corruptions=("fog",)).corruptions == ("fog",)


def test_missing_files_are_all_named(tmp_path: Path) -> None:
    write_fake_cifar_c(tmp_path)
    (tmp_path / "snow.npy").unlink()
    (tmp_path / "jpeg_compression.npy").unlink()
    with pytest.raises(DataError) as error:
        load_cifar_c(tmp_path)
    message = str(error.value)
    assert "snow.npy" in message and "jpeg_compression.npy" in message and "fog.npy" not in message
    assert str(tmp_path.resolve()) in message
    assert "zenodo.org/record/2535967" in message and "zenodo.org/record/3555552" in message
    assert "robustness.corruptions=[gaussian_noise,shot_noise," in message  # the ones it holds can be scored
    assert "labels" not in message.split("robustness.corruptions=")[1].split("]")[0]
    (tmp_path / "labels.npy").unlink()
    with pytest.raises(DataError) as error:
        load_cifar_c(tmp_path)
    assert "robustness.corruptions=" not in str(error.value)  # without labels nothing can be scored
    (tmp_path / "manifest.json").write_text('{"severities": [1, 2, 3, 4, 5], "files": {}}')  # generated, stopped
    with pytest.raises(DataError, match=r"alternet generated it: the same alternet cifar-c --export command"):
        load_cifar_c(tmp_path)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_cifar_c(tmp_path / "nope")


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (np.zeros((20, 32, 32), np.uint8), r"fog\.npy: expected a uint8 array of shape \(5\*N, H, W, 3\), found"),
        (np.zeros((20, 32, 32, 3), np.float32), r"fog\.npy: expected a uint8.*found float32"),
        (np.zeros((19, 32, 32, 3), np.uint8), r"fog\.npy: .*found 19 rows, not a positive multiple of 5"),
        (np.zeros((20, 16, 16, 3), np.uint8), r"fog\.npy: shape \(20, 16, 16, 3\) differs"),
    ],
)
def test_bad_image_file(tmp_path: Path, array: np.ndarray, expected: str) -> None:
    write_fake_cifar_c(tmp_path)
    np.save(tmp_path / "fog.npy", array)
    with pytest.raises(DataError, match=expected):
        load_cifar_c(tmp_path)


def test_wrong_label_count(tmp_path: Path) -> None:
    write_fake_cifar_c(tmp_path, n=4)
    np.save(tmp_path / "labels.npy", np.zeros(19, np.uint8))
    with pytest.raises(DataError, match=r"labels\.npy: expected 20 labels .*found 19"):
        load_cifar_c(tmp_path)


def test_labels_out_of_range(tmp_path: Path) -> None:
    write_fake_cifar_c(tmp_path, n=4)
    with pytest.raises(DataError, match=r"labels must be \[0, 3\), found range \[0, 3\]"):
        load_cifar_c(tmp_path, num_classes=3)


def test_not_a_npy_file(tmp_path: Path) -> None:
    write_fake_cifar_c(tmp_path)
    (tmp_path / "fog.npy").write_bytes(b"not numpy")
    with pytest.raises(DataError, match=r"cannot read .*fog\.npy"):
        load_cifar_c(tmp_path)


# ---------------------------------------------------------------- generation and cache


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mtimes(root: Path) -> dict[str, int]:
    """The modification times of ``root``'s files (the lock excepted: each writer records itself in it)."""
    return {path.name: path.stat().st_mtime_ns for path in root.iterdir() if path.name != OUTPUT_LOCK}


NAMES = ("gaussian_noise", "frost", "pixelate")


def test_generate_writes_the_cifar_c_layout(tmp_path: Path, images: np.ndarray) -> None:
    clean, labels = images[:12], np.arange(12) % 7
    out = generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, seed=3, workers=1)
    expected_files = [*(f"{name}.npy" for name in NAMES), "labels.npy", "manifest.json", OUTPUT_LOCK]
    assert sorted(p.name for p in out.iterdir()) == sorted(expected_files)
    for name in NAMES:
        data = np.load(out / f"{name}.npy")
        assert data.shape == (60, 32, 32, 3) and data.dtype == np.uint8
        for severity in SEVERITIES:
            expected = corrupt(clean, name, severity, seed=task_seed(3, name, severity, 0))
            np.testing.assert_array_equal(data[12 * (severity - 1) : 12 * severity], expected)
    np.testing.assert_array_equal(np.load(out / "labels.npy"), np.tile(labels, 5))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["source"] == "generated" and manifest["seed"] == 3 and manifest["synthetic_frost"] is True
    assert manifest["n_per_severity"] == 12 and manifest["severities"] == [1, 2, 3, 4, 5]
    assert "make_cifar_c.py" in manifest["constants"]
    for name, entry in manifest["files"].items():
        assert entry == {"bytes": (out / name).stat().st_size, "sha256": sha256(out / name)}
    loaded = load_cifar_c(out, corruptions=NAMES, num_classes=7)
    assert loaded.source == "generated" and loaded.synthetic_frost


def test_generate_reuses_then_invalidates_the_cache(
    tmp_path: Path, images: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean, labels = images[:8], np.zeros(8, int)
    generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, seed=0, workers=1)
    before = mtimes(tmp_path)

    def no_generation(*args: object) -> None:
        raise AssertionError("cache should have been reused")

    with monkeypatch.context() as patch:
        patch.setattr(cifar_c, "_generate_files", no_generation)
        generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, seed=0, workers=1)
        generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES[:1], seed=0, workers=1)  # a subset is cached too
    assert mtimes(tmp_path) == before

    generate_cifar_c(clean, labels, tmp_path, corruptions=(*NAMES, "fog"), seed=0, workers=1)  # adds one file only
    after = mtimes(tmp_path)
    assert all(after[f"{name}.npy"] == before[f"{name}.npy"] for name in NAMES) and "fog.npy" in after

    noise = np.load(tmp_path / "gaussian_noise.npy")
    generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, seed=1, workers=1)  # new seed: regenerated
    assert not np.array_equal(noise, np.load(tmp_path / "gaussian_noise.npy"))
    assert json.loads((tmp_path / "manifest.json").read_text())["seed"] == 1
    assert not (tmp_path / "fog.npy").exists()  # stale file of the old key removed

    generate_cifar_c(clean[::-1].copy(), labels, tmp_path, corruptions=NAMES, seed=1, workers=1)  # new images
    assert not np.array_equal(noise, np.load(tmp_path / "gaussian_noise.npy"))
    assert mtimes(tmp_path)["pixelate.npy"] != before["pixelate.npy"]


def test_a_generated_directory_is_read_as_its_manifest_lists_it(tmp_path: Path, images: np.ndarray) -> None:
    """Only the complete files the manifest lists are read: an extra corruption's file left by another key is not
    scored, and a wanted file the manifest does not list (a generation stopped before it) is refused."""
    clean, labels = images[:8], np.zeros(8, int)
    sets = generate_and_load(clean, labels, tmp_path, NAMES, SEVERITIES, seed=0, workers=1)
    assert sets.corruptions == tuple(NAMES)
    np.save(tmp_path / f"{EXTRA_CORRUPTIONS[0]}.npy", np.load(tmp_path / f"{NAMES[0]}.npy"))  # not listed
    assert load_cifar_c(tmp_path, NAMES).corruptions == tuple(NAMES)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    del manifest["files"][f"{NAMES[0]}.npy"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=rf"lists no complete {NAMES[0]}\.npy in its manifest\.json"):
        load_cifar_c(tmp_path, NAMES)


def test_a_second_generation_into_the_same_cache_waits_for_the_first(
    tmp_path: Path, images: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two evaluations sharing a CIFAR-C cache: the second waits while the first writes (both would fill the same
    partial files and rewrite each other's manifest), then finds the files written and generates nothing."""
    clean, labels = images[:6], np.arange(6)
    tmp_path.mkdir(exist_ok=True)
    holder = lock_file(tmp_path / OUTPUT_LOCK)  # the first generation, mid-write
    waiting = threading.Event()
    monkeypatch.setattr(cifar_c, "_wait_for", lambda out, owner: waiting.set())
    second = threading.Thread(
        target=generate_cifar_c, args=(clean, labels, tmp_path), kwargs={"corruptions": NAMES[:1], "workers": 1}
    )
    second.start()
    assert waiting.wait(30) and second.is_alive()
    assert sorted(p.name for p in tmp_path.iterdir()) == [OUTPUT_LOCK]  # nothing written while the first holds it
    generate_cifar_c(clean, labels, tmp_path / "first", corruptions=NAMES[:1], workers=1)  # stand-in for its work
    for path in (tmp_path / "first").glob("*.*"):
        path.rename(tmp_path / path.name)
    before = mtimes(tmp_path)
    monkeypatch.setattr(cifar_c, "_generate_files", lambda *args: pytest.fail("the first one's files were redone"))
    holder.close()
    second.join(30)
    assert not second.is_alive() and mtimes(tmp_path) == before


def test_generate_in_worker_processes_matches_serial(tmp_path: Path, images: np.ndarray) -> None:
    clean, labels = images[:10], np.arange(10)
    serial = generate_cifar_c(clean, labels, tmp_path / "serial", corruptions=NAMES, severities=(2, 5), workers=1)
    pooled = generate_cifar_c(clean, labels, tmp_path / "pooled", corruptions=NAMES, severities=(5, 2), workers=2)
    for name in NAMES:
        np.testing.assert_array_equal(np.load(serial / f"{name}.npy"), np.load(pooled / f"{name}.npy"))
    data = load_cifar_c(pooled, corruptions=NAMES)
    assert data.severities == (2, 5) and data.n_per_severity == 10
    np.testing.assert_array_equal(data.get("pixelate", 5)[0], corrupt(clean, "pixelate", 5))


def test_interrupted_generation_resumes(tmp_path: Path, images: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    clean, labels = images[:4], np.zeros(4, int)

    def fails_on_pixelate(batch: np.ndarray, name: str, severity: int, seed: int) -> np.ndarray:
        if name == "pixelate":
            raise RuntimeError("boom")
        return corrupt(batch, name, severity, seed)

    with monkeypatch.context() as patch:
        patch.setattr(cifar_c, "corrupt", fails_on_pixelate)
        with pytest.raises(RuntimeError, match="boom"):
            generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, workers=1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [OUTPUT_LOCK, "frost.npy", "gaussian_noise.npy", "labels.npy", "manifest.json"]  # no partial file
    assert sorted(json.loads((tmp_path / "manifest.json").read_text())["files"]) == names[1:4]
    with pytest.raises(DataError, match=r"missing .*pixelate\.npy"):
        load_cifar_c(tmp_path, corruptions=NAMES)

    before = mtimes(tmp_path)
    killed = [tmp_path / ".pixelate.npy.partial", tmp_path / ".manifest.json.k2j3h4ab.tmp"]  # what SIGKILL leaves
    for path in killed:
        path.write_bytes(b"unfinished")
    generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, workers=1)
    after = mtimes(tmp_path)
    assert all(after[name] == before[name] for name in names[1:4]) and "pixelate.npy" in after
    assert load_cifar_c(tmp_path, corruptions=NAMES).corruptions == NAMES
    assert not any(path.exists() for path in killed)


def test_generate_never_overwrites_real_files(tmp_path: Path, images: np.ndarray) -> None:
    write_fake_cifar_c(tmp_path, names=("fog",))
    before = mtimes(tmp_path)
    with pytest.raises(WriteError, match=r"not CIFAR-C generated by alternet \(fog\.npy, labels\.npy\)"):
        generate_cifar_c(images[:4], np.zeros(4, int), tmp_path, corruptions=("fog",), workers=1)
    assert mtimes(tmp_path) == before


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"labels": np.zeros(3, int)}, "labels must be 4 integers"),
        ({"corruptions": ("rain",)}, "unknown corruption 'rain'"),
        ({"severities": (0,)}, "severity must be an integer"),
        ({"seed": -1}, "seed must be a non-negative integer"),
    ],
)
def test_generate_rejects_bad_arguments(tmp_path: Path, images: np.ndarray, kwargs: dict, match: str) -> None:
    arguments = {"images": images[:4], "labels": np.zeros(4, int), "out_dir": tmp_path, **kwargs}
    with pytest.raises(ValueError, match=match):
        generate_cifar_c(**arguments)


def test_a_cache_with_synthetic_frost_regenerates_frost_alone_once_the_photographs_are_installed(
    tmp_path: Path, images: np.ndarray, frost_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, labels = tmp_path / "c", np.arange(len(images)) % 10
    installed = corruptions.frost_folder
    monkeypatch.setattr(corruptions, "frost_folder", lambda: None)
    generate_cifar_c(images, labels, out, corruptions=("frost", "fog"), severities=(1,), workers=1)
    before = mtimes(out)
    assert load_cifar_c(out, ("frost", "fog")).frost_source == "synthetic"
    monkeypatch.setattr(corruptions, "frost_folder", installed)
    generate_cifar_c(images, labels, out, corruptions=("frost", "fog"), severities=(1,), workers=1)
    after = mtimes(out)
    assert after["fog.npy"] == before["fog.npy"] and after["frost.npy"] != before["frost.npy"]
    loaded = load_cifar_c(out, ("frost", "fog"))
    assert loaded.frost_source == "photographs" and not loaded.synthetic_frost


def test_a_generated_file_replaced_since_is_generated_again_or_refused(tmp_path: Path, images: np.ndarray) -> None:
    """The manifest's digests were written and never read: a file copied over another was reused and scored as
    the corruption it replaced."""
    clean, labels = images[:8], np.zeros(8, int)
    generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, seed=0, workers=1)
    first, second = (tmp_path / f"{name}.npy" for name in NAMES[:2])
    own = first.read_bytes()
    shutil.copy(second, first)  # the same size: only the digest tells
    with pytest.raises(DataError, match=rf"{first.name} no longer holds what was generated"):
        load_cifar_c(tmp_path, NAMES)
    generate_cifar_c(clean, labels, tmp_path, corruptions=NAMES, seed=0, workers=1)  # made again
    assert first.read_bytes() == own and load_cifar_c(tmp_path, NAMES).corruptions == tuple(NAMES)
    np.save(tmp_path / "labels.npy", np.ones(8, int))  # the labels every score reads
    with pytest.raises(DataError, match=r"labels\.npy no longer holds what was generated"):
        load_cifar_c(tmp_path, NAMES)
