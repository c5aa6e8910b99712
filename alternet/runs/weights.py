"""The model inside a training checkpoint: its weights with timm's key names and how to rebuild it, and the
hyperparameters it saved, as every reader of a saved recipe takes them."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..architectures.config import model_config
from ..architectures.named import base_name, spec_kwargs
from ..data.augment import SECTIONS
from ..dataset_facts import DataFacts
from ..errors import CheckpointError
from ..models import create_model
from ..models.factory import model_args
from .checkpoints import read_checkpoint

# the recipe sections a checkpoint of alternet 0.1 saved as null when off, and their "off" values now
OFF_WAS_NULL = {
    "ema": {"decay": None, "warmup": False},
    "mixup": {"mixup_alpha": 0.0, "cutmix_alpha": 0.0, "prob": 1.0, "switch_prob": 0.5, "mode": "batch"},
    "progressive_resize": {"sizes": [], "epochs": []},
}


def saved_recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe as a run, a checkpoint or an export saved it, its sections saved as null when off
    (:data:`OFF_WAS_NULL`) read as their "off" values; the caller's dict is left as it was."""
    nulls = [key for key in OFF_WAS_NULL if key in recipe and recipe[key] is None]
    return recipe | {key: copy.deepcopy(OFF_WAS_NULL[key]) for key in nulls}


def saved_hyperparameters(checkpoint: dict[str, Any], source: str) -> dict[str, Any]:
    """A training checkpoint's hyperparameters, as every reader of a saved recipe takes them. A section saved as
    null when off (:data:`OFF_WAS_NULL`) reads as its "off" value; a recipe saved before ``recipe.augment`` had its
    sections (one flat list of both stacks' keys), and a data section that is not whole data facts, are refused in
    one line."""
    hparams = checkpoint.get("hyper_parameters") or {}
    if isinstance(hparams.get("data"), dict):
        try:
            DataFacts.from_dict(hparams["data"])
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"{source}: its data hyperparameters are not whole ({error})") from None
    if isinstance(hparams.get("recipe"), dict):
        hparams = hparams | {"recipe": saved_recipe(hparams["recipe"])}
    augment = (hparams.get("recipe") or {}).get("augment")
    if isinstance(augment, dict) and (flat := sorted(set(augment) - set(SECTIONS))):
        raise CheckpointError(
            f"{source} was saved before recipe.augment had its sections ({', '.join(SECTIONS)}): it holds "
            f"recipe.augment.{flat[0]}, which alternet no longer reads; train it again with this version"
        )
    return hparams


TRAINING_ONLY_ARGS = ("num_classes", "drop_rate", "drop_path_rate", "drop_block_rate")  # the builder's, or training's


@dataclass
class CheckpointWeights:
    """A training checkpoint's network: weights with timm key names and how to rebuild their model."""

    path: Path
    state_dict: dict[str, torch.Tensor]
    architecture: str
    num_classes: int
    model_args: dict[str, Any]  # create_model arguments besides num_classes: the full architecture
    hyper_parameters: dict[str, Any]  # the model / recipe / data sections the run trained with

    @property
    def data(self) -> DataFacts:
        return DataFacts.from_dict(self.hyper_parameters["data"])

    def build(self) -> nn.Module:
        """The model with these weights loaded (every tensor must fit), in eval mode."""
        model = create_model(self.architecture, num_classes=self.num_classes, **self.model_args)
        missing, unexpected = model.load_state_dict(self.state_dict, strict=False)
        if missing or unexpected:
            raise CheckpointError(
                f"checkpoint {self.path} does not match its model {self.architecture!r}: "
                f"missing {list(missing)[:5]}, unexpected {list(unexpected)[:5]}"
            )
        return model.eval()


class NoEmaWeights(CheckpointError):
    """EMA weights asked of a run that kept none: true of every checkpoint of that run, so no other is advised."""


def read_weights(path: str | Path, *, ema: bool = False) -> CheckpointWeights:
    """The network of a checkpoint written by alternet's training (its EMA copy with ``ema``), read safely."""
    path = Path(path)
    checkpoint = read_checkpoint(path)
    hparams = saved_hyperparameters(checkpoint, f"checkpoint {path}")
    if not all(isinstance(hparams.get(key), dict) for key in ("model", "data")):
        raise CheckpointError(
            f"checkpoint {path} lacks the model and data hyperparameters alternet's training saves; "
            "it was not written by alternet"
        )
    prefix = "ema." if ema else "model."
    state_dict = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    if not state_dict and ema:
        raise NoEmaWeights(
            f"checkpoint {path} has no EMA weights: the run had no recipe.ema, so none of its checkpoints has; "
            "use its model weights (leave out use_ema=true or --ema; ema=False in Python)"
        )
    if not state_dict:
        raise CheckpointError(f"checkpoint {path} has no model weights (no 'model.' keys)")
    model, data = model_config(hparams["model"]), DataFacts.from_dict(hparams["data"])
    num_classes = int(data.num_classes)
    # the full architecture (the zoo's spec under the run's overrides), so the record does not depend on the zoo
    args = spec_kwargs(base_name(model.name)) | model_args(
        model, num_classes=num_classes, img_size=data.image_size, drop_path_rate=0.0
    )
    return CheckpointWeights(
        path=path,
        state_dict=state_dict,
        architecture=model.name,
        num_classes=num_classes,
        model_args={k: v for k, v in args.items() if k not in TRAINING_ONLY_ARGS and not k.endswith("_drop_rate")},
        hyper_parameters=hparams,
    )


def load_model(path: str | Path, *, ema: bool = False) -> tuple[nn.Module, CheckpointWeights]:
    """The bare model (no LightningModule) of a training checkpoint, in eval mode, and what it was read from."""
    weights = read_weights(path, ema=ema)
    return weights.build(), weights
