"""The hybrid Conv + MSA backbone, built from a per-stage layout (see :mod:`alternet.architectures.layout`).

One class covers AlterNet and its pre-activation ResNet twins (a layout without ``M`` tokens).
The module tree follows timm conventions: ``stem`` -> ``stages`` (``nn.Sequential`` of stages, each
an ``nn.Sequential`` of blocks) -> ``norm`` (final BN-ReLU) -> ``head`` (pool, dropout, ``fc``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from timm.layers import SelectAdaptivePool2d
from timm.models import checkpoint_seq
from timm.models._features import feature_take_indices
from torch import nn

from ..architectures.layout import StageSpec, resolve_stages
from ..architectures.rules import DEFAULT_WINDOW, STEM_REDUCTION, check_attention, check_block, choose_stem
from ..errors import ConfigValueError, require
from .attention import WindowAttention, fused_setting
from .blocks import BLOCK_TYPES, STEM_TYPES, MSABlock, NormAct, PreActBlock
from .guards import check_num_classes


@dataclass(frozen=True)
class BlockInfo:
    """One residual block of the backbone, as the analysis tools see it."""

    name: str
    kind: str  # "C" or "M"
    stage: int
    index: int  # global index over all blocks, 0-based
    module: PreActBlock


class AlterNet(nn.Module):
    """Pre-activation ResNet stages with MSA blocks where the layout says ``M``.

    Args:
        layout: per-stage block sequence, e.g. ``"CCC|CCCM|CCCCCM|CMCM"``.
        block: ``"basic"`` or ``"bottleneck"`` Conv blocks (expansion 1 or 4).
        widths: per-stage base width (output channels are ``width * expansion``).
        heads: per-stage number of attention heads (ignored for stages without MSA).
        head_dim: channels per head.
        strides: per-stage stride of the first block; default ``1, 2, 2, ...``.
        attn_dims: optional per-stage total attention width, checked against ``heads * head_dim``.
        window: attention window (int or per-stage list); ``None`` picks 4 (CIFAR or patch2 stem) or 7 (ImageNet stem).
        attention: ``"window"``, ``"global"``, ``"focused_linear"`` or ``"position_only"`` (the kernel softmax(B) of
            the position bias alone: ``window``'s parameters, no data dependence).
        bias_per_head: one relative position bias table per head instead of one shared table.
        fused_attn: ``True`` uses ``scaled_dot_product_attention``, ``False`` the math path; ``None`` the faster one
            for the device and precision (the math path on a CPU in bf16/fp16 for windows of <= 256 tokens) unless
            timm's global switch (``timm.layers.set_fused_attn``, ``TIMM_FUSED_ATTN``) turns fused attention off.
        qkv_bias: a bias on the q/k/v projections; ``None`` is the attention kind's default (none for ``window`` and
            ``global`` as in the reference, a bias for ``focused_linear`` as in FLatten-Swin).
        stem: ``"auto"``, ``"cifar"``, ``"patch2"`` (not in the reference: a 2x2 stride-2 conv) or ``"imagenet"``.
        img_size: input size used to resolve and validate windows.
        drop_path_rate: stochastic depth; block j of N drops with rate ``drop_path_rate * j / (N - 1)``.
    """

    def __init__(
        self,
        layout: str = "CC|CM|CM|CM",
        block: str = "basic",
        widths: Sequence[int] = (64, 128, 256, 512),
        heads: Sequence[int] = (3, 6, 12, 24),
        head_dim: int = 64,
        strides: Sequence[int] | None = None,
        attn_dims: Sequence[int | None] | None = None,
        window: int | Sequence[int | None] | None = None,
        attention: str = "window",
        bias_per_head: bool = False,
        fused_attn: bool | None = None,
        qkv_bias: bool | None = None,
        stem: str = "auto",
        stem_width: int | None = None,
        img_size: int | Sequence[int] = 32,
        in_chans: int = 3,
        num_classes: int = 1000,
        global_pool: str = "avg",
        drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
    ):
        super().__init__()
        check_block(block)
        check_attention(attention, bias_per_head=bias_per_head)
        require("drop_path_rate", drop_path_rate, lambda v: 0 <= v < 1, "must be in [0, 1)")  # as recipe's
        stem = choose_stem(stem, img_size)
        conv_block = BLOCK_TYPES[block]
        self.specs: list[StageSpec] = resolve_stages(
            layout,
            widths,
            heads,
            strides=strides,
            head_dim=head_dim,
            attn_dims=attn_dims,
            window=window,
            default_window=DEFAULT_WINDOW[stem],
            attention=attention,
            img_size=img_size,
            stem_reduction=STEM_REDUCTION[stem],
        )
        self.layout = "|".join(spec.sequence for spec in self.specs)
        self.num_classes = num_classes
        self.drop_rate = drop_rate
        self.grad_checkpointing = False

        stem_width = stem_width or self.specs[0].width
        self.stem = STEM_TYPES[stem](in_chans, stem_width)
        total_blocks = sum(len(spec.sequence) for spec in self.specs)
        block_index = 0
        chs, reduction = stem_width, STEM_REDUCTION[stem]
        stages, self.feature_info = [], []
        attn = dict(attention=attention, bias_per_head=bias_per_head, fused=fused_attn, qkv_bias=qkv_bias)
        for stage_index, spec in enumerate(self.specs):
            blocks = []
            for position, token in enumerate(spec.sequence):
                rate = drop_path_rate * block_index / max(total_blocks - 1, 1)
                stride = spec.stride if position == 0 else 1
                if token == "C":
                    blocks.append(conv_block(chs, spec.width, stride=stride, drop_path=rate))
                else:
                    blocks.append(
                        MSABlock(
                            chs,
                            spec.width,
                            expansion=conv_block.expansion,
                            heads=spec.heads,
                            head_dim=spec.head_dim,
                            window=spec.window,
                            drop_path=rate,
                            **attn,
                        )
                    )
                chs = spec.width * conv_block.expansion
                block_index += 1
            stages.append(nn.Sequential(*blocks))
            reduction *= spec.stride
            self.feature_info.append(dict(num_chs=chs, reduction=reduction, module=f"stages.{stage_index}"))
        self.stages = nn.Sequential(*stages)
        self.num_features = self.head_hidden_size = chs
        self.norm = NormAct(chs)
        self.feature_info[-1]["module"] = "norm"
        self.head = nn.Module()
        self._build_head(num_classes, global_pool)

    def _build_head(self, num_classes: int, global_pool: str) -> None:
        check_num_classes(num_classes)
        if not global_pool and num_classes > 0:  # timm's rule: an unpooled map has no linear classifier
            raise ConfigValueError(f"global_pool='' leaves the map unpooled: it needs num_classes=0, not {num_classes}")
        self.head.global_pool = SelectAdaptivePool2d(pool_type=global_pool, flatten=bool(global_pool))
        self.head.drop = nn.Dropout(self.drop_rate)
        width = self.num_features * self.head.global_pool.feat_mult()  # catavgmax: twice the channels
        self.head.fc = nn.Linear(width, num_classes) if num_classes > 0 else nn.Identity()

    # timm model interface -------------------------------------------------------------------

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in backward instead of keeping them (timm's convention): trades
        about one extra forward of the stages for most of their activation memory, for large-image runs.

        The function computed is unchanged (stochastic depth replays the same random draws), but a recomputed
        block runs its BatchNorms in train mode a second time, so their running statistics are updated twice
        per step; timm accepts that too.
        """
        self.grad_checkpointing = enable

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        if self.grad_checkpointing and not torch.jit.is_scripting() and torch.is_grad_enabled():
            for stage in self.stages:
                x = checkpoint_seq(stage, x)  # one checkpoint per block
        else:
            x = self.stages(x)
        return self.norm(x)

    def forward_intermediates(
        self,
        x: torch.Tensor,
        indices: int | list[int] | None = None,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
    ) -> list[torch.Tensor] | tuple[torch.Tensor, list[torch.Tensor]]:
        """Stage outputs (timm's convention): ``indices`` an int takes the last n stages, a list the stages named;
        ``norm`` applies the final pre-activation norm to the last stage's map (as ``features_only`` does)."""
        if output_fmt != "NCHW":
            raise ValueError(f"output_fmt={output_fmt!r}: AlterNet feature maps are NCHW only")
        take_indices, max_index = feature_take_indices(len(self.stages), indices)
        last = len(self.stages) - 1
        stages = self.stages if not stop_early else self.stages[: max_index + 1]
        intermediates = []
        x = self.stem(x)
        for index, stage in enumerate(stages):
            x = stage(x)
            if index in take_indices:
                intermediates.append(self.norm(x) if norm and index == last else x)
        if intermediates_only:
            return intermediates
        return (self.norm(x) if len(stages) == len(self.stages) else x), intermediates

    def prune_intermediate_layers(
        self, indices: int | list[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Drop the stages after the last one ``indices`` takes (and the norm and head, as asked): a smaller
        backbone for :meth:`forward_intermediates`."""
        take_indices, max_index = feature_take_indices(len(self.stages), indices)
        self.stages = self.stages[: max_index + 1]
        if prune_norm or max_index < len(self.feature_info) - 1:
            self.norm = nn.Identity()
        if prune_head:
            self.reset_classifier(0)
        return take_indices

    @torch.jit.ignore
    def group_matcher(self, coarse: bool = False) -> dict[str, object]:
        """Parameter groups by depth (timm's convention, used by ``layer_decay``): the stem, then each stage
        (coarse) or each block, then the final norm with the last blocks."""
        blocks = r"^stages\.(\d+)" if coarse else [(r"^stages\.(\d+)\.(\d+)", None), (r"^norm", (99999,))]
        return {"stem": r"^stem", "blocks": blocks}

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.head.drop(self.head.global_pool(x))
        return x if pre_logits else self.head.fc(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        self._build_head(num_classes, self.head.global_pool.pool_type if global_pool is None else global_pool)
        self.num_classes = num_classes

    def no_weight_decay(self) -> set[str]:
        """Position tables (relative position biases, focused linear attention's key positional encodings): names
        excluded from weight decay, timm's convention."""
        return {n for n, _ in self.named_parameters() if n.endswith(("rel_pos_bias", "positional_encoding"))}

    # analysis interface ---------------------------------------------------------------------

    def blocks(self) -> list[BlockInfo]:
        """Every residual block in order, labelled ``C`` or ``M``."""
        infos = []
        for stage_index, stage in enumerate(self.stages):
            for position, module in enumerate(stage):
                name = f"stages.{stage_index}.{position}"
                infos.append(BlockInfo(name, module.kind, stage_index, len(infos), module))
        return infos

    def set_fused_attn(self, enabled: bool | None) -> None:
        """Switch every softmax attention to the fused kernel (``True``), the math path (``False``) or the faster
        one for the device and precision (``None``; off while timm's global switch is off, as at construction)."""
        for module in self.modules():
            if isinstance(module, WindowAttention):
                module.fused = fused_setting(enabled)
