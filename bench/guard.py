"""What the non-finite guard costs a training step: the old synchronous check (``isfinite(loss).item()`` before
backward, with the multi-tensor optimizer) against the deferred one (a device-side gradient flag handed to the fused
optimizer as ``found_inf``, read one step later through pinned memory behind a CUDA event), each beside the same
step without a guard. Modes alternate step by step (``bench/harness.py``'s ``interleave``, with a CUDA sync around
each clock on a GPU), so machine noise hits them alike; prints the median step time and the guard's ratio. On a CPU a
sync is free, so expect ~1.0x for both; the deferred guard exists for GPUs.

    python -m bench.guard [--model alternet_tiny] [--batch 128] [--steps 30] [--device auto] [--no-record]

``--steps`` (= ``--rounds``) timed runs of each mode after ``--warmup`` untimed ones; a run is one step on a CPU and
5 on a GPU, where a run of steps shows the queue draining.
"""

from __future__ import annotations

import argparse

import torch

import alternet
from alternet.training.guard import HostFlags, non_finite_flag

from .harness import add_harness_arguments, begin, device_sync, finish, interleave, ratio, row, summarise, timing_row

MODES = ("none, multi-tensor", "synchronous guard", "none, fused", "deferred guard")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="alternet_tiny")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--device", default="auto")
    add_harness_arguments(parser, rounds=30, warmup=3, round_aliases=["--steps"], round_help="timed runs of each mode")
    args = parser.parse_args()
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    facts = begin(args, "guard", device=device.type)
    torch.manual_seed(0)
    models, optimizers = {}, {}
    for mode in MODES:
        model = alternet.create_model(args.model, num_classes=100, img_size=args.size).to(device)
        models[mode] = model
        fused = mode in ("none, fused", "deferred guard")
        optimizers[mode] = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused or None)
    images = torch.randn(args.batch, 3, args.size, args.size, device=device)
    labels = torch.randint(0, 100, (args.batch,), device=device)
    flags = HostFlags()
    pending: dict[str, tuple[torch.Tensor, torch.cuda.Event | None]] = {}

    def step(mode: str, index: int) -> None:
        model, optimizer = models[mode], optimizers[mode]
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        if mode == "synchronous guard" and not torch.isfinite(loss).item():
            raise FloatingPointError("non-finite loss")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if mode == "deferred guard":
            if mode in pending and HostFlags.read(pending[mode]):
                raise FloatingPointError("non-finite gradients")
            found = non_finite_flag(optimizer)
            optimizer.found_inf = found
            pending[mode] = flags.send(found, index)
        optimizer.step()

    def run_of_steps(mode: str):
        steps_per_run = 5 if device.type == "cuda" else 1  # on a GPU, a run of steps shows the queue draining
        index = 0

        def run() -> None:
            nonlocal index
            for _ in range(steps_per_run):
                step(mode, index)
                index += 1

        return run

    times = interleave({mode: run_of_steps(mode) for mode in MODES}, args.rounds, args.warmup, device_sync(device))
    print(f"{args.model}, batch {args.batch}, {args.size} px, {device}, median of {args.rounds} (s per timed run)")
    setting = f"{args.model} batch {args.batch} {args.size} px {device.type}"
    unit_of_run = f"a run is {5 if device.type == 'cuda' else 1} step(s)"
    rows = []
    for mode in MODES:
        print(f"  {mode:20s} {summarise(times[mode]).median:.4f}")
        rows.append(timing_row(f"{setting} {mode}", "run median", times[mode], notes=unit_of_run))
    for guarded, plain in (
        ("synchronous guard", "none, multi-tensor"),
        ("deferred guard", "none, fused"),
        ("deferred guard", "synchronous guard"),
    ):
        print(f"{guarded} / {plain}: {ratio(times[guarded], times[plain]):.3f}x")
        rows.append(row(f"{setting} {guarded} / {plain}", "run median ratio", ratio(times[guarded], times[plain]), "x"))
    finish(args, "guard", rows, facts)


if __name__ == "__main__":
    main()
