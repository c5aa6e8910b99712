"""Stage layouts: the Conv (``C``) / MSA (``M``) block sequence of every stage.

A layout is written as one string, stages separated by ``|``: ``"CCC|CCCM|CCCCCM|CMCM"``.
:func:`alternate_layout` applies the paper's build-up rule; :func:`resolve_stages` checks a layout
against the rest of the architecture and the input size and returns one :class:`StageSpec` per stage.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import AlternetError
from .rules import WINDOWED_KINDS

CONV = "C"
MSA = "M"
TOKENS = (CONV, MSA)
STAGE_SEPARATOR = "|"


class LayoutError(AlternetError, ValueError):
    """A layout or MSA setting that the architecture cannot run."""


@dataclass(frozen=True)
class StageSpec:
    """Everything needed to build one stage."""

    sequence: str
    width: int
    stride: int
    heads: int
    head_dim: int
    window: tuple[int, int]
    feature_size: tuple[int, int]

    @property
    def num_msa(self) -> int:
        return self.sequence.count(MSA)


def parse_layout(layout: str) -> list[str]:
    """Split ``"CC|CM"`` into per-stage sequences, rejecting empty stages and unknown tokens."""
    if not isinstance(layout, str) or not layout.strip():
        raise LayoutError(f"layout must be a non-empty string such as 'CC|CM|CM|CM', got {layout!r}")
    stages = [s.strip().upper() for s in layout.split(STAGE_SEPARATOR)]
    for index, sequence in enumerate(stages):
        if not sequence:
            raise LayoutError(f"layout {layout!r}: stage {index + 1} is empty; every stage needs at least one block")
        unknown = sorted(set(sequence) - set(TOKENS))
        if unknown:
            raise LayoutError(
                f"layout {layout!r}: stage {index + 1} has unknown token(s) {unknown}; "
                f"use {CONV!r} for a Conv block and {MSA!r} for an MSA block"
            )
    return stages


def buildup_violations(layout: str, heads: int | Sequence[int | None] | None = None) -> list[str]:
    """The paper's AlterNet build-up rules a layout breaks (it still runs; these are design guidance, one line each):
    MSAs end a stage, alternating with Convs; MSAs go to the later stages first; later stages get more heads."""
    stages = parse_layout(layout)
    found = []
    for index, sequence in enumerate(stages):
        label = f"stage {index + 1} ({sequence})"
        if MSA + MSA in sequence:
            found.append(f"{label}: consecutive MSA blocks; the rules alternate MSAs with Conv blocks")
        elif MSA in sequence and not sequence.endswith(MSA):
            found.append(f"{label}: ends with a Conv block after its MSAs; the rules put MSAs at the end of a stage")
        elif not re.fullmatch(f"{CONV}*({CONV}{MSA})*", sequence):
            found.append(
                f"{label}: its MSAs are not an alternating Conv/MSA tail (e.g. CCCMCM); the rules put "
                "them at the end of the stage"
            )
    with_msa = [i for i, sequence in enumerate(stages) if MSA in sequence]
    later_without = [j + 1 for j in range(with_msa[0] + 1, len(stages)) if j not in with_msa] if with_msa else []
    if later_without:
        found.append(
            f"stage {with_msa[0] + 1} has MSAs but later stage(s) {later_without} have none; the rules add MSAs "
            "from the last stage backwards"
        )
    stage_heads = per_stage("heads", heads, len(stages)) if heads is not None else []
    msa_heads = [(i, stage_heads[i]) for i in with_msa if stage_heads and stage_heads[i]]
    for (i, before), (j, after) in itertools.pairwise(msa_heads):
        if after < before:
            found.append(
                f"stage {j + 1} has fewer heads ({after}) than stage {i + 1} ({before}); the rules give "
                "later stages more heads"
            )
    return found


def format_layout(stages: Sequence[str]) -> str:
    return STAGE_SEPARATOR.join(stages)


def alternate_layout(depths: Sequence[int], msa_counts: Sequence[int]) -> str:
    """The AlterNet build-up rule: per stage, MSAs take the last ``2n`` positions, alternating C, M.

    ``alternate_layout((3, 4, 6, 4), (0, 1, 1, 2)) == "CCC|CCCM|CCCCCM|CMCM"``.
    """
    if len(depths) != len(msa_counts):
        raise LayoutError(f"depths {list(depths)} and msa_counts {list(msa_counts)} must have the same length")
    stages = []
    for index, (depth, msas) in enumerate(zip(depths, msa_counts)):
        if depth < 1:
            raise LayoutError(f"stage {index + 1}: depth must be >= 1, got {depth}")
        if msas < 0 or 2 * msas > depth:
            raise LayoutError(
                f"stage {index + 1}: {msas} MSA block(s) need {2 * msas} positions (C, M pairs) "
                f"but the stage has {depth} block(s)"
            )
        stages.append(CONV * (depth - 2 * msas) + (CONV + MSA) * msas)
    return format_layout(stages)


def with_one_more_msa(layout: str, stage: int) -> str | None:
    """``layout`` with one more MSA at the end of ``stage`` (0-based) by build-up rule 1: the stage's alternating
    Conv/MSA tail one pair longer (``CCCC`` -> ``CCCM`` -> ``CMCM``); None when the stage has no room (its first
    block stays a Conv block). A stage whose MSAs are not such a tail is refused: the rules cannot extend it."""
    stages = parse_layout(layout)
    sequence = stages[stage]
    tail = re.fullmatch(f"({CONV}*)((?:{CONV}{MSA})*)", sequence)
    if tail is None:
        raise LayoutError(
            f"layout {layout!r}: stage {stage + 1} ({sequence}) is not Conv blocks ending in an alternating Conv/MSA "
            "tail (e.g. CCCMCM), so the build-up rules cannot add the next MSA to it; start from such a layout"
        )
    msas = sequence.count(MSA) + 1
    if 2 * msas > len(sequence):
        return None
    stages[stage] = CONV * (len(sequence) - 2 * msas) + (CONV + MSA) * msas
    return format_layout(stages)


def next_candidates(layout: str, stage: int) -> list[tuple[int, str]]:
    """A build-up round's candidates from ``layout``, the search standing at ``stage`` (0-based): the next MSA at
    the end of the first stage from ``stage`` backwards with room for one (rule 1), then at the end of the nearest
    stage before it with room (rule 2: where the next MSA goes when that one does not improve). As
    ``(stage, layout)`` pairs; empty when no stage at or before ``stage`` has room."""
    found = []
    for index in range(stage, -1, -1):
        if (candidate := with_one_more_msa(layout, index)) is not None:
            found.append((index, candidate))
        if len(found) == 2:
            break
    return found


def per_stage(name: str, value: int | Sequence[int] | None, num_stages: int) -> list:
    """One value per stage: an int (or None) repeated, or a sequence of exactly ``num_stages`` values."""
    if value is None or isinstance(value, int):
        return [value] * num_stages
    values = list(value)
    if len(values) != num_stages:
        raise LayoutError(f"{name} has {len(values)} value(s) {values} but the layout has {num_stages} stage(s)")
    return values


def stage_sizes(
    num_stages: int, img_size: int | Sequence[int], stem_reduction: int, strides: Sequence[int]
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The (input, output) feature map of each stage, for families whose blocks need fixed or divisible sizes;
    each stride must divide the map it reduces (else a strided conv and its pooled shortcut disagree)."""
    height, width = (img_size, img_size) if isinstance(img_size, int) else map(int, img_size)
    if height % stem_reduction or width % stem_reduction:
        raise LayoutError(f"input size {height}x{width} is not divisible by the stem's reduction {stem_reduction}")
    size = (height // stem_reduction, width // stem_reduction)
    sizes = []
    for index, stride in enumerate(per_stage("strides", list(strides), num_stages)):
        if stride < 1:
            raise LayoutError(f"stage {index + 1}: stride must be >= 1, got {stride}")
        if size[0] % stride or size[1] % stride or size[0] < stride:
            raise LayoutError(
                f"stage {index + 1}: feature map {size[0]}x{size[1]} cannot be reduced by stride {stride}; "
                "use a larger input size (data.image_size) or fewer stages"
            )
        reduced = (size[0] // stride, size[1] // stride)
        sizes.append((size, reduced))
        size = reduced
    return sizes


def resolve_stages(
    layout: str,
    widths: Sequence[int],
    heads: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    head_dim: int = 64,
    attn_dims: Sequence[int | None] | None = None,
    window: int | Sequence[int | None] | None = None,
    default_window: int = 4,
    attention: str = "window",
    img_size: int | Sequence[int] = 32,
    stem_reduction: int = 1,
) -> list[StageSpec]:
    """Validate a layout against widths, heads, windows and the input size; return the stage specs.

    ``window=None`` picks ``default_window`` for each stage, capped at the stage's feature map; an
    explicit window must divide the feature map of every stage that has an MSA.
    ``attn_dims`` (optional, per stage) is the total attention width and must equal ``heads * head_dim``.
    """
    stages = parse_layout(layout)
    n = len(stages)
    widths = per_stage("widths", widths, n)
    heads = per_stage("heads", heads, n)
    strides = [1] + [2] * (n - 1) if strides is None else per_stage("strides", strides, n)
    attn_dims = per_stage("attn_dims", attn_dims, n)
    windows = per_stage("window", window, n)
    if head_dim < 1:
        raise LayoutError(f"head_dim must be >= 1, got {head_dim}")

    sizes = stage_sizes(n, img_size, stem_reduction, strides)
    specs = []
    for index, sequence in enumerate(stages):
        label = f"stage {index + 1} ({sequence!r})"
        if widths[index] is None or widths[index] < 1:
            raise LayoutError(f"{label}: width must be >= 1, got {widths[index]}")
        height, width = sizes[index][1]
        if sequence[0] == MSA:
            raise LayoutError(
                f"{label}: the first block of a stage changes resolution/width and in AlterNet must be a Conv "
                f"block ('{CONV}'), not an MSA ('{MSA}') (model=byob and model=maxxvit build MSAs that downsample)"
            )
        stage_heads = heads[index] or 0
        win = (0, 0)
        if MSA in sequence:
            if stage_heads < 1:
                raise LayoutError(f"{label}: has MSA blocks, so heads must be >= 1, got {heads[index]}")
            if attn_dims[index] is not None and attn_dims[index] != stage_heads * head_dim:
                raise LayoutError(
                    f"{label}: attn_dim {attn_dims[index]} != heads * head_dim = {stage_heads} * {head_dim} "
                    f"= {stage_heads * head_dim}; change heads, head_dim or attn_dims so they agree"
                )
            win = _stage_window(label, windows[index], default_window, attention, (height, width))
        specs.append(
            StageSpec(
                sequence, int(widths[index]), int(strides[index]), int(stage_heads), int(head_dim), win, (height, width)
            )
        )
    return specs


def common_divisors(height: int, width: int) -> list[int]:
    """The sides that tile a height x width feature map: what a window, block or partition may be."""
    return [d for d in range(1, min(height, width) + 1) if height % d == 0 and width % d == 0]


def _stage_window(
    label: str, window: int | None, default_window: int, attention: str, feature_size: tuple[int, int]
) -> tuple[int, int]:
    height, width = feature_size
    if attention not in WINDOWED_KINDS:
        return height, width
    divisors = common_divisors(height, width)
    if window is None:
        automatic = min(default_window, height), min(default_window, width)
        if height % automatic[0] or width % automatic[1]:
            raise LayoutError(
                f"{label}: the automatic attention window {automatic[0]} does not divide the stage's {height}x{width} "
                f"feature map (from the input size); set model.window to one of {divisors}, or use an input size "
                f"whose feature maps {default_window} divides"
            )
        return automatic
    if window < 1 or height % window or width % window:
        raise LayoutError(
            f"{label}: window {window} does not divide the stage's {height}x{width} feature map "
            f"(valid windows: {divisors}); set model.window to one of them, or null for the automatic choice"
        )
    return window, window
