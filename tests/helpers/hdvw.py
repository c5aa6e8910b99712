"""Checkpoints as the paper's code (HDVW) saves them, written from our models: each converter renames (and
reshapes) our tensors *into* HDVW's layout, the inverse of :mod:`alternet.hub.hdvw`'s mapping, written from HDVW's
key names (``models/resnet.py`` + ``resnet_dnn_block.py``, ``models/alternet.py`` + ``preresnet_dnn_block.py``, and
timm 0.4's ViT / PiT / Swin)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import torch

from alternet.models import create_model

TensorDict = dict[str, torch.Tensor]


def _sub(rules: list[tuple[str, str | Callable[[re.Match[str]], str]]], key: str) -> str:
    for pattern, replacement in rules:
        key = re.sub(pattern, replacement, key)
    return key


def resnet_to_hdvw(model: torch.nn.Module) -> TensorDict:
    """timm's ResNet names -> HDVW models/resnet.py (layer0 = conv, bn, relu; blocks' conv{n} = Sequential(conv,
    bn[, relu]); shortcut = Sequential(conv1x1, bn); classifier = Sequential(GAPBlock(gap, dense)))."""
    rules = [
        (r"^conv1\.", "layer0.0."),
        (r"^bn1\.", "layer0.1."),
        (r"^(layer\d\.\d+)\.conv(\d)\.", r"\1.conv\2.0."),
        (r"^(layer\d\.\d+)\.bn(\d)\.", r"\1.conv\2.1."),
        (r"^(layer\d\.\d+)\.downsample\.", r"\1.shortcut."),
        (r"^fc\.", "classifier.0.dense."),
    ]
    return {_sub(rules, k): v for k, v in model.state_dict().items()}


def alternet_to_hdvw(model: torch.nn.Module) -> TensorDict:
    """Our AlterNet names -> HDVW models/alternet.py: stem ``layer0.layer0.0``; stage s block b ``layer{s+1}.b``;
    Conv blocks (preresnet_dnn_block) ``bn``, ``shortcut.0``, ``conv1``, ``conv2``/``conv3`` = (bn, relu, conv);
    MSA blocks (AttentionBlockB) ``norm1``, ``conv``, ``norm2``, ``attn.attn.to_q/to_kv/to_out.0`` as 1x1 convs and
    ``attn.pos_embedding``; head BNGAPBlock ``classifier.0.bn`` / ``classifier.0.dense``."""
    msa_blocks = {info.name for info in model.blocks() if info.kind == "M"}
    out = {}
    for key, value in model.state_dict().items():
        block = re.match(r"^stages\.(\d+)\.(\d+)\.", key)
        hdvw = key
        if block:
            prefix, rest = f"layer{int(block[1]) + 1}.{block[2]}.", key[block.end() :]
            is_msa = f"stages.{block[1]}.{block[2]}" in msa_blocks
            rest = _sub(
                [
                    (r"^pre_act\.0\.", "norm1." if is_msa else "bn."),
                    (r"^shortcut\.", "shortcut.0."),
                    (r"^reduce\.0\.", "conv."),
                    (r"^reduce\.1\.", "norm2."),
                    (r"^attn\.to_out\.", "attn.attn.to_out.0."),
                    (r"^attn\.to_(q|kv)\.", r"attn.attn.to_\1."),
                    (r"^attn\.rel_pos_bias$", "attn.pos_embedding"),
                ],
                rest,
            )
            hdvw = prefix + rest
            if rest.startswith("attn.attn.") and rest.endswith(".weight"):
                value = value[:, :, None, None]  # HDVW's Attention2d projects with 1x1 convolutions
        hdvw = _sub(
            [
                (r"^stem\.conv\.", "layer0.layer0.0."),
                (r"^norm\.bn\.", "classifier.0.bn."),
                (r"^head\.fc\.", "classifier.0.dense."),
            ],
            hdvw,
        )
        out[hdvw] = value
    return out


def vit_to_hdvw(model: torch.nn.Module) -> TensorDict:
    """timm 0.4's VisionTransformer has today's names."""
    return dict(model.state_dict())


def pit_to_old_timm(model: torch.nn.Module) -> TensorDict:
    """timm 0.4's PiT pools at the end of a stage (``transformers.N.pool``), today's at the start of the next."""
    rule = (r"^transformers\.(\d+)\.pool\.", lambda m: f"transformers.{int(m[1]) - 1}.pool.")
    return {_sub([rule], k): v for k, v in model.state_dict().items()}


def swin_to_old_timm(model: torch.nn.Module) -> TensorDict:
    """timm 0.4's Swin merges patches at the end of a stage, names its classifier ``head`` and saves two buffers
    today's recomputes: each block's ``relative_position_index`` and, in shifted blocks, ``attn_mask``."""
    rules = [
        (r"^layers\.(\d+)\.downsample\.", lambda m: f"layers.{int(m[1]) - 1}.downsample."),
        (r"^head\.fc\.", "head."),
    ]
    out = {_sub(rules, k): v for k, v in model.state_dict().items()}
    for name, buffer in model.named_buffers():
        if name.endswith(("relative_position_index", "attn_mask")) and buffer is not None:
            out[name] = buffer.clone()
    return out


def randomized(name: str, num_classes: int = 100) -> torch.nn.Module:
    """Our model with every tensor random (batch-norm statistics too), so a tensor in the wrong place shows."""
    torch.manual_seed(0)
    model = create_model(name, num_classes=num_classes)
    with torch.no_grad():
        for key, tensor in model.state_dict().items():
            if tensor.is_floating_point():
                tensor.copy_(
                    torch.rand_like(tensor) + 0.5 if key.endswith("running_var") else torch.randn_like(tensor) * 0.05
                )
    return model.eval()


def save_as_hdvw(path: Path, name: str, state_dict: TensorDict, **extra) -> Path:
    torch.save({"name": name, "state_dict": state_dict, **extra}, path)  # HDVW's models._save
    return path
