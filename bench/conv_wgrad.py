"""Whether a 3x3 convolution's weight gradient computed another way beats oneDNN's on this CPU (issue 55: on AVX2,
oneDNN's weight gradients run at about half the rate of its forward).

    python -m bench.conv_wgrad [--model alternet_laptop] [--batch 256] [--rounds 5]

For every distinct stride-1, padding-1 3x3 convolution shape of ``--model`` at 32 px (channels_last, fp32), times
in one interleaved run (``bench/harness.py``):
  * ``oneDNN``: torch's weight gradient (``convolution_backward``, weight only), the one training uses;
  * ``swapped``: the same gradient as a forward convolution, batch and channels swapped (the input as ``C_in``
    images of ``N`` channels, the output gradient as ``C_out`` filters of ``N`` x H x W), which oneDNN computes with
    its forward kernels;
  * ``9 GEMMs``: nine matrix products on the zero-padded maps, each tap a row offset of the flattened pixels (no
    im2col copy), in chunks of 16 images so that a chunk stays in cache;
  * ``native``: torch's own convolution (oneDNN off: im2col and a BLAS product per image);
and the forward convolution of the same shape, the rate the weight gradient would need to reach. Every formulation
is checked against oneDNN's gradient first (max |diff| / max |grad|).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import alternet

from .harness import add_harness_arguments, begin, finish, interleave, row, summarise, timing_row


def conv_shapes(model: torch.nn.Module, size: int) -> list[tuple[int, int, int]]:
    """(C_in, C_out, map side) of the model's stride-1, padding-1 3x3 convolutions, each shape once."""
    found: list[tuple[int, int, int]] = []

    def hook(module: torch.nn.Conv2d, inputs: tuple[torch.Tensor, ...], _: torch.Tensor) -> None:
        if module.kernel_size == (3, 3) and module.stride == (1, 1) and module.padding == (1, 1):
            shape = (module.in_channels, module.out_channels, inputs[0].shape[-1])
            if module.groups == 1 and shape not in found:
                found.append(shape)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(torch.randn(1, 3, size, size))
    for handle in handles:
        handle.remove()
    return found


def formulations(x: torch.Tensor, grad: torch.Tensor, weight: torch.Tensor) -> dict[str, object]:
    """The weight gradient of ``conv2d(x, weight, padding=1)`` given the output gradient ``grad``, four ways."""
    n, c_in, side, _ = x.shape
    c_out = grad.shape[1]

    def onednn() -> torch.Tensor:
        return torch.ops.aten.convolution_backward(
            grad, x, weight, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False]
        )[1]

    def swapped() -> torch.Tensor:
        images = x.transpose(0, 1).contiguous(memory_format=torch.channels_last)
        filters = grad.transpose(0, 1).contiguous(memory_format=torch.channels_last)
        return F.conv2d(images, filters, padding=1).transpose(0, 1)

    def gemms(chunk: int = 16) -> torch.Tensor:
        padded = side + 2
        pixels_in = F.pad(x, (1, 1, 1, 1)).permute(0, 2, 3, 1).reshape(n, -1, c_in)
        pixels_out = F.pad(grad, (1, 1, 1, 1)).permute(0, 2, 3, 1).reshape(n, -1, c_out)
        taps = torch.zeros(9, c_out, c_in)
        for start in range(0, n, chunk):
            a = pixels_out[start : start + chunk].reshape(-1, c_out)
            b = pixels_in[start : start + chunk].reshape(-1, c_in)
            # Rows within padded + 1 of either end are border pixels (zero gradient); the taps' offsets stay inside.
            lo, hi = padded + 1, a.shape[0] - padded - 1
            for tap in range(9):
                offset = (tap // 3 - 1) * padded + (tap % 3 - 1)
                taps[tap].addmm_(a[lo:hi].t(), b[lo + offset : hi + offset])
        return taps.permute(1, 2, 0).reshape(c_out, c_in, 3, 3)

    def native() -> torch.Tensor:
        with torch.backends.mkldnn.flags(enabled=False):
            return torch.ops.aten.convolution_backward(
                grad.contiguous(),
                x.contiguous(),
                weight.contiguous(),
                None,
                [1, 1],
                [1, 1],
                [1, 1],
                False,
                [0, 0],
                1,
                [False, True, False],
            )[1]

    return {"oneDNN": onednn, "swapped": swapped, "9 GEMMs": gemms, "native": native}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="alternet_laptop")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=32)
    add_harness_arguments(parser, rounds=5)
    args = parser.parse_args()
    facts = begin(args, "conv_wgrad")
    torch.manual_seed(0)
    model = alternet.create_model(args.model, num_classes=100, img_size=args.size)
    rows = []
    for c_in, c_out, side in conv_shapes(model, args.size):
        case = f"{args.model} 3x3 {c_in}->{c_out} @{side}x{side} batch {args.batch} fp32 channels_last"
        x = torch.randn(args.batch, c_in, side, side).contiguous(memory_format=torch.channels_last)
        grad = torch.randn(args.batch, c_out, side, side).contiguous(memory_format=torch.channels_last)
        weight = torch.randn(c_out, c_in, 3, 3).contiguous(memory_format=torch.channels_last)
        ways = formulations(x, grad, weight)
        reference = ways["oneDNN"]()
        for name, way in ways.items():
            gap = ((way() - reference).abs().max() / reference.abs().max()).item()
            if gap > 1e-4:
                raise SystemExit(f"bench/conv_wgrad.py: {name} differs from oneDNN by {gap:.1e} on {case}")
        cases = {**ways, "forward": lambda x=x, weight=weight: F.conv2d(x, weight, padding=1)}
        times = interleave(cases, args.rounds, args.warmup)
        gflop = 2 * args.batch * side * side * c_in * c_out * 9 / 1e9
        base = summarise(times["oneDNN"]).median
        print(case, f"({gflop:.2f} GFLOP)")
        for name, seconds in times.items():
            median = summarise(seconds).median
            print(f"  {name:8s} {median * 1e3:7.1f} ms  {gflop / median:6.1f} GFLOP/s  {base / median:5.2f}x oneDNN's")
            rows.append(timing_row(f"{case} {name}", "median", seconds))
            rows.append(row(f"{case} {name}", "GFLOP/s", gflop / median, "GFLOP/s"))
    finish(args, "conv_wgrad", rows, facts)


if __name__ == "__main__":
    main()
