"""Where AlterNet-50's extra step time over its Conv-only twin comes from: each MSA block of ``alternet_r50``
beside the bottleneck a Conv block would put in its place (same input, same output width), timed alone (forward +
backward on the input the block sees in a real step, batch 32 at 32x32), with its FLOPs and the GFLOP/s it
reaches. (``preresnet50`` is not quite that twin: its last stage has 3 blocks, AlterNet-50's has 4.)

    python -m bench.blocks [--precision bf16|fp32] [--contiguous] [--batch 32] [--rounds 10] [--profile] [--no-record]

``--profile`` adds, per pair, the self CPU ms of each operator category (``bench/profile_step.py``'s).

The two blocks of a pair are timed alternately in one process (``bench/harness.py``'s ``interleave``, best of
``--rounds``; ``--repeats`` is the older name), so their ratio is robust to this machine's drift. A block that
does more FLOPs at fewer GFLOP/s than its twin is what the step-time ratio in ``bench/models.py`` is made of.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

import alternet
from alternet.models.blocks import Bottleneck

from .harness import add_harness_arguments, begin, finish, interleave, row, summarise, timing_row
from .profile_step import CATEGORIES, category


def block_inputs(model: torch.nn.Module, images: torch.Tensor) -> dict[str, torch.Tensor]:
    """The input each residual block receives in a forward pass of ``images``."""
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        info.module.register_forward_pre_hook(lambda _, args, name=info.name: seen.setdefault(name, args[0].detach()))
        for info in model.blocks()
    ]
    with torch.no_grad():
        model(images)
    for hook in hooks:
        hook.remove()
    return seen


def forward_backward(block: torch.nn.Module, x: torch.Tensor, dtype: torch.dtype | None):
    def run() -> None:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            out = block(x)
        out.float().sum().backward()

    return run


def gflop(run) -> float:
    counter = FlopCounterMode(display=False)
    with counter:
        run()
    return counter.get_total_flops() / 1e9


def category_ms(run, repeats: int) -> dict[str, float]:
    """Self CPU ms of one call of ``run`` per operator category (mean over ``repeats`` calls)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            run()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        totals[category(event.key)] += event.self_cpu_time_total / 1e3 / repeats
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--contiguous", action="store_true", help="NCHW instead of channels_last")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="per-operator-category ms of each pair")
    add_harness_arguments(parser, rounds=10, round_aliases=["--repeats"])
    args = parser.parse_args()
    facts = begin(args, "blocks")

    torch.manual_seed(0)
    layout = torch.contiguous_format if args.contiguous else torch.channels_last
    dtype = torch.bfloat16 if args.precision == "bf16" else None
    images = torch.randn(args.batch, 3, 32, 32).contiguous(memory_format=layout)
    model = alternet.create_model("alternet_r50", num_classes=100, img_size=32).to(memory_format=layout).train()
    inputs = block_inputs(model, images)
    fmt = "contiguous" if args.contiguous else "channels_last"
    print(f"batch {args.batch}, {args.precision} {fmt}")
    setting = f"alternet_r50 {args.precision} {fmt} batch {args.batch}"
    rows = []
    print("forward + backward of each MSA block of alternet_r50 and of a bottleneck in its place")
    print(
        f"{'block':<12} {'input':<18} {'MSA GFLOP':>9} {'ms':>7} {'GFLOP/s':>7}  {'Conv GFLOP':>10} {'ms':>7} "
        f"{'GFLOP/s':>7}  {'time ratio':>10}"
    )
    totals = [0.0, 0.0, 0.0, 0.0]
    for info in model.blocks():
        if info.kind != "M":
            continue
        x = inputs[info.name]
        out_chs = info.module.attn.to_out.out_features
        twin = Bottleneck(x.shape[1], out_chs // Bottleneck.expansion).to(memory_format=layout).train()
        runs = {kind: forward_backward(block, x, dtype) for kind, block in (("MSA", info.module), ("Conv", twin))}
        flops = [gflop(run) for run in runs.values()]
        seconds = interleave(runs, args.rounds, args.warmup)
        times = [summarise(seconds[kind]).low * 1000 for kind in runs]
        shape = "x".join(str(size) for size in x.shape)
        rate = [f / (t / 1000) for f, t in zip(flops, times)]
        for (kind, kind_seconds), kind_flops, kind_rate in zip(seconds.items(), flops, rate):
            case = f"{setting} {info.name} {kind}"
            rows += [
                timing_row(case, "fwd+bwd best", kind_seconds, statistic="low", notes=f"input {shape}"),
                row(case, "fwd+bwd", kind_flops, "GFLOP"),
                row(case, "fwd+bwd best rate", kind_rate, "GFLOP/s"),
            ]
        rows.append(row(f"{setting} {info.name} MSA/Conv", "fwd+bwd best ratio", times[0] / times[1], "x"))
        print(
            f"{info.name:<12} {shape:<18} {flops[0]:9.2f} {times[0]:7.1f} {rate[0]:7.0f}  {flops[1]:10.2f} "
            f"{times[1]:7.1f} {rate[1]:7.0f}  {times[0] / times[1]:9.2f}x"
        )
        totals = [totals[0] + flops[0], totals[1] + times[0], totals[2] + flops[1], totals[3] + times[1]]
        if args.profile:
            profiles = [category_ms(run, args.rounds) for run in runs.values()]
            for label in [label for label, _ in CATEGORIES] + ["other"]:
                msa, conv = (profiled.get(label, 0.0) for profiled in profiles)
                print(f"    {label:<26} MSA {msa:7.1f} ms   Conv {conv:7.1f} ms")
                for kind, ms in (("MSA", msa), ("Conv", conv)):
                    rows.append(row(f"{setting} {info.name} {kind} {label}", "self CPU, profiled", ms, "ms"))
    print(
        f"{'all MSA':<12} {'':<18} {totals[0]:9.2f} {totals[1]:7.1f} {totals[0] / totals[1] * 1000:7.0f}  "
        f"{totals[2]:10.2f} {totals[3]:7.1f} {totals[2] / totals[3] * 1000:7.0f}  {totals[1] / totals[3]:9.2f}x"
    )
    print(
        f"extra time of the MSA blocks over their twins: {totals[1] - totals[3]:.0f} ms per step "
        f"(FLOPs {totals[0] / totals[2]:.2f}x, GFLOP/s {totals[0] / totals[1] / (totals[2] / totals[3]):.2f}x)"
    )
    rows += [
        row(f"{setting} all MSA", "fwd+bwd best, summed", totals[1], "ms"),
        row(f"{setting} all Conv twins", "fwd+bwd best, summed", totals[3], "ms"),
        row(f"{setting} all MSA/Conv", "fwd+bwd best ratio", totals[1] / totals[3], "x"),
    ]
    finish(args, "blocks", rows, facts)


if __name__ == "__main__":
    main()
