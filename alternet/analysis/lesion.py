"""Lesion study: the test accuracy lost when one block's residual branch is removed (the block then passes
its shortcut only), for every block in turn."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from ..files import write_csv
from ..progress import Progress
from . import plots
from .blocks import Block
from .config import SampleConfig
from .context import AnalysisContext
from .data import Batch, clean_batches
from .objective import accuracy
from .tables import compact, kind_means


@dataclass(frozen=True)
class LesionConfig(SampleConfig):
    analysis: ClassVar[str] = "lesion"


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
    batches = clean_batches(context.datamodule, config.images, config.batch_size, config.seed, context.device)
    baseline = accuracy(context.model, batches)
    lesioned = lesioned_accuracies(context.model, sequence.blocks, batches)
    drops = [baseline - acc for acc in lesioned]
    rows = [dict(info, accuracy=acc, drop=drop) for info, acc, drop in zip(sequence.depth_rows()[1:], lesioned, drops)]
    files = [
        write_csv(context.path("lesion.csv"), rows),
        plots.depth_series(
            sequence,
            list(range(1, len(drops) + 1)),
            [100 * d for d in drops],
            "Accuracy drop (%)",
            f"Lesion study (baseline accuracy {100 * baseline:.1f}%)",
            context.path("lesion.png"),
        ),
    ]
    worst = max(range(len(drops)), key=drops.__getitem__)
    return compact(
        dict(
            images=sum(len(y) for _, y in batches),
            baseline_acc=baseline,
            max_drop=drops[worst],
            max_drop_block=sequence.blocks[worst].name,
            **kind_means("drop", drops, [b.kind for b in sequence.blocks]),
            files=[str(f) for f in files],
        )
    )
