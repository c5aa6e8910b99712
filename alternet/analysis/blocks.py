"""Block adapters: any supported network seen as a stem followed by residual blocks labelled C or M.

* alternet backbones (:class:`~alternet.models.AlterNet`): their own ``blocks()``; lesion by ``residual_scale = 0``.
* timm ``resnet*``: every BasicBlock / Bottleneck is a ``C`` block; lesion by zeroing the branch's last BN.
* timm ``vit_*``: each transformer block gives two residual blocks, attention (``M``) then MLP (``C``);
  tokens become (B, C, H, W) maps with the prefix (class/register) tokens dropped; lesion by zeroing the
  residual's ``ls1`` / ``ls2`` output.

Every block offers a :class:`Tap` on its output map and, for MSA blocks, an :class:`AttentionTap`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial

import torch
from timm.models.resnet import BasicBlock, Bottleneck, ResNet
from timm.models.vision_transformer import Attention, VisionTransformer
from torch import nn

from ..models import AlterNet, FocusedLinearAttention, WindowAttention
from ..models.blocks import PreActBlock
from .errors import AnalysisError

SUPPORTED = "alternet backbones (alternet_*, preresnet_*), timm ResNet (resnet*) and timm VisionTransformer (vit_*)"


def _same(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class Tap:
    """A feature map read from a module's output (or its first input), converted to (B, C, H, W)."""

    module: nn.Module
    on_input: bool = False
    to_map: Callable[[torch.Tensor], torch.Tensor] = _same


@dataclass(frozen=True)
class AttentionTap:
    """The input of an attention module, and how to turn it into attention maps and token positions.

    ``probabilities(x)`` gives row-stochastic maps (B', heads, N, N); ``positions(x)`` the (N, 2) row/column
    coordinates of the tokens in pixels of the block's feature map.
    """

    module: nn.Module
    probabilities: Callable[[torch.Tensor], torch.Tensor]
    positions: Callable[[torch.Tensor], torch.Tensor]
    # the kernel of the position bias alone, (heads or 1, N, N) rows, for kinds that have one (a Conv-like,
    # input-independent reference for data specificity); None for kinds without a relative position bias
    position_kernel: Callable[[], torch.Tensor] | None = None


@dataclass(frozen=True)
class Block:
    """One residual block: name, ``kind`` (``C`` or ``M``), stage, output tap, lesion and attention access.

    ``projection``: the block's shortcut is a learned projection (the first block of a stage, where the width or
    resolution changes), so a lesion leaves that map rather than the identity and drops accuracy by construction.
    """

    name: str
    kind: str
    stage: int
    output: Tap
    lesion: Callable[[], AbstractContextManager[None]]
    attention: AttentionTap | None = None
    projection: bool = False


@dataclass(frozen=True)
class BlockSequence:
    """The stem (depth 0) and the residual blocks (depths 1..L) of a network."""

    stem: Tap
    blocks: tuple[Block, ...]

    @property
    def taps(self) -> list[Tap]:
        return [self.stem, *(block.output for block in self.blocks)]

    def depth_rows(self) -> list[dict[str, object]]:
        """Per depth (stem first): ``depth``, ``normalized_depth``, ``name``, ``kind``, ``stage``."""
        total = len(self.blocks)
        rows = [dict(depth=0, normalized_depth=0.0, name="stem", kind="stem", stage=self.blocks[0].stage)]
        for depth, block in enumerate(self.blocks, start=1):
            rows.append(
                dict(depth=depth, normalized_depth=depth / total, name=block.name, kind=block.kind, stage=block.stage)
            )
        return rows


@contextmanager
def zero_residual_scale(block: PreActBlock) -> Iterator[None]:
    """Remove an alternet block's residual branch for the duration of the context."""
    saved = block.residual_scale
    block.residual_scale = 0.0
    try:
        yield
    finally:
        block.residual_scale = saved


@contextmanager
def zero_output(module: nn.Module) -> Iterator[None]:
    """Replace ``module``'s output by zeros for the duration of the context."""
    handle = module.register_forward_hook(lambda _module, _args, output: torch.zeros_like(output))
    try:
        yield
    finally:
        handle.remove()


def grid_positions(height: int, width: int) -> torch.Tensor:
    """(height * width, 2) row/column coordinates of a row-major token grid."""
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    return torch.stack([rows.flatten(), cols.flatten()], dim=1).float()


# alternet ------------------------------------------------------------------------------------


def _alternet_attention(attn: nn.Module) -> AttentionTap:
    """Window/global softmax maps use window coordinates; focused linear maps span the whole map."""
    if isinstance(attn, WindowAttention):
        return AttentionTap(
            attn,
            attn.attention_map,
            lambda _x: grid_positions(*attn.window),
            lambda: attn.position_bias().float().softmax(dim=-1),
        )
    if isinstance(attn, FocusedLinearAttention):
        return AttentionTap(attn, attn.attention_map, lambda x: grid_positions(*x.shape[-2:]))
    raise AnalysisError(f"no attention statistics for {type(attn).__name__}")


def _alternet_blocks(model: AlterNet) -> BlockSequence:
    blocks = []
    for info in model.blocks():
        attention = _alternet_attention(info.module.attn) if info.kind == "M" else None
        lesion = partial(zero_residual_scale, info.module)
        projection = info.module.shortcut is not None
        blocks.append(Block(info.name, info.kind, info.stage, Tap(info.module), lesion, attention, projection))
    return BlockSequence(Tap(model.stem), tuple(blocks))


# timm ResNet ---------------------------------------------------------------------------------


def _resnet_blocks(model: ResNet) -> BlockSequence:
    blocks = []
    for stage in range(4):
        for position, module in enumerate(getattr(model, f"layer{stage + 1}")):
            if isinstance(module, Bottleneck):
                branch_end = module.bn3
            elif isinstance(module, BasicBlock):
                branch_end = module.bn2
            else:
                raise AnalysisError(f"unsupported ResNet block {type(module).__name__} in layer{stage + 1}")
            name = f"layer{stage + 1}.{position}"
            lesion = partial(zero_output, branch_end)
            blocks.append(Block(name, "C", stage, Tap(module), lesion, projection=module.downsample is not None))
    return BlockSequence(Tap(model.maxpool), tuple(blocks))


# timm ViT ------------------------------------------------------------------------------------


def _vit_token_map(model: VisionTransformer) -> Callable[[torch.Tensor], torch.Tensor]:
    prefix = model.num_prefix_tokens
    height, width = model.patch_embed.grid_size

    def to_map(tokens: torch.Tensor) -> torch.Tensor:
        patches = tokens[:, prefix:]
        if patches.shape[1] != height * width:
            raise AnalysisError(
                f"ViT has {patches.shape[1]} patch tokens but a {height}x{width} patch grid; "
                "analyse it at the image size it was built for"
            )
        return patches.transpose(1, 2).reshape(tokens.shape[0], -1, height, width)

    return to_map


@torch.no_grad()
def vit_attention_map(attn: Attention, tokens: torch.Tensor, prefix: int) -> torch.Tensor:
    """Softmax attention among the patch tokens of a timm ViT block, rows renormalised after dropping the
    prefix tokens: (B, heads, N_patches, N_patches)."""
    b, n, _ = tokens.shape
    qkv = attn.qkv(tokens).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
    probs = ((q * attn.scale) @ k.transpose(-2, -1)).softmax(dim=-1)[..., prefix:, prefix:]
    return probs / probs.sum(dim=-1, keepdim=True)


def _vit_blocks(model: VisionTransformer) -> BlockSequence:
    to_map = _vit_token_map(model)
    positions = grid_positions(*model.patch_embed.grid_size)
    blocks = []
    for index, module in enumerate(model.blocks):
        if not isinstance(module.attn, Attention):
            raise AnalysisError(f"unsupported attention {type(module.attn).__name__} in ViT block {index}")
        probabilities = partial(vit_attention_map, module.attn, prefix=model.num_prefix_tokens)
        attention = AttentionTap(module.attn, probabilities, lambda _x: positions)
        # The attention residual's output is the input of norm2; the MLP residual's output is the block's.
        attn_out = Tap(module.norm2, on_input=True, to_map=to_map)
        blocks.append(Block(f"blocks.{index}.attn", "M", 0, attn_out, partial(zero_output, module.ls1), attention))
        blocks.append(
            Block(f"blocks.{index}.mlp", "C", 0, Tap(module, to_map=to_map), partial(zero_output, module.ls2))
        )
    return BlockSequence(Tap(model.blocks, on_input=True, to_map=to_map), tuple(blocks))


def block_sequence(model: nn.Module) -> BlockSequence:
    """The stem and residual blocks of ``model`` (raises :class:`AnalysisError` for unsupported models)."""
    if isinstance(model, AlterNet):
        return _alternet_blocks(model)
    if isinstance(model, ResNet):
        return _resnet_blocks(model)
    if isinstance(model, VisionTransformer):
        return _vit_blocks(model)
    raise AnalysisError(f"block analyses do not support {type(model).__name__}; supported: {SUPPORTED}")
