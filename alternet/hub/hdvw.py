"""The paper authors' checkpoints (HDVW, github.com/xxxnell/how-do-vits-work) as alternet weights.

HDVW saves ``torch.save({"name": NAME, "state_dict": model.state_dict()[, "optimizer": ...]}, PATH)``
(``models/__init__.py``, ``_save``). Its released CIFAR-100 checkpoints (how-do-vits-work-storage, release v0.1)
hold HDVW's own post-activation ResNet-50 and, as HDVW's README loads them, timm's ViT-Ti, PiT-Ti and Swin-Ti
(timm 0.4), whose layouts today's timm renamed: PiT's pooling and Swin's patch merging moved one stage later and
Swin's classifier became ``head.fc``. HDVW's AlterNets (``models/alternet.py``) name layers after HDVW's modules
and store the attention projections as 1x1 convolutions where ours are linear layers (the same function).

Each arch is a list of renames (regular expressions, applied in order) plus the few reshapes and inferred
arguments it needs; :func:`convert` checks the result against the model it builds, naming the first tensor that
does not fit.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from timm.models import get_pretrained_cfg

from ..dataset_facts import FACTS
from ..errors import CheckpointError, brief_reason
from ..models import create_model
from ..runs.checkpoints import refused_global
from .references import check_hdvw_file

Rename = tuple[str, str | Callable[[re.Match[str]], str]]
DATA_BY_CLASSES = {facts.num_classes: name for name, facts in FACTS.items()}  # 10, 100, 1000 classes


def _one_stage_later(template: str) -> Callable[[re.Match[str]], str]:
    """Stage N's module as stage N+1's: old timm kept PiT's pooling and Swin's patch merging at the end of a stage,
    today's timm at the start of the next one."""
    return lambda match: template.format(stage=int(match[1]) + 1)


def _stage_of_layer(match: re.Match[str]) -> str:
    """HDVW's ``layerN.B.`` (layer0 is the stem) -> our ``stages.N-1.B.``."""
    return f"stages.{int(match[1]) - 1}.{match[2]}."


RESNET_RENAMES: tuple[Rename, ...] = (
    (r"^layer0\.0\.", "conv1."),
    (r"^layer0\.1\.", "bn1."),
    (r"^(layer\d\.\d+)\.conv(\d)\.0\.", r"\1.conv\2."),
    (r"^(layer\d\.\d+)\.conv(\d)\.1\.", r"\1.bn\2."),
    (r"^(layer\d\.\d+)\.shortcut\.", r"\1.downsample."),
    (r"^classifier\.0\.dense\.", "fc."),
)
BLOCK = r"^(stages\.\d+\.\d+)"
ALTERNET_RENAMES: tuple[Rename, ...] = (
    (r"^layer0\.layer0\.0\.", "stem.conv."),
    (r"^layer([1-9])\.(\d+)\.", _stage_of_layer),
    (BLOCK + r"\.(bn|norm1)\.", r"\1.pre_act.0."),  # Conv block's / MSA block's pre-activation BN
    (BLOCK + r"\.shortcut\.0\.", r"\1.shortcut."),
    (BLOCK + r"\.conv\.", r"\1.reduce.0."),  # the MSA block's 1x1 reduction and its BN
    (BLOCK + r"\.norm2\.", r"\1.reduce.1."),
    (BLOCK + r"\.attn\.attn\.to_out\.0\.", r"\1.attn.to_out."),
    (BLOCK + r"\.attn\.attn\.", r"\1.attn."),
    (BLOCK + r"\.attn\.pos_embedding$", r"\1.attn.rel_pos_bias"),
    (r"^classifier\.0\.bn\.", "norm.bn."),
    (r"^classifier\.0\.dense\.", "head.fc."),
)
PIT_OLD_TIMM: tuple[Rename, ...] = ((r"^transformers\.(\d+)\.pool\.", _one_stage_later("transformers.{stage}.pool.")),)
SWIN_OLD_TIMM: tuple[Rename, ...] = (
    (r"^layers\.(\d+)\.downsample\.", _one_stage_later("layers.{stage}.downsample.")),
    (r"^head\.", "head.fc."),
)


@dataclass(frozen=True)
class HdvwArch:
    """How one of HDVW's models becomes one of ours."""

    hdvw: str  # HDVW's name for it (the checkpoint's "name" when trained as HDVW's README does)
    architecture: str  # our zoo name
    origin: str  # the code that defines HDVW's model
    renames: tuple[Rename, ...] = ()
    old_timm_marker: str | None = None  # a key only timm 0.4's layout has: then old_timm_renames apply as well
    old_timm_renames: tuple[Rename, ...] = ()
    derived_buffers: str | None = None  # keys old timm saved that ours computes (regex): dropped
    linear_from_1x1: str | None = None  # our Linear weights HDVW stores as 1x1 conv kernels (regex)
    infer_args: Callable[[dict[str, torch.Tensor]], dict[str, Any]] = field(default=lambda weights: {})


def _stem(key: str) -> Callable[[dict[str, torch.Tensor]], dict[str, Any]]:
    """The stem from its first conv's kernel: 3x3 is HDVW's CIFAR stem (``stem=False``), 7x7 the ImageNet one."""

    def infer(weights: dict[str, torch.Tensor]) -> dict[str, Any]:
        kernel = weights[key].shape[-1] if key in weights else 3
        return {"stem": "imagenet" if kernel == 7 else "cifar"}

    return infer


def _alternet_args(weights: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Stem and window: HDVW's window_size is not saved, but its relative position table is (2p - 1) x (2p - 1)."""
    tables = [v for k, v in weights.items() if k.endswith(".attn.rel_pos_bias")]
    window = {"window": (int(tables[0].shape[-1]) + 1) // 2} if tables else {}
    return {**_stem("stem.conv.weight")(weights), **window}


def _alternet(depth: int) -> HdvwArch:
    return HdvwArch(
        hdvw=f"alternet_{depth}",
        architecture="alternet_r50_hdvw" if depth == 50 else f"alternet_r{depth}",
        origin=f"HDVW models/alternet.py dnn_{depth}",
        renames=ALTERNET_RENAMES,
        linear_from_1x1=r"\.attn\.to_(q|kv|out)\.weight$",
        infer_args=_alternet_args,
    )


ARCHS: dict[str, HdvwArch] = {
    arch.hdvw: arch
    for arch in (
        HdvwArch(
            "resnet_dnn_50",
            "resnet50_hdvw",
            "HDVW models/resnet.py dnn_50",
            RESNET_RENAMES,
            infer_args=_stem("conv1.weight"),
        ),
        HdvwArch("vit_ti", "vit_ti_cifar", "timm's VisionTransformer as HDVW's README builds ViT-Ti (qkv_bias=False)"),
        HdvwArch(
            "pit_ti",
            "pit_ti_cifar",
            "timm's PoolingVisionTransformer as HDVW's README builds PiT-Ti",
            old_timm_marker="transformers.0.pool.conv.weight",
            old_timm_renames=PIT_OLD_TIMM,
        ),
        HdvwArch(
            "swin_ti",
            "swin_ti_cifar",
            "timm's SwinTransformer as HDVW's README builds Swin-Ti (qkv_bias=False)",
            old_timm_marker="layers.0.downsample.reduction.weight",
            old_timm_renames=SWIN_OLD_TIMM,
            derived_buffers=r"\.(relative_position_index|attn_mask)$",
        ),
        *(_alternet(depth) for depth in (18, 34, 50, 101, 152)),
    )
}
# other names for the same archs: HDVW's README calls its ResNet-50 "resnet_50"; our zoo names work too
ALIASES = {"resnet_50": "resnet_dnn_50", **{arch.architecture: name for name, arch in ARCHS.items()}}


@dataclass
class Converted:
    """HDVW weights under our names, with what builds their model."""

    arch: HdvwArch
    hdvw_name: str | None  # the checkpoint's own "name" entry
    state_dict: dict[str, torch.Tensor]
    num_classes: int
    data: str  # the data set the class count and input size belong to (a dataset_facts name)
    model_args: dict[str, Any]


def resolve_arch(name: str | None, recorded: str | None, location: str) -> HdvwArch:
    """``--arch`` (an HDVW name, an alias or our zoo name), else the checkpoint's own ``name`` entry."""
    chosen = name or recorded
    key = ALIASES.get(chosen, chosen) if chosen else None
    if key in ARCHS:
        return ARCHS[key]
    what = f"--arch {name!r}" if name else f"{location} names its model {recorded!r}" if recorded else None
    raise CheckpointError(
        f"{what or f'{location} does not name its model'}: pass --arch with one of HDVW's {', '.join(sorted(ARCHS))}"
    )


def read_hdvw(path: str | Path) -> tuple[str | None, dict[str, torch.Tensor]]:
    """The ``name`` and ``state_dict`` of a checkpoint HDVW saved (or a bare state dict), read with
    ``torch.load(weights_only=True)``: a file that needs arbitrary objects unpickled is refused."""
    path = Path(path).expanduser()
    check_hdvw_file(path)
    not_torch = f"{path} is not a torch checkpoint (torch.save writes a zip archive, or a pickle in older versions)"
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = refused_global(error)
        if not found:  # not a refusal of an object: the bytes themselves are not a checkpoint
            raise CheckpointError(f"{not_torch}: it is unreadable or truncated") from None
        raise CheckpointError(
            f"{path} holds pickled objects besides tensors ({found}), which torch.load(weights_only=True) refuses "
            "to unpickle; only an HDVW checkpoint of plain tensors ({'name', 'state_dict'}) is imported"
        ) from None
    except Exception as error:  # any failure of the unpickler on foreign bytes (KeyError, ValueError, ...)
        raise CheckpointError(f"{not_torch}: it is unreadable or truncated ({brief_reason(error)})") from None
    if isinstance(payload, dict) and "pytorch-lightning_version" in payload:
        raise CheckpointError(
            f"{path} is a Lightning checkpoint (alternet's, say), not HDVW's: export it with alternet export "
            f"{path} --out DIR, or load it as it is (alternet.hub.load, model.pretrained={path})"
        )
    name = payload.get("name") if isinstance(payload, dict) else None
    weights = payload.get("state_dict", payload) if isinstance(payload, dict) else None
    if not isinstance(weights, dict) or not weights or not all(isinstance(v, torch.Tensor) for v in weights.values()):
        raise CheckpointError(f"{path} is not an HDVW checkpoint: expected {{'name', 'state_dict'}} or a state dict")
    if all(k.startswith("module.") for k in weights):  # saved from nn.DataParallel
        weights = {k.removeprefix("module."): v for k, v in weights.items()}
    return name if isinstance(name, str) else None, weights


def rename_all(weights: dict[str, torch.Tensor], arch: HdvwArch) -> dict[str, tuple[str, torch.Tensor]]:
    """Our name -> (HDVW's name, tensor), old timm layouts moved to today's, derived buffers dropped."""
    renames = arch.renames
    if arch.old_timm_marker and arch.old_timm_marker in weights:
        renames = renames + arch.old_timm_renames
    renamed = {}
    for key, value in weights.items():
        if arch.derived_buffers and re.search(arch.derived_buffers, key):
            continue
        ours = key
        for pattern, replacement in renames:
            ours = re.sub(pattern, replacement, ours)
        if ours in renamed:
            raise CheckpointError(
                f"tensors {renamed[ours][0]!r} and {key!r} both stand for {ours!r} of {arch.architecture}"
            )
        if arch.linear_from_1x1 and re.search(arch.linear_from_1x1, ours) and value.shape[2:] == (1, 1):
            value = value.flatten(1)
        renamed[ours] = (key, value)
    return renamed


def _classifier_weight(architecture: str) -> str:
    classifier = get_pretrained_cfg(architecture).classifier
    return f"{classifier if isinstance(classifier, str) else classifier[0]}.weight"


def _data_for(num_classes: int | None, data: str | None, location: str) -> str:
    """The data set of the weights: as given, else the public one with this class count (CIFAR-100, the released
    checkpoints' data, when there is no head to count)."""
    chosen = data or DATA_BY_CLASSES.get(num_classes or 100)
    if chosen not in FACTS:
        raise CheckpointError(
            f"{location} has {num_classes} classes, which no known data set has: "
            f"pass --data with one of {', '.join(sorted(FACTS))}"
        )
    if num_classes and FACTS[chosen].num_classes != num_classes:
        raise CheckpointError(
            f"{location} has {num_classes} classes but --data {chosen} has {FACTS[chosen].num_classes}: "
            "pass the data set the checkpoint was trained on"
        )
    return chosen


def check_fit(renamed: dict[str, tuple[str, torch.Tensor]], model: torch.nn.Module, arch: HdvwArch, where: str) -> None:
    """Every tensor has its place and shape in ``model``, and every place is filled; else the first offender."""
    expected = model.state_dict()
    fits = f"does not fit --arch {arch.hdvw} ({arch.architecture})"
    for ours, (theirs, value) in renamed.items():
        if ours not in expected:
            raise CheckpointError(f"{where} {fits}: its tensor {theirs!r} has no place in the model")
        if tuple(value.shape) != tuple(expected[ours].shape):
            raise CheckpointError(
                f"{where} {fits}: its tensor {theirs!r} has shape {tuple(value.shape)}, the model's {ours!r} "
                f"{tuple(expected[ours].shape)}"
            )
    missing = [key for key in expected if key not in renamed]
    if missing:
        raise CheckpointError(f"{where} {fits}: it has no tensor for the model's {missing[0]!r}")


def convert(
    weights: dict[str, torch.Tensor],
    arch: HdvwArch,
    *,
    hdvw_name: str | None = None,
    data: str | None = None,
    location: str = "the checkpoint",
) -> Converted:
    """HDVW's tensors under our names and shapes, checked against the model they build (on the meta device)."""
    renamed = rename_all(weights, arch)
    state_dict = {ours: value for ours, (_, value) in renamed.items()}
    head = state_dict.get(_classifier_weight(arch.architecture))
    num_classes = int(head.shape[0]) if head is not None and head.ndim == 2 else None
    data = _data_for(num_classes, data, location)
    model_args = {**arch.infer_args(state_dict), "img_size": FACTS[data].image_size}
    with torch.device("meta"):
        model = create_model(arch.architecture, num_classes=num_classes or 1, **model_args)
    check_fit(renamed, model, arch, location)
    return Converted(arch, hdvw_name, state_dict, int(num_classes or 1), data, model_args)


def read_converted(path: str | Path, arch: str | None = None, data: str | None = None) -> Converted:
    """An HDVW checkpoint file as our weights (``arch``: ``--arch``, else the file's ``name``)."""
    name, weights = read_hdvw(path)
    location = str(Path(path).expanduser())
    return convert(weights, resolve_arch(arch, name, location), hdvw_name=name, data=data, location=location)
