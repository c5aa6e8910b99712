"""GPU training throughput of AlterNet-50: images/s, step time and model FLOPs utilisation (MFU) at 32 px (CIFAR
stem) and 224 px (ImageNet stem), bf16 autocast + channels_last, eager and ``torch.compile``, beside the reference
implementation (``--reference PATH``, a how-do-vits-work checkout; eager, as it was written to run).

    python bench/gpu.py [--reference ../how-do-vits-work] [--batch32 256] [--batch224 64] [--peak-tflops N]

MFU = (training FLOPs per step / step time) / the GPU's dense bf16 peak. FLOPs are counted, not estimated:
``torch.utils.flop_counter`` over one forward + backward at the benchmark's shapes (matmuls and convolutions, the
work that peaks measure). Goals (issue 16): >= 3x the reference, MFU >= 30% at 224 px. Needs a CUDA GPU;
``--device cpu --steps 1 --batch32 2 --batch224 2 [--no-compile]`` runs the same code on a CPU as a smoke test (no
MFU there; compiling the 224 px model takes the CPU over ten minutes).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

from step import training_step

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


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def training_flops(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> int:
    counter = FlopCounterMode(display=False)
    with counter, torch.autocast(images.device.type, dtype=torch.bfloat16):
        torch.nn.functional.cross_entropy(model(images), labels).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def measure(which: str, size: int, batch: int, compiled: bool, reference: str | None, steps: int, device: str) -> dict:
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
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    seconds = (time.perf_counter() - start) / steps
    return {"step_ms": 1000 * seconds, "img_per_s": batch / seconds, "tflops": flops / seconds / 1e12}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference", default=None, help="a how-do-vits-work checkout to time beside ours")
    parser.add_argument("--batch32", type=int, default=256)
    parser.add_argument("--batch224", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--peak-tflops", type=float, default=None, help="dense bf16 peak (default: by GPU name)")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of this script")
    args = parser.parse_args()
    on_gpu = args.device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        raise SystemExit("bench/gpu.py needs a CUDA GPU (none is visible); the CPU benchmarks are bench/models.py")
    name = torch.cuda.get_device_name() if on_gpu else "CPU (smoke test)"
    peak = peak_tflops(name, args.peak_tflops) if on_gpu else None
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"{name}, torch {torch.__version__}, bf16 autocast + channels_last, {args.steps} timed steps")
    header = f"{'model':<11} {'size':>4} {'batch':>5} {'mode':<8} {'img/s':>9} {'ms/step':>8} {'TFLOP/s':>8} {'MFU':>6}"
    print(header + "\n" + "-" * len(header))
    results = {}
    for size, batch in ((32, args.batch32), (224, args.batch224)):
        runs = [("ours", False)] + ([] if args.no_compile else [("ours", True)])
        runs += [("reference", False)] if args.reference else []
        for which, compiled in runs:
            result = measure(which, size, batch, compiled, args.reference, args.steps, args.device)
            results[which, size, compiled] = result
            mfu = f"{result['tflops'] / peak:.1%}" if peak else "n/a"
            mode = "compile" if compiled else "eager"
            print(
                f"{which:<11} {size:>4} {batch:>5} {mode:<8} {result['img_per_s']:>9.0f} {result['step_ms']:>8.1f} "
                f"{result['tflops']:>8.1f} {mfu:>6}",
                flush=True,
            )
        if args.reference:
            ref = results["reference", size, False]["step_ms"]
            best = min(results["ours", size, c]["step_ms"] for c in (False, True) if ("ours", size, c) in results)
            print(f"  {size} px: ours (best) vs reference: {ref / best:.2f}x the images/s (goal >= 3x)")
    if peak is None and on_gpu:
        print(f"MFU: unknown peak for {name!r}; pass --peak-tflops")


if __name__ == "__main__":
    main()
