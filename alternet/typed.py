"""Typed config sections: a dataclass declares a section's keys and their types, its rules sit beside the fields,
and the YAML under ``alternet/conf`` holds every default.

A section is a :class:`Section` dataclass (keyword-only fields, no defaults but for keys only some configs set).
Hydra composes ``train.yaml`` and ``evaluate.yaml`` against them (their schemas, :mod:`alternet.apps.config`), so an
unknown key or a value of the wrong type stops at composition. :func:`build` then makes the objects from the
composed values: each section's :meth:`Section.check` runs as it is made (``__post_init__``), and a failure names
the full key in one line (``recipe.optimizer.lr=0 is invalid: must be > 0``).

A sub-section that may be null (``recipe.ema``, ``recipe.mixup`` ...) is declared ``Any`` with its class in the
field's metadata, ``field(metadata={SECTION: EmaConfig})``: OmegaConf 2.3 cannot set a key below a null typed node
from the command line, and ``+recipe.ema.decay=0.9999`` must stay the way to switch one on.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from .errors import ConfigValueError, is_integer, suggest

S = TypeVar("S", bound="Section")
SECTION = "section"  # the metadata key of a nullable sub-section's class
MISSING = "???"


@dataclasses.dataclass(kw_only=True)
class Section:
    """Base of typed sections: :meth:`check` runs once the values are in (also for a section made in Python)."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The section's rules: ranges, choices and the rules across its fields (:meth:`require`, :meth:`one_of`)."""

    def require(self, key: str, ok: Callable[[Any], Any], expectation: str) -> None:
        """``KEY=VALUE is invalid: EXPECTATION`` unless ``ok(value)`` holds; a null value is the key's own default
        behaviour and passes (a comparison that cannot be made fails)."""
        value = getattr(self, key)
        if value is None:
            return
        try:
            passed = ok(value)
        except (TypeError, ValueError):
            passed = False
        if not passed:
            raise ConfigValueError(f"{key}={shown(value)} is invalid: {expectation}")

    def one_of(self, key: str, choices: Iterable[Any]) -> None:
        """``KEY=VALUE is not one of [...]`` (with the closest) unless the value, as typed, is one of ``choices``."""
        value, choices = getattr(self, key), list(choices)
        if value is not None and str(value) not in [str(c) for c in choices]:
            raise ConfigValueError(f"{key}={shown(value)} is not one of {choices}{suggest(value, choices)}")


def shown(value: Any) -> str:
    """A value as the user typed it: a float key holds ``1.0`` for a typed ``1``."""
    return format(value, "g") if isinstance(value, float) else repr(value)


def integer(minimum: int) -> Callable[[Any], bool]:
    return lambda value: is_integer(value, minimum)


def build(cls: type[S], values: Mapping[str, Any], prefix: str = "") -> S:
    """``cls`` made from a composed section (plain values), sub-sections first; any failure raises
    :class:`ConfigValueError` naming the full key (``prefix``: the section's place, ``recipe.``)."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [key for key in values if key not in names]
    if unknown:
        where = f"of {prefix.rstrip('.')}" if prefix else "at the top level"
        raise ConfigValueError(f"{prefix}{unknown[0]} is not a key {where}{suggest(unknown[0], names)}")
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        if field.name not in values:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigValueError(f"{key} must be set")
            continue
        value = values[field.name]
        if isinstance(value, str) and value == MISSING:
            raise ConfigValueError(f"{key} must be set")
        section = field.metadata.get(SECTION) or _section_type(hints[field.name])
        if section is not None and value is not None:
            if not isinstance(value, Mapping):
                raise ConfigValueError(f"{key}={value!r} is invalid: a section of keys {_keys(section)} (or null)")
            value = build(section, value, f"{key}.")
        kwargs[field.name] = value
    try:
        return cls(**kwargs)
    except ConfigValueError as error:  # the section's own check: its messages begin with the key in the section
        message = str(error)
        raise ConfigValueError(message if message.startswith(prefix) else f"{prefix}{message}") from None


def _section_type(hint: Any) -> type[Section] | None:
    """The :class:`Section` class a field's annotation names (also as ``X | None``)."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    options = typing.get_args(hint) if union else (hint,)
    return next((o for o in options if isinstance(o, type) and issubclass(o, Section)), None)


def _keys(section: type[Section]) -> list[str]:
    return [f.name for f in dataclasses.fields(section)]
