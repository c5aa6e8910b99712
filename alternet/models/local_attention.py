"""Sliding k x k local attention for timm's ViT: the paper's locality instrument (section 4, HDVW models/convit.py).

Each patch token attends to the patch tokens of the k x k neighbourhood around it on the token grid: offsets
-(k-1)//2 to k//2 in each direction, the window a convolution with ``padding="same"`` reads, so an even kernel (the
paper's 8 x 8) reaches one token further down and right than up and left. A class token, where the model has one,
attends to every token (it reads the whole map, as the reference's global-average-pooling head does) and no patch
token attends to it; ``model.class_token=false model.global_pool=avg`` gives HDVW's ConViT head instead (no class
token; average pooling, LayerNorm, linear). ``local_kernel=None`` is ordinary global attention. One difference from
the reference's ``ConvAttention2d``: at the border the neighbourhood is cut by the mask instead of zero-padded (zero
keys would take softmax weight for nothing). The parameters and state-dict keys are those of the plain ViT, so
weights move between kernels.
"""

from __future__ import annotations

from typing import Any

import torch
from timm.layers import Attention
from torch import nn

from ..errors import ConfigValueError


def local_attention_mask(grid: tuple[int, int], kernel: int, prefix_tokens: int = 1) -> torch.Tensor:
    """(N, N) boolean mask, True where a query may attend to a key: N = prefix tokens + grid cells (row-major)."""
    rows, cols = torch.meshgrid(torch.arange(grid[0]), torch.arange(grid[1]), indexing="ij")
    rows, cols = rows.flatten(), cols.flatten()
    before, after = (kernel - 1) // 2, kernel // 2  # a "same" convolution's window: [i - before, i + after]

    def within(query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        offset = key[None, :] - query[:, None]
        return (offset >= -before) & (offset <= after)

    near = within(rows, rows) & within(cols, cols)
    n = prefix_tokens + near.shape[0]
    mask = torch.zeros(n, n, dtype=torch.bool)
    mask[:prefix_tokens, :] = True  # the class token reads every token
    mask[prefix_tokens:, prefix_tokens:] = near
    return mask


class LocalAttention(Attention):
    """timm's :class:`Attention` with a fixed sliding-window mask (a non-persistent buffer: no new state)."""

    local_mask: torch.Tensor

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        if attn_mask is None:
            mask = self.local_mask
        elif attn_mask.dtype == torch.bool:  # True: may attend
            mask = self.local_mask & attn_mask
        else:  # an additive mask (0: may attend, -inf: may not)
            mask = attn_mask.masked_fill(~self.local_mask, float("-inf"))
        return super().forward(x, attn_mask=mask, **kwargs)


def localise_attention(vit: nn.Module, kernel: int | None) -> nn.Module:
    """Restrict every block of the timm ViT ``vit`` to ``kernel`` x ``kernel`` local attention (None: global)."""
    if kernel is None:
        return vit
    grid = tuple(vit.patch_embed.grid_size)
    if isinstance(kernel, bool) or not isinstance(kernel, int) or kernel < 2:
        raise ConfigValueError(
            f"model.local_kernel={kernel!r} is invalid: a window side >= 2 (1 would be a softmax over one key, "
            "not attention), or null for global attention"
        )
    if kernel >= 2 * max(grid) - 1:
        raise ConfigValueError(
            f"model.local_kernel={kernel} covers the whole {grid[0]}x{grid[1]} token grid from every token: that is "
            "global attention; use model.local_kernel=null"
        )
    mask = local_attention_mask(grid, kernel, prefix_tokens=vit.num_prefix_tokens)
    for block in vit.blocks:
        if type(block.attn) is not Attention:
            raise ConfigValueError(f"model.local_kernel needs timm's ViT Attention, found {type(block.attn).__name__}")
        block.attn.__class__ = LocalAttention  # the same module and parameters, now masked
        block.attn.register_buffer("local_mask", mask.clone(), persistent=False)
    vit.local_kernel = kernel
    return vit
