"""Loading weights into models: a report of what was loaded, a new head when the class count differs, and an
error naming the keys when anything else does not fit."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from timm.models import FeatureListNet, adapt_input_conv
from timm.models._features import FeatureGetterNet
from torch import nn

from ..errors import CheckpointError, ConfigValueError, one_line
from ..models import create_model
from ..models.features import check_feature_arguments, feature_model
from ..models.zoo import adapt_checkpoint
from ..runs.records import override, shell_word
from .sources import OTHER_WEIGHTS_KEYS, Source, open_source

logger = logging.getLogger(__name__)
MAX_NAMED_KEYS = 8


@dataclass(frozen=True)
class LoadReport:
    """What :func:`load_pretrained` did. ``head`` says why the classifier was not loaded (``None``: it was)."""

    source: str
    loaded: int
    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    head: str | None = None
    adapted: str | None = None  # the first conv's weights adapted to another channel count, as timm's loader does
    normalisation: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # the source's (mean, std), if recorded

    @property
    def complete(self) -> bool:
        """Every tensor of the model came from the source (or is a new head) and nothing was left over."""
        return not self.missing and not self.unexpected

    def __str__(self) -> str:
        parts = [f"loaded {self.loaded} tensors from {self.source}"]
        if self.head:
            parts.append(self.head)
        if self.adapted:
            parts.append(self.adapted)
        if self.missing:
            parts.append(f"{len(self.missing)} missing, left at initialisation: {_names(self.missing)}")
        if self.unexpected:
            parts.append(f"{len(self.unexpected)} unexpected, ignored: {_names(self.unexpected)}")
        return "; ".join(parts)


def _names(keys: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(keys[:MAX_NAMED_KEYS])
    return shown + (f" and {len(keys) - MAX_NAMED_KEYS} more" if len(keys) > MAX_NAMED_KEYS else "")


def _classifier_names(model: nn.Module, source: Source) -> tuple[str, ...]:
    names = []
    for cfg in (getattr(model, "pretrained_cfg", None) or {}, source.pretrained_cfg):
        classifier = cfg.get("classifier")
        names += [classifier] if isinstance(classifier, str) else list(classifier or ())
    return tuple(dict.fromkeys(names))


def _is_head(key: str, classifiers: tuple[str, ...]) -> bool:
    return any(key == name or key.startswith(name + ".") for name in classifiers)


def _check_body_shapes(model: nn.Module, source: Source, classifiers: tuple[str, ...]) -> None:
    expected, weights = model.state_dict(), source.state_dict
    wrong = [
        k for k in expected if k in weights and weights[k].shape != expected[k].shape and not _is_head(k, classifiers)
    ]
    if wrong:
        details = [
            f"{k}: {tuple(weights[k].shape)} in the source, {tuple(expected[k].shape)} in the model" for k in wrong
        ]
        raise CheckpointError(
            f"weights in {source.location} do not fit the model outside its classifier head ({len(wrong)} tensors): "
            f"{_names(details)}. {_fitting_advice(source, wrong, model_name(model))}"
        )


def _fitting_advice(source: Source, wrong: list[str], model: str) -> str:
    """What builds a model the source's weights fit: another architecture's (``model``: the one built), named; its
    input size where its relative position tables are what differs; else its model arguments, as overrides of
    alternet train."""
    if source.architecture and source.architecture != model:
        return f"They are {source.architecture}'s: build that architecture (model={source.architecture})"
    size = (source.hyper_parameters.get("data") or {}).get("image_size")
    if size and all("rel_pos" in key for key in wrong):
        return (
            "Its relative position tables are sized by its attention windows, which loading does not resize: build "
            f"the model with the windows of the source (the input size it was trained at, data.image_size={size}, "
            "builds them; a larger one may keep them)"
        )
    args = {k: v for k, v in source.model_args.items() if k not in ("num_classes", "img_size", "drop_path_rate")}
    shown = " ".join(shell_word(_as_override(f"model.{k}", v)) for k, v in args.items())
    built = f" It was built with {shown} (alternet train overrides; alternet.hub.load builds it so)" if shown else ""
    return f"Were they trained with another architecture or layout?{built}"


def _as_override(key: str, value: Any) -> str:
    """``key=value`` as an alternet train override (a list as Hydra's ``[a,b]``)."""
    if isinstance(value, (list, tuple)):
        return f"{key}=[{','.join(str(item) for item in value)}]"
    return override(key, value)


def model_name(model: nn.Module) -> str:
    """A built model's name as the user chose it (``preresnet_tiny``, not its class ``AlterNet``)."""
    return (getattr(model, "pretrained_cfg", None) or {}).get("architecture") or type(model).__name__


def _check_values(expected: dict[str, torch.Tensor], source: Source, classifiers: tuple[str, ...]) -> None:
    """Weights are looked at before they are loaded: a floating tensor stored as integers would be cast silently,
    a NaN or infinity would load and poison every output, and a head narrower than the source's own class count
    means the source contradicts itself."""
    weights = source.state_dict
    cast = [
        f"{k} ({weights[k].dtype})"
        for k in expected
        if k in weights and expected[k].is_floating_point() and not weights[k].is_floating_point()
    ]
    if cast:
        raise CheckpointError(
            f"weights in {source.location} store floating-point tensors as integers ({_names(cast)}); quantized or "
            "converted weights are not supported: load the original floating-point file"
        )
    bad = [k for k, v in weights.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise CheckpointError(f"weights in {source.location} contain NaN or infinite values: {_names(bad)}")
    heads = [k for k in weights if _is_head(k, classifiers) and k.endswith("weight") and weights[k].ndim >= 1]
    if source.num_classes is not None and heads and weights[heads[0]].shape[0] != source.num_classes:
        raise CheckpointError(
            f"{source.location} says {source.num_classes} classes but its head {heads[0]} has "
            f"{weights[heads[0]].shape[0]} outputs: its config and weights do not belong together"
        )


def _head_note(model: nn.Module, source: Source, model_head: list[str], source_head: list[str]) -> str | None:
    """Why the classifier head is not loaded, or ``None`` when it fits (same keys and shapes; the rest of the
    model was checked by :func:`_check_body_shapes`)."""
    if not model_head and not source_head:
        return None
    expected, weights = model.state_dict(), source.state_dict
    if sorted(model_head) == sorted(source_head) and all(weights[k].shape == expected[k].shape for k in model_head):
        return None
    if not model_head:
        return "classifier head not loaded (the model has none)"
    origin = "none" if not source_head else (source.num_classes if source.num_classes is not None else "?")
    return f"new classifier head ({origin} -> {getattr(model, 'num_classes', '?')} classes; left at initialisation)"


def select_weights(model: nn.Module, source: Source) -> tuple[dict[str, torch.Tensor], LoadReport]:
    """The source tensors to load into ``model``. The head is skipped when it does not fit (another class count,
    or absent on either side); a shape mismatch anywhere else is an error naming the keys. A ViT's, PiT's or Swin's
    position tables are first resized to the model's input size, as timm does (:func:`adapt_checkpoint`)."""
    try:
        source = replace(source, state_dict=adapt_checkpoint(source.state_dict, model))
    except (ValueError, RuntimeError, KeyError, IndexError) as error:  # timm's filter, given another family's tensors
        arch = f" ({source.architecture} weights)" if source.architecture else ""
        raise CheckpointError(
            f"{source.location}{arch} does not fit this {model_name(model)}: its position tables cannot be "
            f"resized to it ({one_line(error)}); check model.name against the weights' architecture"
        ) from None
    expected = model.state_dict()
    source, adapted = _adapt_input_channels(expected, model, source)
    weights = source.state_dict
    classifiers = _classifier_names(model, source)
    _check_body_shapes(model, source, classifiers)
    _check_values(expected, source, classifiers)
    model_head = [k for k in expected if _is_head(k, classifiers)]
    source_head = [k for k in weights if _is_head(k, classifiers)]
    head_note = _head_note(model, source, model_head, source_head)
    skip = set(model_head) | set(source_head) if head_note else set()
    selected = {k: v for k, v in weights.items() if k in expected and k not in skip}
    report = LoadReport(
        source=source.location,
        loaded=len(selected),
        missing=tuple(k for k in expected if k not in weights and k not in skip),
        unexpected=tuple(k for k in weights if k not in expected and k not in skip),
        head=head_note,
        adapted=adapted,
        normalisation=_normalisation(source.pretrained_cfg),
    )
    return selected, report


def _adapt_input_channels(
    expected: dict[str, torch.Tensor], model: nn.Module, source: Source
) -> tuple[Source, str | None]:
    """A model built for another number of input channels (``in_chans=1``) than its source's first conv takes: that
    conv's weights adapted to it as timm's ``load_pretrained`` adapts them (:func:`timm.models.adapt_input_conv`:
    summed into one channel, or repeated and rescaled); the rest of the weights load as they are."""
    firsts = (getattr(model, "pretrained_cfg", None) or {}).get("first_conv") or ()
    weights = dict(source.state_dict)  # ``expected``: the model's state_dict
    adapted = []
    for name in [firsts] if isinstance(firsts, str) else firsts:
        key = f"{name}.weight"
        have, want = weights.get(key), expected.get(key)
        if have is None or want is None or have.ndim != 4 or have.shape[1] == want.shape[1]:
            continue
        if have.shape[0] != want.shape[0] or have.shape[2:] != want.shape[2:]:
            continue  # another architecture: the shape check names it
        weights[key] = adapt_input_conv(want.shape[1], have)
        adapted.append(f"{key} adapted from {have.shape[1]} to {want.shape[1]} input channels (as timm does)")
    if not adapted:
        return source, None
    return replace(source, state_dict=weights), "; ".join(adapted)


def _normalisation(cfg: dict[str, Any]) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The (mean, std) a source's weights were trained with, where its pretrained_cfg records them."""
    mean, std = cfg.get("mean"), cfg.get("std")
    if not isinstance(mean, (list, tuple)) or not isinstance(std, (list, tuple)):
        return None
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


def apply_weights(model: nn.Module, source: Source, *, strict: bool = False, new_head_ok: bool = True) -> LoadReport:
    """Load ``source`` into ``model`` as :func:`select_weights` decides; log and return the report. With
    ``new_head_ok=False`` (the caller did not ask for another class count) a head left at initialisation is an
    error: the model would predict at random with no sign of it."""
    selected, report = select_weights(model, source)
    if not selected:
        arch = f" ({source.architecture} weights)" if source.architecture else ""
        raise CheckpointError(
            f"no tensor of {source.location}{arch} fits this {model_name(model)}: none of its "
            f"{len(source.state_dict)} names is the model's, so it would start from its random initialisation; "
            "check model.name against the weights' architecture"
        )
    if strict and not report.complete:
        raise CheckpointError(f"strict loading failed: {report}")
    if report.head and not new_head_ok and getattr(model, "num_classes", 0):
        raise CheckpointError(
            f"{source.location} has no classifier head that fits its own {model.num_classes} classes "
            f"({report.head}); pass num_classes=N to train a new head, or features_only=True for the features"
        )
    model.load_state_dict(selected, strict=False)
    (logger.info if report.complete and not report.head else logger.warning)("%s", report)
    return report


def load_pretrained(model: nn.Module, source: str | Path, *, ema: bool = False, strict: bool = False) -> LoadReport:
    """Load weights from ``source`` (export dir, run dir, checkpoint, .safetensors or W&B artifact ref) into an
    existing model. A different class count leaves the model's new head at its initialisation; missing and
    unexpected keys are reported (an error with ``strict=True``); shapes that differ elsewhere are an error. A
    ``features_only`` model (timm's wrappers rename the classifier's modules) is refused in one line: 5 of an
    AlterNet's 76 tensors loaded into one, the rest left at their initialisation."""
    if isinstance(model, FeatureListNet | FeatureGetterNet):
        raise ConfigValueError(
            f"load_pretrained loads a classifier's weights, and this is timm's {type(model).__name__} of one (its "
            "modules renamed): load the features with their weights instead, alternet.hub.load(SOURCE, "
            "features_only=True)"
        )
    opened = open_source(source, ema=ema)
    architecture = (getattr(model, "pretrained_cfg", None) or {}).get("architecture")
    if opened.architecture and architecture and opened.architecture != architecture:
        logger.warning("loading %s weights from %s into a %s model", opened.architecture, source, architecture)
    return apply_weights(model, opened, strict=strict)


def load(
    source: str | Path,
    num_classes: int | None = None,
    features_only: bool = False,
    *,
    ema: bool = False,
    strict: bool = False,
    **kwargs: Any,
) -> nn.Module:
    """A model rebuilt from ``source`` with its weights, in eval mode.

    Args:
        source: an export directory, a run directory (its tested checkpoint), a Lightning checkpoint, a W&B
            artifact reference ``entity/project/name:version``, ``hdvw:[ARCH:]FILE``, ``timm:NAME``,
            ``hf-hub:REPO`` or ``local-dir:DIR`` (:data:`alternet.hub.references.KINDS`).
        num_classes: a new class count (the head is then new; every other tensor is loaded).
        features_only: a timm ``FeatureListNet`` returning one feature map per stage (``out_indices=`` selects).
        ema: the EMA weights of a Lightning checkpoint.
        strict: raise instead of reporting missing or unexpected keys.
        **kwargs: model arguments overriding the source's (e.g. ``img_size``, ``drop_path_rate``).

    The load report is logged and kept as ``model.load_report``.
    """
    return build_model(open_source(source, ema=ema), num_classes, features_only, strict=strict, **kwargs)


def build_model(
    opened: Source, num_classes: int | None = None, features_only: bool = False, *, strict: bool = False, **kwargs: Any
) -> nn.Module:
    """The model of an opened source with its weights, in eval mode (:func:`load`'s arguments)."""
    if features_only and num_classes is not None:
        raise ConfigValueError("num_classes has no effect with features_only=True (feature models have no head)")
    if opened.model is not None and not features_only and not kwargs and num_classes in (None, opened.num_classes):
        opened.model.load_report = LoadReport(source=opened.location, loaded=len(opened.state_dict))
        return opened.model.eval()  # timm built it with these weights
    out_indices = kwargs.pop("out_indices", None)
    check_feature_arguments(features_only, out_indices=out_indices)
    args = {**opened.model_args, **kwargs}
    classes = 0 if features_only else (opened.num_classes if num_classes is None else num_classes)
    overlay = dict.fromkeys(OTHER_WEIGHTS_KEYS) | opened.pretrained_cfg  # not the registry's weights' test size
    if classes != opened.num_classes:  # a new head: the source's class names are not its classes
        overlay = {k: v for k, v in overlay.items() if k not in ("label_names", "label_descriptions")}
        overlay["num_classes"] = classes
    model = build_architecture(opened, num_classes=classes, pretrained_cfg_overlay=overlay, **args)
    if features_only:
        check_features(model)  # before its weights: a model without features may also take no headless weights
    report = apply_weights(model, opened, strict=strict, new_head_ok=num_classes is not None or features_only)
    if features_only:
        model = as_features(model, out_indices)
    model.load_report = report
    return model.eval()


def build_architecture(opened: Source, **kwargs: Any) -> nn.Module:
    """``opened``'s architecture built with ``kwargs`` (its model arguments among them); an argument the
    architecture does not take (an export written by another alternet, or edited) is refused in one line."""
    architecture = opened.require_architecture()
    try:
        return create_model(architecture, **kwargs)
    except TypeError as error:
        unexpected = re.search(r"unexpected keyword argument '(\w+)'", str(error))
        if unexpected is None:
            raise
        name = unexpected.group(1)
        if name not in opened.model_args:  # the caller's own keyword
            raise ConfigValueError(f"{architecture} takes no argument {name}") from None
        raise CheckpointError(
            f"{opened.location} builds {architecture} with {name}={opened.model_args[name]!r}, an argument "
            f"{architecture} does not take: it was written by another version of alternet (or edited); export it "
            "again with this one"
        ) from None


def check_features(model: nn.Module) -> None:
    """``features_only=True`` needs timm's ``feature_info`` and ``forward_intermediates``: refused in one line."""
    if not hasattr(model, "feature_info") or not hasattr(model, "forward_intermediates"):
        name = model_name(model)
        raise ConfigValueError(
            f"features_only=True needs a model with timm's feature_info and forward_intermediates, which {name} "
            "lacks; load the classifier with alternet.hub.load and take its features with forward hooks"
        )


def as_features(model: nn.Module, out_indices: int | tuple[int, ...] | None = None) -> nn.Module:
    """The timm feature wrapper of a loaded classifier that ``features_only=True`` builds (one map per stage)."""
    check_features(model)
    return feature_model(model, out_indices)
