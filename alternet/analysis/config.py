"""Typed analysis configs: each analysis's budgets are a :class:`~alternet.typed.Section`, checked as every other
config section is (``analysis.fourier.images=-1 is invalid: must be >= 1``).

Every budget's default lives in one place, the packaged ``conf/analysis/<name>.yaml`` (also Hydra's
``analysis=<name>`` option); the dataclasses declare the keys and their types only, and :func:`parse_config`
fills whatever the caller leaves out from that file.
"""

from __future__ import annotations

from collections.abc import Mapping
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
