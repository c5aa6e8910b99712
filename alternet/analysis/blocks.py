"""Block adapters: any supported network seen as a stem followed by residual blocks labelled C or M.

* alternet backbones (:class:`~alternet.models.AlterNet`): their own ``blocks()``; lesion by ``residual_scale = 0``.
* timm ``resnet*``: every BasicBlock / Bottleneck is a ``C`` block; lesion by zeroing the branch's last BN.
* timm ``vit_*``: each transformer block gives two residual blocks, attention (``M``) then MLP (``C``);
  tokens become (B, C, H, W) maps with the prefix (class/register) tokens dropped; lesion by zeroing the
  residual's ``ls1`` / ``ls2`` output. A sliding-window ViT (``model.local_kernel``) maps its masked attention.
* timm PiT (``pit_*``): the same two residual blocks per transformer block, stage by stage, each stage's tokens
  on its own (pooled) grid; the stem is the embedded, position-encoded map.
* timm Swin (``swin_*``): each Swin block gives its (shifted) window attention residual (``M``) and its MLP
  residual (``C``); attention maps per window with the relative position bias and the shift's mask.
* timm ByobNet (BoTNet, HaloNet, LambdaNet; ``model=byob``): a ``SelfAttnBlock`` is ``M``, every other block
  ``C``; attention maps of bottleneck (BoTNet) and halo attention; a lambda layer has none (the block says so).
* timm MaxxVit (CoAtNet, MaxViT; ``model=maxxvit``): MBConv / ConvNeXt blocks are ``C``, transformer and MaxViT
  blocks ``M``; attention maps of a transformer block (the whole map) and of a MaxViT block's window attention
  (its grid attention is not mapped).
* A timm hybrid's lesion zeroes every residual branch of the block (its ``drop_path*`` outputs), so the block
  passes its shortcut only.

Every block offers a :class:`Tap` on its output map and, for MSA blocks, an :class:`AttentionTap` (or, where the
block computes no attention map, ``attention_note`` saying why).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial

import torch
from timm.layers.bottleneck_attn import BottleneckAttn
from timm.layers.halo_attn import HaloAttn
from timm.layers.lambda_layer import LambdaLayer
from timm.models.byobnet import ByobNet, SelfAttnBlock
from timm.models.maxxvit import (
    Attention2d,
    AttentionCl,
    ConvNeXtBlock,
    MaxxVit,
    MaxxVitBlock,
    MbConvBlock,
    ParallelMaxxVitBlock,
    TransformerBlock2d,
)
from timm.models.pit import PoolingVisionTransformer
from timm.models.resnet import BasicBlock, Bottleneck, ResNet
from timm.models.swin_transformer import SwinTransformer, SwinTransformerBlock
from timm.models.swin_transformer import WindowAttention as SwinWindowAttention
from timm.models.vision_transformer import Attention, VisionTransformer
from timm.models.vision_transformer import Block as VitBlock
from torch import nn

from ..models import AlterNet, FocusedLinearAttention, PositionOnlyAttention, WindowAttention
from ..models.blocks import PreActBlock
from .errors import AnalysisError

SUPPORTED = (
    "alternet backbones (alternet_*, preresnet_*), timm ResNet (resnet*), timm VisionTransformer (vit_*), "
    "timm PiT (pit_*), timm Swin (swin_*), "
    "timm ByobNet (botnet*, halonet*, lambda_resnet*, model=byob) and timm MaxxVit (coatnet*, maxvit*, model=maxxvit)"
)


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
    coordinates of the tokens in pixels of the block's feature map, or, where queries and keys differ (halo
    attention: a block of queries, its block and halo of keys), a pair (queries (Nq, 2), keys (Nk, 2)) for maps
    (B', heads, Nq, Nk).
    """

    module: nn.Module
    probabilities: Callable[[torch.Tensor], torch.Tensor]
    positions: Callable[[torch.Tensor], torch.Tensor]
    # the kernel of the position bias alone, (heads or 1, N, N) rows, for kinds that have one (a Conv-like,
    # input-independent reference for data specificity); None for kinds without a relative position bias
    position_kernel: Callable[[torch.Tensor], torch.Tensor] | None = None  # of the input, as ``positions``


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
    attention_note: str | None = None  # an M block without attention maps, or mapped in part: why (a lambda layer)


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
        stem = dict(depth=0, normalized_depth=0.0, name="stem", kind="stem", stage=self.blocks[0].stage)
        return [stem] + [
            dict(depth=depth, normalized_depth=depth / total, name=block.name, kind=block.kind, stage=block.stage)
            for depth, block in enumerate(self.blocks, start=1)
        ]


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
def zero_outputs(*modules: nn.Module) -> Iterator[None]:
    """Replace every module's output by zeros for the duration of the context (a block's residual branches)."""
    handles = [m.register_forward_hook(lambda _module, _args, output: torch.zeros_like(output)) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def grid_positions(height: int, width: int) -> torch.Tensor:
    """(height * width, 2) row/column coordinates of a row-major token grid."""
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    return torch.stack([rows.flatten(), cols.flatten()], dim=1).float()


# alternet ------------------------------------------------------------------------------------


def _alternet_attention(attn: nn.Module) -> AttentionTap:
    """Window/global softmax maps use window coordinates; focused linear maps span the whole map."""
    if isinstance(attn, WindowAttention | PositionOnlyAttention):
        return AttentionTap(  # the window clipped to the map, as the layer cuts it (a 2x2 last stage at 16 px)
            attn,
            attn.attention_map,
            lambda x: grid_positions(*attn.window_for(x.shape[-2:])),
            lambda x: attn.position_bias(attn.window_for(x.shape[-2:])).float().softmax(dim=-1),
        )
    if isinstance(attn, FocusedLinearAttention):
        return AttentionTap(attn, attn.attention_map, map_positions)
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
            lesion = partial(zero_outputs, branch_end)
            blocks.append(Block(name, "C", stage, Tap(module), lesion, projection=module.downsample is not None))
    return BlockSequence(Tap(model.maxpool), tuple(blocks))


# timm ViT ------------------------------------------------------------------------------------


def token_map(prefix: int, height: int, width: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """(B, prefix + H*W, C) tokens to the (B, C, H, W) map of their patch tokens."""

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
    prefix tokens: (B, heads, N_patches, N_patches). A sliding-window block's mask (``local_mask``) applies."""
    b, n, _ = tokens.shape
    qkv = attn.qkv(tokens).reshape(b, n, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
    q, k = attn.q_norm(qkv[0]), attn.k_norm(qkv[1])
    logits = (q * attn.scale) @ k.transpose(-2, -1)
    if (mask := getattr(attn, "local_mask", None)) is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    probs = logits.softmax(dim=-1)[..., prefix:, prefix:]
    return probs / probs.sum(dim=-1, keepdim=True)


def _transformer_blocks(
    modules: nn.Sequential, name: str, stage: int, prefix: int, grid: tuple[int, int]
) -> list[Block]:
    """Two residual blocks per timm ViT block (attention ``M``, then MLP ``C``), tokens on ``grid``."""
    to_map = token_map(prefix, *grid)
    positions = grid_positions(*grid)
    blocks = []
    for index, module in enumerate(modules):
        if not isinstance(module, VitBlock) or not isinstance(module.attn, Attention):
            raise AnalysisError(f"unsupported block or attention {type(module).__name__} at {name}.{index}")
        probabilities = partial(vit_attention_map, module.attn, prefix=prefix)
        attention = AttentionTap(module.attn, probabilities, lambda _x: positions)
        # The attention residual's output is the input of norm2; the MLP residual's output is the block's.
        attn_out = Tap(module.norm2, on_input=True, to_map=to_map)
        lesion = partial(zero_outputs, module.ls1)
        blocks.append(Block(f"{name}.{index}.attn", "M", stage, attn_out, lesion, attention))
        mlp_out = Tap(module, to_map=to_map)
        blocks.append(Block(f"{name}.{index}.mlp", "C", stage, mlp_out, partial(zero_outputs, module.ls2)))
    return blocks


def _vit_blocks(model: VisionTransformer) -> BlockSequence:
    grid = tuple(model.patch_embed.grid_size)
    blocks = _transformer_blocks(model.blocks, "blocks", 0, model.num_prefix_tokens, grid)
    stem = Tap(model.blocks, on_input=True, to_map=token_map(model.num_prefix_tokens, *grid))
    return BlockSequence(stem, tuple(blocks))


# timm PiT ------------------------------------------------------------------------------------


def _pit_blocks(model: PoolingVisionTransformer) -> BlockSequence:
    """Each stage's transformer blocks on the stage's grid: the first stage's is the patch grid, each later one's
    that of its pooling convolution's output."""
    height, width = model.patch_embed.grid_size
    blocks = []
    for index, stage in enumerate(model.transformers):
        if stage.pool is not None:
            conv = stage.pool.conv
            (kh, kw), (sh, sw), (ph, pw) = conv.kernel_size, conv.stride, conv.padding
            height, width = (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1
        name = f"transformers.{index}.blocks"
        blocks += _transformer_blocks(stage.blocks, name, index, model.num_tokens, (height, width))
    return BlockSequence(Tap(model.pos_drop), tuple(blocks))


# timm Swin -----------------------------------------------------------------------------------


@torch.no_grad()
def swin_attention_map(block: SwinTransformerBlock, windows: torch.Tensor) -> torch.Tensor:
    """A Swin block's window attention over its (B * windows, N, C) input, with the relative position bias and,
    in a shifted block, the shift's mask (its entries between regions the roll brought together are 0):
    (B * windows, heads, N, N)."""
    attn = block.attn
    b, n, _ = windows.shape
    q, k, _ = attn.qkv(windows).reshape(b, n, 3, attn.num_heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
    logits = (q * attn.scale) @ k.transpose(-2, -1) + attn._get_rel_pos_bias()
    mask = block.attn_mask
    if mask is not None:
        logits = (logits.view(-1, mask.shape[0], attn.num_heads, n, n) + mask[None, :, None]).view(b, -1, n, n)
    return logits.softmax(dim=-1)


def _swin_blocks(model: SwinTransformer) -> BlockSequence:
    blocks = []
    for stage_index, stage in enumerate(model.layers):
        for position, module in enumerate(stage.blocks):
            if not isinstance(module, SwinTransformerBlock) or not isinstance(module.attn, SwinWindowAttention):
                raise AnalysisError(f"unsupported Swin block {type(module).__name__} in stage {stage_index}")
            if getattr(module, "dynamic_mask", False):
                raise AnalysisError("a Swin with dynamic_mask=True computes its shift mask per input; build it without")
            name = f"layers.{stage_index}.blocks.{position}"
            window = tuple(module.window_size)
            attention = AttentionTap(
                module.attn,
                partial(swin_attention_map, module),
                lambda _x, window=window: grid_positions(*window),
                lambda _x, attn=module.attn: attn._get_rel_pos_bias()[0].float().softmax(dim=-1),
            )
            # The attention residual's output is the input of norm2, (B, H*W, C) tokens; the block's is (B, H, W, C).
            attn_out = Tap(module.norm2, on_input=True, to_map=partial(_swin_tokens_to_map, module))
            lesion = partial(zero_outputs, module.drop_path1)
            blocks.append(Block(f"{name}.attn", "M", stage_index, attn_out, lesion, attention))
            mlp_out = Tap(module, to_map=_channels_last_to_map)
            blocks.append(Block(f"{name}.mlp", "C", stage_index, mlp_out, partial(zero_outputs, module.drop_path2)))
    return BlockSequence(Tap(model.patch_embed, to_map=_channels_last_to_map), tuple(blocks))


def _channels_last_to_map(x: torch.Tensor) -> torch.Tensor:
    return x.permute(0, 3, 1, 2)


def _swin_tokens_to_map(block: SwinTransformerBlock, tokens: torch.Tensor) -> torch.Tensor:
    height, width = block.input_resolution
    return tokens.transpose(1, 2).reshape(tokens.shape[0], -1, height, width)


# timm hybrids: ByobNet (BoTNet, HaloNet, LambdaNet) and MaxxVit (CoAtNet, MaxViT) ---------------


def residual_branches(block: nn.Module) -> list[nn.Module]:
    """A timm block's residual branch ends: its ``drop_path*`` modules (DropPath, or Identity at rate 0), each
    applied to a branch just before it is added to the shortcut."""
    ends = [m for name, m in block.named_modules() if name.rsplit(".", 1)[-1].startswith("drop_path")]
    if not ends:
        raise AnalysisError(f"no residual branch (drop_path) found in {type(block).__name__}")
    return ends


def _has_projection(block: nn.Module) -> bool:
    """A shortcut that is a learned map (or a pooling), not the identity."""
    shortcut = getattr(block, "shortcut", None) or getattr(getattr(block, "conv", None), "shortcut", None)
    return shortcut is not None and not isinstance(shortcut, nn.Identity)


@torch.no_grad()
def bottleneck_attention_map(attn: BottleneckAttn, x: torch.Tensor) -> torch.Tensor:
    """BoTNet's attention over the whole (B, C, H, W) map, as its forward computes it: (B, heads, HW, HW)."""
    b, _, height, width = x.shape
    q, k, _ = torch.split(attn.qkv(x), [attn.dim_out_qk, attn.dim_out_qk, attn.dim_out_v], dim=1)
    q = q.reshape(b * attn.num_heads, attn.dim_head_qk, -1).transpose(-1, -2)
    k = k.reshape(b * attn.num_heads, attn.dim_head_qk, -1)
    if attn.scale_pos_embed:
        logits = (q @ k + attn.pos_embed(q)) * attn.scale
    else:
        logits = (q @ k) * attn.scale + attn.pos_embed(q)
    return logits.softmax(dim=-1).reshape(b, attn.num_heads, height * width, height * width)


@torch.no_grad()
def halo_attention_map(attn: HaloAttn, x: torch.Tensor) -> torch.Tensor:
    """HaloNet's attention of each query block over its block and halo, as its forward computes it:
    (B * blocks, heads, queries per block, keys per window)."""
    b, _, height, width = x.shape
    size, ds = attn.block_size, attn.block_size_ds
    rows, cols = height // size, width // size
    blocks = rows * cols
    q = attn.q(x).reshape(-1, attn.dim_head_qk, rows, ds, cols, ds).permute(0, 1, 3, 5, 2, 4)
    q = q.reshape(b * attn.num_heads, attn.dim_head_qk, -1, blocks).transpose(1, 3)
    kv = nn.functional.pad(attn.kv(x), [attn.halo_size] * 4)
    kv = kv.unfold(2, attn.win_size, size).unfold(3, attn.win_size, size)
    kv = kv.reshape(b * attn.num_heads, attn.dim_head_qk + attn.dim_head_v, blocks, -1).permute(0, 2, 3, 1)
    k = kv[..., : attn.dim_head_qk]
    if attn.scale_pos_embed:
        logits = (q @ k.transpose(-1, -2) + attn.pos_embed(q)) * attn.scale
    else:
        logits = (q @ k.transpose(-1, -2)) * attn.scale + attn.pos_embed(q)
    probs = logits.softmax(dim=-1).reshape(b, attn.num_heads, blocks, ds * ds, attn.win_size**2)
    return probs.transpose(1, 2).reshape(b * blocks, attn.num_heads, ds * ds, attn.win_size**2)


def halo_positions(attn: HaloAttn) -> tuple[torch.Tensor, torch.Tensor]:
    """Query and key coordinates in a halo window's frame: keys cover the block and its halo (zero padding at the
    map's border included, as the layer attends to it), queries the block, strided when the layer downsamples."""
    queries = grid_positions(attn.block_size_ds, attn.block_size_ds) * attn.block_stride + attn.halo_size
    return queries, grid_positions(attn.win_size, attn.win_size)


def map_positions(x: torch.Tensor) -> torch.Tensor:
    """Token coordinates of a (B, C, H, W) map."""
    return grid_positions(*x.shape[-2:])


def window_positions(x: torch.Tensor) -> torch.Tensor:
    """Token coordinates of channels-last windows (B', h, w, C)."""
    return grid_positions(x.shape[1], x.shape[2])


def _byob_attention(attn: nn.Module) -> tuple[AttentionTap | None, str | None]:
    if isinstance(attn, BottleneckAttn):
        return AttentionTap(attn, partial(bottleneck_attention_map, attn), map_positions), None
    if isinstance(attn, HaloAttn):
        positions = halo_positions(attn)
        return AttentionTap(attn, partial(halo_attention_map, attn), lambda _x: positions), None
    if isinstance(attn, LambdaLayer):
        return None, "a lambda layer computes no attention map (its content and position lambdas are linear maps)"
    return None, f"no attention maps for {type(attn).__name__}"


def _byob_blocks(model: ByobNet) -> BlockSequence:
    blocks = []
    for stage_index, stage in enumerate(model.stages):
        for position, module in enumerate(stage):
            kind = "M" if isinstance(module, SelfAttnBlock) else "C"
            attention, note = _byob_attention(module.self_attn) if kind == "M" else (None, None)
            lesion = partial(zero_outputs, *residual_branches(module))
            name = f"stages.{stage_index}.{position}"
            blocks.append(Block(name, kind, stage_index, Tap(module), lesion, attention, _has_projection(module), note))
    return BlockSequence(Tap(model.stem), tuple(blocks))


@torch.no_grad()
def attention2d_map(attn: Attention2d, x: torch.Tensor) -> torch.Tensor:
    """CoAtNet's transformer attention over the whole (B, C, H, W) map, with its relative position bias:
    (B, heads, HW, HW)."""
    b = x.shape[0]
    if attn.head_first:
        q, k, _ = attn.qkv(x).view(b, attn.num_heads, attn.dim_head * 3, -1).chunk(3, dim=2)
    else:
        q, k, _ = attn.qkv(x).reshape(b, 3, attn.num_heads, attn.dim_head, -1).unbind(1)
    logits = (q * attn.scale).transpose(-2, -1) @ k
    return (attn.rel_pos(logits) if attn.rel_pos is not None else logits).softmax(dim=-1)


@torch.no_grad()
def attention_cl_map(attn: AttentionCl, x: torch.Tensor) -> torch.Tensor:
    """MaxViT's window attention over channels-last windows (B', h, w, C): (B', heads, hw, hw)."""
    b = x.shape[0]
    if attn.head_first:
        q, k, _ = attn.qkv(x).view(b, -1, attn.num_heads, attn.dim_head * 3).transpose(1, 2).chunk(3, dim=3)
    else:
        q, k, _ = attn.qkv(x).reshape(b, -1, 3, attn.num_heads, attn.dim_head).transpose(1, 3).unbind(2)
    logits = (q * attn.scale) @ k.transpose(-2, -1)
    return (attn.rel_pos(logits) if attn.rel_pos is not None else logits).softmax(dim=-1)


def _position_kernel(attn: nn.Module) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """softmax of the relative position bias alone, (heads, N, N), where the layer has one."""
    if attn.rel_pos is None:
        return None
    return lambda _x: attn.rel_pos.get_bias()[0].float().softmax(dim=-1)


def _maxxvit_attention(block: nn.Module) -> tuple[AttentionTap | None, str | None]:
    if isinstance(block, TransformerBlock2d):
        attn = block.attn
        return AttentionTap(attn, partial(attention2d_map, attn), map_positions, _position_kernel(attn)), None
    if isinstance(block, MaxxVitBlock) and block.attn_block is not None:
        attn = block.attn_block.attn
        tap = AttentionTap(attn, partial(attention_cl_map, attn), window_positions, _position_kernel(attn))
        return tap, "a MaxViT block's window attention (its grid attention is not mapped)"
    return None, f"no attention maps for {type(block).__name__} (timm's parallel window/grid attention)"


def _maxxvit_blocks(model: MaxxVit) -> BlockSequence:
    blocks = []
    for stage_index, stage in enumerate(model.stages):
        for position, module in enumerate(stage.blocks):
            if isinstance(module, MbConvBlock | ConvNeXtBlock):
                kind, attention, note = "C", None, None
            elif isinstance(module, TransformerBlock2d | MaxxVitBlock | ParallelMaxxVitBlock):
                kind, (attention, note) = "M", _maxxvit_attention(module)
            else:
                raise AnalysisError(f"unsupported MaxxVit block {type(module).__name__} in stage {stage_index}")
            lesion = partial(zero_outputs, *residual_branches(module))
            name = f"stages.{stage_index}.blocks.{position}"
            blocks.append(Block(name, kind, stage_index, Tap(module), lesion, attention, _has_projection(module), note))
    return BlockSequence(Tap(model.stem), tuple(blocks))


def block_sequence(model: nn.Module) -> BlockSequence:
    """The stem and residual blocks of ``model`` (raises :class:`AnalysisError` for unsupported models)."""
    if isinstance(model, AlterNet):
        return _alternet_blocks(model)
    if isinstance(model, ResNet):
        return _resnet_blocks(model)
    if isinstance(model, VisionTransformer):
        return _vit_blocks(model)
    if isinstance(model, PoolingVisionTransformer):
        return _pit_blocks(model)
    if isinstance(model, SwinTransformer):
        return _swin_blocks(model)
    if isinstance(model, ByobNet):
        return _byob_blocks(model)
    if isinstance(model, MaxxVit):
        return _maxxvit_blocks(model)
    raise AnalysisError(f"block analyses do not support {type(model).__name__}; supported: {SUPPORTED}")
