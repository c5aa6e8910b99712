"""``compose_train`` composes in Hydra's two steps, the first cached: every config it gives equals Hydra's own
composition of the same command line, value for value and flag for flag."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from alternet.apps.config import compose

from helpers import FAST, PRESET_TWO_STEPS, compose_train

CASES = [
    [],
    [*FAST, "seed=3", "recipe.optimizer.lr=1e-3"],
    [*FAST, "recipe=paper", "recipe.ema={decay:0.99,warmup:true}", "recipe.batch_size=32"],
    ["trainer.max_epochs=4", "model=alternet_tiny", "trainer.max_epochs=2", "model.layout=C|CC"],  # the last wins
    ["experiment=paper/inductive_bias", "data.root=/data", "model=vit_mini_cifar", *PRESET_TWO_STEPS],
    ["data=cifar10", "recipe.augment=null", "recipe.mixup.mixup_alpha=0.2", "logger=wandb", "logger.wandb.tags=[a,b]"],
    ["evaluate.after_training=true", "callbacks.checkpoint.save_top_k=2", "paths.log_dir=${paths.data_dir}/x"],
    ["+callbacks.extra=[]", "seed=1"],  # an addition: the whole list composes at once
]


@pytest.mark.parametrize("overrides", CASES, ids=[" ".join(case) or "defaults" for case in CASES])
def test_the_cached_two_step_composition_is_hydras(overrides):
    ours = compose_train(*overrides, output_dir="out")
    hydras = compose("train", [*overrides, "paths.output_dir=out"])
    assert OmegaConf.to_yaml(ours) == OmegaConf.to_yaml(hydras)
    assert OmegaConf.is_struct(ours) == OmegaConf.is_struct(hydras) is True
    assert OmegaConf.to_container(ours, resolve=True) == OmegaConf.to_container(hydras, resolve=True)


def test_a_bad_value_is_refused_as_hydra_refuses_it():
    from hydra.errors import ConfigCompositionException

    for overrides in (["seed=abc"], ["recipe.optimizer.lrx=1"]):
        with pytest.raises(ConfigCompositionException) as ours:
            compose_train(*overrides)
        with pytest.raises(ConfigCompositionException) as hydras:
            compose("train", overrides)
        assert str(ours.value) == str(hydras.value)
