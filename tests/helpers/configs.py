"""Override lists that make a run cheap, and the training config as ``train.py`` composes it."""

from __future__ import annotations

import copy
import functools
from dataclasses import replace
from pathlib import Path

# A run that touches every stage but costs seconds: a few batches per loop (conf/debug/fast.yaml).
FAST = ["debug=fast"]
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
    "hessian": dict(images=8, k=2, iterations=4, minibatches=3, minibatch_steps=3),
    "landscape": dict(images=8, batch_size=8, points_1d=3, points_2d=3),
    "noise": dict(images=16, batch_size=16),
}


def compose_train(*overrides: str, output_dir: Path | str = "unused"):
    """The training config as ``train.py`` would compose it, with the run directory set explicitly.

    Composed once per test process for each list of overrides and copied (a test may change its copy): a Hydra
    composition takes ~0.15 s, a copy ~5 ms, and a third of the suite's ~570 compositions repeat an earlier one."""
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():  # within a running app: its own config directory, not cached
        from alternet.apps.config import compose

        return compose("train", [*overrides, f"paths.output_dir={output_dir}"])
    config = copy.deepcopy(_composed(overrides))
    config.paths.output_dir = str(output_dir)
    return config


@functools.cache
def _composed(overrides: tuple[str, ...]):
    from alternet.apps.config import compose

    return compose("train", [*overrides, "paths.output_dir=unused"])


# The suite's shared digits run (the ``digits_run`` / ``digits_summary`` fixtures in tests/conftest.py): debug=fast,
# tested, evaluated and exported at the end of training, so one run serves every test that needs "a trained digits
# run" of any of those kinds.
DIGITS_RUN = [*FAST, "evaluate.after_training=true", "export.after_training=true"]


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
