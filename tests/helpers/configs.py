"""Override lists that make a run cheap, and the training config as ``train.py`` composes it."""

from __future__ import annotations

import copy
import functools
from dataclasses import replace
from pathlib import Path

# A run that touches every stage but costs seconds: a few batches per loop (conf/debug/fast.yaml) of 16 training
# images (the digits recipe's 64 made half a short run's compute on a 2-core Zen 3: 175 ms a step, 48 ms at 16) and
# 32 evaluated (at the recipe's 256 each epoch scored the 180 validation and 512 train_clean images, the test 360:
# three quarters of a short run's compute).
FAST = ["debug=fast", "recipe.batch_size=16", "recipe.eval_batch_size=32"]
# A laptop-scale preset's jobs (CIFAR-100, experiment=paper/NAME or hybrids) cut to two training batches of 16 in fp32
# and one batch per evaluation loop: every job of a grid runs end to end in seconds.
PRESET_TWO_STEPS = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "recipe.batch_size=16",
    "recipe.eval_batch_size=16",
    "data.train_clean_size=16",
    "trainer.precision=32-true",
]
# One epoch of 2-process CPU DDP (gloo), for the probes that Lightning re-executes per rank (tests/scripts/).
DDP_CPU = [
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
]


# Tiny analysis budgets: every analysis of alternet.analysis runs in about a second at 16 px.
TINY_ANALYSIS_BUDGETS = {
    "fourier": dict(images=16, batch_size=8),
    "variance": dict(images=16, batch_size=8),
    "lesion": dict(images=16, batch_size=16),
    "attention": dict(images=8, batch_size=8),
    "hessian": dict(images=8, k=2, iterations=4, minibatches=3, minibatch_steps=3, slq_runs=1),
    "landscape": dict(images=8, batch_size=8, points_1d=3, points_2d=3),
    "noise": dict(images=16, batch_size=16),
}


def compose_train(*overrides: str, output_dir: Path | str = "unused"):
    """The training config as ``train.py`` would compose it, with the run directory set explicitly.

    Composed as Hydra composes it, in its two steps, the first one cached: the config-group choices (``model=...``,
    ``debug=fast``) make the defaults list whose configs are merged, then the value overrides (``seed=1``,
    ``recipe.ema.decay=0.9``) are applied to the merged config by Hydra's own function, in struct mode. The first
    step costs ~0.15 s, and the suite's ~570 compositions share a few dozen lists of choices; the second a few ms.
    An override Hydra treats otherwise (``+``, ``~``, ``++``, a package, ``hydra.*``) composes the whole list."""
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # within a running app: its own config directory, not cached
        from alternet.apps.config import compose

        return compose("train", [*overrides, f"paths.output_dir={output_dir}"])
    choices, values = _split(overrides)
    config = copy.deepcopy(_composed(choices))
    if values:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl

        ConfigLoaderImpl._apply_overrides_to_config(values, config)
    config.paths.output_dir = str(output_dir)
    return config


def _split(overrides: tuple[str, ...]) -> tuple[tuple[str, ...], list]:
    """(the overrides the first step needs, as strings; the value overrides, parsed as Hydra parses them)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    if any(o.is_add() or o.is_delete() or o.is_force_add() or o.package or o.is_hydra_override() for o in parsed):
        return overrides, []
    choices = tuple(o.input_line for o in parsed if o.key_or_group.replace(".", "/") in _groups())
    return choices, [o for o in parsed if o.input_line not in choices]


@functools.cache
def _groups() -> frozenset[str]:
    from helpers.paths import CONF

    return frozenset(str(path.relative_to(CONF)) for path in CONF.rglob("*") if path.is_dir())


@functools.cache
def _composed(overrides: tuple[str, ...]):
    from alternet.apps.config import compose

    return compose("train", [*overrides, "paths.output_dir=unused"])


# The suite's shared digits run (the ``digits_run`` / ``digits_summary`` fixtures in tests/conftest.py): debug=fast,
# tested on the whole test split, evaluated and exported at the end of training, so one run serves every test that
# needs "a trained digits run" of any of those kinds.
DIGITS_RUN = [*FAST, "trainer.limit_test_batches=1.0", "evaluate.after_training=true", "export.after_training=true"]


def resolved(*overrides: str) -> dict:
    """The training config composed with ``overrides``, resolved to plain containers."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(compose_train(*overrides), resolve=True)


def datamodule_of(config: dict, seed: int = 0):
    """The DataModule of a resolved training config, as ``alternet train`` builds it."""
    from alternet.apps.config import train_config
    from alternet.apps.train import build_data

    return build_data(replace(train_config(config), seed=seed))


def typed(*overrides: str):
    """The training config as typed objects (:func:`alternet.apps.config.train_config`)."""
    from alternet.apps.config import train_config

    return train_config(resolved(*overrides))


def module_of(config: dict, facts):
    """The LightningModule of a resolved training config for data of these ``facts``, as ``alternet train`` builds
    it."""
    from alternet.apps.config import train_config
    from alternet.training import build_module

    sections = train_config(config)
    return build_module(sections.model, sections.recipe, facts, sections.performance, sections.trainer)


def paper_recipe_in_miniature():
    """The paper's recipe in miniature for the analyses' models: mixup/cutmix with label smoothing (the landscape and
    Hessian mix their batches) at batch 4, decay off norms and biases."""
    return typed("recipe=paper", "recipe.batch_size=4", "recipe.no_decay_norm_bias=true").recipe
