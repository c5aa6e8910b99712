"""Read feature maps (or attention inputs) with forward hooks while a model runs on a batch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from .blocks import Tap
from .errors import AnalysisError


@torch.no_grad()
def capture(model: nn.Module, modules: Sequence[tuple[nn.Module, bool]], images: torch.Tensor) -> list[torch.Tensor]:
    """Run ``model(images)`` once; return, per ``(module, on_input)``, that module's output or first input.

    A module called more than once keeps its last call.
    """
    captured: list[torch.Tensor | None] = [None] * len(modules)
    handles = []
    for slot, (module, on_input) in enumerate(modules):

        def store(tensor: torch.Tensor, slot: int = slot) -> None:
            captured[slot] = tensor.detach()

        if on_input:
            handles.append(module.register_forward_pre_hook(lambda _m, args, store=store: store(args[0])))
        else:
            handles.append(module.register_forward_hook(lambda _m, _args, out, store=store: store(out)))
    try:
        model(images)
    finally:
        for handle in handles:
            handle.remove()
    missing = [type(modules[i][0]).__name__ for i, t in enumerate(captured) if t is None]
    if missing:
        raise AnalysisError(f"modules never called during the model's forward pass: {missing}")
    return captured  # type: ignore[return-value]


def feature_maps(
    model: nn.Module, taps: Sequence[Tap], batches: Iterable[torch.Tensor]
) -> Iterator[list[torch.Tensor]]:
    """Per batch of images, every tap's (B, C, H, W) feature map, in fp32."""
    modules = [(tap.module, tap.on_input) for tap in taps]
    for images in batches:
        outputs = capture(model, modules, images)
        yield [tap.to_map(out).float() for tap, out in zip(taps, outputs)]


def mean_per_tap(
    model: nn.Module,
    taps: Sequence[Tap],
    batches: Iterable[torch.Tensor],
    statistic: Callable[[torch.Tensor], torch.Tensor],
) -> list[torch.Tensor]:
    """Per tap, ``statistic`` of its feature maps ((B, C, ...) from (B, C, H, W)) averaged over samples and channels."""
    sums: list[torch.Tensor | float] = [0.0] * len(taps)
    counts = [0] * len(taps)
    for maps in feature_maps(model, taps, batches):
        for i, m in enumerate(maps):
            sums[i] = sums[i] + statistic(m).sum(dim=(0, 1))
            counts[i] += m.shape[0] * m.shape[1]
    return [total / count for total, count in zip(sums, counts)]
