"""Attention statistics of every MSA block, per head: mean entropy of the attention rows (nats) and mean
attention distance, sum_j p_ij * |pos_i - pos_j| in pixels of the block's feature map (window coordinates
for window attention, the whole map for global and focused linear attention, whose implied map is used).

References for each block: the entropy of a uniform row, log N, and the mean distance under uniform attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ..files import write_csv
from . import plots
from .blocks import Block
from .config import SampleConfig
from .context import AnalysisContext
from .data import clean_batches
from .features import capture
from .tables import compact


@dataclass(frozen=True)
class AttentionConfig(SampleConfig):
    analysis: ClassVar[str] = "attention"


def row_entropy(probs: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row of row-stochastic maps (..., N, N) -> (..., N)."""
    return -torch.special.xlogy(probs, probs).sum(dim=-1)


def pairwise_distance(positions: torch.Tensor) -> torch.Tensor:
    """(N, 2) coordinates -> (N, N) Euclidean distances."""
    return torch.cdist(positions.double(), positions.double()).float()


def row_distance(probs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Expected distance from each query to its attended keys: (..., N, N) -> (..., N)."""
    return (probs * pairwise_distance(positions).to(probs.device)).sum(dim=-1)


@dataclass(frozen=True)
class HeadStats:
    """Per-head means over every query of every image (and window), with the uniform-attention references."""

    entropy: list[float]
    distance: list[float]
    tokens: int
    uniform_distance: float


class _Accumulator:
    def __init__(self) -> None:
        self.entropy: torch.Tensor | float = 0.0
        self.distance: torch.Tensor | float = 0.0
        self.rows = 0
        self.positions: torch.Tensor | None = None

    def add(self, probs: torch.Tensor, positions: torch.Tensor) -> None:
        self.entropy = self.entropy + row_entropy(probs).sum(dim=(0, 2)).double()
        self.distance = self.distance + row_distance(probs, positions).sum(dim=(0, 2)).double()
        self.rows += probs.shape[0] * probs.shape[2]
        self.positions = positions

    def result(self) -> HeadStats:
        return HeadStats(
            (self.entropy / self.rows).tolist(),
            (self.distance / self.rows).tolist(),
            self.positions.shape[0],
            float(pairwise_distance(self.positions).double().mean()),
        )


@torch.no_grad()
def attention_stats(model: nn.Module, blocks: Sequence[Block], batches: Sequence[torch.Tensor]) -> list[HeadStats]:
    """Mean entropy and distance per head of each block's attention (``block.attention`` set) over ``batches``."""
    taps = [block.attention for block in blocks]
    accumulators = [_Accumulator() for _ in blocks]
    for images in batches:
        inputs = capture(model, [(tap.module, True) for tap in taps], images)
        for tap, x, acc in zip(taps, inputs, accumulators):
            acc.add(tap.probabilities(x).float(), tap.positions(x))
    return [acc.result() for acc in accumulators]


def run(context: AnalysisContext, config: AttentionConfig) -> dict[str, Any]:
    sequence = context.blocks
    msa = [(depth, block) for depth, block in enumerate(sequence.blocks, start=1) if block.attention is not None]
    if not msa:
        return {"msa_blocks": 0, "files": []}
    batches = clean_batches(context.datamodule, config.images, config.batch_size, config.seed, context.device)
    images = [x for x, _ in batches]
    depth_rows = sequence.depth_rows()
    rows, head_depths, entropies, distances = [], [], [], []
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
                )
            )
            head_depths.append(depth)
            entropies.append(entropy)
            distances.append(distance)
    files = [
        write_csv(context.path("attention.csv"), rows),
        plots.attention_by_depth(
            sequence,
            head_depths,
            {
                "Attention entropy (nats)": (entropies, [r["max_entropy"] for r in rows]),
                "Attention distance (pixels)": (distances, [r["uniform_distance"] for r in rows]),
            },
            context.path("attention.png"),
        ),
    ]
    relative = [r["entropy"] / r["max_entropy"] for r in rows if r["max_entropy"] > 0]
    return compact(
        dict(
            images=sum(len(y) for _, y in batches),
            msa_blocks=len(msa),
            entropy_mean=sum(entropies) / len(entropies),
            relative_entropy_mean=sum(relative) / len(relative) if relative else None,
            distance_mean=sum(distances) / len(distances),
            files=[str(f) for f in files],
        )
    )
