"""Fused attention kernel vs the math path on this machine: what ``fused_attn=None`` (the default) chooses from.

    python -m bench.attention [--model alternet_r50_hdvw] [--rounds 6] [--threads N] [--no-record]

Two measurements, each path timed alternately with the other in one process (``bench/harness.py``'s
``interleave``; best or median of ``--rounds``, also spelt ``--repeats``):
  * one ``WindowAttention`` (256 -> 512 channels, 4 heads of 64), forward + backward, at window sizes from the
    CIFAR window (4 x 4 = 16 tokens) to a 28 x 28 global map (784 tokens), bf16 autocast and fp32, channels_last;
  * a whole training step of ``--model`` (batch 32, 32 px, channels_last) in bf16 and fp32, median ms.
"""

from __future__ import annotations

import argparse

import torch

import alternet
from alternet.models.attention import WindowAttention

from .harness import add_harness_arguments, begin, finish, interleave, row, summarise, switched, timing_row
from .step import training_step

WINDOWS = ((16, 4), (14, 7), (8, 8), (14, 14), (28, 28))  # (map side, window side)
PATHS = ("fused", "math")


def module_row(side: int, window: int, dtype: torch.dtype | None, rounds: int, warmup: int) -> list[dict]:
    batch = max(1, 32 * 256 // (side * side))  # about the same number of tokens per row
    attention = WindowAttention(256, 512, heads=4, head_dim=64, window=(window, window)).train()
    x = torch.randn(batch, 256, side, side).contiguous(memory_format=torch.channels_last).requires_grad_()

    def run() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            out = attention(x)
        out.float().sum().backward()

    def set_fused(fused: bool) -> None:
        attention.fused = fused

    times = interleave({path: switched(set_fused, path == "fused", run) for path in PATHS}, rounds, warmup)
    fused, math = (summarise(times[path]).low * 1000 for path in PATHS)
    precision = "bf16" if dtype else "fp32"
    print(
        f"  {precision} map {side:>2}x{side:<2} window {window:>2} (N={window * window:>3}) batch {batch:>3}: "
        f"fused {fused:7.1f} ms  math {math:7.1f} ms  fused/math {fused / math:.2f}"
    )
    case = f"WindowAttention {precision} map {side}x{side} window {window} batch {batch}"
    rows = [timing_row(f"{case} {path}", "fwd+bwd best", times[path], statistic="low") for path in PATHS]
    return [*rows, row(f"{case} fused/math", "fwd+bwd best ratio", fused / math, "x")]


def step_rows(name: str, dtype: torch.dtype | None, rounds: int, warmup: int) -> list[dict]:
    torch.manual_seed(0)
    layout = torch.channels_last
    model = alternet.create_model(name, num_classes=100, img_size=32).to(memory_format=layout).train()
    images = torch.randn(32, 3, 32, 32).contiguous(memory_format=layout)
    labels = torch.randint(0, 100, (32,))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = training_step(model, images, labels, optimizer, dtype)
    times = interleave({path: switched(model.set_fused_attn, path == "fused", step) for path in PATHS}, rounds, warmup)
    fused, math = (summarise(times[path]).median * 1000 for path in PATHS)
    precision = "bf16" if dtype else "fp32"
    print(
        f"  {name} {precision} channels_last: fused {fused:7.1f} ms  math {math:7.1f} ms  fused/math {fused / math:.2f}"
    )
    case = f"{name} step {precision} channels_last batch 32"
    rows = [timing_row(f"{case} {path}", "step median", times[path]) for path in PATHS]
    return [*rows, row(f"{case} fused/math", "step median ratio", fused / math, "x")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="alternet_r50_hdvw")
    add_harness_arguments(parser, rounds=6, round_aliases=["--repeats"])
    args = parser.parse_args()
    facts = begin(args, "attention")
    rows = []
    print("one WindowAttention, forward + backward, best of the rounds:")
    for dtype in (torch.bfloat16, None):
        for side, window in WINDOWS:
            rows += module_row(side, window, dtype, args.rounds, args.warmup)
    print(f"a training step of {args.model}, batch 32, median of the rounds:")
    for dtype in (torch.bfloat16, None):
        rows += step_rows(args.model, dtype, args.rounds, args.warmup)
    finish(args, "attention", rows, facts)


if __name__ == "__main__":
    main()
