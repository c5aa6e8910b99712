"""Fused attention kernel vs the math path on this machine: what ``fused_attn=None`` (the default) chooses from.

    python bench/attention.py [--model alternet_r50_hdvw] [--repeats 6]

Two measurements, each path timed alternately with the other in one process (best or median of ``--repeats``):
  * one ``WindowAttention`` (256 -> 512 channels, 4 heads of 64), forward + backward, at window sizes from the
    CIFAR window (4 x 4 = 16 tokens) to a 28 x 28 global map (784 tokens), bf16 autocast and fp32, channels_last;
  * a whole training step of ``--model`` (batch 32, 32 px, channels_last) in bf16 and fp32, median ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

import alternet
from alternet.models.attention import WindowAttention

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step import training_step

WINDOWS = ((16, 4), (14, 7), (8, 8), (14, 14), (28, 28))  # (map side, window side)


def alternate(runs: dict[str, object], repeats: int) -> dict[str, list[float]]:
    """ms of each named callable over ``repeats`` rounds, the callables interleaved within a round."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def with_attention(set_fused, fused: bool, run):
    def switched() -> None:
        set_fused(fused)
        run()

    return switched


def module_row(side: int, window: int, dtype: torch.dtype | None, repeats: int) -> None:
    batch = max(1, 32 * 256 // (side * side))  # about the same number of tokens per row
    attention = WindowAttention(256, 512, heads=4, head_dim=64, window=(window, window)).train()
    x = torch.randn(batch, 256, side, side).contiguous(memory_format=torch.channels_last).requires_grad_()

    def run() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            out = attention(x)
        out.float().sum().backward()

    def set_fused(fused: bool) -> None:
        attention.fused = fused

    times = alternate({f: with_attention(set_fused, f, run) for f in (True, False)}, repeats)
    fused, math = min(times[True]), min(times[False])
    precision = "bf16" if dtype else "fp32"
    print(
        f"  {precision} map {side:>2}x{side:<2} window {window:>2} (N={window * window:>3}) batch {batch:>3}: "
        f"fused {fused:7.1f} ms  math {math:7.1f} ms  fused/math {fused / math:.2f}"
    )


def step_rows(name: str, dtype: torch.dtype | None, repeats: int) -> None:
    torch.manual_seed(0)
    layout = torch.channels_last
    model = alternet.create_model(name, num_classes=100, img_size=32).to(memory_format=layout).train()
    images = torch.randn(32, 3, 32, 32).contiguous(memory_format=layout)
    labels = torch.randint(0, 100, (32,))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = training_step(model, images, labels, optimizer, dtype)
    times = alternate({f: with_attention(model.set_fused_attn, f, step) for f in (True, False)}, repeats)
    fused, math = statistics.median(times[True]), statistics.median(times[False])
    precision = "bf16" if dtype else "fp32"
    print(
        f"  {name} {precision} channels_last: fused {fused:7.1f} ms  math {math:7.1f} ms  fused/math {fused / math:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="alternet_r50_hdvw")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("one WindowAttention, forward + backward, best of the repeats:")
    for dtype in (torch.bfloat16, None):
        for side, window in WINDOWS:
            module_row(side, window, dtype, args.repeats)
    print(f"a training step of {args.model}, batch 32, median of the repeats:")
    for dtype in (torch.bfloat16, None):
        step_rows(args.model, dtype, args.repeats)


if __name__ == "__main__":
    main()
