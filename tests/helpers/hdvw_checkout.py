"""A small stand-in of a how-do-vits-work checkout, written for tools/parity.py's smoke test: the files the tool
reads (``models/alternet.py``, ``ops/loss_landscapes.py``, ``configs/cifar100_vit.yaml`` and the three notebooks)
with the interfaces it calls and the cell markers it lifts by. Nothing of HDVW is copied: each piece restates, in
its own code, the definition docs/analysis.md gives for HDVW's (Fourier profiles, feature-map variance, the
landscape's directions and loss), so the tool's rows against it should agree.

``dnn_18`` is our ``alternet_r18`` seen as HDVW lays it out: its stem, stages and head as ``layer0``..``layer4``
and ``classifier``, its state dict under HDVW's keys (:func:`helpers.hdvw.alternet_to_hdvw` and back through
:mod:`alternet.hub.hdvw`).
"""

from __future__ import annotations

import json
from pathlib import Path

MODELS = '''
"""Stand-in of HDVW's models/alternet.py: dnn_18 with HDVW's module names and state-dict keys."""

import torch
from torch import nn

from alternet.hub.hdvw import ARCHS, convert
from alternet.models import create_model
from helpers.hdvw import alternet_to_hdvw


class StandInAlterNet(nn.Module):
    def __init__(self, num_classes, window_size):
        super().__init__()
        ours = create_model("alternet_r18", num_classes=num_classes, stem="cifar", window=window_size)
        object.__setattr__(self, "ours", ours)  # reached through the layers below, not registered twice
        self.layer0 = ours.stem
        for index, stage in enumerate(ours.stages):
            setattr(self, f"layer{index + 1}", stage)
        self.classifier = nn.Sequential(ours.norm, ours.head.global_pool, ours.head.drop, ours.head.fc)
        self.name = "alternet_18"

    def forward(self, x):
        x = self.layer0(x)
        for layer in (self.layer1, self.layer2, self.layer3, self.layer4):
            x = layer(x)
        return self.classifier(x)

    def state_dict(self, *args, **kwargs):
        return alternet_to_hdvw(self.ours)

    def load_state_dict(self, state_dict, strict=True):
        return self.ours.load_state_dict(convert(dict(state_dict), ARCHS["alternet_18"]).state_dict, strict=strict)


def dnn_18(num_classes=1000, stem=True, window_size=7, **kwargs):
    assert not stem, "the stand-in has the CIFAR stem only"
    return StandInAlterNet(num_classes, window_size)
'''

LOSS_LANDSCAPES = '''
"""Stand-in of HDVW's ops/loss_landscapes.py: random bases normalised to the weights' norms over dim 0 (1-D
tensors and the keywords' tensors held still), and the loss on a grid of w0 + x d1 + y d2."""

import copy

import numpy as np
import torch


def rand_basis(ws, gpu=True):
    return {key: torch.randn(value.shape) for key, value in ws.items()}


def normalize_filter(bs, ws):
    out = {}
    for key, w in ws.items():
        if w.dim() <= 1:
            out[key] = torch.zeros(w.shape, dtype=torch.float32)
            continue
        b = bs[key].float()
        out[key] = b * (w.float().norm(dim=0, keepdim=True) / (b.norm(dim=0, keepdim=True) + 1e-7))
    return out


def create_bases(model, kws=None, gpu=True):
    ws0 = copy.deepcopy(model.state_dict())
    bases = [normalize_filter(rand_basis(ws0, gpu), ws0) for _ in range(2)]
    for bs in bases:
        for key in bs:
            if any(kw in key for kw in kws or []):
                bs[key] = torch.zeros_like(bs[key])
    return bases


def test(model, n_ff, dataset):
    model.eval()
    nll, correct, count = 0.0, 0.0, 0
    with torch.no_grad():
        for xs, ys in dataset:
            logits = model(xs)
            nll += float(-(ys * torch.log_softmax(logits, dim=-1)).sum())
            correct += float((logits.argmax(dim=-1) == ys.argmax(dim=-1)).sum())
            count += len(xs)
    return nll / count, correct / count * 100


def get_loss_landscape(model, n_ff, dataset, x_min=-1.0, x_max=1.0, n_x=11, y_min=-1.0, y_max=1.0, n_y=11,
                       bases=None, kws=None, gpu=True):
    ws0 = copy.deepcopy(model.state_dict())
    bases = create_bases(model, kws, gpu) if bases is None else bases
    grid = {}
    for x in np.linspace(x_min, x_max, n_x):
        for y in np.linspace(y_min, y_max, n_y):
            moved = {k: (w + x * bases[0][k] + y * bases[1][k]).to(w.dtype) for k, w in ws0.items()}
            model.load_state_dict(moved)
            nll, acc = test(model, n_ff, dataset)
            l2 = float(sum(p.detach().norm() for p in model.parameters()))
            grid[(x, y)] = (nll, l2, nll, 0.0, 0.0, (acc / 100,))
            print(x, y, grid[(x, y)])
    model.load_state_dict(ws0)
    return grid
'''

CONFIG = """
dataset:
  name: cifar100
  mean: [0.5071, 0.4865, 0.4409]
  std: [0.2673, 0.2564, 0.2762]
train:
  smoothing: 0.1
  mixup:
    mixup_alpha: 0.8
    cutmix_alpha: 1.0
    prob: 1.0
    switch_prob: 0.5
    mode: batch
    label_smoothing: 0.1
optim:
  name: AdamW
  lr: 0.001
  weight_decay: 0.05
"""

# the notebooks' cells, each a list of statements as the tool finds them by their markers
LANDSCAPE_CELLS = [
    """
from timm.data import Mixup


def mixup_function(train_args):
    args = copy.deepcopy(train_args).get("mixup")
    return Mixup(**args) if args else None


transform = mixup_function(train_args)
""",
    """
metrics_grid = ops.loss_landscapes.get_loss_landscape(
    model, 1, dataset_train, transform=transform, kws=["pos_embed", "relative_position"],
    x_min=-1.0, x_max=1.0, n_x=21, y_min=-1.0, y_max=1.0, n_y=21, gpu=gpu,
)
""",
    """
data["loss"] = data["NLL"] + optim_args["weight_decay"] * data["l2"]
side = int(np.sqrt(len(data["loss"])))
""",
]
LATENTS_CELL = """
latents = []
with torch.no_grad():
    for xs, ys in dataset_test:
        x = xs
        for block in blocks:
            x = block(x)
            latents.append(x)
"""
MAPS = """
from einops import rearrange


def as_map(latent):
    if latent.dim() == 3:  # tokens: the class token dropped, the rest on their square grid
        latent = latent[:, 1:]
        side = int(latent.shape[1] ** 0.5)
        latent = rearrange(latent, "b (h w) c -> b c h w", h=side, w=side)
    return latent

"""
VARIANCE_CELLS = [
    "blocks = [model.layer0, *model.layer1, *model.layer2, *model.layer3, *model.layer4, model.classifier]",
    LATENTS_CELL,
    MAPS
    + """
variances = []
for latent in latents[:-1]:  # the logits dropped
    variances.append(as_map(latent).var(dim=[-1, -2]).mean(dim=[0, 1]))
if model.name == "resnet_50":
    variances = variances[1:]
""",
    """
model = timm.models.vision_transformer.VisionTransformer(
    img_size=32, patch_size=4, embed_dim=48, depth=2, num_heads=3, num_classes=100
)
model.name = "vit_ti"
models.stats(model)


class PatchEmbed(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.norm_pre(self.model.patch_drop(self.model._pos_embed(self.model.patch_embed(x))))


class Residual(nn.Module):
    def __init__(self, *fns):
        super().__init__()
        self.fns = nn.Sequential(*fns)

    def forward(self, x):
        return x + self.fns(x)


class Head(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model.forward_head(self.model.norm(x))


blocks = [PatchEmbed(model)]
for block in model.blocks:
    blocks.append(Residual(block.norm1, block.attn, block.ls1, block.drop_path1))
    blocks.append(Residual(block.norm2, block.mlp, block.ls2, block.drop_path2))
blocks.append(Head(model))
""",
]
FOURIER_CELLS = [
    LATENTS_CELL.replace("for xs, ys in dataset_test:", "for xs in [xs]:"),
    MAPS
    + """
def fourier(x):
    return torch.log(torch.fft.fft2(x).abs() + 1e-6)


def shift(x):
    h, w = x.shape[-2:]
    return torch.roll(x, shifts=(h // 2, w // 2), dims=(-2, -1))


fourier_latents = []
for latent in latents[:-1]:  # the logits dropped
    latent = as_map(latent)
    h = latent.shape[-1]
    profile = shift(fourier(latent)).mean(dim=(0, 1)).diag()[h // 2:]
    fourier_latents.append(profile - profile[0])
fig, ax = plt.subplots(1, 1)
""",
]


def _notebook(cells: list[str]) -> str:
    return json.dumps(
        {
            "cells": [{"cell_type": "code", "source": cell.strip().splitlines(keepends=True)} for cell in cells],
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def write_checkout(root: Path) -> Path:
    """The stand-in checkout under ``root``."""
    files = {
        "models/alternet.py": MODELS,
        "ops/__init__.py": "",
        "ops/loss_landscapes.py": LOSS_LANDSCAPES,
        "configs/cifar100_vit.yaml": CONFIG,
        "losslandscape.ipynb": _notebook(LANDSCAPE_CELLS),
        "featuremap_variance.ipynb": _notebook(VARIANCE_CELLS),
        "fourier_analysis.ipynb": _notebook(FOURIER_CELLS),
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip())
    return root
