"""Activation memory of one training forward with and without gradient checkpointing, on the CPU.

The main figure is what autograd saves for backward: the bytes of every tensor saved while the forward runs
(``torch.autograd.graph.saved_tensors_hooks``), counted once per storage and without the parameters (a conv saves
its weight, which exists anyway). With checkpointing each block saves only its input; the rest is recomputed in
backward. Peak RSS growth over one forward+backward (gradients and allocator slack included) is the process-level
check, which is why each mode runs in its own process. Timings are the best of ``--rounds`` (also spelt
``--repeats``) forward+backward passes after the measured one, timed by ``bench/harness.py``'s ``interleave`` within
the child; the two modes cannot be interleaved in one process (each needs a peak RSS of its own), so they run one
child after the other.

    python -m bench.activation_memory [--model alternet_r101] [--img-size 224] [--batch 8] [--threads N] [--no-record]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from .harness import add_harness_arguments, begin, finish, interleave, row, timing_row

MODES = ("plain", "checkpointed")


def rss_mb() -> float:
    """The process's resident memory now (Linux)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def measure(model_name: str, img_size: int, batch: int, checkpointed: bool, repeats: int, warmup: int) -> dict:
    """Run in a child process: one measured forward+backward (the first warm-up), then ``warmup`` untimed and
    ``repeats`` timed ones."""
    import torch

    import alternet

    torch.manual_seed(0)
    model = alternet.create_model(model_name, num_classes=1000, img_size=img_size).train()
    model.set_grad_checkpointing(checkpointed)
    images = torch.randn(batch, 3, img_size, img_size)
    labels = torch.randint(0, 1000, (batch,))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}  # storage address -> bytes
    count = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        model.zero_grad(set_to_none=True)

    rss_before = rss_mb()
    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    first = time.perf_counter() - start
    peak_delta = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before
    model.zero_grad(set_to_none=True)
    del loss
    times = interleave({"step": step}, repeats, warmup)["step"]
    return {
        "saved_mb": sum(saved.values()) / 2**20,
        "saved_tensors": count,
        "saved_storages": len(saved),
        "peak_rss_delta_mb": peak_delta,
        "first_s": first,
        "step_s": min(times) if times else first,
        "step_seconds": times or [first],
        "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
    }


def run_child(args: argparse.Namespace, mode: str) -> dict:
    command = [
        sys.executable,
        "-m",
        __spec__.name,
        "--child",
        mode,
        "--model",
        args.model,
        "--img-size",
        str(args.img_size),
    ]
    command += ["--batch", str(args.batch), "--rounds", str(args.rounds), "--warmup", str(args.warmup)]
    command += ["--threads", str(args.threads)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="alternet_r101")
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    add_harness_arguments(parser, rounds=2, warmup=0, round_aliases=["--repeats"], round_help="timed passes per mode")
    args = parser.parse_args()
    if args.child:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        checkpointed = args.child == "checkpointed"
        print(json.dumps(measure(args.model, args.img_size, args.batch, checkpointed, args.rounds, args.warmup)))
        return

    facts = begin(args, "activation_memory")
    print(f"{args.model}, {args.img_size}x{args.img_size}, batch {args.batch}, fp32, train mode")
    results = {mode: run_child(args, mode) for mode in MODES}
    print(f"parameters: {results['plain']['params_m']:.2f} M")
    header = f"{'mode':<13} {'saved MB':>9} {'saved tensors':>14} {'peak RSS +MB':>13} {'fwd+bwd s':>10} {'first s':>8}"
    print(header)
    print("-" * len(header))
    for mode, r in results.items():
        print(
            f"{mode:<13} {r['saved_mb']:>9.0f} {r['saved_tensors']:>14} {r['peak_rss_delta_mb']:>13.0f} "
            f"{r['step_s']:>10.2f} {r['first_s']:>8.2f}"
        )
    plain, ckpt = results["plain"], results["checkpointed"]
    print(
        f"\nsaved for backward: {ckpt['saved_mb']:.0f} MB vs {plain['saved_mb']:.0f} MB "
        f"({plain['saved_mb'] / ckpt['saved_mb']:.1f}x less, {1 - ckpt['saved_mb'] / plain['saved_mb']:.0%} saved)"
    )
    print(
        f"peak RSS growth: {ckpt['peak_rss_delta_mb']:.0f} MB vs {plain['peak_rss_delta_mb']:.0f} MB "
        f"({plain['peak_rss_delta_mb'] / ckpt['peak_rss_delta_mb']:.1f}x less)"
    )
    print(f"forward+backward time, checkpointed / plain: {ckpt['step_s'] / plain['step_s']:.2f}x")
    setting = f"{args.model} {args.img_size}px batch {args.batch} fp32"
    rows = []
    for mode, r in results.items():
        case = f"{setting} {mode}"
        rows += [
            row(case, "saved for backward", r["saved_mb"], "MB", notes=f"{r['saved_tensors']} tensors"),
            row(case, "peak RSS growth", r["peak_rss_delta_mb"], "MB", notes="own process"),
            timing_row(case, "fwd+bwd best", r["step_seconds"], unit="s", statistic="low"),
            row(case, "first fwd+bwd", r["first_s"], "s", notes="with the saved-tensor hooks"),
        ]
    rows += [
        row(f"{setting} plain / checkpointed", "saved for backward ratio", plain["saved_mb"] / ckpt["saved_mb"], "x"),
        row(f"{setting} checkpointed / plain", "fwd+bwd best ratio", ckpt["step_s"] / plain["step_s"], "x"),
    ]
    finish(args, "activation_memory", rows, facts)


if __name__ == "__main__":
    main()
