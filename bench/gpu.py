"""GPU training throughput of AlterNet-50: images/s, step time and model FLOPs utilisation (MFU) at 32 px (CIFAR
stem) and 224 px (ImageNet stem), bf16 autocast + channels_last, eager and ``torch.compile``, beside the reference
implementation (``--reference PATH``, a how-do-vits-work checkout; eager, as it was written to run).

    python bench/gpu.py [--reference ../how-do-vits-work] [--batch32 256] [--batch224 64] [--peak-tflops N]
                        [--sizes 32 224] [--steps 20] [--rounds 3] [--no-record]

MFU = (training FLOPs per step / step time) / the GPU's dense bf16 peak. FLOPs are counted, not estimated:
``torch.utils.flop_counter`` over one forward + backward at the benchmark's shapes (matmuls and convolutions, the
work that peaks measure). Goals (issue 16): >= 3x the reference, MFU >= 30% at 224 px. Needs a CUDA GPU;
``--device cpu --steps 1 --batch32 2 --batch224 2 [--no-compile]`` runs the same code on a CPU as a smoke test (no
MFU there; compiling the 224 px model takes the CPU over ten minutes).

At each size the runs (ours eager, ours compiled, the reference) are built and warmed up (10 steps compiled, 3
eager: compilation and autotuning happen there), then timed in turn by ``bench/harness.py``'s ``interleave``: each
of ``--rounds`` rounds times ``--steps`` steps of every run, between CUDA syncs; the median round gives the step time.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import add_harness_arguments, begin, device_sync, finish, interleave, ratio, row, summarise, timing_row
from step import training_step

MODEL_NAMES = {"ours": "alternet_r50", "reference": "reference dnn_50"}
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "GH200": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 125.0}


def peak_tflops(name: str, given: float | None) -> float | None:
    if given:
        return given
    return next((peak for key, peak in PEAK_BF16_TFLOPS.items() if key in name), None)


def build(which: str, size: int, reference: str | None) -> torch.nn.Module:
    if which == "reference":
        from reference import reference_alternet_50

        return reference_alternet_50(reference, num_classes=100 if size < 128 else 1000, image_size=size)
    import alternet

    return alternet.create_model("alternet_r50", num_classes=100 if size < 128 else 1000, img_size=size)


def training_flops(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.autocast(images.device.type, dtype=torch.bfloat16):
        torch.nn.functional.cross_entropy(model(images), labels).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def prepare(which: str, size: int, batch: int, compiled: bool, reference: str | None, device: str):
    """A warmed-up training step of ``which`` at ``size`` px and its training FLOPs."""
    torch.manual_seed(0)
    model = build(which, size, reference).to(device, memory_format=torch.channels_last).train()
    classes = 100 if size < 128 else 1000
    images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, classes, (batch,), device=device)
    flops = training_flops(model, images, labels)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = training_step(torch.compile(model) if compiled else model, images, labels, optimizer, torch.bfloat16)
    for _ in range(10 if compiled else 3):  # compilation and autotuning happen here
        step()
    return step, flops


def steps_of(step: Callable[[], None], steps: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(steps):
            step()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", default=None, help="a how-do-vits-work checkout to time beside ours")
    parser.add_argument("--batch32", type=int, default=256)
    parser.add_argument("--batch224", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak (default: by GPU name)")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--sizes", type=int, nargs="+", choices=(32, 224), default=[32, 224], help="image sizes")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of this script")
    add_harness_arguments(parser, rounds=3, round_help="timed rounds of --steps steps, every run once per round")
    args = parser.parse_args()
    on_gpu = args.device == "cuda"
    facts = begin(args, "gpu", device=args.device, no_gpu="the CPU benchmarks are bench/models.py")
    name = torch.cuda.get_device_name() if on_gpu else "CPU (smoke test)"
    peak = peak_tflops(name, args.peak_tflops) if on_gpu else None
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"{name}, bf16 autocast + channels_last, {args.rounds} rounds of {args.steps} timed steps")
    header = f"{'model':<11} {'size':>4} {'batch':>5} {'mode':<8} {'img/s':>9} {'ms/step':>8} {'TFLOP/s':>8} {'MFU':>6}"
    print(header + "\n" + "-" * len(header))
    rows = []
    for size in args.sizes:
        batch = args.batch32 if size == 32 else args.batch224
        runs = [("ours", False)] + ([] if args.no_compile else [("ours", True)])
        runs += [("reference", False)] if args.reference else []
        cases, flops = {}, {}
        for which, compiled in runs:
            key = f"{which} {'compile' if compiled else 'eager'}"
            step, flops[key] = prepare(which, size, batch, compiled, args.reference, args.device)
            cases[key] = steps_of(step, args.steps)
        timed = interleave(cases, args.rounds, args.warmup, device_sync(args.device))
        per_step = {key: [seconds / args.steps for seconds in values] for key, values in timed.items()}
        for key, seconds in per_step.items():
            which, mode = key.split()
            step_s = summarise(seconds).median
            tflops = flops[key] / step_s / 1e12
            mfu = f"{tflops / peak:.1%}" if peak else "n/a"
            print(
                f"{which:<11} {size:>4} {batch:>5} {mode:<8} {batch / step_s:>9.0f} {step_s * 1000:>8.1f} "
                f"{tflops:>8.1f} {mfu:>6}",
                flush=True,
            )
            case = f"{MODEL_NAMES[which]} {size}px batch {batch} bf16 channels_last {mode}"
            rows += [
                timing_row(case, "step median", seconds, notes=f"rounds of {args.steps} steps"),
                row(case, "throughput", batch / step_s, "img/s"),
                row(case, "training FLOP rate", tflops, "TFLOP/s"),
            ]
            if peak:
                rows.append(row(case, "MFU", 100 * tflops / peak, "%", notes=f"peak {peak:g} TFLOP/s"))
        if args.reference:
            best = min((key for key in per_step if key.startswith("ours")), key=lambda k: summarise(per_step[k]).median)
            speedup = ratio(per_step["reference eager"], per_step[best])
            print(f"  {size} px: ours (best) vs reference: {speedup:.2f}x the images/s (goal >= 3x)")
            case = f"{MODEL_NAMES['ours']} {best.split()[1]} vs {MODEL_NAMES['reference']} eager, {size}px"
            rows.append(row(case, "throughput ratio", speedup, "x"))
    if peak is None and on_gpu:
        print(f"MFU: unknown peak for {name!r}; pass --peak-tflops")
    finish(args, "gpu", rows, facts)


if __name__ == "__main__":
    main()
