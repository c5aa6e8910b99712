"""What the timm hybrid families share: a CIFAR stem made from timm's stride-2 stem conv, and one-line refusals of
inputs whose size a fixed-size model was not built for, or that its layout cannot take (timm's own checks there are
empty assertions); the arguments every model of the zoo is built with, checked in one line."""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from typing import Any

import torch
from torch import nn

from ..architectures.layout import LayoutError
from ..errors import ConfigValueError


class InputSizeGuard:
    """A forward pre-hook: refuse an input of another size than ``size``, saying why the model needs it."""

    def __init__(self, size: Sequence[int], reason: str):
        self.size = tuple(int(s) for s in size)
        self.reason = reason

    def __call__(self, _module: nn.Module, args: tuple[Any, ...]) -> None:
        if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 4:
            return
        got = tuple(args[0].shape[-2:])
        if got != self.size:
            height, width = self.size
            raise LayoutError(
                f"this model was built for {height}x{width} inputs and got {got[0]}x{got[1]} ({self.reason}); "
                f"feed it {height}x{width} images (data.image_size={height}) or build it for the new size"
            )


@torch.jit.unused
def _refuse_size(message: str) -> None:
    raise LayoutError(message)


def built_size_check(module: nn.Module, args: tuple[torch.Tensor]) -> None:
    """:class:`InputSizeGuard` as a forward pre-hook TorchScript compiles (a PiT scripts, as timm's own models do):
    an input of another size than ``module.input_size_built`` refused in one line (a RuntimeError when scripted)."""
    x = args[0]
    height, width = module.input_size_built
    if x.dim() == 4 and (x.shape[-2] != height or x.shape[-1] != width):
        message = (
            f"this model was built for {height}x{width} inputs and got {x.shape[-2]}x{x.shape[-1]} (its position "
            f"embedding is sized for that input's patches); feed it {height}x{width} images "
            f"(data.image_size={height}) or build it for the new size"
        )
        if torch.jit.is_scripting():
            raise RuntimeError(message)
        _refuse_size(message)


class LayoutCheck:
    """A forward pre-hook: an input whose size the layout cannot take at every stage (a halo block or MaxViT window
    that does not divide a stage's map: timm's own check is an empty assertion) refused in one line by the spec's
    own check, as a build at that size would be; each size is checked once."""

    def __init__(self, spec: Any, stem: str):
        self.spec, self.stem = spec, stem
        self.passed: set[tuple[int, int]] = set()

    def __call__(self, _module: nn.Module, args: tuple[Any, ...]) -> None:
        if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 4:
            return
        size = (int(args[0].shape[-2]), int(args[0].shape[-1]))
        if size not in self.passed:
            try:
                self.spec.check(size, self.stem)
            except LayoutError as error:
                raise LayoutError(f"this model cannot take a {size[0]}x{size[1]} input: {error}") from None
            self.passed.add(size)


def unstride_stem_conv(model: nn.Module, conv: nn.Conv2d) -> None:
    """Make the stem's stride-2 3x3 conv stride 1 (same weights, same padding) and halve the reductions the model
    reports; the caller built the model for twice the input size, so every later map keeps its planned size."""
    if conv.kernel_size != (3, 3) or conv.stride != (2, 2) or conv.padding != (1, 1):
        raise LayoutError(f"the CIFAR stem expects a 3x3 stride-2 conv with padding 1, got {conv}")
    conv.stride = (1, 1)
    if hasattr(model, "stem") and hasattr(model.stem, "stride"):
        model.stem.stride = 1
    info = getattr(model, "feature_info", None)
    if isinstance(info, list):
        for entry in info:
            entry["reduction"] = max(1, entry["reduction"] // 2)


def check_num_classes(value: Any) -> None:
    """A classifier's class count: an integer >= 0 (0: no classifier, the pooled features), in one line."""
    if not (isinstance(value, Integral) and not isinstance(value, bool) and value >= 0):
        raise ConfigValueError(f"num_classes={value!r} must be an integer >= 0 (0: no classifier, the features)")


def check_build_arguments(kwargs: dict[str, Any]) -> None:
    """What a model is built with, checked in one line naming the argument before it fails deep inside (a float
    ``img_size`` was "'float' object is not subscriptable") or builds something else (``in_chans=0``: a stem of no
    input channels; ``num_classes=-1``: no head, and ``num_classes == -1``)."""
    if kwargs.get("num_classes") is not None:
        check_num_classes(kwargs["num_classes"])
    size = kwargs.get("img_size")
    pair = isinstance(size, list | tuple) and len(size) == 2 and all(_count(v, 1) for v in size)
    if size is not None and not _count(size, 1) and not pair:
        raise ConfigValueError(f"img_size={size!r} must be an integer >= 1, or a (height, width) pair of them")
    if kwargs.get("in_chans") is not None and not _count(kwargs["in_chans"], 1):
        raise ConfigValueError(f"in_chans={kwargs['in_chans']!r} must be an integer >= 1 (3: RGB, 1: grey)")


def _count(value: Any, minimum: int) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool) and value >= minimum
