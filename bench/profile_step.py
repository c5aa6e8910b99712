"""Where a training step's time goes: a per-operator profile of forward + backward + AdamW step, grouped into the
categories issue 16 asks about (convolutions, BatchNorm, attention matmuls, softmax, layout copies, elementwise,
optimizer), for our AlterNet-50 and, given ``--reference PATH``, the reference implementation's.

    python -m bench.profile_step [--model alternet_r50_hdvw] [--precision fp32|bf16] [--channels-last]
                                 [--batch 32] [--size 32] [--device cpu|cuda] [--steps 3]
                                 [--reference ../how-do-vits-work] [--compile-mode reduce-overhead] [--no-record]

Self CPU time per operator (``torch.profiler``), summed over the ``--steps`` (also spelt ``--rounds``) profiled
steps after ``--warmup`` (2) and divided by their count; on ``--device cuda``, GPU time (the kernels alone: an
operator's own row would count its kernels again), the time that bounds a GPU step, and beside it the
host's top operators (self CPU), which bound a step the GPU waits for: ``--compile-mode reduce-overhead`` profiles
the step as a GPU run trains it, with CUDA graphs. The profiler, not a clock around each call, is the
measurement here, so the steps run in a plain loop rather than ``bench/harness.py``'s ``interleave``; the header and
the recorded rows (ms per step of each category, the total and the top operators) are the harness's.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from .harness import add_harness_arguments, begin, finish, row
from .step import training_step

CATEGORIES = (  # first match wins: (category, operator-name fragments)
    ("convolution", ("conv", "mkldnn_convolution", "slow_conv", "xmma", "implicit_gemm", "wgrad", "dgrad", "fprop")),
    ("batch norm", ("batch_norm",)),
    ("attention matmul", ("bmm", "matmul", "baddbmm", "scaled_dot_product", "_flash", "einsum", "fmha", "attention")),
    ("linear / addmm", ("addmm", "linear", "aten::mm")),
    ("softmax", ("softmax",)),
    ("layout copies", ("copy_", "clone", "contiguous", "permute", "transpose", "reshape", "view", "_to_copy", "cat")),
    ("optimizer", ("_foreach", "_fused_adam", "lerp", "addcdiv", "addcmul", "sqrt")),
    ("elementwise", ("add", "mul", "gelu", "relu", "div", "sub", "where", "fill", "zero", "pow", "neg", "exp")),
)


def category(name: str) -> str:
    lowered = name.lower()
    return next((label for label, keys in CATEGORIES if any(k in lowered for k in keys)), "other")


def build(name: str, reference: str | None, size: int) -> torch.nn.Module:
    classes = 100 if size < 128 else 1000
    if name == "reference":
        from reference import reference_alternet_50

        return reference_alternet_50(reference, num_classes=classes, image_size=size)
    import alternet

    return alternet.create_model(name, num_classes=classes, img_size=size)


def self_time_us(event, device: str) -> float:
    """An operator's own time: CPU time on a CPU, the time of the GPU kernels it launched itself on CUDA."""
    if device == "cpu":
        return event.self_cpu_time_total
    return getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)


def counted(event, device: str) -> bool:
    """On CUDA the kernels alone: the operator that launched a kernel also reports its time as its own, and counting
    both counted each kernel twice (the 2026-11-27 H200 profile in bench/RESULTS.md)."""
    return device == "cpu" or event.device_type == DeviceType.CUDA


def profile_steps(model: torch.nn.Module, args: argparse.Namespace) -> tuple[dict[str, float], list, float]:
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(args.device, memory_format=layout).train()
    images = torch.randn(args.batch, 3, args.size, args.size, device=args.device).contiguous(memory_format=layout)
    labels = torch.randint(0, 100 if args.size < 128 else 1000, (args.batch,), device=args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    dtype = torch.bfloat16 if args.precision == "bf16" else None

    net = torch.compile(model, mode=args.compile_mode) if args.compile_mode else model
    step = training_step(net, images, labels, optimizer, dtype)

    for _ in range(max(args.warmup, 5) if args.compile_mode else args.warmup):  # compiling, recording graphs
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.rounds):
            step()
        if args.device == "cuda":
            torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if self_time_us(e, args.device) > 0 and counted(e, args.device)]
    totals: dict[str, float] = defaultdict(float)
    for event in events:
        totals[category(event.key)] += self_time_us(event, args.device) / 1e3 / args.rounds  # ms per step
    top = sorted(events, key=lambda e: self_time_us(e, args.device), reverse=True)[:12]
    if args.device == "cuda":
        host = [e for e in prof.key_averages() if e.device_type == DeviceType.CPU and e.self_cpu_time_total > 0]
        print(f"\ntop host operators (self CPU ms per step; {args.rounds} steps, device synced after the last):")
        for event in sorted(host, key=lambda e: e.self_cpu_time_total, reverse=True)[:15]:
            print(f"  {event.key[:60]:<60} {event.self_cpu_time_total / 1e3 / args.rounds:>8.2f}")
    return dict(totals), top, sum(totals.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="alternet_r50_hdvw")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", type=int, default=32, help="image size: 32 (CIFAR stem) or 224 (ImageNet stem)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--reference", default=None, help="a how-do-vits-work checkout: profile its dnn_50 too")
    parser.add_argument("--compile-mode", default=None, help="torch.compile the model with this mode (default: eager)")
    add_harness_arguments(parser, rounds=3, warmup=2, round_aliases=["--steps"], round_help="profiled steps")
    args = parser.parse_args()
    facts = begin(args, "profile_step", device=args.device)
    names = [args.model] + (["reference"] if args.reference else [])
    layout = "channels_last" if args.channels_last else "contiguous"
    compiled = f", compiled ({args.compile_mode})" if args.compile_mode else ""
    print(f"batch {args.batch}, {args.size} px, {args.precision}, {layout}, {args.device}{compiled}")
    profiles = {}
    for name in names:
        torch.manual_seed(0)
        profiles[name] = profile_steps(build(name, args.reference, args.size), args)
    labels = [label for label, _ in CATEGORIES] + ["other"]
    what = "self CPU" if args.device == "cpu" else "self GPU"
    print(f"\n{what} ms per step{'':<6}" + "".join(f"{n:>20}" for n in names))
    for label in labels:
        print(f"  {label:<24}" + "".join(f"{profiles[n][0].get(label, 0.0):>20.1f}" for n in names))
    print(f"  {'total':<24}" + "".join(f"{profiles[n][2]:>20.1f}" for n in names))
    rows = []
    for name in names:
        model = "reference dnn_50" if name == "reference" else name
        case = f"{model} {args.size}px {args.precision} {layout} batch {args.batch} {args.device}{compiled}"
        metric = f"{what} per step, profiled"
        rows += [row(f"{case} {label}", metric, profiles[name][0].get(label, 0.0), "ms") for label in labels]
        rows.append(row(f"{case} total", metric, profiles[name][2], "ms", rounds=args.rounds))
        print(f"\ntop operators, {name} ({what} ms per step):")
        for event in profiles[name][1]:
            ms = self_time_us(event, args.device) / 1e3 / args.rounds
            print(f"  {event.key:<48} {ms:>9.1f}  {category(event.key)}")
            rows.append(row(f"{case} op {event.key}", metric, ms, "ms", notes=category(event.key)))
    finish(args, "profile_step", rows, facts)


if __name__ == "__main__":
    main()
