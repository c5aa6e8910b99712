"""Attention statistics of every MSA block, per head: mean row entropy, mean attention distance and a
data-specificity score, a *descriptive statistic, not evidence* for the paper's claim. Definitions, references and
the test of the claim (``model.attention=position_only``): docs/analysis.md, "Attention statistics and data
specificity".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..files import write_csv
from . import plots
from .blocks import Block
from .config import AttentionConfig
from .context import AnalysisContext
from .data import clean_batches
from .features import capture
from .tables import compact, mean_or_none, summary

log = logging.getLogger(__name__)


def row_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row of row-stochastic maps (..., N, N) -> (..., N)."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


Positions = torch.Tensor | tuple[torch.Tensor, torch.Tensor]  # (N, 2), or (queries (Nq, 2), keys (Nk, 2))


def query_key(positions: Positions) -> tuple[torch.Tensor, torch.Tensor]:
    """Query and key coordinates: the same tokens for self-attention over one set, a pair where they differ."""
    return positions if isinstance(positions, tuple) else (positions, positions)


def pairwise_distance(positions: Positions) -> torch.Tensor:
    """(N, 2) coordinates -> (N, N) Euclidean distances; a (queries, keys) pair -> (Nq, Nk)."""
    queries, keys = query_key(positions)
    return torch.cdist(queries.double(), keys.double()).float()


def row_distance(probs: torch.Tensor, positions: Positions) -> torch.Tensor:
    """Expected distance from each query to its attended keys: (..., Nq, Nk) -> (..., Nq)."""
    return (probs * pairwise_distance(positions).to(probs.device)).sum(dim=-1)


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (nats) between distributions along the last axis (broadcast), in float64 (a
    difference of entropies: float32 round-off would swamp the small divergences of near-uniform rows)."""
    p, q = p.double(), q.double()
    m = 0.5 * (p + q)
    return (row_entropy(m) - 0.5 * (row_entropy(p) + row_entropy(q))).clamp_min(0.0)


def across_images(probs: torch.Tensor, images: int) -> torch.Tensor:
    """(images * windows, heads, N, N) rows -> per-image pairs' JS divergence (images, windows, heads, N): each
    image against the next one (cyclically), at the same window and query position."""
    rows = probs.reshape(images, -1, *probs.shape[1:])
    return js_divergence(rows, rows.roll(1, dims=0))


@dataclass(frozen=True)
class HeadStats:
    """Per-head means over every query of every image (and window), with the uniform-attention references and
    the data-specificity scores (``None`` where the attention kind has no position-bias kernel)."""

    entropy: list[float]
    distance: list[float]
    tokens: int
    uniform_distance: float
    specificity: list[float]
    position_kernel_specificity: list[float] | None
    content_shift: list[float] | None


class _Accumulator:
    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor | float] = {}
        self.counts: dict[str, int] = {}
        self.positions: Positions | None = None

    def _add(self, name: str, values: torch.Tensor) -> None:
        """``values`` (..., heads, N): summed per head."""
        per_head = values.transpose(0, -2).reshape(values.shape[-2], -1).double()
        self.sums[name] = self.sums.get(name, 0.0) + per_head.sum(dim=1)
        self.counts[name] = self.counts.get(name, 0) + per_head.shape[1]

    def add(self, probs: torch.Tensor, positions: Positions, images: int, kernel: torch.Tensor | None) -> None:
        self._add("entropy", row_entropy(probs))
        self._add("distance", row_distance(probs, positions))
        if kernel is not None:
            fixed = kernel.to(probs.device).expand(probs.shape[1:]).expand(probs.shape)
            self._add("content_shift", js_divergence(probs, fixed))
        if images > 1:  # a batch of one image has no pair to compare
            self._add("specificity", across_images(probs, images))
            if kernel is not None:
                self._add("position_kernel_specificity", across_images(fixed, images))
        self.positions = positions

    def _mean(self, name: str) -> list[float] | None:
        return (self.sums[name] / self.counts[name]).tolist() if name in self.sums else None

    def result(self) -> HeadStats:
        return HeadStats(
            self._mean("entropy"),
            self._mean("distance"),
            query_key(self.positions)[1].shape[0],
            float(pairwise_distance(self.positions).double().mean()),
            self._mean("specificity"),
            self._mean("position_kernel_specificity"),
            self._mean("content_shift"),
        )


@torch.no_grad()
def attention_stats(model: nn.Module, blocks: Sequence[Block], batches: Sequence[torch.Tensor]) -> list[HeadStats]:
    """Per-head entropy, distance and data specificity of each block's attention (``block.attention`` set) over
    ``batches`` (specificity pairs images within a batch, so batches need two images or more)."""
    taps = [block.attention for block in blocks]
    accumulators = [_Accumulator() for _ in blocks]
    for images in batches:
        inputs = capture(model, [(tap.module, True) for tap in taps], images)
        for tap, x, acc in zip(taps, inputs, accumulators):
            kernel = tap.position_kernel(x) if tap.position_kernel is not None else None
            acc.add(tap.probabilities(x).float(), tap.positions(x), len(images), kernel)
    return [acc.result() for acc in accumulators]


def run(context: AnalysisContext, config: AttentionConfig) -> dict[str, Any]:
    sequence = context.blocks
    msa = [(depth, block) for depth, block in enumerate(sequence.blocks, start=1) if block.attention is not None]
    unmapped = without_maps(sequence.blocks)
    if not msa:
        return compact(dict(msa_blocks=0, **unmapped, files=[]))
    batches = clean_batches(context, config)
    images = [x for x, _ in batches]
    depth_rows = sequence.depth_rows()
    rows = []
    for (depth, _), stats in zip(msa, attention_stats(context.model, [b for _, b in msa], images)):
        for head, (entropy, distance) in enumerate(zip(stats.entropy, stats.distance)):
            rows.append(
                dict(
                    depth_rows[depth],
                    head=head,
                    tokens=stats.tokens,
                    entropy=entropy,
                    max_entropy=math.log(stats.tokens),
                    distance=distance,
                    uniform_distance=stats.uniform_distance,
                    specificity=_at(stats.specificity, head),
                    position_kernel_specificity=_at(stats.position_kernel_specificity, head),
                    content_shift=_at(stats.content_shift, head),
                )
            )
    entropies, distances = [r["entropy"] for r in rows], [r["distance"] for r in rows]
    specificities = [r["specificity"] for r in rows]
    files = [
        write_csv(context.path("attention.csv"), rows),
        plots.attention_by_depth(
            sequence,
            [r["depth"] for r in rows],
            {
                "Attention entropy (nats)": (entropies, [r["max_entropy"] for r in rows]),
                "Attention distance (feature-map pixels)": (distances, [r["uniform_distance"] for r in rows]),
                "Data specificity (JS, nats)": (
                    [float("nan") if v is None else v for v in specificities],
                    [r["position_kernel_specificity"] or 0.0 for r in rows],
                    "position kernel",
                ),
            },
            context.path("attention.png"),
        ),
    ]
    relative = [r["entropy"] / r["max_entropy"] for r in rows if r["max_entropy"] > 0]
    return summary(
        batches,
        files,
        msa_blocks=len(msa),
        **unmapped,
        entropy_mean=mean_or_none(entropies),
        relative_entropy_mean=mean_or_none(relative),
        distance_mean=mean_or_none(distances),
        specificity_mean=mean_or_none([v for v in specificities if v is not None]),
        content_shift_mean=mean_or_none([r["content_shift"] for r in rows if r["content_shift"] is not None]),
    )


def without_maps(blocks: Sequence[Block]) -> dict[str, Any]:
    """The MSA blocks that compute no attention map (a lambda layer's, timm's parallel MaxViT's), or map only part
    of their attention (a MaxViT block's window attention, not its grid attention), said in the summary and the log
    instead of failing: ``{}`` when every MSA block's attention is mapped whole."""
    missing = [block for block in blocks if block.kind == "M" and block.attention is None]
    partial = [block for block in blocks if block.kind == "M" and block.attention is not None and block.attention_note]
    notes, said = [], {}
    if missing:
        why = "; ".join(sorted({block.attention_note or "no attention map" for block in missing}))
        notes.append(f"{len(missing)} MSA block(s) without attention maps, not in the statistics: {why}")
        said["msa_blocks_without_maps"] = len(missing)
    if partial:
        what = "; ".join(sorted({str(block.attention_note) for block in partial}))
        notes.append(f"{len(partial)} MSA block(s) mapped in part: {what}")
        said["msa_blocks_mapped_in_part"] = len(partial)
    if not notes:
        return {}
    note = ". ".join(notes)
    log.warning("attention: %s (%s)", note, ", ".join(block.name for block in [*missing, *partial]))
    return {**said, "note": note}


def _at(values: list[float] | None, index: int) -> float | None:
    return None if values is None else values[index]
