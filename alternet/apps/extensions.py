"""What a user plugs in from the command line without changing alternet, none of it stored in a checkpoint:

- ``imports=[my_pkg.models, ...]``: modules imported before the config is checked
  (:func:`alternet.runs.records.import_modules`), so that what they register is known to the checks and the
  builders: a timm ``@register_model`` (``model=timm model.name=NAME``), a data module
  (:func:`alternet.data.register_datamodule`, ``data.name=NAME``; its config options through
  ``hydra.searchpath=[pkg://my_pkg.conf]``), an analysis. The run records them (its config.yaml), and evaluating
  or exporting it imports them again (:func:`alternet.runs.records.import_recorded`).
- ``callbacks.extra`` and ``logger.extra``: lists of Lightning callbacks and loggers, each a ``_target_`` with its
  arguments, built by ``hydra.utils.instantiate`` for the run (a callback's ``state_dict``, if it has one, is
  saved in checkpoints by Lightning as for any callback: keep it to plain values).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate

from ..errors import ConfigValueError, one_line


def check_targets(entries: Sequence[Any] | None, key: str) -> None:
    """Every entry of ``key`` (``callbacks.extra``, ``logger.extra``) names an importable ``_target_``."""
    for index, entry in enumerate(entries or ()):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("_target_"), str):
            raise ConfigValueError(
                f"{key}[{index}] needs a _target_: e.g. '{key}=[{{_target_: my_pkg.MyClass, arg: 1}}]'"
            )
        hydra_log = logging.getLogger("hydra.utils")  # get_object logs its error as it raises it: said here, once
        disabled, hydra_log.disabled = hydra_log.disabled, True
        try:
            get_object(entry["_target_"])
        except Exception as error:  # ImportError, AttributeError, or the module's own error on import
            raise ConfigValueError(
                f"{key}[{index}]._target_={entry['_target_']} cannot be imported "
                f"({type(error).__name__}: {one_line(error)})"
            ) from None
        finally:
            hydra_log.disabled = disabled


def build_extra(entries: Sequence[Mapping[str, Any]] | None, key: str, kind: type) -> list[Any]:
    """The objects of ``key``'s entries, each checked to be a ``kind`` (Lightning's Callback or Logger)."""
    built = []
    for index, entry in enumerate(entries or ()):
        try:
            made = instantiate(dict(entry))
        except InstantiationException as error:
            raise ConfigValueError(f"{key}[{index}] ({entry['_target_']}) cannot be built: {one_line(error)}") from None
        if not isinstance(made, kind):
            raise ConfigValueError(
                f"{key}[{index}] built {type(made).__qualname__}, not a Lightning {kind.__name__}: check its _target_"
            )
        built.append(made)
    return built
