"""Lesion study (the paper's Sec. 4): the test accuracy lost when one block's residual branch is removed (the block
then passes its shortcut only), for every block in turn. Projection-shortcut blocks are reported apart, never
averaged with the others: docs/analysis.md, "Lesion study".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ..files import write_csv
from ..progress import Progress
from . import plots
from .blocks import Block
from .config import LesionConfig
from .context import AnalysisContext
from .data import Batch, clean_batches
from .objective import accuracy
from .tables import kind_means, mean_or_none, summary


def lesioned_accuracies(model: nn.Module, blocks: Sequence[Block], batches: Sequence[Batch]) -> list[float]:
    """Accuracy with each block lesioned in turn (the model is unchanged afterwards)."""
    results = []
    with Progress(len(blocks), "lesion", unit="blocks", every=30.0) as shown:
        for block in blocks:
            with block.lesion():
                results.append(accuracy(model, batches))
            shown.update()
    return results


def run(context: AnalysisContext, config: LesionConfig) -> dict[str, Any]:
    sequence = context.blocks
    batches = clean_batches(context, config)
    baseline = accuracy(context.model, batches)
    lesioned = lesioned_accuracies(context.model, sequence.blocks, batches)
    drops = [baseline - acc for acc in lesioned]
    projection = [block.projection for block in sequence.blocks]
    identity = [(d, b.kind) for d, b in zip(drops, sequence.blocks) if not b.projection]
    rows = [
        dict(info, projection_shortcut=apart, accuracy=acc, drop=drop)
        for info, apart, acc, drop in zip(sequence.depth_rows()[1:], projection, lesioned, drops)
    ]
    files = [
        write_csv(context.path("lesion.csv"), rows),
        plots.depth_series(
            sequence,
            list(range(1, len(drops) + 1)),
            [100 * d for d in drops],
            "Accuracy drop (%)",
            f"Lesion study (baseline accuracy {100 * baseline:.1f}%)",
            context.path("lesion.png"),
            apart=projection,
            apart_label="projection shortcut kept",
        ),
    ]
    return summary(
        batches,
        files,
        baseline_acc=baseline,
        **worst_block("max_drop", drops, sequence.blocks, projection=False),
        **kind_means("drop", [d for d, _ in identity], [k for _, k in identity]),
        **worst_block("projection_max_drop", drops, sequence.blocks, projection=True),
        projection_drop_mean=mean_or_none([d for d, p in zip(drops, projection) if p]),
        projection_blocks=sum(projection),
    )


def worst_block(prefix: str, drops: Sequence[float], blocks: Sequence[Block], projection: bool) -> dict[str, Any]:
    """``{prefix}`` and ``{prefix}_block``: the largest drop among the blocks with (or without) a projection."""
    candidates = [i for i, b in enumerate(blocks) if b.projection == projection]
    if not candidates:
        return {}
    worst = max(candidates, key=drops.__getitem__)
    return {prefix: drops[worst], f"{prefix}_block": blocks[worst].name}
