"""Typed config sections: a dataclass declares a section's keys and their types, its rules sit beside the fields,
and the YAML under ``conf`` holds every default.

A section is a :class:`Section` dataclass (keyword-only fields, no defaults but for keys only some configs set).
Hydra composes ``train.yaml`` and ``evaluate.yaml`` against them (their schemas, :mod:`alternet.apps.config`), so an
unknown key or a value of the wrong type stops at composition. :func:`build` then makes the objects from the
composed values: each section's :meth:`Section.check` runs as it is made (``__post_init__``), and a failure names
the full key in one line (``recipe.optimizer.lr=0 is invalid: must be > 0``).

"Off" is a value inside a section a user switches on key by key (``recipe.ema.decay: null``), so it is typed as any
other; one set whole or not at all is ``X | None`` (an augmentation's crop or cutout: ``cutout={holes: 1}``; a key
set below a null section is refused in one line saying so). ``logger.wandb`` is ``Any`` with its class in the
field's metadata, ``field(metadata={SECTION: WandbSettings})``: ``logger=wandb`` fills it, and OmegaConf 2.3 fails
with an assertion, not an error, when a key is set below a null typed node there. A section whose keys
depend on a value in it (``data`` on ``data.name``, ``model`` on ``model.name``: a family's keys, a user's registered
data set) names a function of its values instead, which returns the class; :func:`build` then types each value
against its field's annotation as Hydra does for the others. A section with ``OPEN = True`` keeps the keys it does
not declare in its ``extra`` field (any timm model's own keywords, ``+model.drop_rate=0.1``).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, TypeVar

from . import errors
from .errors import ConfigValueError, is_integer, suggest

S = TypeVar("S", bound="Section")
SECTION = "section"  # the metadata key of a nullable sub-section's class


@dataclasses.dataclass(kw_only=True)
class Section:
    """Base of typed sections: :meth:`check` runs once the values are in (also for a section made in Python)."""

    OPEN: ClassVar[bool] = False  # True: keys the section does not declare are kept in its ``extra`` field

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """The section's rules: ranges, choices and the rules across its fields (:meth:`require`, :meth:`one_of`)."""

    @classmethod
    def keys(cls) -> list[str]:
        """The section's keys, in their order."""
        return [f.name for f in dataclasses.fields(cls) if not (cls.OPEN and f.name == "extra")]

    @classmethod
    def unknown_hint(cls, key: str, prefix: str) -> str:
        """What the message about an unknown ``key`` adds (the closest key; a section may say where it belongs)."""
        return suggest(key, cls.keys())

    def to_dict(self) -> dict[str, Any]:
        """The section as its YAML spells it, in plain values (a checkpoint keeps it, ``weights_only``-loadable; an
        open section's other keys beside its own)."""
        values = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        extra = values.pop("extra") if self.OPEN else {}
        return values | extra

    def require(self, key: str, ok: Callable[[Any], Any], expectation: str) -> None:
        """:func:`alternet.errors.require` on the key's value; a null value is the key's own default behaviour and
        passes."""
        if (value := getattr(self, key)) is not None:
            errors.require(key, value, ok, expectation, shown)

    def one_of(self, key: str, choices: Iterable[Any]) -> None:
        """:func:`alternet.errors.one_of` on the key's value, unless it is null."""
        if (value := getattr(self, key)) is not None:
            errors.one_of(key, value, choices, shown)


def _plain(value: Any) -> Any:
    if isinstance(value, Section):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return [_plain(v) for v in value] if isinstance(value, list | tuple) else value


def shown(value: Any) -> str:
    """A value as the user typed it: a float key holds ``1.0`` for a typed ``1``."""
    return format(value, "g") if isinstance(value, float) else repr(value)


def integer(minimum: int) -> Callable[[Any], bool]:
    return lambda value: is_integer(value, minimum)


def build(cls: type[S], values: Mapping[str, Any], prefix: str = "") -> S:
    """``cls`` made from a composed section (plain values), sub-sections first; any failure raises
    :class:`ConfigValueError` naming the full key (``prefix``: the section's place, ``recipe.``). A null where the
    field's type has none is refused: a library taking the section's set keys would fall back on its own default."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [key for key in values if key not in names]
    kwargs: dict[str, Any] = {}
    if unknown and cls.OPEN:
        kwargs["extra"] = {key: values[key] for key in unknown}
    elif unknown:
        where = f"of {prefix.rstrip('.')}" if prefix else "at the top level"
        raise ConfigValueError(f"{prefix}{unknown[0]} is not a key {where}{cls.unknown_hint(unknown[0], prefix)}")
    for field in dataclasses.fields(cls):
        key = f"{prefix}{field.name}"
        if field.name not in values:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ConfigValueError(f"{key} must be set")
            continue
        value = values[field.name]
        if value is None and not conforms(None, hints[field.name]) and SECTION not in field.metadata:
            raise ConfigValueError(f"{key}=null is invalid: must be {described(hints[field.name])}")
        section = field.metadata.get(SECTION) or section_type(hints[field.name])
        if section is not None and value is not None:
            if not isinstance(value, Mapping):
                shape = f"a section of keys {section.keys()}" if isinstance(section, type) else "a section of keys"
                raise ConfigValueError(f"{key}={value!r} is invalid: {shape} (or null)")
            if not isinstance(section, type):  # chosen by its values (the data set, the model family)
                section = section(value)
            value = build(section, value, f"{key}.")
        elif section is None and value is not None and not conforms(value, hints[field.name]):
            typed = repr(value) if isinstance(value, float) else shown(value)  # 1.0 for an integer key, not "1"
            raise ConfigValueError(f"{key}={typed} is invalid: must be {described(hints[field.name])}")
        kwargs[field.name] = value
    try:
        return cls(**kwargs)
    except ConfigValueError as error:  # the section's own check: a message naming one of its keys gets its place
        message, key = str(error), re.match(r"\w+", str(error))
        if prefix and key is not None and key.group() in [*names, *unknown] and not message.startswith(prefix):
            raise type(error)(f"{prefix}{message}") from None
        raise


NAMES = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}


def conforms(value: Any, hint: Any) -> bool:
    """Whether a plain value (as composed or read from JSON) is of an annotation's type: the scalars, ``X | None``,
    lists and tuples of them, mappings; anything else (``Any``, a class) is not checked here."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, types.UnionType) or origin is typing.Union:
        return any(conforms(value, option) for option in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # a boolean is no integer
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # a JSON integer is a number too; inf and nan are no setting's value (lr=inf: NaN weights)
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, Section):  # never null: "off" is a value inside it
        return value is not None
    if origin in (list, tuple):
        return isinstance(value, list | tuple) and all(conforms(item, args[0]) for item in value)
    if origin is dict:
        return isinstance(value, Mapping)
    return True


def described(hint: Any) -> str:
    """An annotation in words, for ``must be ...``: ``int | list[int] | None`` -> ``an integer or a list of
    integers``."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return " or ".join(described(arg) for arg in args)
    if typing.get_origin(hint) in (list, tuple):
        return {int: "a list of integers", float: "a list of numbers", str: "a list of strings"}.get(args[0], "a list")
    section = typing.get_origin(hint) is dict or (isinstance(hint, type) and issubclass(hint, Section))
    return NAMES.get(hint, "a section of keys" if section else str(hint))


def section_type(hint: Any) -> type[Section] | None:
    """The :class:`Section` class a field's annotation names (also as ``X | None``)."""
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    options = typing.get_args(hint) if union else (hint,)
    return next((o for o in options if isinstance(o, type) and issubclass(o, Section)), None)
