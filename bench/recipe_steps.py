"""What an epoch of a recipe costs on this machine: training-step time of one model at each training size (for
``recipe.progressive_resize``), eager and ``torch.compile``d, channels_last and contiguous, in fp32 or bf16,
interleaved in one process.

    python -m bench.recipe_steps                                   # the speedrun's model, 16 and 32 px, batch 256
    python -m bench.recipe_steps --sizes 16 32 --compile           # add compiled cases (compile time printed apart)
    python -m bench.recipe_steps --sizes 32 --variants "stem=cifar" "stem=patch2;widths=[64,128,256]"
    python -m bench.recipe_steps --model alternet_laptop --sizes 32 --formats channels_last contiguous --compile
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python -m bench.recipe_steps

Each row is a median step; the epoch column is that step times the batches of a 50,000-image epoch, which is what
the choice between sizes and epochs trades. Compilation time (first call per size) is printed apart: a run pays it
once per size and mode.
"""

from __future__ import annotations

import argparse
import time

import alternet.models  # noqa: F401  (registers the zoo with timm)

from .harness import add_formats_argument, add_harness_arguments, begin, finish, interleave, row, summarise, timing_row
from .step import training_step


def parse_variant(text: str) -> dict:
    """``"stem=patch2;widths=[64,128,256]"`` -> model keyword arguments (values read as YAML)."""
    import yaml

    pairs = [item.split("=", 1) for item in text.split(";") if item.strip()]
    return {key.strip(): yaml.safe_load(value) for key, value in pairs}


def build(model: str, layout: str | None, variant: dict, channels_last: bool):
    import timm
    import torch

    kwargs = {"num_classes": 100, "img_size": 32, **({"layout": layout} if layout else {}), **variant}
    net = timm.create_model(model, **kwargs).train()
    return net.to(memory_format=torch.channels_last) if channels_last else net


def step_fn(net, forward, size: int, batch: int, dtype, channels_last: bool):
    """bench/step.py's training step through ``forward`` (the model, or its compiled twin) at ``size`` px."""
    import torch

    images = torch.randn(batch, 3, size, size)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 100, (batch,))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, nesterov=True)
    return training_step(forward, images, labels, optimizer, dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="alternet_tiny")
    parser.add_argument("--layout", default="C|CC|CM", help="model.layout (default: the speedrun's)")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[""],
        help='model keyword sets to compare, e.g. "stem=patch2;widths=[48,96,192]"',
    )
    parser.add_argument("--sizes", nargs="+", type=int, default=[16, 32])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    add_formats_argument(parser)
    parser.add_argument("--compile", action="store_true", help="time torch.compile'd steps beside eager ones")
    parser.add_argument("--epoch-images", type=int, default=50_000)
    add_harness_arguments(parser, rounds=8, warmup=2)
    args = parser.parse_args()
    facts = begin(args, "recipe_steps")

    import torch

    dtype = torch.bfloat16 if args.precision == "bf16" else None
    cases, compile_s = {}, {}
    for variant in args.variants:
        for memory_format in args.formats:
            channels_last = memory_format == "channels_last"
            net = build(args.model, args.layout, parse_variant(variant), channels_last)
            params = sum(p.numel() for p in net.parameters())
            forwards = {"eager": net}
            if args.compile:
                forwards["compiled"] = torch.compile(net, dynamic=False)  # one graph per size (dynamic shapes fail)
            for mode, forward in forwards.items():
                for size in args.sizes:
                    step = step_fn(net, forward, size, args.batch, dtype, channels_last)
                    start = time.perf_counter()
                    step()  # the first call compiles (or warms the allocator): its time is reported apart
                    key = (variant or "default", params, f"{mode} {'CL' if channels_last else 'NCHW'}", size)
                    compile_s[key] = time.perf_counter() - start
                    cases[key] = step
    seconds = interleave(cases, args.rounds, args.warmup)
    batches = -(-args.epoch_images // args.batch)
    rows = []
    columns = ("variant", "params", "mode", "size", "ms/step", "spread", "s/epoch", "1st s")
    print("{:<36} {:>9} {:<14} {:>4} {:>9} {:>7} {:>8} {:>6}".format(*columns))
    for key, values in seconds.items():
        variant, params, mode, size = key
        stats = summarise(values)
        print(
            f"{variant:<36} {params:>9,} {mode:<14} {size:>4} {1000 * stats.median:>9.1f} {100 * stats.spread:>6.1f}% "
            f"{stats.median * batches:>8.1f} {compile_s[key]:>6.1f}"
        )
        case = f"{args.model} {args.layout} {variant} {args.precision} {mode} {size}px b{args.batch}"
        rows.append(timing_row(case, "step median", values))
        rows.append(row(case, "first call", compile_s[key], "s"))
    finish(args, "recipe_steps", rows, facts)


if __name__ == "__main__":
    main()
