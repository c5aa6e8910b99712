"""RandAugment on numpy against timm's PIL implementation (the oracle), plus its parser, seeding and statistics.

Tolerances (per op, per image, against ``timm.data.auto_augment`` on the installed Pillow):
* pixel ops (AutoContrast, Equalize, Invert, Posterize, Solarize, SolarizeAdd, Color, Contrast, Brightness,
  Sharpness): bit-identical;
* warps, bilinear: max abs diff <= 1 grey level, mean <= 0.1 (OpenCV's sub-pixel quantisation vs Pillow's doubles);
* warps, bicubic: mean abs diff <= 1.5 on smooth images, <= 2.5 on real CIFAR images, <= 5 on white noise
  (OpenCV's cubic kernel is a = -0.75, Pillow's affine bicubic is a = -1).
"""

from __future__ import annotations

import math
import pickle
import random
from pathlib import Path

import albumentations as A
import cv2
import numpy as np
import pytest
from PIL import Image
from timm.data import auto_augment as timm_aa

from alternet.data.arrays.randaugment import (
    _LEVEL_FNS,
    RAND_INCREASING_TRANSFORMS,
    RAND_TRANSFORMS,
    RAND_WEIGHTS,
    RandAugment,
    apply_op,
    parse_config,
)
from alternet.data.arrays.transforms import augmentation_ops
from alternet.data.augment import ArraysAugment, FilesAugment, fill_from_mean
from alternet.data.files.transforms import file_transform, fill_randaugment

FILL = (124, 116, 104)
PIXEL_OPS = ("AutoContrast", "Equalize", "Invert", "Posterize", "Solarize", "SolarizeAdd", "Color", "Contrast")
PIXEL_OPS += ("Brightness", "Sharpness", "PosterizeIncreasing", "SolarizeIncreasing", "ColorIncreasing")
PIXEL_OPS += ("ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing")
WARP_OPS = ("Rotate", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel")
MAGNITUDES = (0, 1, 2.5, 4.2, 7, 9, 10)
PIL_RESAMPLE = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def _smooth(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A real-looking image: upsampled coarse colours, a gradient and mild sensor noise."""
    coarse = rng.integers(0, 256, (height // 6, width // 6, 3), dtype=np.uint8)
    img = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC).astype(np.int64)
    img += np.linspace(-30, 30, width, dtype=np.int64)[None, :, None] + rng.integers(-8, 9, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _images() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "noise": rng.integers(0, 256, (32, 32, 3), dtype=np.uint8),
        "smooth": _smooth(rng, 37, 53),
        "smooth_square": _smooth(rng, 48, 48),
        "low_contrast": rng.integers(100, 140, (24, 40, 3), dtype=np.uint8),
        "constant": np.full((16, 16, 3), 77, np.uint8),
    }


IMAGES = _images()


def _timm(img: np.ndarray, name: str, args: tuple, interpolation: str = "bilinear") -> np.ndarray:
    """timm's op on a PIL image, back to numpy."""
    op = timm_aa.NAME_TO_OP[name]
    out = op(Image.fromarray(img), *args, fillcolor=FILL, resample=PIL_RESAMPLE[interpolation])
    return np.asarray(out)


def _timm_args(name: str, magnitude: float, seed: int) -> tuple:
    """timm's level -> argument map, its sign flip drawn from the global ``random`` seeded with ``seed``."""
    random.seed(seed)
    level_fn = timm_aa.LEVEL_TO_ARG[name]
    return level_fn(magnitude, timm_aa._HPARAMS_DEFAULT) if level_fn else ()


def _pillow_accepts(name: str, args: tuple) -> bool:
    """Recent Pillow refuses to posterize to 0 bits (see ``test_posterize_zero_bits_is_black``)."""
    return not (name.startswith("Posterize") and args[0] == 0)


def _abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


# --------------------------------------------------------------------------------------------------------------------
# Ops against timm


def test_the_ops_are_timms_in_timms_order() -> None:  # an op is drawn by its index
    assert list(RAND_TRANSFORMS) == timm_aa._RAND_TRANSFORMS
    assert list(RAND_INCREASING_TRANSFORMS) == timm_aa._RAND_INCREASING_TRANSFORMS


@pytest.mark.parametrize("name", RAND_TRANSFORMS + RAND_INCREASING_TRANSFORMS)
@pytest.mark.parametrize("magnitude", [*MAGNITUDES, 0.3, 5.5, 8.77])
def test_level_to_argument_matches_timm(name: str, magnitude: float) -> None:
    level_fn = _LEVEL_FNS[name]
    for seed in range(4):
        ours = () if level_fn is None else (level_fn(magnitude, random.Random(seed)),)
        assert ours == _timm_args(name, magnitude, seed)


@pytest.mark.parametrize("name", PIXEL_OPS)
def test_pixel_ops_are_bit_identical_to_timm(name: str) -> None:
    for img in IMAGES.values():
        for magnitude in MAGNITUDES:
            args = _timm_args(name, magnitude, seed=0)
            if not _pillow_accepts(name, args):
                continue
            ours = apply_op(img, name, *args)
            assert ours.dtype == np.uint8
            np.testing.assert_array_equal(ours, _timm(img, name, args), err_msg=f"{name} at M{magnitude}")


def test_posterize_zero_bits_is_black() -> None:
    assert not apply_op(IMAGES["noise"], "Posterize", 0).any()


def _check_warp(ours: np.ndarray, theirs: np.ndarray, interpolation: str, bicubic_mean: float) -> None:
    diff = _abs_diff(ours, theirs)
    if interpolation == "bilinear":
        assert diff.max() <= 1 and diff.mean() <= 0.1
    else:
        assert diff.mean() <= bicubic_mean


@pytest.mark.parametrize("name", WARP_OPS)
@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_warps_match_timm_within_interpolation_tolerance(name: str, interpolation: str) -> None:
    for image_name, img in IMAGES.items():
        for magnitude in MAGNITUDES:
            for seed in range(2):  # both signs
                args = _timm_args(name, magnitude, seed)
                ours = apply_op(img, name, *args, fill=FILL, interpolation=interpolation)
                bound = 5.0 if image_name == "noise" else 1.5
                _check_warp(ours, _timm(img, name, args, interpolation), interpolation, bound)


def test_warps_fill_exactly_the_pixels_pillow_fills() -> None:
    """A fill colour absent from the image marks the out-of-image region: it must coincide with Pillow's."""
    img, fill = np.full((37, 53, 3), 10, np.uint8), (200, 201, 202)
    for name in WARP_OPS:
        for interpolation, resample in PIL_RESAMPLE.items():
            for seed in range(2):
                args = _timm_args(name, 9, seed)
                ours = apply_op(img, name, *args, fill=fill, interpolation=interpolation)
                op = timm_aa.NAME_TO_OP[name]
                theirs = np.asarray(op(Image.fromarray(img), *args, fillcolor=fill, resample=resample))
                filled = (ours == fill).all(axis=2)
                assert filled.any()
                np.testing.assert_array_equal(filled, (theirs == fill).all(axis=2))


def test_ops_match_timm_on_real_cifar_images(cifar100_root: Path) -> None:
    with open(cifar100_root / "cifar-100-python" / "test", "rb") as f:
        data = pickle.load(f, encoding="bytes")[b"data"]
    images = data[:24].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    for index, img in enumerate(np.ascontiguousarray(images)):
        magnitude = (3, 6, 9, 10)[index % 4]
        for name in PIXEL_OPS + WARP_OPS:
            args = _timm_args(name, magnitude, seed=index)
            if name in PIXEL_OPS:
                if _pillow_accepts(name, args):
                    np.testing.assert_array_equal(apply_op(img, name, *args), _timm(img, name, args))
                continue
            for interpolation in PIL_RESAMPLE:
                ours = apply_op(img, name, *args, fill=FILL, interpolation=interpolation)
                _check_warp(ours, _timm(img, name, args, interpolation), interpolation, bicubic_mean=2.5)


# --------------------------------------------------------------------------------------------------------------------
# Config grammar


def _timm_policy(spec: str):
    return timm_aa.rand_augment_transform(spec, {"translate_const": 100, "img_mean": FILL})


@pytest.mark.parametrize(
    "spec",
    ["rand-m9-n2-mstd1.0", "rand", "rand-m7", "rand-n3-m5-p0.7", "rand-m9-mstd0.5-inc1", "rand-m15-mmax20-mstd101"],
)
def test_parser_agrees_with_timm(spec: str) -> None:
    ours, theirs = RandAugment.from_config(spec), _timm_policy(spec)
    op = theirs.ops[0]
    assert ours.ops == tuple(o.name for o in theirs.ops)
    assert (ours.num_ops, ours.magnitude, ours.op_prob) == (theirs.num_layers, op.magnitude, op.prob)
    assert (ours.magnitude_std, ours.magnitude_max) == (op.magnitude_std, op.magnitude_max)
    assert ours.op_weights is None and theirs.choice_weights is None


def test_parser_weighted_op_set_agrees_with_timm() -> None:
    ours, theirs = RandAugment.from_config("rand-m9-n2-tweights"), _timm_policy("rand-m9-n2-tweights")
    assert ours.ops == tuple(o.name for o in theirs.ops)
    weights = np.asarray(ours.op_weights) / sum(ours.op_weights)
    np.testing.assert_allclose(weights, theirs.choice_weights)


def test_parser_values() -> None:
    assert parse_config("rand-m9-n2-mstd1.0") == {
        "magnitude": 9,
        "num_ops": 2,
        "magnitude_std": 1.0,
        "ops": RAND_TRANSFORMS,
    }
    assert parse_config("rand-mstd200")["magnitude_std"] == math.inf
    assert parse_config("rand-inc1")["ops"] == RAND_INCREASING_TRANSFORMS
    assert parse_config("rand-inc0")["ops"] == RAND_TRANSFORMS


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("augmix-m9", "a RandAugment policy starts with 'rand'"),
        ("", "a RandAugment policy starts with 'rand'"),
        ("rand-x9", "its section 'x9' is not one of timm's: m<int> n<int>"),
        ("rand-m9-foo", "its section 'foo' is not one of timm's"),
        ("rand-M9", "its section 'M9' is not one of timm's"),  # timm skipped it, and trained at m10
        ("rand-mnine-n2", "its section 'mnine' is not one of timm's"),
        ("rand-m", r"its section 'm' needs m followed by a number \(int\)"),
        ("rand-m9.5", r"'m9.5' needs m followed by a number \(int\)"),
        ("rand-n2x", r"'n2x' needs n followed by a number \(int\)"),
        ("rand-mstd1.0.0", r"'mstd1.0.0' needs mstd followed by a number \(float\)"),
        ("rand-t3a", "unsupported op set 't3a'"),  # timm's, not ported
        ("rand-tfoo", "its op set 'tfoo' is not one of timm's: tweights, t3a, t3aw"),
    ],
)
def test_parser_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RandAugment.from_config(spec)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ops": ("Rotate", "Blur")},
        {"ops": ()},
        {"op_prob": 1.5},
        {"num_ops": -1},
        {"fill": (0, 0, 300)},
        {"interpolation": "lanczos"},
        {"ops": ("Rotate", "ShearX"), "op_weights": (1.0,)},
        {"ops": ("Rotate", "ShearX"), "op_weights": (1.0, 1.0), "num_ops": 3},
    ],
)
def test_constructor_validates(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        RandAugment(**kwargs)


def test_fill_from_mean_matches_timm_factory() -> None:
    assert fill_from_mean((0.485, 0.456, 0.406)) == FILL
    assert fill_from_mean((0.5071, 0.4865, 0.4409)) == (129, 124, 112)


@pytest.mark.parametrize("mean", [(0.485, 0.456, 0.406), (0.5071, 0.4867, 0.4408), (0.3053,) * 3, (1.01, 0.5, 0.0)])
def test_both_augmentation_stacks_fill_randaugment_with_one_colour(mean) -> None:
    """The arrays' RandAugment (albumentations) and the image files' (timm's, inside its ImageNet pipeline) fill
    with the same colour, :func:`fill_from_mean` of the mean; a mean above 1 is where the arrays' rounding without
    timm's clamp used to disagree (258, which RandAugment refused, against timm's 255)."""
    policy = "rand-m9-n2-mstd1.0"
    (arrays,) = [
        op for op in augmentation_ops(ArraysAugment(randaugment=policy), 32, mean) if isinstance(op, RandAugment)
    ]
    pipeline = file_transform(mean, (0.25,) * 3, 32, FilesAugment(randaugment=policy))
    files = [op for step in pipeline.transforms for op in getattr(step, "ops", ())]
    assert len(files) == len(RAND_TRANSFORMS)
    assert arrays.fill == fill_from_mean(mean)
    assert {op.kwargs["fillcolor"] for op in files} == {fill_from_mean(mean)}
    fill_randaugment(pipeline, (1, 2, 3))  # the colour timm's ops fill with is the one handed to them
    assert {op.kwargs["fillcolor"] for op in files} == {(1, 2, 3)}


# --------------------------------------------------------------------------------------------------------------------
# The transform: shapes, seeding, statistics


def test_output_dtype_shape_and_input_untouched() -> None:
    transform = A.Compose([RandAugment.from_config("rand-m9-n3-mstd1.0-p1.0")], seed=0)
    for img in IMAGES.values():
        before = img.copy()
        for _ in range(20):
            out = transform(image=img)["image"]
            assert out.dtype == np.uint8 and out.shape == img.shape and out.flags.c_contiguous
        np.testing.assert_array_equal(img, before)


def test_rejects_non_rgb_uint8() -> None:
    transform = RandAugment(p=1.0)
    with pytest.raises(ValueError, match="uint8 HWC RGB"):
        transform(image=np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="uint8 HWC RGB"):
        transform(image=np.zeros((8, 8), np.uint8))


def _run(seed: int, images: list[np.ndarray]) -> list[np.ndarray]:
    transform = A.Compose([RandAugment.from_config("rand-m9-n2-mstd1.0")], seed=seed)
    return [transform(image=img)["image"] for img in images]


def test_seeded_compose_is_reproducible() -> None:
    images = [IMAGES["smooth_square"]] * 30
    first, again, other = _run(7, images), _run(7, images), _run(8, images)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_reseeding_restarts_the_stream() -> None:
    transform = A.Compose([RandAugment.from_config()], seed=1)
    img = IMAGES["smooth_square"]
    transform.set_random_seed(123)
    first = [transform(image=img)["image"] for _ in range(10)]
    transform.set_random_seed(123)
    assert all(np.array_equal(a, transform(image=img)["image"]) for a in first)


def _draws(transform: RandAugment, count: int = 4000) -> list[list]:
    transform.set_random_seed(0)
    return [transform.get_params()["ops"] for _ in range(count)]


def test_n_ops_per_image_and_per_op_probability() -> None:
    always = _draws(RandAugment(magnitude=9, num_ops=3, op_prob=1.0))
    assert all(len(ops) == 3 for ops in always)
    counts = np.unique([call.name for ops in always for call in ops], return_counts=True)[1]
    assert len(counts) == len(RAND_TRANSFORMS)
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()  # uniform choice
    halved = _draws(RandAugment(magnitude=9, num_ops=2, op_prob=0.5))
    assert abs(np.mean([len(ops) for ops in halved]) - 1.0) < 0.05


def _rotate_magnitudes(**kwargs) -> np.ndarray:
    """Magnitudes recovered from sampled Rotate angles (30 degrees per 10 magnitude units)."""
    draws = _draws(RandAugment(ops=("Rotate",), num_ops=1, op_prob=1.0, **kwargs))
    return np.array([ops[0].arg for ops in draws]) / 3.0


def test_magnitude_noise_sign_flips_and_clipping() -> None:
    signed = _rotate_magnitudes(magnitude=9, magnitude_std=1.0)
    magnitude = np.abs(signed)
    # N(9, 1) clipped to [0, 10]: mean 9 - (phi(1) - (1 - Phi(1))) = 8.917, P(clipped) = 0.159
    assert abs(magnitude.mean() - 8.917) < 0.05
    assert 0.8 < magnitude.std() < 0.95
    assert magnitude.max() == pytest.approx(10.0)
    assert abs((magnitude > 10 - 1e-9).mean() - 0.159) < 0.03
    assert abs((signed > 0).mean() - 0.5) < 0.05
    np.testing.assert_allclose(np.abs(_rotate_magnitudes(magnitude=9)), 9.0)
    uniform = np.abs(_rotate_magnitudes(magnitude=9, magnitude_std=math.inf))
    assert abs(uniform.mean() - 4.5) < 0.2 and uniform.max() <= 9.0
    np.testing.assert_allclose(np.abs(_rotate_magnitudes(magnitude=15)), 10.0)
    np.testing.assert_allclose(np.abs(_rotate_magnitudes(magnitude=15, magnitude_max=20)), 15.0)


def test_random_interpolation_for_warps_only() -> None:
    draws = [call for ops in _draws(RandAugment(magnitude=9, num_ops=2, op_prob=1.0)) for call in ops]
    warps = [call.interpolation for call in draws if call.name in WARP_OPS]
    assert abs(np.mean([i == "bicubic" for i in warps]) - 0.5) < 0.05 and set(warps) == {"bilinear", "bicubic"}
    fixed = _draws(RandAugment(ops=("ShearX",), num_ops=1, op_prob=1.0, interpolation="bicubic"), count=50)
    assert {ops[0].interpolation for ops in fixed} == {"bicubic"}


def test_weighted_choice_is_without_replacement_and_follows_weights() -> None:
    draws = _draws(RandAugment.from_config("rand-m9-n2-p1.0-tweights"))
    assert all(len({call.name for call in ops}) == 2 for ops in draws)
    names = [call.name for ops in draws for call in ops]
    assert max(set(names), key=names.count) == "Rotate"
    assert names.count("Invert") < names.count("ShearX") / 10
    assert set(names) <= set(RAND_WEIGHTS)


def test_serialises_and_pickles() -> None:
    transform = A.Compose([RandAugment.from_config("rand-m7-n3-mstd0.5", fill=(1, 2, 3))], seed=5)
    for clone in (A.from_dict(A.to_dict(transform)), pickle.loads(pickle.dumps(transform))):
        ra = clone.transforms[0]
        assert (ra.magnitude, ra.num_ops, ra.magnitude_std, ra.fill) == (7, 3, 0.5, (1, 2, 3))
