"""Where a CPU training step's convolution time goes, by oneDNN primitive, and whether 1x1 weight gradients computed
as a matrix product would win it back.

    python -m bench.onednn [--model alternet_r50_hdvw] [--precision bf16] [--batch 32] [--rounds 6] [--max-pixels 64]
    python -m bench.onednn --model alternet_laptop --precision fp32 --batch 256   # the speedrun's step

Two measurements, batch ``--batch`` (32), 32 px, channels_last:
  * one training step under oneDNN's verbose mode, its primitive executions summed by kind, implementation and
    direction (forward, backward data, backward weights), and the costliest convolution shapes with their GFLOP/s;
  * an A/B of whole steps, alternated in one process (``bench/harness.py``'s ``interleave``, median of ``--rounds``
    rounds of 3 steps; ``--repeats`` is the older name): oneDNN as is, vs every 1x1 convolution on maps of at most
    ``--max-pixels`` pixels taking its weight gradient from one matrix product (the rest of it still oneDNN). That
    is the case the breakdown shows oneDNN slowest at.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import types

import torch
import torch.nn.functional as F

import alternet
import alternet.models.attention as window_attention

from .harness import add_harness_arguments, begin, finish, interleave, ratio, row, summarise, switched, timing_row
from .step import training_step


class _MatmulWeightGrad1x1(torch.autograd.Function):
    """A 1x1 convolution whose weight gradient is grad_out^T @ input on the (pixels, channels) views."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return F.conv2d(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.convolution_backward(
                grad, x, weight, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, False, False]
            )[0]
        if ctx.needs_input_grad[1]:
            pixels_in = x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])
            pixels_out = grad.permute(0, 2, 3, 1).reshape(-1, grad.shape[1])
            grad_w = (pixels_out.t() @ pixels_in).view_as(weight)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum((0, 2, 3))
        return grad_x, grad_w, grad_b


class _Switch:
    """Routes small-map 1x1 convolutions (Conv2d modules and the attention's functional ones) through
    ``_MatmulWeightGrad1x1`` while ``on``."""

    def __init__(self, max_pixels: int):
        self.on = False
        self.max_pixels = max_pixels

    def set(self, on: bool) -> None:
        self.on = on

    def conv2d(self, x, weight, bias=None, *args):
        if (
            self.on
            and not args
            and weight.shape[-2:] == (1, 1)
            and x.shape[-1] * x.shape[-2] <= self.max_pixels
            and torch.is_autocast_enabled("cpu")
        ):
            dtype = torch.get_autocast_dtype("cpu")
            with torch.autocast("cpu", enabled=False):
                bias = None if bias is None else bias.to(dtype)
                return _MatmulWeightGrad1x1.apply(x.to(dtype), weight.to(dtype), bias)
        return F.conv2d(x, weight, bias, *args)

    def install(self, model: torch.nn.Module) -> int:
        count = 0
        for module in model.modules():
            pointwise = isinstance(module, torch.nn.Conv2d) and module.kernel_size == (1, 1)
            if pointwise and module.stride == (1, 1) and module.groups == 1 and module.padding == (0, 0):
                module.forward = lambda x, m=module: self.conv2d(x, m.weight, m.bias)
                count += 1
        functional = types.ModuleType("F")
        functional.__getattr__ = lambda name: getattr(F, name)
        functional.conv2d = self.conv2d
        window_attention.F = functional
        return count


def onednn_breakdown(step) -> list[str]:
    """One step under oneDNN verbose (its lines go to the C stdout, so fd 1 is redirected to a file)."""
    sys.stdout.flush()
    with tempfile.TemporaryFile(mode="w+") as log:
        saved = os.dup(1)
        os.dup2(log.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                step()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        return [line for line in log if line.startswith("onednn_verbose,v1,primitive,exec")]


def conv_gflop(shape: str) -> float:
    """FLOPs of a oneDNN convolution descriptor such as ``mb32_ic64oc64_ih32oh32kh3..._iw32ow32kw3...``."""
    f = {key: int(re.search(key + r"(\d+)", shape).group(1)) for key in ("mb", "ic", "oc", "oh", "ow", "kh", "kw")}
    return 2 * f["mb"] * f["oh"] * f["ow"] * f["oc"] * f["ic"] * f["kh"] * f["kw"] / 1e9


def report_breakdown(lines: list[str], top: int, case: str) -> list[dict]:
    """Print the breakdown; its sums as rows (case: ``case`` plus the primitive or the convolution shape)."""
    by_impl = collections.defaultdict(lambda: [0, 0.0])
    by_shape = collections.defaultdict(lambda: [0, 0.0])
    for line in lines:
        fields = line.strip().split(",")
        kind, impl, direction, ms = fields[5], fields[6], fields[7], float(fields[-1])
        groups = [by_impl[(kind, impl.split(":")[0], direction)]]
        if kind == "convolution":
            groups.append(by_shape[(direction, fields[-2])])
        for group in groups:
            group[0] += 1
            group[1] += ms
    print(f"oneDNN primitives in one step: {sum(v[1] for v in by_impl.values()):.0f} ms")
    print(f"  {'ms':>7} {'calls':>5}  kind / implementation / direction")
    rows = [row(f"{case} all primitives", "oneDNN exec, one step", sum(v[1] for v in by_impl.values()), "ms")]
    for (kind, impl, direction), (calls, ms) in sorted(by_impl.items(), key=lambda kv: -kv[1][1]):
        print(f"  {ms:7.1f} {calls:5d}  {kind} / {impl} / {direction}")
        rows.append(
            row(f"{case} {kind} / {impl} / {direction}", "oneDNN exec, one step", ms, "ms", notes=f"{calls} calls")
        )
    print(f"costliest convolution shapes (top {top}):")
    print(f"  {'ms':>7} {'calls':>5} {'GFLOP/s':>8}  direction  shape")
    for (direction, shape), (calls, ms) in sorted(by_shape.items(), key=lambda kv: -kv[1][1])[:top]:
        rate = conv_gflop(shape) * calls / (ms / 1000)
        print(f"  {ms:7.1f} {calls:5d} {rate:8.0f}  {direction:<17} {shape}")
        rows.append(
            row(f"{case} convolution {direction} {shape}", "oneDNN rate", rate, "GFLOP/s", notes=f"{ms:.1f} ms")
        )
    return rows


def gradient_gap(
    model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, switch: _Switch, bf16: bool
) -> float:
    """Largest gradient difference between the two paths, relative to the largest gradient (round-off of the
    precision the step runs in)."""
    grads = []
    for on in (False, True):
        switch.set(on)
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            F.cross_entropy(model(images), labels).backward()
        grads.append(torch.cat([p.grad.float().flatten() for p in model.parameters()]))
    return ((grads[0] - grads[1]).abs().max() / grads[0].abs().max()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="alternet_r50_hdvw")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--max-pixels", type=int, default=64, help="largest map (h*w) given a matmul grad")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--top", type=int, default=12)
    add_harness_arguments(parser, rounds=6, round_aliases=["--repeats"], round_help="A/B rounds of 3 steps")
    args = parser.parse_args()
    facts = begin(args, "onednn")

    torch.manual_seed(0)
    model = alternet.create_model(args.model, num_classes=100, img_size=32)
    switch = _Switch(args.max_pixels)
    patched = switch.install(model)
    model = model.to(memory_format=torch.channels_last).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    images = torch.randn(args.batch, 3, 32, 32).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 100, (args.batch,))
    step = training_step(model, images, labels, optimizer, torch.bfloat16 if args.precision == "bf16" else None)
    print(f"{args.model}, {args.precision}, batch {args.batch}, channels_last")
    case = f"{args.model} {args.precision} channels_last batch {args.batch}"

    for on in (False, True, False):
        switch.set(on)
        step()
    rows = report_breakdown(onednn_breakdown(step), args.top, case)

    gap = gradient_gap(model, images, labels, switch, args.precision == "bf16")
    print(f"same gradients either way: max |diff| / max |grad| = {gap:.1e}")
    rows.append(row(f"{case} matmul weight grad vs oneDNN", "max |diff| / max |grad|", gap, "1"))

    def three_steps() -> None:
        for _ in range(3):
            step()

    paths = {"oneDNN weight grad": False, "matmul weight grad": True}
    times = interleave(
        {name: switched(switch.set, on, three_steps) for name, on in paths.items()}, args.rounds, args.warmup
    )
    per_step = {name: [seconds / 3 for seconds in times[name]] for name in paths}
    base, matmul = (summarise(per_step[name]).median * 1000 for name in paths)
    speedup = ratio(per_step["oneDNN weight grad"], per_step["matmul weight grad"])
    print(f"A/B, {patched} 1x1 Conv2d modules plus the attention's projections, maps <= {args.max_pixels} px:")
    print(f"  oneDNN weight grad {base:.0f} ms/step, matmul weight grad {matmul:.0f} ms/step: {speedup:.3f}x")
    notes = f"1x1 convs on maps <= {args.max_pixels} px"
    rows += [timing_row(f"{case} {name}", "step median", per_step[name], notes=notes) for name in paths]
    rows.append(row(f"{case} oneDNN / matmul weight grad", "step median ratio", speedup, "x", notes=notes))
    finish(args, "onednn", rows, facts)


if __name__ == "__main__":
    main()
