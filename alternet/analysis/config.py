"""Typed analysis configs: each analysis's budgets are a :class:`~alternet.typed.Section`, checked as every other
config section is (``analysis.fourier.images=-1 is invalid: must be >= 1``).

Every budget's default lives in one place, the packaged ``conf/analysis/<name>.yaml`` (also Hydra's
``analysis=<name>`` option); the dataclasses declare the keys and their types only, and :func:`parse_config`
fills whatever the caller leaves out from that file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar, TypeVar

import yaml

from ..errors import ConfigValueError, suggest
from ..typed import Section, build, integer
from .errors import AnalysisConfigError

C = TypeVar("C", bound=Section)


def default_values(analysis: str) -> dict[str, Any]:
    """The budgets of ``conf/analysis/<analysis>.yaml`` (``{}`` for a name without a packaged file)."""
    path = resources.files("alternet.conf") / "analysis" / f"{analysis}.yaml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def parse_config(cls: type[C], values: Mapping[str, Any] | None, analysis: str) -> C:
    """``cls`` over the packaged defaults of ``analysis`` (:func:`default_values`); an unknown key, a value of the
    wrong type or out of range raises :class:`AnalysisConfigError` naming the full key (``analysis.NAME.KEY``)."""
    try:
        return build(cls, {**default_values(analysis), **(values or {})}, f"analysis.{analysis}.")
    except ConfigValueError as error:
        raise AnalysisConfigError(str(error)) from None


class Budgets(Section):
    """An analysis's budgets: an unknown key is answered with the valid ones."""

    @classmethod
    def unknown_hint(cls, key: str, prefix: str) -> str:
        return f"{suggest(key, cls.keys())}; valid keys: {cls.keys()}"


@dataclass(kw_only=True)
class SampleConfig(Budgets):
    """A fixed, seeded sample of a data split, processed in batches."""

    analysis: ClassVar[str] = "sample"

    images: int
    batch_size: int
    seed: int

    def check(self) -> None:
        self.require("images", integer(1), "must be >= 1")
        self.require("batch_size", integer(1), "must be >= 1")


# what the loss is measured on: the training loss (the recipe's mixup/cutmix and label smoothing, soft-target
# cross-entropy, as HDVW's landscapes) or the sampled images' own labels (cross-entropy with label_smoothing)
TARGETS = ("training", "labels")
# the L2 term: HDVW's wd * sum ||w|| (unsquared, every trainable parameter), 0.5 * wd * sum ||w||^2 over the
# parameters training decays (the decay's own objective for SGD), or none
REGULARISERS = ("hdvw", "decay_squared", "none")


@dataclass(kw_only=True)
class ObjectiveConfig(Budgets):
    """A seeded sample of augmented training images and the loss measured on it (Hessian, landscape).

    ``batch_size: null`` is the checkpoint recipe's batch size: mixup/cutmix mix the images of one batch, so
    the batches are those training saw.
    """

    analysis: ClassVar[str] = "objective"

    images: int
    batch_size: int | None
    seed: int
    targets: str
    regulariser: str
    label_smoothing: float

    def check(self) -> None:
        self.require("images", integer(1), "must be >= 1")
        self.require("batch_size", integer(1), "must be >= 1 or null (the recipe's)")
        self.one_of("targets", TARGETS)
        self.one_of("regulariser", REGULARISERS)
        self.require("label_smoothing", lambda v: 0.0 <= v < 1.0, "must be in [0, 1)")
        if self.targets != "labels" and self.label_smoothing != 0.0:
            raise ConfigValueError(
                "label_smoothing applies to targets=labels only (targets=training uses the recipe's)"
            )


HIGH_FREQUENCY = ("hdvw", "nyquist")
BN_MODES = ("eval", "batch")
ESTIMATORS = {"unbiased": 1, "population": 0}  # the divisor's correction: H*W - correction
METHODS = ("lanczos", "power")
NORMALISATIONS = ("hdvw", "filter")
NLL_FORMS = ("log_softmax", "log_of_softmax")
BAND_KINDS = ("hdvw", "rings")


@dataclass(kw_only=True)
class FourierConfig(SampleConfig):
    analysis: ClassVar[str] = "fourier"

    high_frequency: str
    bn_mode: str

    def check(self) -> None:
        super().check()
        self.one_of("high_frequency", HIGH_FREQUENCY)
        self.one_of("bn_mode", BN_MODES)


@dataclass(kw_only=True)
class VarianceConfig(SampleConfig):
    analysis: ClassVar[str] = "variance"

    estimator: str

    def check(self) -> None:
        super().check()
        self.one_of("estimator", ESTIMATORS)


@dataclass(kw_only=True)
class LesionConfig(SampleConfig):
    analysis: ClassVar[str] = "lesion"


@dataclass(kw_only=True)
class AttentionConfig(SampleConfig):
    analysis: ClassVar[str] = "attention"


@dataclass(kw_only=True)
class HessianConfig(ObjectiveConfig):
    analysis: ClassVar[str] = "hessian"

    minibatches: int
    minibatch_steps: int
    per_minibatch: int
    k: int
    method: str
    iterations: int
    tol: float
    slq_runs: int

    def check(self) -> None:
        super().check()
        self.require("minibatches", integer(0), "must be >= 0")
        self.require("minibatch_steps", integer(1), "must be >= 1")
        self.require("per_minibatch", lambda v: 1 <= v <= self.minibatch_steps, "must be in [1, minibatch_steps]")
        self.one_of("method", METHODS)
        self.require("k", integer(1), "must be >= 1")
        self.require("iterations", integer(1), "must be >= 1")
        self.require("slq_runs", integer(0), "must be >= 0")
        if self.method == "lanczos":
            self.require("iterations", lambda v: v >= self.k, f"method=lanczos needs iterations >= k ({self.k})")
            self.require("slq_runs", integer(1), "method=lanczos needs slq_runs >= 1 (its first run gives the top-k)")
        self.require("tol", lambda v: v > 0, "must be > 0")


@dataclass(kw_only=True)
class LandscapeConfig(ObjectiveConfig):
    analysis: ClassVar[str] = "landscape"

    span: float
    points_1d: int
    points_2d: int
    normalisation: str
    redraw: bool
    nll: str
    clip: float | None

    def check(self) -> None:
        super().check()
        self.require("span", lambda v: v > 0, "must be > 0")
        for key in ("points_1d", "points_2d"):
            self.require(key, lambda v: v >= 3 and v % 2 == 1, "must be odd and >= 3 (to include 0)")
        self.one_of("normalisation", NORMALISATIONS)
        self.one_of("nll", NLL_FORMS)
        self.require("clip", lambda v: v > 0, "must be > 0 or null")


@dataclass(kw_only=True)
class NoiseConfig(SampleConfig):
    analysis: ClassVar[str] = "noise"

    bands: str
    rings: int
    max_frequency: float
    rms: float

    def check(self) -> None:
        super().check()
        self.one_of("bands", BAND_KINDS)
        self.require("rings", integer(1), "must be >= 1")
        self.require("max_frequency", lambda v: 0 < v <= math.sqrt(2), "must be in (0, sqrt(2)] (units of pi)")
        self.require("rms", lambda v: v > 0, "must be > 0")


CONFIGS: dict[str, type[Budgets]] = {  # each analysis's budgets, by its name (analysis=[NAME,...]), in run order
    "fourier": FourierConfig,
    "variance": VarianceConfig,
    "lesion": LesionConfig,
    "attention": AttentionConfig,
    "hessian": HessianConfig,
    "landscape": LandscapeConfig,
    "noise": NoiseConfig,
}
ANALYSES = tuple(CONFIGS)


def parse_configs(names: Sequence[str], configs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Check every name and config before anything runs; return the typed configs."""
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        raise AnalysisConfigError(f"unknown analysis name(s) {unknown}; valid names: {list(CONFIGS)}")
    return {name: parse_config(CONFIGS[name], configs.get(name), name) for name in names}
