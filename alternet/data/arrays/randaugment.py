"""timm's RandAugment (``rand-m9-n2-mstd1.0`` and the rest of its ``rand-*`` grammar) on uint8 HWC numpy images.

A port of ``timm.data.auto_augment.rand_augment_transform`` to OpenCV/numpy as an albumentations transform: the same
op sets, level-to-argument maps, random sign flips, per-op probability and magnitude noise, with every op reproducing
Pillow's arithmetic: the LUT ops, ``ImageEnhance`` blends (float32, truncated), the 3x3 SMOOTH kernel behind
Sharpness (border pixels kept) and affine sampling at pixel centres with edge clamping inside the image and the fill
colour outside it.

Why a port: the paper's recipe names timm's policy, and timm's implementation works on PIL images, which would mean a
numpy -> PIL -> numpy round trip per image inside an otherwise numpy pipeline (and costs ~2x: bench/dataloader.py);
albumentations 2.0.8 has no RandAugment, and assembling one from its transforms (``SomeOf``) would use their
magnitude scales, so ``m9`` would not mean what it means in timm.

Known differences from timm on Pillow, bounded in ``tests/data/test_randaugment.py``:

* bicubic warps use OpenCV's Keys kernel (a = -0.75); Pillow's affine bicubic uses a = -1;
* OpenCV quantises sub-pixel positions, so rare bilinear pixels land one grey level off;
* Posterize to 0 bits gives a black image (as timm on older Pillow); recent Pillow raises instead.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import albumentations as A
import cv2
import numpy as np
from albumentations.core.transforms_interface import BaseTransformInitSchema
from pydantic import Field, model_validator

from ..augment import rand_sections

__all__ = [
    "DEFAULT_FILL",
    "RAND_INCREASING_TRANSFORMS",
    "RAND_TRANSFORMS",
    "RAND_WEIGHTS",
    "OpCall",
    "RandAugment",
    "apply_op",
    "parse_config",
]

LEVEL_DENOM = 10.0  # magnitude M maps to the fractional level M / 10, as in timm
DEFAULT_FILL = (124, 116, 104)  # timm's fill for the ImageNet mean (0.485, 0.456, 0.406): augment.fill_from_mean
TRANSLATE_PCT = 0.45  # timm's default ``translate_pct`` for the relative translations

RAND_TRANSFORMS = (  # timm's _RAND_TRANSFORMS, in its order (an op is drawn by its index)
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "SolarizeAdd",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateXRel",
    "TranslateYRel",
)
INCREASING = ("Posterize", "Solarize", "Color", "Contrast", "Brightness", "Sharpness")  # timm's "...Increasing" ops
RAND_INCREASING_TRANSFORMS = tuple(f"{op}Increasing" if op in INCREASING else op for op in RAND_TRANSFORMS)
# timm's ``_RAND_WEIGHTED_0`` (config token ``tweights``): ops are then drawn without replacement.
RAND_WEIGHTS = {
    "Rotate": 3.0,
    "ShearX": 2.0,
    "ShearY": 2.0,
    "TranslateXRel": 1.0,
    "TranslateYRel": 1.0,
    "ColorIncreasing": 0.25,
    "SharpnessIncreasing": 0.25,
    "AutoContrast": 0.25,
    "SolarizeIncreasing": 0.05,
    "SolarizeAdd": 0.05,
    "ContrastIncreasing": 0.05,
    "BrightnessIncreasing": 0.05,
    "Equalize": 0.05,
    "PosterizeIncreasing": 0.05,
    "Invert": 0.05,
}

Interpolation = Literal["random", "bilinear", "bicubic"]
_CV2_INTERPOLATION = {"bilinear": cv2.INTER_LINEAR, "bicubic": cv2.INTER_CUBIC}
_RANDOM_INTERPOLATION = ("bilinear", "bicubic")  # timm's choice when no interpolation is configured


class OpCall(NamedTuple):
    """One sampled op: its name, its argument (None for argument-free ops) and the interpolation (warps only)."""

    name: str
    arg: float | None = None
    interpolation: str = "bilinear"


# --------------------------------------------------------------------------------------------------------------------
# Level -> argument maps (timm's LEVEL_TO_ARG); ``rng`` draws the random sign flips.


def _signed(value: float, rng: random.Random) -> float:
    """Negate ``value`` with probability 1/2 (timm's ``_randomly_negate``)."""
    return -value if rng.random() > 0.5 else value


def _enhance_level(level: float, _rng: random.Random) -> float:
    return (level / LEVEL_DENOM) * 1.8 + 0.1


def _enhance_increasing_level(level: float, rng: random.Random) -> float:
    return max(0.1, 1.0 + _signed((level / LEVEL_DENOM) * 0.9, rng))


LevelFn = Callable[[float, random.Random], float]
_LEVEL_FNS: dict[str, LevelFn | None] = {
    "AutoContrast": None,
    "Equalize": None,
    "Invert": None,
    "Rotate": lambda level, rng: _signed((level / LEVEL_DENOM) * 30.0, rng),
    "Posterize": lambda level, _rng: int((level / LEVEL_DENOM) * 4),
    "PosterizeIncreasing": lambda level, _rng: 4 - int((level / LEVEL_DENOM) * 4),
    "Solarize": lambda level, _rng: min(256, int((level / LEVEL_DENOM) * 256)),
    "SolarizeIncreasing": lambda level, _rng: 256 - min(256, int((level / LEVEL_DENOM) * 256)),
    "SolarizeAdd": lambda level, _rng: min(128, int((level / LEVEL_DENOM) * 110)),
    "Color": _enhance_level,
    "ColorIncreasing": _enhance_increasing_level,
    "Contrast": _enhance_level,
    "ContrastIncreasing": _enhance_increasing_level,
    "Brightness": _enhance_level,
    "BrightnessIncreasing": _enhance_increasing_level,
    "Sharpness": _enhance_level,
    "SharpnessIncreasing": _enhance_increasing_level,
    "ShearX": lambda level, rng: _signed((level / LEVEL_DENOM) * 0.3, rng),
    "ShearY": lambda level, rng: _signed((level / LEVEL_DENOM) * 0.3, rng),
    "TranslateXRel": lambda level, rng: _signed((level / LEVEL_DENOM) * TRANSLATE_PCT, rng),
    "TranslateYRel": lambda level, rng: _signed((level / LEVEL_DENOM) * TRANSLATE_PCT, rng),
}


# --------------------------------------------------------------------------------------------------------------------
# Pixel ops: Pillow's ImageOps / ImageEnhance arithmetic on uint8 HWC RGB.


def _lut(img: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Apply a lookup table: shape (256,) for all channels or (256, C) per channel."""
    table = np.ascontiguousarray(table, dtype=np.uint8)
    return cv2.LUT(img, table if table.ndim == 1 else table[None])


def _blend(degenerate: np.ndarray, img: np.ndarray, factor: float) -> np.ndarray:
    """``Image.blend(degenerate, img, factor)``: float32 ``d + f * (i - d)``, clipped and truncated like Pillow."""
    d = degenerate.astype(np.float32)
    out = d + np.float32(factor) * (img.astype(np.float32) - d)
    return np.clip(out, 0, 255).astype(np.uint8)


def _grey(img: np.ndarray) -> np.ndarray:
    """Pillow's RGB -> L: ``(19595 R + 38470 G + 7471 B + 0x8000) >> 16``."""
    rgb = img.astype(np.uint32)
    return ((rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16).astype(np.uint8)


def auto_contrast(img: np.ndarray) -> np.ndarray:
    """``ImageOps.autocontrast``: stretch each channel's [min, max] to [0, 255]."""
    lo, hi = img.min(axis=(0, 1)).astype(np.float64), img.max(axis=(0, 1)).astype(np.float64)
    scale = 255.0 / np.maximum(hi - lo, 1)
    table = np.trunc(np.arange(256.0)[:, None] * scale + (-lo * scale))
    table = np.where(hi > lo, np.clip(table, 0, 255), np.arange(256.0)[:, None])
    return _lut(img, table)


def _equalize_table(hist: np.ndarray) -> np.ndarray:
    """``ImageOps.equalize``'s table for one channel's histogram (Pillow clips entries above 255)."""
    used = hist[hist > 0]
    step = (int(used.sum()) - int(used[-1])) // 255 if len(used) > 1 else 0
    if not step:
        return np.arange(256)
    before = np.concatenate(([0], np.cumsum(hist)[:-1]))
    return np.minimum((step // 2 + before) // step, 255)


def equalize(img: np.ndarray) -> np.ndarray:
    """``ImageOps.equalize``, per channel."""
    tables = [_equalize_table(np.bincount(img[..., c].ravel(), minlength=256)) for c in range(img.shape[2])]
    return _lut(img, np.stack(tables, axis=1))


def invert(img: np.ndarray) -> np.ndarray:
    """``ImageOps.invert``."""
    return 255 - img


def posterize(img: np.ndarray, bits: int) -> np.ndarray:
    """Keep the ``bits`` most significant bits (0 bits -> black, >= 8 -> unchanged)."""
    if bits >= 8:
        return img
    return img & np.uint8(~(2 ** (8 - bits) - 1) & 0xFF)


def solarize(img: np.ndarray, threshold: int) -> np.ndarray:
    """``ImageOps.solarize``: invert values >= ``threshold``."""
    values = np.arange(256)
    return _lut(img, np.where(values < threshold, values, 255 - values))


def solarize_add(img: np.ndarray, add: int, threshold: int = 128) -> np.ndarray:
    """timm's ``solarize_add``: add ``add`` (saturating) to values below ``threshold``."""
    values = np.arange(256)
    return _lut(img, np.where(values < threshold, np.minimum(values + add, 255), values))


def color(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Color``: blend with the greyscale image."""
    return _blend(np.repeat(_grey(img)[..., None], 3, axis=2), img, factor)


def contrast(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Contrast``: blend with the rounded mean of the greyscale image."""
    grey = _grey(img)
    mean = int(int(grey.sum(dtype=np.int64)) / grey.size + 0.5)
    return _lut(img, _blend(np.full(256, mean, np.uint8), np.arange(256, dtype=np.uint8), factor))


def brightness(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Brightness``: blend with black."""
    return _lut(img, _blend(np.zeros(256, np.uint8), np.arange(256, dtype=np.uint8), factor))


_SMOOTH_KERNEL = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32)


def smooth(img: np.ndarray) -> np.ndarray:
    """``ImageFilter.SMOOTH``: (3x3 box + 4 x centre) / 13, rounded half up; border pixels copied.

    The integer sum S is exact in float32 and (S + 6.5) / 13 is never within float32 error of an integer, so this
    matches Pillow's float32 accumulation bit for bit.
    """
    total = cv2.filter2D(img, cv2.CV_32F, _SMOOTH_KERNEL, borderType=cv2.BORDER_REPLICATE)
    out = img.copy()
    out[1:-1, 1:-1] = ((total[1:-1, 1:-1] + 6.5) / 13).astype(np.uint8)
    return out


def sharpness(img: np.ndarray, factor: float) -> np.ndarray:
    """``ImageEnhance.Sharpness``: blend with the SMOOTH-filtered image."""
    return _blend(smooth(img), img, factor)


_PIXEL_OPS: dict[str, Callable[..., np.ndarray]] = {
    "AutoContrast": auto_contrast,
    "Equalize": equalize,
    "Invert": invert,
    "Posterize": posterize,
    "Solarize": solarize,
    "SolarizeAdd": solarize_add,
    "Color": color,
    "Contrast": contrast,
    "Brightness": brightness,
    "Sharpness": sharpness,
}


# --------------------------------------------------------------------------------------------------------------------
# Geometric ops: Pillow affine matrices (output pixel centre -> input point), sampled with cv2.warpAffine.

Affine = tuple[float, float, float, float, float, float]


def _rotate_matrix(degrees: float, height: int, width: int) -> Affine:
    """``Image.rotate(degrees)``'s inverse matrix about the image centre, rounded as Pillow rounds it."""
    angle = -math.radians(degrees % 360.0)
    a, b = round(math.cos(angle), 15), round(math.sin(angle), 15)
    d, e = round(-math.sin(angle), 15), round(math.cos(angle), 15)
    cx, cy = width / 2, height / 2
    return a, b, a * -cx + b * -cy + cx, d, e, d * -cx + e * -cy + cy


_AFFINE_OPS: dict[str, Callable[[float, int, int], Affine]] = {
    "Rotate": _rotate_matrix,
    "ShearX": lambda factor, _h, _w: (1.0, factor, 0.0, 0.0, 1.0, 0.0),
    "ShearY": lambda factor, _h, _w: (1.0, 0.0, 0.0, factor, 1.0, 0.0),
    "TranslateXRel": lambda pct, _h, w: (1.0, 0.0, pct * w, 0.0, 1.0, 0.0),
    "TranslateYRel": lambda pct, h, _w: (1.0, 0.0, 0.0, 0.0, 1.0, pct * h),
}


def warp_affine(img: np.ndarray, matrix: Affine, fill: Sequence[int], interpolation: str) -> np.ndarray:
    """``Image.transform(AFFINE, matrix, resample, fillcolor=fill)`` for bilinear/bicubic, with OpenCV.

    Pillow maps output pixel centre (x + .5, y + .5) through ``matrix`` to an input point; points outside
    [0, W) x [0, H) take ``fill``, the others are interpolated with clamped edges and truncated to uint8.
    """
    h, w = img.shape[:2]
    a, b, c, d, e, f = matrix
    to_index = np.array([[a, b, c + 0.5 * (a + b) - 0.5], [d, e, f + 0.5 * (d + e) - 0.5]])
    flags = _CV2_INTERPOLATION[interpolation] | cv2.WARP_INVERSE_MAP
    warped = cv2.warpAffine(img.astype(np.float32), to_index, (w, h), flags=flags, borderMode=cv2.BORDER_REPLICATE)
    out = np.clip(warped, 0, 255).astype(np.uint8).reshape(img.shape)
    xs, ys = np.arange(w) + 0.5, (np.arange(h) + 0.5)[:, None]
    x_in, y_in = a * xs + b * ys + c, d * xs + e * ys + f
    out[(x_in < 0) | (x_in >= w) | (y_in < 0) | (y_in >= h)] = fill
    return out


def apply_op(
    img: np.ndarray,
    name: str,
    arg: float | None = None,
    *,
    fill: Sequence[int] = DEFAULT_FILL,
    interpolation: str = "bilinear",
) -> np.ndarray:
    """Apply one RandAugment op by its timm name with an explicit argument (as timm's level map returns it)."""
    name = name.removesuffix("Increasing")
    if name in _AFFINE_OPS:
        return warp_affine(img, _AFFINE_OPS[name](arg, *img.shape[:2]), fill, interpolation)
    op = _PIXEL_OPS[name]
    return op(img) if arg is None else op(img, arg)


# --------------------------------------------------------------------------------------------------------------------
# Config string grammar (timm's ``rand_augment_transform``).

_TRANSFORM_SETS = {"weights": RAND_WEIGHTS}


def parse_config(spec: str) -> dict[str, Any]:
    """Parse a timm ``rand-...`` string into :class:`RandAugment` keyword arguments.

    Sections after ``rand`` (any order): ``m`` magnitude (int, default 10), ``n`` ops per image (int, 2), ``p``
    per-op probability (0.5), ``mstd`` magnitude noise std (> 100 means uniform in [0, m]), ``mmax`` magnitude
    upper bound (default 10), ``inc`` 0/1 for the increasing-severity variants, ``t<name>`` op set (``weights``).
    """
    kwargs: dict[str, Any] = {}
    increasing, op_set = False, None
    names = {"m": "magnitude", "n": "num_ops", "p": "op_prob", "mstd": "magnitude_std", "mmax": "magnitude_max"}
    for key, value in rand_sections(spec):
        if key == "t":
            if value not in _TRANSFORM_SETS:
                raise ValueError(f"RandAugment config: unsupported op set 't{value}' in {spec!r} (known: tweights)")
            op_set = _TRANSFORM_SETS[value]
        elif key == "inc":
            increasing = bool(value)
        else:
            kwargs[names[key]] = math.inf if key == "mstd" and value > 100 else value
    if op_set is not None:
        kwargs["ops"], kwargs["op_weights"] = tuple(op_set), tuple(op_set.values())
    else:
        kwargs["ops"] = RAND_INCREASING_TRANSFORMS if increasing else RAND_TRANSFORMS
    return kwargs


# --------------------------------------------------------------------------------------------------------------------
# The albumentations transform.


class RandAugment(A.ImageOnlyTransform):
    """timm's RandAugment on uint8 HWC RGB numpy images (build it from a timm string with :meth:`from_config`).

    Per image: ``num_ops`` ops are drawn uniformly with replacement (or, with ``op_weights``, by weight without
    replacement); each is applied with probability ``op_prob`` at magnitude ``N(magnitude, magnitude_std)`` (uniform
    in [0, magnitude] if the std is infinite) clipped to [0, ``magnitude_max`` or 10], with a random sign for the
    signed ops and, for ``interpolation="random"``, a random bilinear/bicubic choice for each warp. Randomness comes
    from albumentations' ``py_random``/``random_generator``, so ``A.Compose(..., seed=...)`` reproduces it.
    """

    class InitSchema(BaseTransformInitSchema):
        magnitude: float = Field(ge=0)
        num_ops: int = Field(ge=0)
        magnitude_std: float = Field(ge=0)
        magnitude_max: float | None = Field(ge=0)
        op_prob: float = Field(ge=0, le=1)
        ops: tuple[str, ...] = Field(min_length=1)
        op_weights: tuple[float, ...] | None
        fill: tuple[int, int, int]
        interpolation: Interpolation

        @model_validator(mode="after")
        def _check(self) -> Any:
            unknown = sorted(set(self.ops) - set(_LEVEL_FNS))
            if unknown:
                raise ValueError(f"unknown RandAugment ops {unknown}; known: {sorted(_LEVEL_FNS)}")
            if not all(0 <= v <= 255 for v in self.fill):
                raise ValueError(f"fill must be three values in [0, 255], got {self.fill}")
            if self.op_weights is not None:
                if len(self.op_weights) != len(self.ops) or min(self.op_weights) <= 0:
                    raise ValueError("op_weights needs one positive weight per op")
                if self.num_ops > len(self.ops):
                    raise ValueError("weighted choice is without replacement: num_ops must be <= len(ops)")
            return self

    def __init__(
        self,
        magnitude: float = LEVEL_DENOM,
        num_ops: int = 2,
        magnitude_std: float = 0.0,
        magnitude_max: float | None = None,
        op_prob: float = 0.5,
        ops: Sequence[str] = RAND_TRANSFORMS,
        op_weights: Sequence[float] | None = None,
        fill: Sequence[int] = DEFAULT_FILL,
        interpolation: Interpolation = "random",
        p: float = 1.0,
    ):
        super().__init__(p=p)
        self.magnitude, self.num_ops, self.op_prob = magnitude, num_ops, op_prob
        self.magnitude_std, self.magnitude_max = magnitude_std, magnitude_max
        self.ops, self.op_weights = tuple(ops), None if op_weights is None else tuple(op_weights)
        self.fill, self.interpolation = tuple(fill), interpolation

    @classmethod
    def from_config(cls, spec: str = "rand-m9-n2-mstd1.0", fill: Sequence[int] = DEFAULT_FILL) -> RandAugment:
        """Build from a timm config string, e.g. ``rand-m9-n2-mstd1.0`` (see :func:`parse_config`)."""
        return cls(**parse_config(spec), fill=fill)

    def _choose(self) -> list[str]:
        """The op names for one image."""
        if self.op_weights is None:
            return [self.ops[i] for i in self.random_generator.integers(0, len(self.ops), self.num_ops)]
        weights = np.asarray(self.op_weights) / sum(self.op_weights)
        chosen = self.random_generator.choice(len(self.ops), self.num_ops, replace=False, p=weights)
        return [self.ops[i] for i in chosen]

    def _magnitude(self) -> float:
        """The (noisy, clipped) magnitude for one op application."""
        magnitude = self.magnitude
        if self.magnitude_std == math.inf:
            magnitude = self.py_random.uniform(0, magnitude)
        elif self.magnitude_std > 0:
            magnitude = self.py_random.gauss(magnitude, self.magnitude_std)
        return max(0.0, min(magnitude, self.magnitude_max or LEVEL_DENOM))

    def _sample(self, name: str) -> OpCall | None:
        """Decide whether ``name`` fires and, if so, its argument and interpolation (timm's ``AugmentOp``)."""
        if self.op_prob < 1.0 and self.py_random.random() > self.op_prob:
            return None
        level_fn = _LEVEL_FNS[name]
        arg = None if level_fn is None else level_fn(self._magnitude(), self.py_random)
        if name not in _AFFINE_OPS:
            return OpCall(name, arg)
        interpolation = self.interpolation
        if interpolation == "random":
            interpolation = self.py_random.choice(_RANDOM_INTERPOLATION)
        return OpCall(name, arg, interpolation)

    def get_params(self) -> dict[str, Any]:
        """Sample the op calls for one image."""
        return {"ops": [call for name in self._choose() if (call := self._sample(name)) is not None]}

    def apply(self, img: np.ndarray, ops: Sequence[OpCall] = (), **params: Any) -> np.ndarray:
        """Run the sampled ops on a uint8 HWC RGB image."""
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(f"RandAugment needs a uint8 HWC RGB image, got {img.dtype} {img.shape}")
        for call in ops:
            img = apply_op(img, call.name, call.arg, fill=self.fill, interpolation=call.interpolation)
        return img
