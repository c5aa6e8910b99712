"""The schemas of ``train.yaml`` and ``evaluate.yaml``, composed from the typed sections each library declares.

Registered in Hydra's ConfigStore when this module is imported (the apps import it before Hydra reads
``conf``), so composing refuses an
unknown key or a value of the wrong type (:mod:`alternet.apps.hydra.composition` words it in one line);
:func:`train_config` and :func:`evaluate_config` then make the objects, each section's rules checked as it is made.

``data`` and ``model`` are typed by the section their name chooses (:func:`alternet.data.config.data_section`,
:func:`alternet.architectures.config.model_section`): a family's keys, a user's registered data set, any timm
model's own keywords. Hydra composes them as open mappings; :func:`train_config` types and checks them, before any
work, with the same one-line messages. ``trainer`` is open too: the keys alternet reads typed, any other Trainer
argument checked against Lightning's signature (:class:`~alternet.training.config.TrainerConfig`).
"""

from __future__ import annotations

import dataclasses
import re
import sys
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..analysis.config import parse_configs
from ..architectures.config import model_section
from ..data.config import data_section
from ..errors import ConfigValueError, is_integer
from ..evaluation.config import EvaluationConfig
from ..hub.references import check_named
from ..launch import register_resolvers
from ..runs.checkpoint_files import check_resume_path
from ..tracking import WandbSettings
from ..training.config import CallbacksConfig, ExportConfig, PerformanceConfig, RecipeConfig, TrainerConfig
from ..typed import SECTION, Section, build, conforms, section_type

TRAIN_SCHEMA = "train_schema"
EVALUATE_SCHEMA = "evaluate_schema"


@dataclass(kw_only=True)
class LoggerConfig(Section):
    wandb: Any = field(metadata={SECTION: WandbSettings})  # the W&B settings (logger=wandb), or null: CSV only
    extra: list[Any]  # more Lightning loggers, each a _target_ (apps.extensions; logger=tensorboard is one)


@dataclass(kw_only=True)
class PathsConfig(Section):
    data_dir: str
    log_dir: str
    output_dir: str | None  # the job's directory: Hydra's runtime.output_dir, none where no job runs (--cfg job)

    def check(self) -> None:
        if self.output_dir is None:
            raise ConfigValueError("paths.output_dir=null is invalid: it is the run directory (hydra.run.dir sets it)")


@dataclass(kw_only=True)
class TrainingEvaluation(EvaluationConfig):
    after_training: bool  # score the tested weights with alternet evaluate's metrics at the end of training


@dataclass(kw_only=True)
class TrainConfig(Section):
    """``alternet train``'s config (train.yaml)."""

    data: Any = field(metadata={SECTION: data_section})  # its data set's DataConfig, once built
    model: Any = field(metadata={SECTION: model_section})  # its family's ModelConfig, once built
    recipe: RecipeConfig
    trainer: Any = field(metadata={SECTION: TrainerConfig})  # open: any other argument of Lightning's Trainer
    logger: LoggerConfig
    callbacks: CallbacksConfig
    paths: PathsConfig
    evaluate: TrainingEvaluation
    seed: int
    imports: list[str]  # the user's modules, imported before the checks (apps.extensions)
    optimized_metric: str | None
    ckpt_path: str | None
    reuse_run_dir: bool
    export: ExportConfig
    performance: PerformanceConfig

    def check(self) -> None:
        self.require("seed", lambda v: is_integer(v, 0) and v < 2**32, "must be an integer in [0, 2**32 - 1]")
        self.require(  # "" reached Lightning, which asked for `.fit(ckpt_path=PATH)`
            "ckpt_path",
            str.strip,
            "it must name a checkpoint file (a run's checkpoints/NAME.ckpt), or be last (the run directory's "
            "last.ckpt) or null (start afresh)",
        )
        self.model.check_size(self.data.image_size)  # the layout against the widths, heads and windows: torch-free


@dataclass(kw_only=True)
class EvaluateConfig(EvaluationConfig):
    """``alternet evaluate``'s config (evaluate.yaml): the evaluation settings at its root."""

    ckpt: Any  # any source alternet.hub.load reads, or a list of them
    imports: list[str]  # the user's modules, imported before the checks (apps.extensions)
    data_root: str | None
    use_ema: bool
    test_flip: bool | None  # each prediction averaged with its mirror image's; null: as the run did (recipe.test_flip)
    out_dir: str | None  # the evaluation's directory (paths.output_dir: none where no job runs, --cfg job)
    logger: LoggerConfig
    paths: PathsConfig
    data: Any = None  # the data group when one is chosen (default: the checkpoint's data)
    analysis: Any = None  # the analyses chosen (analysis=[...]), their budgets checked by alternet.analysis.config
    recipe: Any = None  # recipe=NAME: the training recipe of a model that records none (the objective analyses)

    def check(self) -> None:
        super().check()
        if self.out_dir is None:
            raise ConfigValueError("out_dir=null is invalid: it is the evaluation's directory (out_dir=DIR sets it)")
        if self.analysis:  # their budgets, typed before any work (the model and data are checked as they load)
            parse_configs(list(self.analysis), self.analysis)
        if self.logger.extra:
            raise ConfigValueError(
                "logger.extra (and logger=tensorboard) apply to alternet train; an evaluation writes its numbers into "
                "its output folder, and to W&B with logger=wandb"
            )


def model_sources(ckpt: Any) -> list[str]:
    """The models ``ckpt=`` names (one, or a list), each checked as far as its name and the file system tell
    (:func:`alternet.hub.references.check_named`; a number is a name too: Hydra reads ``ckpt=2024`` as one)."""
    items = list(ckpt) if isinstance(ckpt, list | tuple) else [ckpt]
    if not items:
        raise ConfigValueError("ckpt=[] names no model: alternet evaluate ckpt=SOURCE or ckpt=[SOURCE,SOURCE]")
    for item in items:
        if isinstance(item, Mapping | list | tuple):  # ckpt=[[RUN]], ckpt={a:1}: no path
            raise ConfigValueError(
                f"ckpt holds {'a mapping' if isinstance(item, Mapping) else 'a list'} ({item}), which names no model: "
                "give one source, ckpt=SOURCE, or a flat list of them, ckpt=[SOURCE,SOURCE]"
            )
    sources = [str(item) for item in items]
    for source in sources:
        check_named(source)
    return sources


def check_sources(config: TrainConfig | EvaluateConfig) -> None:
    """The weights a command reads, as far as their names and the file system tell (torch-free): evaluate's
    ``ckpt``, a resume's ``ckpt_path`` (``last`` is the run directory's, if any), and a new run's
    ``model.pretrained`` (a resume reads its own checkpoint's; ``true`` is timm's)."""
    if isinstance(config, EvaluateConfig):
        model_sources(config.ckpt)
    elif config.ckpt_path is not None:
        if config.ckpt_path != "last":
            check_resume_path(config.ckpt_path)
    elif isinstance(config.model.pretrained, str):
        check_named(config.model.pretrained)


# the two schemas in Hydra's ConfigStore (train.yaml and evaluate.yaml name them first in their defaults)
ConfigStore.instance().store(name=TRAIN_SCHEMA, node=TrainConfig)
ConfigStore.instance().store(name=EVALUATE_SCHEMA, node=EvaluateConfig)
register_resolvers()  # ${alternet.run_stamp:} in hydra.run.dir: one run directory for every rank of a job


def compose(name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """``train.yaml`` or ``evaluate.yaml`` (``name``) composed with ``overrides`` from Python, as the command composes
    it: against its schema (registered by this module), from the packaged configs, or within a running Hydra app
    from that app's. Not resolved; :func:`train_config` / :func:`evaluate_config` make the checked objects."""
    if GlobalHydra.instance().is_initialized():
        return hydra.compose(name, overrides=list(overrides))
    with hydra.initialize_config_module("alternet.conf", version_base="1.3"):
        return hydra.compose(name, overrides=list(overrides))


def resolved(cfg: DictConfig, command: str = "train") -> dict[str, Any]:
    """A composed config's values, every interpolation resolved: one that cannot be (an unset environment variable
    in ``${oc.env:VAR}``, a key that is not there) is one line naming the key, not OmegaConf's traceback."""
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None)
        value = OmegaConf.to_container(cfg, resolve=False)
        for part in str(key or "").split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        reason = str(error).splitlines()[0].split(": ", 1)[-1].strip('"') if str(error) else type(error).__name__
        shown = f"{key}={value}" if key and isinstance(value, str) else (key or "the config")
        missing = reason.partition("Missing mandatory value: ")[2]  # a section ~KEY removed (~recipe): said so
        if missing and _removed(missing):
            raise ConfigValueError(kept_key(missing, command)) from None
        raise ConfigValueError(f"{shown} cannot be resolved: {reason}") from None


def train_config(values: Mapping[str, Any]) -> TrainConfig:
    """A composed, resolved training config (Hydra's own section aside) as objects, every section checked."""
    logger = values.get("logger")  # ??? where ~logger removed it: _set names it
    wandb = logger.get("wandb") if isinstance(logger, Mapping) else None
    if isinstance(wandb, Mapping) and "project" not in wandb:  # logger=csv over a preset that sets W&B keys
        raise ConfigValueError(
            f"logger.wandb holds {', '.join(sorted(wandb))} but no project: a preset's W&B settings outlive "
            "logger=csv; add logger.wandb=null to switch W&B off, or logger=wandb to log to it"
        )
    return _typed(TrainConfig, values, "train")


def evaluate_config(values: Mapping[str, Any]) -> EvaluateConfig:
    """A composed, resolved evaluation config (Hydra's own section aside) as objects, every section checked."""
    if values.get("ckpt") in (None, "???"):  # before _set's word for any key left at ???: what ckpt takes
        raise ConfigValueError(
            "ckpt is required: alternet evaluate ckpt=SOURCE (a run directory, a .ckpt, an export directory, "
            "hdvw:FILE, timm:NAME, hf-hub:REPO, local-dir:DIR) or a list [A,B]"
        )
    return _typed(EvaluateConfig, values, "evaluate")


def _typed(cls: type[TrainConfig | EvaluateConfig], values: Mapping[str, Any], command: str) -> Any:
    """The config as ``cls``; a required key that the command line's ``~KEY`` removed (``~seed``,
    ``~trainer.max_epochs``: Hydra deletes them) is said to be that (Hydra's overrides are the command line's, also
    in the checks before the job runs, where the composed config no longer holds them)."""
    try:
        return build(cls, _set(values, command))
    except ConfigValueError as error:
        named = re.match(r"([\w.]+)(?:, [\w.]+)* must be set", str(error))
        if named is None or not _removed(named.group(1)):
            raise
        raise ConfigValueError(kept_key(named.group(1), command)) from None


def _removed(key: str) -> bool:
    """Whether the command line's ``~KEY`` removed ``key``."""
    return f"~{key}" in {arg.partition("=")[0] for arg in sys.argv[1:]}


def kept_key(key: str, command: str) -> str:
    """``~KEY`` of a key the command always needs (every key of a typed section, ``seed``): what to type instead."""
    parent, _, name = key.rpartition(".")
    section = schema_section(parent, command)
    hint = typing.get_type_hints(section).get(name) if section is not None else None
    instead = f"{key}=null or another value" if hint is not None and conforms(None, hint) else f"{key}=VALUE"
    return (
        f"~{key}: {key} cannot be removed, the command always needs a value; set {instead} instead "
        f"(`alternet {command} --cfg job` prints it)"
    )


def schema_section(path: str, command: str) -> type[Section] | None:
    """The typed section the schema declares at ``path`` (``recipe.augment``; ``""``: the root), None where it
    declares none (an open mapping, a section chosen by its values such as ``data``)."""
    section: Any = {"train": TrainConfig, "evaluate": EvaluateConfig}.get(command)
    for part in path.split(".") if path else ():
        if not dataclasses.is_dataclass(section) or part not in {f.name for f in dataclasses.fields(section)}:
            return None
        field = next(f for f in dataclasses.fields(section) if f.name == part)
        section = field.metadata.get(SECTION) or section_type(typing.get_type_hints(section)[part])
    return section if isinstance(section, type) and issubclass(section, Section) else None


def _set(values: Mapping[str, Any], command: str) -> dict[str, Any]:
    """The config but Hydra's section, every key at OmegaConf's mandatory marker ``???`` (``data.root`` of
    ``data=imagefolder``) named in one line first."""
    values = {key: value for key, value in values.items() if key != "hydra"}
    missing = missing_keys(values)
    if missing:
        example = " ".join(f"{key}=..." for key in missing)
        raise ConfigValueError(f"{', '.join(missing)} must be set: e.g. alternet {command} {example}")
    return values


def missing_keys(values: Any, prefix: str = "") -> list[str]:
    """The keys of a composed config still at OmegaConf's mandatory marker ``???``."""
    if isinstance(values, Mapping):
        return [key for k, v in values.items() for key in missing_keys(v, f"{prefix}{k}.")]
    return [prefix.rstrip(".")] if values == "???" else []
