"""``model``: the config section of each model family, derived from its spec, chosen by ``model.name``
(:func:`model_section`). How a spec's fields become the section's keys (each optional, ``null`` for the zoo's value):
docs/development.md, "Adding a model family". A tuple field is a list in the config. Any other timm model
(``model=timm model.name=NAME``) is an open section: the keys it does not declare (``+model.drop_rate=0.1``) are its
constructor's, checked against that constructor when the model is built (:func:`alternet.models.factory.model_args`).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import AlternetError, one_of
from ..typed import Section, build
from .named import SPECS, base_name, spec_kwargs
from .specs import FAMILY_SPECS, ModelSpec, spec_with

BUILDUP_RULES = ("warn", "off")
# keys that choose how a model computes, not what: left out of its label
IMPLEMENTATION_KEYS = ("fused_attn",)
# the model's name, where its starting weights come from, and whether to warn about the paper's build-up rules
NOT_MODEL_ARGS = ("name", "pretrained", "buildup_rules", "extra")


@dataclass(kw_only=True)
class ModelConfig(Section):
    """Every family's keys: the model's name and its starting weights."""

    SPEC: ClassVar[type[ModelSpec] | None] = None  # the family's spec (None: any timm model)

    name: str
    pretrained: bool | str | None  # true: timm's weights for the name; or an export, checkpoint, run or W&B artifact

    def check(self) -> None:
        if self.SPEC is not None:
            self.SPEC.check_config(self)

    def arguments(self) -> dict[str, Any]:
        """The ``create_model`` keywords the config sets (its non-null keys but the name and the weights)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | getattr(self, "extra", {})
        return {k: v for k, v in values.items() if k not in NOT_MODEL_ARGS and v is not None}

    def check_size(self, img_size: int) -> None:
        """The family's hard constraints at the data's image size (its spec's ``check``: the layout against the
        widths, heads and windows ...), torch-free, before anything is built."""
        arch = base_name(self.name)
        if arch in SPECS:
            spec_with(SPECS[arch], self.arguments()).check(img_size)

    def changed(self) -> dict[str, Any]:
        """The keys this config sets to other values than its named model's (``model=byob
        model.self_attn_layer=halo`` builds under botnet_cifar's name); for a timm model, every key it sets."""
        named = {key: _tupled(value) for key, value in spec_kwargs(base_name(self.name)).items()}
        return {
            k: v
            for k, v in self.arguments().items()
            if k not in IMPLEMENTATION_KEYS and (k not in named or named[k] != _tupled(v))
        }

    def label(self) -> str:
        """What the run is called where it is recorded (metrics.json, W&B, the console's last lines): the model's
        name, and, where the config changes its architecture, the keys it changes: ``botnet_cifar[self_attn_layer=
        halo]``, ``alternet_r50[layout=C|CM|CM|CM]``."""
        changed = ", ".join(f"{k}={_shown(v)}" for k, v in self.changed().items())
        return f"{self.name}[{changed}]" if changed else self.name

    def built(self) -> dict[str, Any]:
        """The architecture this config builds: the zoo's keywords for its name (none for a timm model) under the
        keys it sets."""
        return spec_kwargs(base_name(self.name)) | self.arguments()


@dataclass(kw_only=True)
class LayoutModel(ModelConfig):
    """A family built from a layout of Conv and MSA blocks, whose build-up rules the config checks warn about."""

    layout: str | None = None  # stages separated by |: C = Conv block, M = MSA block
    buildup_rules: str  # warn | off (a deliberate contrast)

    def check(self) -> None:
        one_of("buildup_rules", self.buildup_rules, BUILDUP_RULES)
        super().check()


@dataclass(kw_only=True)
class TimmModel(ModelConfig):
    """Any other timm model (``model/timm.yaml``): an open section, its other keys its constructor's (its name is
    checked against timm's registry with the run's checks, :func:`alternet.apps.checks.check_model`)."""

    OPEN = True
    extra: dict[str, Any] = field(default_factory=dict)  # +model.KEY=VALUE: the constructor's own keywords


def _tupled(value: Any) -> Any:
    """A config's lists as the specs' tuples, to compare them."""
    return tuple(_tupled(item) for item in value) if isinstance(value, (list, tuple)) else value


def _shown(value: Any) -> str:
    """A key's value as an override writes it: ``[2,4,8]``, ``halo``."""
    if isinstance(value, (list, tuple)):
        return f"[{','.join(_shown(item) for item in value)}]"
    return str(value)


def _as_config(hint: Any) -> Any:
    """A spec field's type as a config's: a tuple is a list (``tuple[int, ...]`` -> ``list[int]``)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return functools.reduce(operator.or_, (_as_config(option) for option in typing.get_args(hint)))
    return list[typing.get_args(hint)[0]] if typing.get_origin(hint) is tuple else hint


def section_of(spec: type[ModelSpec]) -> type[ModelConfig]:
    """The config section of a family: each of the spec's fields a config sets, optional (null: the zoo's value),
    below :class:`LayoutModel` for a family with a layout."""
    hints = typing.get_type_hints(spec)
    base = LayoutModel if "layout" in hints else ModelConfig
    inherited = {f.name for f in dataclasses.fields(base)}
    keys = [
        (f.name, _as_config(hints[f.name]) | None, field(default=None))
        for f in dataclasses.fields(spec)  # type: ignore[arg-type]
        if f.name not in inherited and f.name not in spec.config_only
    ]
    name = spec.__name__.removesuffix("Spec") + "Model"
    doc = f"The section of ``{spec.__name__}``'s family: its keys, each null for the zoo's value."
    section = dataclasses.make_dataclass(name, keys, bases=(base,), kw_only=True, namespace={"SPEC": spec})
    section.__module__, section.__doc__ = __name__, doc
    return section


SECTIONS: dict[type[ModelSpec], type[ModelConfig]] = {spec: section_of(spec) for spec in FAMILY_SPECS}
globals().update({section.__name__: section for section in SECTIONS.values()})  # importable and picklable by name


def model_section(values: Mapping[str, Any]) -> type[ModelConfig]:
    """The section a model config is typed by: its zoo family's, or :class:`TimmModel` for any other name."""
    name = values.get("name")
    arch = base_name(name) if isinstance(name, str) and name != "???" else None
    return SECTIONS[type(SPECS[arch])] if arch in SPECS else TimmModel


def model_config(values: Mapping[str, Any]) -> ModelConfig:
    """A model section (as composed, or as a checkpoint keeps it) as its family's typed object, checked."""
    return build(model_section(values), values, "model.")


def recorded_label(values: Any, architecture: str) -> str:
    """The label (:meth:`ModelConfig.label`) of the model section a checkpoint or an export recorded (``values``),
    else the ``architecture``'s name (no section kept, one of another architecture, or one this version no longer
    types)."""
    if isinstance(values, Mapping) and values.get("name") == architecture:
        try:
            return model_config(values).label()
        except AlternetError:
            pass
    return architecture
