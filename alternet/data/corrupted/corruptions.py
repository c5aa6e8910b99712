"""The 15 CIFAR-C corruptions (Hendrycks & Dietterich, ICLR 2019) with the CIFAR-C severity constants.

Constants and formulas follow ``ImageNet-C/create_c/make_cifar_c.py`` of hendrycks/robustness (see
``CONSTANTS_VERSION``), not the ImageNet-C ones. Every corruption works on a batch of uint8 HWC images and, like
the reference's final ``np.uint8(...)``, truncates float results to uint8.

Which tool does what:

- cv2: defocus blur (the reference's disk kernel via ``cv2.GaussianBlur`` + ``cv2.filter2D``), the affine part of
  elastic transform (``cv2.getAffineTransform`` + ``cv2.warpAffine``), JPEG (``cv2.imencode``/``imdecode``, the
  libjpeg path albumentations' ``ImageCompression`` uses; byte-identical to PIL's encoder at these qualities).
- scipy.ndimage: Gaussian filtering (what ``skimage.filters.gaussian`` wraps) and ``map_coordinates``.
- own numpy (no library call reproduces the reference exactly): the noises, glass blur's pixel shuffle, motion blur,
  zoom blur (linear-interpolation matrices equal to ``scipy.ndimage.zoom(order=1)``), snow, fog's plasma fractal,
  brightness (closed form of the HSV value shift), contrast, pixelate (PIL's BOX resampling in fixed point).

Deviations from the reference, all documented at the function:

- motion blur (and the streaks of snow): ImageMagick's ``MotionBlurImage`` re-implemented in numpy (one-sided
  Gaussian line kernel, same radius/sigma/angle semantics, edge pixels replicated, rounded to 8 bits);
- frost: the reference crops its frost photographs, which alternet does not ship; they are read from the
  ``imagecorruptions`` package when it is installed (``pip install "alternet[frost]"``; its wheel ships the same
  files under Apache-2.0, NOTICE), else a seeded procedural ice texture stands in (:func:`frost_source` says which;
  synthetic frost numbers are not comparable with real CIFAR-C frost);
- glass blur: the reference's "swap" of two numpy views copies the neighbour into the pixel and leaves the
  neighbour unchanged; we reproduce that (what CIFAR-C contains) in one vectorised gather per iteration;
- random numbers come from ``numpy.random.Generator``, so images match the reference in distribution, not bit for bit.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from scipy import ndimage

from .names import CORRUPTIONS, SEVERITIES

CONSTANTS_VERSION = "hendrycks/robustness@ca360085d57889288c4143fddd8a707bbcae01bd:ImageNet-C/create_c/make_cifar_c.py"
IMPLEMENTATION_VERSION = 1  # bump whenever generated images would change; part of the cache key
FROST_TEXTURE_SEED = 2019
FROST_PACKAGE = "imagecorruptions"  # its wheel ships the reference's frost photographs (frost/frost1.png ...)
FROST_PHOTOGRAPHS = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")  # the five it draws from
FROST_SCALE = 0.2  # make_cifar_c shrinks each photograph to a fifth before cropping

# Severity 1..5 parameters, as in make_cifar_c.py.
SEVERITY_PARAMS: dict[str, tuple[Any, ...]] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # noise std
    "shot_noise": (500, 250, 100, 75, 50),  # photons per unit intensity
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # salt-and-pepper amount
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),  # disk radius, alias blur sigma
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),  # sigma, max delta, iterations
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),  # radius, sigma
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),  # zoom factors np.arange(1, stop, 0.01)
    "snow": (  # mean, std, zoom, threshold, blur radius, blur sigma, image weight
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    ),
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),  # image weight, frost weight
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),  # fog amount, wibble decay
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),  # added to HSV value
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor on the deviation from the channel mean
    "elastic_transform": (  # displacement alpha, smoothing sigma, affine jitter; all x image size (32 for CIFAR)
        (0, 0, 0.08),
        (0.05, 0.2, 0.07),
        (0.08, 0.06, 0.06),
        (0.1, 0.04, 0.05),
        (0.1, 0.03, 0.03),
    ),
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # downscale factor
    "jpeg_compression": (80, 65, 58, 50, 40),  # JPEG quality
}

_MIN_SIDE = 8
_PIL_PRECISION_BITS = 22  # Pillow's fixed-point precision for 8-bit resampling


# ---------------------------------------------------------------- shared helpers


def _unit(images: np.ndarray) -> np.ndarray:
    """uint8 images as float64 in [0, 1]."""
    return images / 255.0


def _to_uint8(x: np.ndarray) -> np.ndarray:
    """[0, 1] floats to uint8 by truncation, as the reference's ``np.uint8(clip(x, 0, 1) * 255)``."""
    return (np.clip(x, 0, 1) * 255).astype(np.uint8)


def _gaussian(x: np.ndarray, sigma: float, mode: str = "nearest", truncate: float = 4.0) -> np.ndarray:
    """``skimage.filters.gaussian`` over the spatial axes 1 and 2 of a batch (other axes untouched)."""
    sigmas = [0.0] * x.ndim
    sigmas[1] = sigmas[2] = sigma
    return ndimage.gaussian_filter(x, sigmas, mode=mode, truncate=truncate)


def _batch_index(n: int) -> np.ndarray:
    """Image indices shaped to broadcast against (N, H, W) index arrays."""
    return np.arange(n)[:, None, None]


def _zoom_matrix(size: int, factor: float) -> np.ndarray:
    """(size, size) matrix of the reference's ``clipped_zoom`` along one axis: centre crop of ceil(size/factor)
    pixels, ``scipy.ndimage.zoom(order=1)`` back up (grid corners aligned), centre trim to ``size``."""
    crop = math.ceil(size / factor)
    start = (size - crop) // 2
    zoomed = round(crop * factor)
    coords = np.arange(zoomed) * ((crop - 1) / (zoomed - 1))
    low = np.minimum(np.floor(coords).astype(int), crop - 1)
    high = np.minimum(low + 1, crop - 1)
    frac = coords - low
    matrix = np.zeros((zoomed, size))
    np.add.at(matrix, (np.arange(zoomed), start + low), 1 - frac)
    np.add.at(matrix, (np.arange(zoomed), start + high), frac)
    trim = (zoomed - size) // 2
    return matrix[trim : trim + size]


def _to_planes(x: np.ndarray) -> np.ndarray:
    """(N, H, W, C) -> (H, W, N*C): the layout in which zooms are two matrix products."""
    n, h, w, c = x.shape
    return np.ascontiguousarray(np.moveaxis(x, 0, 2)).reshape(h, w, n * c)


def _from_planes(planes: np.ndarray, n: int) -> np.ndarray:
    """Inverse of :func:`_to_planes`."""
    h, w, k = planes.shape
    return np.moveaxis(planes.reshape(h, w, n, k // n), 2, 0)


def _zoom_planes(planes: np.ndarray, factor: float) -> np.ndarray:
    """The reference's ``clipped_zoom`` of (H, W, K) planes, in their dtype."""
    h, w, k = planes.shape
    rows = _zoom_matrix(h, factor).astype(planes.dtype)
    cols = _zoom_matrix(w, factor).astype(planes.dtype)
    return cols @ (rows @ planes.reshape(h, w * k)).reshape(h, w, k)


def _clipped_zoom(x: np.ndarray, factor: float) -> np.ndarray:
    """Zoom a float batch (N, H, W, C) into its centre by ``factor`` keeping its size and dtype."""
    return _from_planes(_zoom_planes(_to_planes(x), factor), len(x))


def _plasma_fractal(n: int, size: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """(n, size, size) diamond-square height maps in [0, 1]; ``size`` a power of two. The reference's
    ``plasma_fractal``, batched: the random offset at scale ``wibble`` is uniform(-wibble, wibble) * wibble."""
    maps = np.zeros((n, size, size))
    step, wibble = size, 100.0

    def wibbled_mean(total: np.ndarray) -> np.ndarray:
        return total / 4 + wibble * rng.uniform(-wibble, wibble, total.shape)

    while step >= 2:
        half = step // 2
        corners = maps[:, 0:size:step, 0:size:step]
        squares = corners + np.roll(corners, -1, axis=1)
        squares = squares + np.roll(squares, -1, axis=2)
        maps[:, half:size:step, half:size:step] = wibbled_mean(squares)
        centres = maps[:, half:size:step, half:size:step]
        corners = maps[:, 0:size:step, 0:size:step]
        on_corner_rows = centres + np.roll(centres, 1, axis=1) + corners + np.roll(corners, -1, axis=2)
        maps[:, 0:size:step, half:size:step] = wibbled_mean(on_corner_rows)
        on_corner_cols = centres + np.roll(centres, 1, axis=2) + corners + np.roll(corners, -1, axis=1)
        maps[:, half:size:step, 0:size:step] = wibbled_mean(on_corner_cols)
        step, wibble = half, wibble / decay
    maps -= maps.min(axis=(1, 2), keepdims=True)
    return maps / maps.max(axis=(1, 2), keepdims=True)


def _power_of_two(size: int) -> int:
    """Smallest power of two >= size."""
    return 1 << max(size - 1, 1).bit_length()


def motion_kernel(radius: float, sigma: float) -> np.ndarray:
    """ImageMagick's motion-blur weights: a one-sided Gaussian over 2*ceil(radius)+1 taps, normalised."""
    taps = np.arange(2 * math.ceil(radius) + 1)
    weights = np.exp(-(taps**2) / (2.0 * max(sigma, 1e-12) ** 2))
    return weights / weights.sum()


def motion_offsets(width: int, angle: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer (row, column) offsets of the ``width`` taps along each angle in degrees (N,) -> two (N, width)."""
    theta = np.deg2rad(angle)[:, None]
    taps = np.arange(width)[None, :]
    rows = np.ceil(taps * np.sin(theta) - 0.5).astype(int)
    cols = np.ceil(taps * np.cos(theta) - 0.5).astype(int)
    return rows, cols


def motion_blur_batch(images: np.ndarray, radius: float, sigma: float, angle: np.ndarray) -> np.ndarray:
    """ImageMagick ``MotionBlurImage(radius, sigma, angle)`` on uint8 (N, H, W, C), one angle per image.

    Each output pixel is the kernel-weighted sum of the pixels at the rounded offsets i*(cos a, sin a), i >= 0
    (a trail on one side, rows growing downwards), with out-of-image samples replaced by the nearest edge pixel
    (ImageMagick's default virtual pixels). The result is rounded to 8 bits, as the reference's 16-bit ImageMagick
    result saved to an 8-bit PNG; there is no 16-bit intermediate here, so values can differ by one level.
    """
    n, h, w = images.shape[:3]
    weights = motion_kernel(radius, sigma)
    row_offsets, col_offsets = motion_offsets(len(weights), angle)
    rows = np.arange(h)[None, :, None]
    cols = np.arange(w)[None, None, :]
    index = _batch_index(n)
    out = np.zeros(images.shape)
    for tap, weight in enumerate(weights):
        src_rows = np.clip(rows + row_offsets[:, tap, None, None], 0, h - 1)
        src_cols = np.clip(cols + col_offsets[:, tap, None, None], 0, w - 1)
        out += weight * images[index, src_rows, src_cols]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------- noise


def _gaussian_noise(images: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    x = _unit(images)
    return _to_uint8(x + rng.normal(scale=std, size=x.shape))


def _shot_noise(images: np.ndarray, photons: float, rng: np.random.Generator) -> np.ndarray:
    return _to_uint8(rng.poisson(_unit(images) * photons) / photons)


def _impulse_noise(images: np.ndarray, amount: float, rng: np.random.Generator) -> np.ndarray:
    """``skimage.util.random_noise(mode="s&p")``: each value independently flipped with probability ``amount``,
    to 1 or 0 with equal odds."""
    x = _unit(images)
    flipped = rng.random(x.shape) <= amount
    salt = rng.random(x.shape) <= 0.5
    x[flipped & salt] = 1.0
    x[flipped & ~salt] = 0.0
    return _to_uint8(x)


# ---------------------------------------------------------------- blur


def defocus_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """The reference's anti-aliased disk: a 17x17 (or wider) binary disk, normalised, then Gaussian-blurred."""
    half = max(8, math.ceil(radius))
    coords = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(coords, coords)
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float32)
    disk /= disk.sum()
    ksize = 3 if radius <= 8 else 5
    return cv2.GaussianBlur(disk, (ksize, ksize), sigmaX=alias_blur)


def _defocus_blur(images: np.ndarray, params: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    kernel = defocus_kernel(*params)
    x = _unit(images)
    return _to_uint8(np.stack([cv2.filter2D(image, -1, kernel) for image in x]))


def glass_shuffle(images: np.ndarray, row_offsets: np.ndarray, col_offsets: np.ndarray, delta: int) -> np.ndarray:
    """One pass of the reference's local pixel shuffle over rows/columns delta+1 .. size-delta.

    The reference walks pixels from the bottom-right and writes ``x[h, w], x[h', w'] = x[h', w'], x[h, w]``;
    with numpy views that copies the neighbour (h', w') = (h+dy, w+dx) into (h, w) and leaves the neighbour as is.
    With offsets in {-1, 0} (delta = 1, every CIFAR-C severity) each source is read before the walk reaches it, so
    the walk equals this single gather. Offsets are (N, H-2*delta, W-2*delta) arrays.
    """
    n, h, w = images.shape[:3]
    rows = np.arange(delta + 1, h - delta + 1)[:, None]
    cols = np.arange(delta + 1, w - delta + 1)[None, :]
    out = images.copy()
    out[:, rows, cols] = images[_batch_index(n), rows + row_offsets, cols + col_offsets]
    return out


def _glass_blur(images: np.ndarray, params: tuple[float, int, int], rng: np.random.Generator) -> np.ndarray:
    sigma, delta, iterations = params
    n, h, w = images.shape[:3]
    x = _to_uint8(_gaussian(_unit(images), sigma))
    for _ in range(iterations):
        row_offsets, col_offsets = rng.integers(-delta, delta, size=(2, n, h - 2 * delta, w - 2 * delta))
        x = glass_shuffle(x, row_offsets, col_offsets, delta)
    return _to_uint8(_gaussian(_unit(x), sigma))


def _motion_blur(images: np.ndarray, params: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    radius, sigma = params
    return motion_blur_batch(images, radius, sigma, rng.uniform(-45, 45, size=len(images)))


def _zoom_blur(images: np.ndarray, stop: float, rng: np.random.Generator) -> np.ndarray:
    """Average of the image and its centre zooms by 1, 1.01, ... (``np.arange(1, stop, 0.01)``, float32)."""
    planes = _to_planes(_unit(images).astype(np.float32))
    factors = np.arange(1, stop, 0.01)
    total = planes.copy()
    for factor in factors:
        total += _zoom_planes(planes, factor)
    return _to_uint8(_from_planes(total, len(images)) / (len(factors) + 1))


# ---------------------------------------------------------------- weather


def _snow(images: np.ndarray, params: tuple[float, ...], rng: np.random.Generator) -> np.ndarray:
    """Thresholded, zoomed Gaussian flakes, motion-blurred downwards, added twice (as is and rotated 180 degrees)
    to an image brightened towards 1.5 * grey + 0.5."""
    mean, std, zoom, threshold, radius, sigma, weight = params
    n, h, w = images.shape[:3]
    x = images.astype(np.float32) / 255.0
    flakes = _clipped_zoom(rng.normal(mean, std, size=(n, h, w, 1)), zoom)
    flakes[flakes < threshold] = 0
    flakes = (np.clip(flakes, 0, 1) * 255).astype(np.uint8)
    flakes = motion_blur_batch(flakes, radius, sigma, rng.uniform(-135, -45, size=n)) / 255.0
    grey = x @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    x = weight * x + (1 - weight) * np.maximum(x, grey[..., None] * 1.5 + 0.5)
    return _to_uint8(x + flakes + flakes[:, ::-1, ::-1])


def frost_folder() -> Path | None:
    """The folder of the reference's frost photographs inside the installed ``imagecorruptions`` package, found
    without importing it (its import needs scikit-image); None when it is not installed or lacks them."""
    spec = importlib.util.find_spec(FROST_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "frost"
        if all((folder / name).is_file() for name in FROST_PHOTOGRAPHS):
            return folder
    return None


def frost_source() -> str:
    """What generated frost is made of: ``photographs`` (the reference's) or ``synthetic`` (the stand-in)."""
    return "photographs" if frost_folder() is not None else "synthetic"


@functools.lru_cache(maxsize=1)
def frost_photographs() -> tuple[np.ndarray, ...]:
    """The five photographs as the reference reads them: decoded, shrunk by FROST_SCALE (OpenCV's bilinear
    resize), RGB."""
    folder = frost_folder()
    if folder is None:
        raise FileNotFoundError(f"the {FROST_PACKAGE} package and its frost photographs are not installed")
    photographs = []
    for name in FROST_PHOTOGRAPHS:
        image = cv2.imread(str(folder / name), cv2.IMREAD_COLOR)
        if image is None:
            raise OSError(f"{folder / name} cannot be decoded: reinstall {FROST_PACKAGE}")
        photographs.append(cv2.resize(image, (0, 0), fx=FROST_SCALE, fy=FROST_SCALE)[..., ::-1].copy())
    return tuple(photographs)


@functools.lru_cache(maxsize=4)
def frost_textures(size: int) -> np.ndarray:
    """(5, size, size, 3) uint8 procedural frost textures, the same on every call (seeded by FROST_TEXTURE_SEED).

    Stand-ins for the reference's frost photographs: a cloudy plasma base, dendritic ice needles (a stem with
    side branches at +-60 degrees) with a soft glow, fine grain, tinted pale blue.
    """
    rng = np.random.default_rng(FROST_TEXTURE_SEED)
    return np.stack([_frost_texture(size, rng) for _ in FROST_PHOTOGRAPHS])


def _frost_texture(size: int, rng: np.random.Generator) -> np.ndarray:
    """One frost texture; see :func:`frost_textures`."""
    base = 0.2 + 0.35 * _plasma_fractal(1, _power_of_two(size), 2.0, rng)[0, :size, :size]
    needles = np.zeros((size, size), np.float32)
    for _ in range(size * size // 90):
        _draw_crystal(needles, rng)
    glow = cv2.GaussianBlur(needles, (0, 0), 1.5)
    grain = rng.normal(0, 0.03, size=(size, size))
    ice = np.clip(base + 0.7 * needles + 0.8 * glow + grain, 0, 1)
    tint = np.array([0.82, 0.91, 1.0])
    return (ice[..., None] * tint * 255).astype(np.uint8)


def _draw_crystal(canvas: np.ndarray, rng: np.random.Generator) -> None:
    """Draw one ice needle with a few side branches onto ``canvas`` in place."""
    size = canvas.shape[0]
    start = rng.uniform(0, size, 2)
    angle = rng.uniform(0, 2 * np.pi)
    length = rng.uniform(4, size / 5)
    brightness = rng.uniform(0.3, 0.9)
    _draw_line(canvas, start, angle, length, brightness)
    for _ in range(rng.integers(2, 5)):
        at = start + rng.uniform(0.2, 0.9) * length * np.array([np.cos(angle), np.sin(angle)])
        side = angle + rng.choice([-1, 1]) * np.pi / 3
        _draw_line(canvas, at, side, rng.uniform(0.2, 0.5) * length, 0.8 * brightness)


def _draw_line(canvas: np.ndarray, start: np.ndarray, angle: float, length: float, value: float) -> None:
    """Anti-aliased line of ``length`` pixels from ``start`` (x, y) along ``angle`` radians, drawn in place."""
    end = start + length * np.array([np.cos(angle), np.sin(angle)])
    cv2.line(canvas, tuple(int(v) for v in start), tuple(int(v) for v in end), float(value), 1, cv2.LINE_AA)


def _frost(images: np.ndarray, params: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    """``image_weight * image + frost_weight * frost`` in 0..255, with a random crop of a random frost photograph
    (the reference's, when installed: :func:`frost_source`) or procedural texture."""
    image_weight, frost_weight = params
    n, h, w = images.shape[:3]
    if frost_source() == "photographs":
        photographs = frost_photographs()
        choice = rng.integers(len(photographs), size=n)
        frost = np.empty_like(images)
        for i, index in enumerate(choice):
            photograph = photographs[index]
            top, left = rng.integers(0, photograph.shape[0] - h), rng.integers(0, photograph.shape[1] - w)
            frost[i] = photograph[top : top + h, left : left + w]
    else:
        textures = frost_textures(max(128, 2 * max(h, w)))
        size = textures.shape[1]
        choice = rng.integers(len(textures), size=n)[:, None, None]
        top = rng.integers(0, size - h, size=n)[:, None, None]
        left = rng.integers(0, size - w, size=n)[:, None, None]
        frost = textures[choice, top + np.arange(h)[None, :, None], left + np.arange(w)[None, None, :]]
    return np.clip(image_weight * images + frost_weight * frost, 0, 255).astype(np.uint8)


def _fog(images: np.ndarray, params: tuple[float, float], rng: np.random.Generator) -> np.ndarray:
    amount, decay = params
    n, h, w = images.shape[:3]
    x = _unit(images)
    peak = x.max(axis=(1, 2, 3), keepdims=True)
    fog = _plasma_fractal(n, _power_of_two(max(h, w)), decay, rng)[:, :h, :w, None]
    return _to_uint8((x + amount * fog) * peak / (peak + amount))


def _brightness(images: np.ndarray, shift: float, rng: np.random.Generator) -> np.ndarray:
    """Add ``shift`` to the HSV value (clipped at 1), hue and saturation kept.

    Closed form of the reference's rgb2hsv -> V + shift -> hsv2rgb: every channel becomes V' * (channel / V), so the
    largest channel is exactly V' as in hsv2rgb; black pixels (V = 0, saturation 0) become grey V'.
    """
    x = _unit(images)
    value = x.max(axis=-1, keepdims=True)
    new_value = np.minimum(value + shift, 1.0)
    ratio = x / np.where(value > 0, value, 1.0)
    return _to_uint8(np.where(value > 0, new_value * ratio, new_value))


# ---------------------------------------------------------------- digital


def _contrast(images: np.ndarray, factor: float, rng: np.random.Generator) -> np.ndarray:
    x = _unit(images)
    means = x.mean(axis=(1, 2), keepdims=True)
    return _to_uint8((x - means) * factor + means)


def elastic_fields(
    shape: tuple[int, int, int], params: tuple[float, float, float], rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random parts of the elastic transform for (N, H, W) images: the affine target points (N, 3, 2) of the
    source points in :func:`_affine_points`, and smooth row/column displacements (N, H, W) float32."""
    n, h, w = shape
    alpha, sigma, jitter = (value * min(h, w) for value in params)
    targets = _affine_points(h, w) + rng.uniform(-jitter, jitter, size=(n, 3, 2)).astype(np.float32)
    row_shift, col_shift = (
        (_gaussian(rng.uniform(-1, 1, size=(n, h, w)), sigma, mode="reflect", truncate=3) * alpha).astype(np.float32)
        for _ in range(2)
    )
    return targets, row_shift, col_shift


def _affine_points(h: int, w: int) -> np.ndarray:
    """The reference's three (x, y) anchor points around the image centre, float32 (3, 2)."""
    centre = np.float32([w // 2, h // 2])
    half = min(h, w) // 3
    return np.float32([centre + half, [centre[0] + half, centre[1] - half], centre - half])


def _elastic_transform(images: np.ndarray, params: tuple[float, float, float], rng: np.random.Generator) -> np.ndarray:
    """Random affine warp (reflect-101 borders), then a smooth random displacement with bilinear sampling."""
    n, h, w = images.shape[:3]
    targets, row_shift, col_shift = elastic_fields((n, h, w), params, rng)
    x = images.astype(np.float32) / 255.0
    source = _affine_points(h, w)
    warped = np.stack(
        [
            cv2.warpAffine(image, cv2.getAffineTransform(source, target), (w, h), borderMode=cv2.BORDER_REFLECT_101)
            for image, target in zip(x, targets)
        ]
    )
    grid_rows, grid_cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    channels = images.shape[3]
    out = np.empty_like(warped)
    for i in range(n):
        coords = (grid_rows + row_shift[i], grid_cols + col_shift[i])
        for c in range(channels):
            out[i, ..., c] = ndimage.map_coordinates(warped[i, ..., c], coords, order=1, mode="reflect")
    return _to_uint8(out)


def box_resample_weights(in_size: int, out_size: int) -> np.ndarray:
    """(out_size, in_size) int64 weights of Pillow's BOX filter in its 22-bit fixed point."""
    scale = in_size / out_size
    support = 0.5 * max(scale, 1.0)
    centres = (np.arange(out_size) + 0.5) * scale
    offsets = (np.arange(in_size)[None, :] - centres[:, None] + 0.5) / max(scale, 1.0)
    window = (np.arange(in_size)[None, :] >= (centres - support + 0.5).astype(int)[:, None]) & (
        np.arange(in_size)[None, :] < (centres + support + 0.5).astype(int)[:, None]
    )
    inside = window & (offsets > -0.5) & (offsets <= 0.5)
    weights = inside / inside.sum(axis=1, keepdims=True)
    return np.floor(weights * (1 << _PIL_PRECISION_BITS) + 0.5).astype(np.int64)


def _box_pass(images: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    """One Pillow resampling pass along ``axis`` with fixed-point weights, rounded to uint8."""
    moved = np.moveaxis(images, axis, -1).astype(np.int64)
    total = (moved @ weights.T + (1 << (_PIL_PRECISION_BITS - 1))) >> _PIL_PRECISION_BITS
    return np.moveaxis(np.clip(total, 0, 255).astype(np.uint8), -1, axis)


def box_resize(images: np.ndarray, height: int, width: int) -> np.ndarray:
    """Pillow ``Image.resize((width, height), BOX)`` of uint8 (N, H, W, C): horizontal pass, then vertical."""
    wide = _box_pass(images, box_resample_weights(images.shape[2], width), axis=2)
    return _box_pass(wide, box_resample_weights(images.shape[1], height), axis=1)


def _pixelate(images: np.ndarray, factor: float, rng: np.random.Generator) -> np.ndarray:
    h, w = images.shape[1:3]
    small = box_resize(images, int(h * factor), int(w * factor))
    return box_resize(small, h, w)


def _jpeg_compression(images: np.ndarray, quality: int, rng: np.random.Generator) -> np.ndarray:
    """Encode and decode each image as JPEG at ``quality`` (libjpeg defaults: 4:2:0 chroma subsampling)."""
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)]
    out = np.empty_like(images)
    for i, image in enumerate(images):
        ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), params)
        if not ok:
            raise RuntimeError(f"cv2 could not JPEG-encode an image of shape {image.shape}")
        out[i] = cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return out


_FUNCTIONS: dict[str, Callable[[np.ndarray, Any, np.random.Generator], np.ndarray]] = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "defocus_blur": _defocus_blur,
    "glass_blur": _glass_blur,
    "motion_blur": _motion_blur,
    "zoom_blur": _zoom_blur,
    "snow": _snow,
    "frost": _frost,
    "fog": _fog,
    "brightness": _brightness,
    "contrast": _contrast,
    "elastic_transform": _elastic_transform,
    "pixelate": _pixelate,
    "jpeg_compression": _jpeg_compression,
}


# ---------------------------------------------------------------- public entry point


def check_corruption(name: str, severity: int) -> None:
    """Raise ValueError unless ``name`` is one of CORRUPTIONS and ``severity`` an int in 1..5."""
    if name not in _FUNCTIONS:
        raise ValueError(f"unknown corruption {name!r}; valid corruptions: {', '.join(CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, (int, np.integer)) or severity not in SEVERITIES:
        raise ValueError(f"severity must be an integer in 1..5, got {severity!r}")


def check_images(images: np.ndarray) -> None:
    """Raise ValueError unless ``images`` is a uint8 (N, H, W, 3) batch with sides of at least 8 pixels."""
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
        found = f"{images.dtype} {images.shape}" if isinstance(images, np.ndarray) else type(images).__name__
        raise ValueError(f"images must be a uint8 array of shape (N, H, W, 3), got {found}")
    if min(images.shape[1:3]) < _MIN_SIDE:
        raise ValueError(f"images must be at least {_MIN_SIDE}x{_MIN_SIDE} pixels, got {images.shape[1:3]}")


def corrupt(images: np.ndarray, name: str, severity: int, seed: int = 0) -> np.ndarray:
    """Apply corruption ``name`` at ``severity`` (1..5) to uint8 images (N, H, W, 3); same shape and dtype back.

    The output is a deterministic function of (images, name, severity, seed).
    """
    check_corruption(name, severity)
    check_images(images)
    if len(images) == 0:
        return images.copy()
    rng = np.random.default_rng(seed)
    return _FUNCTIONS[name](images, SEVERITY_PARAMS[name][severity - 1], rng)
