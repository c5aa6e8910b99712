"""GPU training throughput of AlterNet-50: images/s, step time and model FLOPs utilisation (MFU) at 32 px (CIFAR
stem) and 224 px (ImageNet stem), bf16 autocast, in either memory format, eager and ``torch.compile`` (any mode),
beside the reference implementation (``--reference PATH``, a how-do-vits-work checkout; eager, as it was written to
run).

    python -m bench.gpu [--reference ../how-do-vits-work] [--batch32 96 256 1024] [--batch224 256]
                        [--formats channels_last contiguous] [--compile-mode reduce-overhead] [--no-compile]
                        [--peak-tflops N] [--sizes 32 224] [--steps 20] [--rounds 3] [--no-record]

MFU = (training FLOPs per step / step time) / the GPU's dense bf16 peak. FLOPs are counted, not estimated:
``torch.utils.flop_counter`` over one forward + backward at the benchmark's shapes (matmuls and convolutions, the
work that peaks measure). ``enqueue ms`` is the host's time to issue one step (between two device syncs): near the
step time, the step is host-bound (the GPU waits for Python); far below it, GPU-bound. Goals (issue 50): 32 px
>= 12,000 img/s at batch 512, 224 px >= 4,000 img/s at batch 256, and >= 1.5x the reference's step. Needs a CUDA GPU;
``--device cpu --steps 1 --batch32 2 --batch224 2 [--no-compile]`` runs the same code on a CPU as a smoke test (no
MFU there; compiling the 224 px model takes the CPU over ten minutes).

At each size the runs (ours eager, ours compiled, the reference) are built and warmed up (10 steps compiled, 3
eager: compilation and autotuning happen there), then timed in turn by ``bench/harness.py``'s ``interleave``: each
of ``--rounds`` rounds times ``--steps`` steps of every run, between CUDA syncs; the median round gives the step time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from .harness import (
    add_formats_argument,
    add_harness_arguments,
    begin,
    device_sync,
    finish,
    interleave,
    memory_format,
    ratio,
    row,
    summarise,
    timing_row,
)
from .step import training_step

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


def prepare(
    which: str, size: int, batch: int, compile_mode: str | None, reference: str | None, device: str, layout: str
):
    """A warmed-up training step of ``which`` at ``size`` px in memory format ``layout``, compiled with
    ``compile_mode`` (None: eager), and its training FLOPs."""
    torch.manual_seed(0)
    layout_format = memory_format(layout)
    model = build(which, size, reference).to(device, memory_format=layout_format).train()
    classes = 100 if size < 128 else 1000
    images = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=layout_format)
    labels = torch.randint(0, classes, (batch,), device=device)
    flops = training_flops(model, images, labels)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    compiled = compile_mode is not None
    net = torch.compile(model, mode=compile_mode) if compiled else model
    step = training_step(net, images, labels, optimizer, torch.bfloat16)
    for _ in range(10 if compiled else 3):  # compilation and autotuning happen here
        step()
    return step, flops


def enqueue_seconds(step: Callable[[], None], sync: Callable[[], None] | None, steps: int) -> float:
    """The median host time to issue one step, each between two syncs (the device idle when it starts)."""
    seconds = []
    for _ in range(steps):
        if sync:
            sync()
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
        if sync:
            sync()
    return summarise(seconds).median


def steps_of(step: Callable[[], None], steps: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(steps):
            step()

    return run


def measure(args, size: int, batch: int, layout: str, peak: float | None, sync) -> list[dict]:
    """Every run at one size, batch and memory format, interleaved; its printed lines and rows."""
    runs = [("ours", None)] + ([] if args.no_compile else [("ours", args.compile_mode)])
    runs += [("reference", None)] if args.reference else []
    cases, flops, enqueue = {}, {}, {}
    for which, compile_mode in runs:
        key = f"{which} {'eager' if compile_mode is None else 'compile'}"
        step, flops[key] = prepare(which, size, batch, compile_mode, args.reference, args.device, layout)
        cases[key] = steps_of(step, args.steps)
        enqueue[key] = enqueue_seconds(step, sync, min(args.steps, 10))
    timed = interleave(cases, args.rounds, args.warmup, sync)
    per_step = {key: [seconds / args.steps for seconds in values] for key, values in timed.items()}
    rows = []
    for key, seconds in per_step.items():
        which, mode = key.split()
        step_s = summarise(seconds).median
        tflops = flops[key] / step_s / 1e12
        mfu = f"{tflops / peak:.1%}" if peak else "n/a"
        print(
            f"{which:<11} {size:>4} {batch:>5} {layout:<13} {mode:<8} {batch / step_s:>9.0f} {step_s * 1000:>8.1f} "
            f"{enqueue[key] * 1000:>10.1f} {tflops:>8.1f} {mfu:>6}",
            flush=True,
        )
        compiled = f"compile {args.compile_mode}" if mode == "compile" else mode
        case = f"{MODEL_NAMES[which]} {size}px batch {batch} bf16 {layout} {compiled}"
        rows += [
            timing_row(case, "step median", seconds, notes=f"rounds of {args.steps} steps"),
            row(case, "throughput", batch / step_s, "img/s"),
            row(case, "enqueue", enqueue[key] * 1000, "ms", notes="host time to issue one step, device idle"),
            row(case, "training FLOP rate", tflops, "TFLOP/s"),
        ]
        if peak:
            rows.append(row(case, "MFU", 100 * tflops / peak, "%", notes=f"peak {peak:g} TFLOP/s"))
    if args.reference:
        best = min((key for key in per_step if key.startswith("ours")), key=lambda k: summarise(per_step[k]).median)
        speedup = ratio(per_step["reference eager"], per_step[best])
        print(
            f"  {size} px batch {batch} {layout}: ours (best) vs reference: {speedup:.2f}x the images/s (goal >= 1.5x)"
        )
        case = f"{MODEL_NAMES['ours']} {best.split()[1]} vs {MODEL_NAMES['reference']} eager, {size}px batch {batch}"
        rows.append(row(case, "throughput ratio", speedup, "x"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", default=None, help="a how-do-vits-work checkout to time beside ours")
    parser.add_argument("--batch32", type=int, nargs="+", default=[256], help="batch sizes at 32 px")
    parser.add_argument("--batch224", type=int, nargs="+", default=[64], help="batch sizes at 224 px")
    add_formats_argument(parser)
    parser.add_argument("--compile-mode", default="default", help="torch.compile's mode for the compiled runs")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak (default: by GPU name)")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--sizes", type=int, nargs="+", choices=(32, 224), default=[32, 224], help="image sizes")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of this script")
    add_harness_arguments(parser, rounds=3, round_help="timed rounds of --steps steps, every run once per round")
    args = parser.parse_args()
    on_gpu = args.device == "cuda"
    facts = begin(args, "gpu", device=args.device, no_gpu="the CPU benchmarks are python -m bench.models")
    name = torch.cuda.get_device_name() if on_gpu else "CPU (smoke test)"
    peak = peak_tflops(name, args.peak_tflops) if on_gpu else None
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"{name}, bf16 autocast, {args.rounds} rounds of {args.steps} timed steps, compile mode {args.compile_mode}")
    header = (
        f"{'model':<11} {'size':>4} {'batch':>5} {'format':<13} {'mode':<8} {'img/s':>9} {'ms/step':>8} "
        f"{'enqueue ms':>10} {'TFLOP/s':>8} {'MFU':>6}"
    )
    print(header + "\n" + "-" * len(header))
    sync = device_sync(args.device)
    for size in args.sizes:
        for batch in args.batch32 if size == 32 else args.batch224:
            for layout in args.formats:  # recorded as each is measured: a run cut by its time limit keeps them
                finish(args, "gpu", measure(args, size, batch, layout, peak, sync), facts)
    if peak is None and on_gpu:
        print(f"MFU: unknown peak for {name!r}; pass --peak-tflops")


if __name__ == "__main__":
    main()
