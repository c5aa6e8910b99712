"""Training-step throughput and peak memory of AlterNet-50 vs pre-activation ResNet-50 on the CPU, and vs the
reference implementation when a checkout of it is given (``--reference PATH``: xxxnell/how-do-vits-work).

Each configuration (model x precision x memory format) runs in its own process so that its peak resident
memory is its own. Prints images/s of forward+backward+optimizer step at batch 32 (32x32, 100 classes),
peak RSS, and the ratios the targets are stated in (and the share of this CPU's matrix-multiply peak each model's
fastest setting reaches, a ceiling for any speed-up):
  * alternet_r50, bf16 autocast + channels_last >= 2x its fp32 contiguous throughput;
  * an AlterNet step costs <= 1.1x a preresnet50 step (same precision and format; the FLOP ratio is printed beside).

    python -m bench.models [--models alternet_r50 preresnet50] [--batch 32] [--steps 10] [--threads N] [--no-record]
    python -m bench.models --reference ../how-do-vits-work   # adds alternet_r50_hdvw and the reference's dnn_50

Timing goes through ``bench/harness.py``: within a child, ``interleave`` over its one training step (``--steps``,
also spelt ``--rounds``, timed steps after ``--warmup`` ones; the median step is reported); the configurations
themselves cannot be interleaved in one process, since each needs a peak RSS of its own, so they run one child after
another, the models of one setting back to back. The header, summaries and recorded rows are the harness's.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

from .harness import add_harness_arguments, begin, finish, interleave, row, summarise, timing_row
from .step import training_step

CONFIGS = [("fp32", False), ("fp32", True), ("bf16", False), ("bf16", True)]


def build(model_name: str, reference: str | None):
    """Our model by name, or ``reference`` (the reference implementation's AlterNet-50 at CIFAR settings)."""
    import alternet

    if model_name == "reference":
        from reference import reference_alternet_50

        return reference_alternet_50(reference, num_classes=100, image_size=32)
    return alternet.create_model(model_name, num_classes=100, img_size=32)


def measure(
    model_name: str, precision: str, channels_last: bool, batch: int, steps: int, warmup: int, reference: str | None
) -> dict:
    """Run in a child process: time `steps` training steps after `warmup` ones (each step's seconds)."""
    import torch

    model = build(model_name, reference)
    # ours steps with the fused AdamW our trainer uses on CPUs (alternet.training.guard); the reference with torch's
    # default (multi-tensor), as its own training script does
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=model_name != "reference")
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format).train()
    images = torch.randn(batch, 3, 32, 32).contiguous(memory_format=memory_format)
    labels = torch.randint(0, 100, (batch,))
    dtype = torch.bfloat16 if precision == "bf16" else None

    step = training_step(model, images, labels, optimizer, dtype)

    seconds = interleave({"step": step}, steps, warmup)["step"]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    step_s = summarise(seconds).median
    return {"img_per_s": batch / step_s, "step_ms": 1000 * step_s, "peak_rss_mb": peak_mb, "step_s": seconds}


def training_flops(model_name: str, reference: str | None) -> float:
    """FLOPs of one image's forward + backward (torch's FlopCounterMode: convolutions, matmuls, attention)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    model = build(model_name, reference).train()
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(2, 3, 32, 32)).sum().backward()
    return counter.get_total_flops() / 2


def gemm_peak_gflops(dtype_name: str, size: int = 2048, repeats: int = 5) -> float:
    """This CPU's matrix-multiply throughput in GFLOP/s (best of ``repeats`` square products): the ceiling a
    training step made of convolutions and matmuls can approach."""
    import torch

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    best = summarise(interleave({"matmul": lambda: a @ b}, repeats)["matmul"]).low
    return 2 * size**3 / best / 1e9


def run_child(args: argparse.Namespace, model: str, precision: str, channels_last: bool) -> dict:
    command = [
        sys.executable,
        "-m",
        __spec__.name,
        "--child",
        model,
        precision,
        str(int(channels_last)),
        "--batch",
        str(args.batch),
        "--rounds",
        str(args.rounds),
        "--warmup",
        str(args.warmup),
    ]
    if args.threads:
        command += ["--threads", str(args.threads)]
    if args.reference:
        command += ["--reference", args.reference]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["alternet_r50", "preresnet50"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=("fp32", "bf16"),
        default=["fp32", "bf16"],
        help="fp32 only on a CPU without native bf16 (emulated bf16 is an order of magnitude slower)",
    )
    parser.add_argument("--reference", default=None, help="a how-do-vits-work checkout: time its dnn_50 beside ours")
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "PRECISION", "CHANNELS_LAST"), help=argparse.SUPPRESS)
    add_harness_arguments(parser, rounds=10, warmup=3, round_aliases=["--steps"], round_help="timed steps per child")
    args = parser.parse_args()
    if args.child:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        model, precision, channels_last = args.child
        result = measure(model, precision, channels_last == "1", args.batch, args.rounds, args.warmup, args.reference)
        print(json.dumps(result))
        return
    if args.reference:
        args.models = list(dict.fromkeys([*args.models, "alternet_r50_hdvw", "reference"]))
    configs = [(precision, channels_last) for precision, channels_last in CONFIGS if precision in args.precisions]

    facts = begin(args, "models")
    print(f"batch {args.batch}, {args.rounds} timed steps (median)")
    peak = {precision: gemm_peak_gflops(precision) for precision in args.precisions}
    print("matrix-multiply peak of this CPU: " + ", ".join(f"{p} {rate:.0f} GFLOP/s" for p, rate in peak.items()))
    rows = [row(f"matmul 2048^3 {precision}", "best of 5 rate", peak[precision], "GFLOP/s") for precision in peak]
    results = {}
    header = f"{'model':<14} {'precision':<9} {'format':<14} {'img/s':>8} {'ms/step':>9} {'peak MB':>9} {'vs fp32':>8}"
    print(header)
    print("-" * len(header))
    for precision, channels_last in configs:  # the models of one setting back to back: their ratio drifts least
        for model in args.models:
            result = run_child(args, model, precision, channels_last)
            results[model, precision, channels_last] = result
            base = results.get((model, "fp32", False), result)["img_per_s"]
            fmt = "channels_last" if channels_last else "contiguous"
            print(
                f"{model:<14} {precision:<9} {fmt:<14} {result['img_per_s']:>8.1f} {result['step_ms']:>9.1f} "
                f"{result['peak_rss_mb']:>9.0f} {result['img_per_s'] / base:>7.2f}x",
                flush=True,
            )
            case = f"{model} {precision} {fmt} batch {args.batch}"
            rows += [
                timing_row(case, "step median", result["step_s"]),
                row(case, "throughput", result["img_per_s"], "img/s"),
                row(case, "peak RSS", result["peak_rss_mb"], "MB", notes="own process"),
                row(case, "throughput vs fp32 contiguous", result["img_per_s"] / base, "x"),
            ]
    if {"alternet_r50", "preresnet50"} <= set(args.models):
        flops = training_flops("alternet_r50", None) / training_flops("preresnet50", None)
        print(f"\nAlterNet-50 / PreAct-ResNet-50 arithmetic (FLOPs of forward + backward): {flops:.3f}x")
        rows.append(row("alternet_r50 / preresnet50", "training FLOPs ratio", flops, "x"))
        print("AlterNet-50 step time / PreAct-ResNet-50 step time (issue 16's target: <= 1.1x):")
        for precision, channels_last in configs:
            ratio = results["alternet_r50", precision, channels_last]["step_ms"]
            ratio /= results["preresnet50", precision, channels_last]["step_ms"]
            fmt = "channels_last" if channels_last else "contiguous"
            print(f"  {precision:<5} {fmt:<14} {ratio:.2f}x")
            case = f"alternet_r50 / preresnet50 {precision} {fmt} batch {args.batch}"
            rows.append(row(case, "step median ratio", ratio, "x", notes="target <= 1.1x"))
        if ("alternet_r50", "bf16", True) in results and ("alternet_r50", "fp32", False) in results:
            speedup = results["alternet_r50", "bf16", True]["img_per_s"]
            speedup /= results["alternet_r50", "fp32", False]["img_per_s"]
            print(f"\nalternet_r50 bf16 + channels_last vs fp32 contiguous (target >= 2x): {speedup:.2f}x")
            case = f"alternet_r50 bf16 channels_last / fp32 contiguous batch {args.batch}"
            rows.append(row(case, "throughput ratio", speedup, "x", notes="target >= 2x"))
    if {"alternet_r50_hdvw", "reference"} <= set(args.models):
        reference = results["reference", "fp32", False]["step_ms"]
        print("\nalternet_r50_hdvw vs the reference's dnn_50 at fp32 contiguous (its only setting), as speed-up:")
        for precision, channels_last in configs:
            ours = results["alternet_r50_hdvw", precision, channels_last]["step_ms"]
            fmt = "channels_last" if channels_last else "contiguous"
            print(f"  ours {precision:<5} {fmt:<14} {reference / ours:.2f}x  (targets: fp32 >= 1.0x, best >= 2.5x)")
            case = f"alternet_r50_hdvw {precision} {fmt} vs reference fp32 contiguous batch {args.batch}"
            rows.append(row(case, "speed-up", reference / ours, "x", notes="targets: fp32 >= 1.0x, best >= 2.5x"))
    print("\nShare of the matrix-multiply peak each model's fastest setting reaches over its whole step (FLOPs of")
    print("forward + backward x batch / step time / peak at that precision):")
    for model in args.models:
        (precision, channels_last), best = min(
            ((key[1:], result) for key, result in results.items() if key[0] == model), key=lambda kv: kv[1]["step_ms"]
        )
        flops = training_flops(model, args.reference) * args.batch
        achieved = flops / (best["step_ms"] / 1000) / 1e9
        fmt = "channels_last" if channels_last else "contiguous"
        print(f"  {model:<18} {precision} {fmt:<14} {achieved:6.0f} GFLOP/s = {achieved / peak[precision]:.0%} of peak")
        case = f"{model} {precision} {fmt} batch {args.batch} (fastest setting)"
        rows += [
            row(case, "training FLOP rate", achieved, "GFLOP/s"),
            row(case, "share of matmul peak", 100 * achieved / peak[precision], "%"),
        ]
        if model == "alternet_r50_hdvw" and "reference" in args.models and "bf16" in peak:
            target_ms = results["reference", "fp32", False]["step_ms"] / 2.5
            needed = flops / (target_ms / 1000) / 1e9
            print(
                f"  {'':<18} 2.5x the reference = {target_ms:.0f} ms/step = {needed:.0f} GFLOP/s "
                f"= {needed / peak['bf16']:.0%} of the bf16 peak"
            )
    finish(args, "models", rows, facts)


if __name__ == "__main__":
    main()
