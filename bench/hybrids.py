"""Training-step time and images/s of each hybrid family beside AlterNet and its ResNet twin, on the CPU in fp32 (or
bf16), at 32 px and at 224 px: AlterNet, pre-activation ResNet, BoTNet, HaloNet, LambdaNet (timm's ByobNet), CoAtNet and
MaxViT (timm's MaxxVit), each the zoo's CIFAR-sized model (0.4M to 1.6M parameters at 100 classes); at 32 px also the
four models ``experiment=hybrids`` trains (AlterNet, its twin, BoTNet and CoAtNet at the laptop scale, 1.05M to 1.07M
parameters), so its cost per family can be read before a sweep is launched.

At 32 px every model has its stride-1 CIFAR stem; at 224 px the same models take their ImageNet stems (the zoo's
``stem=auto``), with the two knobs a 7x7 last stage needs (HaloNet ``block_size=7``, MaxViT ``window=7``). The
laptop models are timed at 32 px only: the laptop AlterNet's fixed 2x2 stem is for CIFAR-sized images.

    python -m bench.hybrids [--sizes 32 224] [--models botnet_cifar coatnet_cifar] [--batch 32] [--batch-224 8]
                            [--precision fp32 bf16] [--device cpu|cuda] [--rounds 5] [--warmup 1] [--threads N]
                            [--no-record]

``--precision`` names one or more precisions (default fp32; bf16 is autocast, as ``trainer.precision=bf16-mixed``
trains, so the rows say what a CPU run of ``experiment=hybrids`` costs); with several, every model runs in each,
in the same interleaved rounds, so their ratios come from one run. ``bf16-dw32`` is bf16 with every strided
depthwise convolution (CoAtNet's and MaxViT's downsampling MBConv blocks) kept in fp32. ``--device cuda`` times the
same steps on a GPU (each clock started and stopped after ``torch.cuda.synchronize``; rows under the GPU's machine
class); raise ``--batch``/``--batch-224`` there, the CPU defaults leave a GPU idle.

Timing goes through ``bench/harness.py``: per size, ``interleave`` runs one training step of every model in turn
(forward, cross-entropy, backward, AdamW step: ``bench/step.py``) for ``--rounds`` rounds after ``--warmup`` ones, so
the machine's drift hits all families alike; the median step is reported. The header, summaries and recorded rows
(``bench/results/hybrids-<machine class>.csv``) are the harness's.
"""

from __future__ import annotations

import argparse

from .harness import add_harness_arguments, begin, device_sync, finish, interleave, row, summarise, timing_row
from .step import training_step

FAMILIES = {  # model -> family
    "alternet_tiny": "AlterNet",
    "preresnet_tiny": "ResNet (pre-activation)",
    "botnet_cifar": "BoTNet (ByobNet)",
    "halonet_cifar": "HaloNet (ByobNet)",
    "lambdanet_cifar": "LambdaNet (ByobNet)",
    "coatnet_cifar": "CoAtNet (MaxxVit)",
    "maxvit_cifar": "MaxViT (MaxxVit)",
    "alternet_laptop": "AlterNet, laptop",
    "preresnet_laptop": "ResNet, laptop",
    "botnet_laptop": "BoTNet, laptop",
    "coatnet_laptop": "CoAtNet, laptop",
}
ONLY_32 = {"alternet_laptop", "preresnet_laptop", "botnet_laptop", "coatnet_laptop"}  # experiment=hybrids' models
# what a model needs at 224 px beyond its ImageNet stem: its last stages' maps are 14 and 7 px there
AT_224 = {"halonet_cifar": dict(block_size=7), "maxvit_cifar": dict(window=7)}
NUM_CLASSES = 100


def build(name: str, size: int):
    import alternet

    extra = AT_224.get(name, {}) if size >= 128 else {}
    return alternet.create_model(name, num_classes=NUM_CLASSES, img_size=size, **extra)


PRECISIONS = ("fp32", "bf16", "bf16-dw32")


def strided_depthwise_in_fp32(model):
    """``bf16-dw32``: bf16 autocast but every strided depthwise convolution in fp32 (autocast off inside it), to
    measure what oneDNN's bf16 backward of those convolutions costs a MBConv family on this CPU."""
    import torch

    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d) and module.groups == module.in_channels > 1 and max(module.stride) > 1:
            forward = module.forward

            def in_fp32(x, forward=forward):
                with torch.autocast(x.device.type, enabled=False):
                    return forward(x.float())

            module.forward = in_fp32
    return model


def steps_at(models: list[str], size: int, batch: int, precisions: list[str], device: str = "cpu"):
    """One training step per model and precision at ``size`` px (contiguous) on ``device``, keyed
    ``(model, precision)``, and each model's parameter count."""
    import torch

    steps, params = {}, {}
    for name in models:
        for precision in precisions:
            torch.manual_seed(0)
            model = build(name, size).to(device).train()
            if precision == "bf16-dw32":
                strided_depthwise_in_fp32(model)
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            images = torch.randn(batch, 3, size, size, device=device)
            labels = torch.randint(0, NUM_CLASSES, (batch,), device=device)
            dtype = torch.bfloat16 if precision.startswith("bf16") else None
            steps[name, precision] = training_step(model, images, labels, optimizer, dtype)
            params[name] = sum(p.numel() for p in model.parameters())
    return steps, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[32, 224])
    parser.add_argument("--batch", type=int, default=32, help="batch at 32 px (default 32)")
    parser.add_argument("--batch-224", type=int, default=8, help="batch at 128 px and more (default 8)")
    parser.add_argument("--precision", nargs="+", default=["fp32"], choices=PRECISIONS, help="default fp32")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    add_harness_arguments(parser, rounds=5, warmup=1)
    args = parser.parse_args()
    facts = begin(args, "hybrids", device=args.device)
    rows = []
    for size in args.sizes:
        batch = args.batch_224 if size >= 128 else args.batch
        models = [name for name in args.models if size < 128 or name not in ONLY_32]
        if not models:
            continue
        steps, params = steps_at(models, size, batch, args.precision, args.device)
        seconds = interleave(steps, args.rounds, args.warmup, sync=device_sync(args.device))
        print(f"\n{size} px, batch {batch}, {args.rounds} timed steps per model (median), interleaved")
        header = f"{'model':<16} {'family':<24} {'params':>10} {'prec':>9} {'ms/step':>9} {'img/s':>8} {'spread':>7}"
        print(header)
        print("-" * len(header))
        for name, precision in steps:
            summary = summarise(seconds[name, precision])
            rate = batch / summary.median
            print(
                f"{name:<16} {FAMILIES[name]:<24} {params[name]:>10,} {precision:>9} {1000 * summary.median:>9.1f} "
                f"{rate:>8.1f} {summary.spread:>6.0%}",
                flush=True,
            )
            case = f"{name} {size}px {precision} batch {batch}"
            rows += [
                timing_row(case, "step median", seconds[name, precision]),
                row(case, "throughput", rate, "img/s", rounds=summary.count),
                row(case, "parameters", params[name], "count", notes=FAMILIES[name]),
            ]
    finish(args, "hybrids", rows, facts)


if __name__ == "__main__":
    main()
