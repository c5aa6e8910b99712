"""Hydra's composition failures as the one ``error:`` line every command ends on.

Hydra reports a bad override, an unknown key, a value of the wrong type or an unknown config option in several lines
of its own (and with its stack trace under ``HYDRA_FULL_ERROR=1``). :func:`one_line_composition_errors` asks Hydra
to raise them instead, through its documented ``HYDRA_FULL_ERROR`` switch, and words each as one line naming the full
key and what to type instead. A user who set ``HYDRA_FULL_ERROR`` gets Hydra's own report, as Hydra documents.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import sys
import typing
import warnings
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from hydra.errors import CompactHydraException, HydraException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigKeyError, ConfigTypeError, ValidationError

from ...errors import AlternetWarning, exit_with_error, suggest
from ...runs.records import hydra_quoted
from ..config import kept_key, schema_section

FULL_ERROR = "HYDRA_FULL_ERROR"
SHOWN_OPTIONS = 12  # a group with more options points to --help instead of listing them
TYPES = {"Float": "a number", "Integer": "an integer", "Boolean": "true or false", "String": "a string"}


@contextlib.contextmanager
def one_line_composition_errors(command: str) -> Iterator[None]:
    """Run a Hydra app (``command``: ``train`` or ``evaluate``) so that a config it cannot compose ends the command
    on one ``error:`` line (:func:`composition_error`), with nothing written."""
    if (missing := missing_searchpath(sys.argv[1:])) is not None:
        exit_with_error(missing)
    if os.environ.get(FULL_ERROR):
        yield
        return
    os.environ[FULL_ERROR] = "1"
    try:
        yield
    except CompactHydraException as error:
        exit_with_error(composition_error(error, command))
    except yaml.YAMLError as error:  # a config file of the user's that is not valid YAML (its indentation, say)
        mark = getattr(error, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a config file"
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        exit_with_error(f"{where} is not valid YAML ({problem}): fix that line of the file")
    except ValueError as error:
        if (said := null_group_error(error, sys.argv[1:], command)) is None:
            raise
        exit_with_error(said)
    except HydraException as error:  # the basic sweeper given interval(): Hydra's traceback
        if "does not support sweep type" not in str(error):
            raise
        exit_with_error(
            f"{error}: interval() needs a sweeper that samples, e.g. hydra/sweeper=optuna (pip install "
            "hydra-optuna-sweeper); the basic sweeper takes lists, range(), choice() and glob()"
        )
    finally:
        os.environ.pop(FULL_ERROR, None)


def missing_searchpath(overrides: Sequence[str]) -> str | None:
    """A ``hydra.searchpath`` folder (``file://DIR``) that is not there, in one line: Hydra warned in two lines of its
    own and went on, and an option the user kept there was then "not an option"."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") != "hydra.searchpath":
            continue
        for folder in re.findall(r"file://([^,\]\s'\"]+)", value):
            if not Path(folder).expanduser().is_dir():
                return (
                    f"hydra.searchpath names file://{folder}, which is not a folder: give the folder that holds your "
                    "config groups (e.g. file://$PWD/conf, with experiment/ and model/ inside)"
                )
    return None


def composition_error(error: CompactHydraException, command: str) -> str:
    """What went wrong in one line, the full key or option named, with the closest spelling where there is one."""
    cause = error.__cause__
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        return _unknown_option(error.missing_cfg_file, error.options, command)
    if isinstance(error, OverrideParseException):
        reason = next(line for line in str(error).splitlines() if not line.startswith(("Error parsing", "See ")))
        reason = reason.split(": ", 1)[-1] if reason.startswith("LexerNoViableAltException") else reason
        key, equals, value = error.override.partition("=")
        quoted = f"{key}='{hydra_quoted(value)}'"
        hint = (
            "quote a value holding spaces, symbols or non-ASCII letters: "
            f"{quoted} (in the shell: {shlex.quote(quoted)})"
            if equals and key and (not value.isascii() or any(c in value for c in " ()[]{},:=!'\"~"))
            else "overrides are KEY=VALUE or GROUP=OPTION"
        )
        said = "" if reason.strip() == error.override else f": {reason}"  # the lexer just repeats it
        return f"cannot read the override {error.override!r}{said}; {hint}"
    if isinstance(cause, ConfigTypeError) and "does not support deletion" in str(cause):  # ~recipe.epochs
        return kept_key(str(error).rpartition("~")[2] or str(cause.full_key), command)
    if isinstance(cause, ConfigKeyError | AttributeError) and getattr(cause, "full_key", None):
        key = str(cause.full_key)
        parent, _, name = key.rpartition(".")
        if _null_section_key(key, command):
            group, _, option = parent.rpartition(".")
            if (
                group
                and "." not in group
                and (Path(str(resources.files("alternet.conf"))) / group / f"{option}.yaml").is_file()
            ):
                fill = f"choose {group}={option} first, which sets {parent}"  # logger=wandb
            else:
                fill = f"set the section whole, e.g. {parent}={{{name}: VALUE}}"
            return (
                f"{key} cannot be set while {parent} is null: {fill} (`alternet {command} --cfg job` prints the keys)"
            )
        node = getattr(cause, "parent_node", None)
        known = list(node.keys()) if node is not None and hasattr(node, "keys") else []
        conf = Path(str(resources.files("alternet.conf")))
        if command == "evaluate" and parent == "analysis" and (conf / "analysis" / f"{name}.yaml").is_file():
            chosen = ",".join([*known, name])
            return (
                f"{key} sets the budget of an analysis not chosen: add it to the list (analysis=[{chosen}]), or leave "
                f"analysis.{name} out"
            )
        if command == "evaluate" and parent == "data" and not known:  # the checkpoint's data: no data group chosen
            return (
                f"{key} sets a data set's key, and alternet evaluate scores on the checkpoint's own data unless "
                f"data=NAME chooses one: choose it first (data=NAME {key}=...), or give the data's directory with "
                "data_root=DIR"
            )
        where = f"of {parent}" if parent else "at the top level"
        section = schema_section(parent, command)  # its own hint: the section a key belongs to (recipe.augment)
        own = section is not None and not section.OPEN  # an open section's keys are more than its class's
        hint = section.unknown_hint(name, f"{parent}.") if own else suggest(name, known)
        return f"{key} is not a key {where}{hint}; `alternet {command} --cfg job` prints the keys"
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        merging = str(error).partition("Error merging override ")[2].strip()
        reason = str(cause).splitlines()[0]
        kind = _field_type(cause)
        if "is not Optional" in reason and kind in SCALARS:  # seed=null
            reason = f"must be {SCALARS[kind]}, never null; `alternet {command} --cfg job` prints its default"
        elif "is not Optional" in reason:  # a section set to null: "off" is a value inside it
            reason = f"a section of keys is never null{_off(cause)}; `alternet {command} --cfg job` prints its keys"
        return f"{merging or cause.full_key} is invalid: {_expected(reason)}"
    placed = re.search(r"Could not override '([\w/]+)'\.\s+Did you mean to override \1@(\w+)", str(error))
    if placed:  # a group the command's config places under a key of its own (evaluation@evaluate)
        group, where = placed.groups()
        keys = "at the top level (KEY=VALUE)" if where.startswith("_") else f"under {where} ({where}.KEY=VALUE)"
        return (
            f"{group}= is not chosen on the command line: its settings sit {keys} and are set one by one; "
            f"`alternet {command} --cfg job` prints them"
        )
    deleted = re.match(r"Could not delete from config\. '([\w.]+)' does not exist", str(error))
    if deleted:  # Hydra says so of a key that is null (left to its default) as of one that is not there
        key = deleted.group(1)
        parent, _, name = key.rpartition(".")
        section, shown = schema_section(parent, command), f"`alternet {command} --cfg job` prints the keys"
        known = section is not None and not section.OPEN
        if known and name not in {f.name for f in dataclasses.fields(section)}:
            where, hint = f"of {parent}" if parent else "at the top level", section.unknown_hint(name, f"{parent}.")
            return f"~{key}: {key} is not a key {where}{hint}; {shown}"
        null = "is null already" if known else "is null already (its default) or is not a key"  # data, model: by name
        return f"~{key} deletes nothing: {key} {null}; ~KEY removes a value that is set; {shown} and their values"
    unplaced = re.match(r"In '(([\w-]+)/[\w/-]+)'", str(error))
    context = error.__context__
    if unplaced and isinstance(context, ConfigKeyError) and str(context.full_key) == unplaced.group(2):
        # an option file without a package header: its keys went under its group's name, which the schema lacks
        path, group = unplaced.groups()
        return (
            f"{path}.yaml puts its keys under {group}, which the config does not have: begin the file with the line "
            "`# @package _global_` so that its keys are the config's own (trainer.max_epochs, ...), as the shipped "
            f"{group} files do"
        )
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    while cause is not None:  # down to the first error ("Error loading X:" holds the ImportError that says why)
        said = (str(cause).splitlines() or [type(cause).__name__])[0].strip()
        if said and said not in lines:
            lines.append(said)
        cause = cause.__cause__
    return "; ".join(lines)


def _null_section_key(key: str, command: str) -> bool:
    """Whether ``key`` names a key of its section in the schema, so that composing refused it only because the
    section is null there (``recipe.augment.arrays.cutout.holes``, ``logger.wandb.project``)."""
    parent, _, name = key.rpartition(".")
    section = schema_section(parent, command)
    return section is not None and name in {f.name for f in dataclasses.fields(section)}


SCALARS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _field_type(cause: ValidationError) -> Any:
    """The declared type of the key a value was refused for (None where its schema does not say)."""
    owner, key = getattr(cause, "object_type", None), str(cause.full_key).rpartition(".")[2]
    try:
        return typing.get_type_hints(owner).get(key) if dataclasses.is_dataclass(owner) else None
    except NameError:
        return None


def _off(cause: ValidationError) -> str:
    """How the section a null was given for is switched off (its class's ``OFF``), when it says."""
    off = getattr(_field_type(cause), "OFF", None)
    return f": {' '.join(f'{cause.full_key}.{setting}' for setting in off.split())} switches it off" if off else ""


def _expected(reason: str) -> str:
    """What a typed key takes, from OmegaConf's reason (``Value 'abc' of type 'str' could not be converted to
    Float``)."""
    converted = re.search(r"could not be converted to (\w+)", reason)
    if converted:
        return "must be " + TYPES.get(converted.group(1), converted.group(1).lower())
    if "is not a valid bool" in reason:
        return "must be true or false"
    if "is not a subclass of" in reason:
        return "it is a section of keys (KEY.NAME=VALUE sets one of them)"
    return reason


def _unknown_option(missing: str, found: Sequence[str] | None, command: str) -> str:
    """``GROUP=NAME is not an option of GROUP`` with the group's options (or the closest, for a long list): ours,
    nested folders included (experiment=paper/locality), and those Hydra ``found`` on the user's searchpath; for
    Hydra's own groups what Hydra found (its plugins' launchers among them)."""
    parts = missing.split("/")
    ours = parts[0] != "hydra"
    depth = 1 if ours else 2  # hydra/launcher is a group; experiment/paper/x an option of experiment
    group, name = "/".join(parts[:depth]), "/".join(parts[depth:])
    options = _group_options(group, found) if ours else [o for o in found or [] if not _hidden(o)]
    if ours and name and (misplaced := _file_not_on_the_searchpath(group, name)):
        return f"{group}={name} is not an option of {group}: {misplaced}"
    if not name or not options:
        return f"config {missing!r} not found; `alternet {command} --help` lists the config groups and options"
    plugin = PLUGINS.get(f"{group}={name}")
    installed = f" (Hydra's plugin: pip install {plugin})" if plugin else ""
    listed = _listed(options, group, command)
    return f"{group}={name} is not an option of {group}{suggest(name, options)}; {listed}{installed}"


def _group_options(group: str, found: Sequence[str] | None = None) -> list[str]:
    """The options of one of our config groups: nested folders too (experiment=paper/locality), and those Hydra
    ``found`` on the user's searchpath."""
    folder = Path(str(resources.files("alternet.conf"))) / group
    options = {str(path.relative_to(folder).with_suffix("")) for path in folder.rglob("*.yaml")} | set(found or [])
    return sorted(option for option in options if not _hidden(option))


def _hidden(option: str) -> bool:
    return any(part.startswith("_") for part in option.split("/"))


def _listed(options: Sequence[str], group: str, command: str) -> str:
    if len(options) <= SHOWN_OPTIONS:
        return f"the options are {', '.join(options)}"
    return f"`alternet {command} --help` lists its {len(options)} options"


def null_group_error(error: ValueError, overrides: Sequence[str], command: str) -> str | None:
    """Hydra's "Config group override must be a string or a list" (a ``ValueError``, with its traceback) in one
    line, naming the first of ``overrides`` that sets one of our config groups to null (``model=null``, or a sweep's
    ``model=null,NAME``); None for any other error."""
    if "Config group override" not in str(error):
        return None
    conf = Path(str(resources.files("alternet.conf")))
    for override in overrides:
        group, equals, value = override.lstrip("+").partition("=")
        if equals and group and (conf / group).is_dir() and "null" in value.replace(" ", "").lower().split(","):
            listed = _listed(_group_options(group), group, command)
            return (
                f"{group}=null is invalid: {group}= chooses one of its options ({listed}); leave it out for the default"
            )
    return None


def _file_not_on_the_searchpath(group: str, name: str) -> str | None:
    """How to make a YAML file the user meant into an option, where one is there: ``GROUP/NAME.yaml`` in the working
    directory, or a file named by its path (``experiment=exp/mine.yaml``). Hydra reads options from its search path
    only, in folders named after their group, by name without ``.yaml``."""
    here = Path(group) / f"{name}.yaml"
    if here.is_file():
        return f"{here} in the working directory is not on Hydra's search path; add {_searchpath(Path.cwd())}"
    path = Path(name).expanduser()
    if not path.is_file() and (Path(group) / name).is_file():  # experiment=mine.yaml beside ./experiment/mine.yaml
        path = Path(group) / name
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return None
    path = path.resolve()
    if path.parent.name == group and path.suffix == ".yaml":
        return f"an option is named, not a file: {group}={path.stem} {_searchpath(path.parent.parent)}"
    return (
        f"an option is named, not a file: put {path.name} into a folder DIR/{group}/ as NAME.yaml and give "
        f"{group}=NAME hydra.searchpath=[file://DIR]"
    )


def _searchpath(folder: Path) -> str:
    """The override that adds ``folder`` to Hydra's search path, quoted for Hydra and for a POSIX shell."""
    value = f"file://{folder}"
    plain = re.fullmatch(r"[A-Za-z0-9_./:-]+", value)
    return shlex.quote(f"hydra.searchpath=[{value}]" if plain else f"hydra.searchpath=['{hydra_quoted(value)}']")


PLUGINS = {  # Hydra's plugins whose options the docs name, by the package that brings them
    "hydra/sweeper=optuna": "hydra-optuna-sweeper",
    "hydra/launcher=joblib": "hydra-joblib-launcher",
    "hydra/launcher=submitit_slurm": "hydra-submitit-launcher",
    "hydra/launcher=submitit_local": "hydra-submitit-launcher",
}


def warn_shadowed_options() -> None:
    """Warn of an option on the user's ``hydra.searchpath`` that the chosen one of the same name hides: Hydra
    searches alternet's own configs first, so a user's ``conf/data/digits.yaml`` is never read for ``data=digits``."""
    from hydra.core.hydra_config import HydraConfig  # deferred: composition errors need no Hydra app

    runtime = HydraConfig.get().runtime
    ours = Path(str(resources.files("alternet.conf")))
    users = [_folder(source) for source in runtime.config_sources if source.provider not in ("main", "hydra")]
    for group, choice in runtime.choices.items():
        group = group.split("@")[0]
        if choice is None or group.startswith("hydra") or not (ours / group / f"{choice}.yaml").is_file():
            continue
        for folder in filter(None, users):
            if (hidden := folder / group / f"{choice}.yaml").is_file():
                warnings.warn(
                    f"{hidden} is not read: {group}={choice} is alternet's own option, which Hydra finds first; "
                    f"give yours another name ({group}=my_{choice.rsplit('/', 1)[-1]})",
                    AlternetWarning,
                    stacklevel=2,
                )


def _folder(source: Any) -> Path | None:
    """A config source's folder (``file://`` or ``pkg://``), if it is one on this file system."""
    if source.schema == "file":
        return Path(source.path)
    if source.schema == "pkg":
        with contextlib.suppress(ImportError, TypeError, ValueError):
            return Path(str(resources.files(source.path.replace("/", "."))))
    return None
