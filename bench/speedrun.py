"""The CIFAR-100 speedrun as a user runs it: the whole command per seed, one at a time, wall time from before the
interpreter starts to after the test pass, and the test numbers its metrics.json holds.

    python -m bench.speedrun --data-root DIR [--seeds 0 1 2] [--out-dir DIR] [-- extra overrides ...]
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
        python -m bench.speedrun --data-root DIR   # as an AVX2 machine

The code-path variables pass to the command, so on an AVX-512 machine the second line measures the AVX2 code paths
(the header's ``env`` line and the results file, ``speedrun-cpu-avx2.csv``, say so). A seed whose run directory
already holds metrics.json is reported from it and not rerun (a campaign cut by a session boundary goes on); a run
directory without one is a run that was cut, so it is removed and that seed starts again (a resumed run's wall time
would not be the command's). The test set chooses nothing: the preset has no validation split and tests its final
weights.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .harness import ROOT, add_harness_arguments, begin, finish, row

METRICS = ("acc", "top5", "nll", "ece")


def run_seed(seed: int, data_root: str, run_dir: Path, overrides: list[str]) -> tuple[dict, float | None]:
    """The metrics of one seed's run and its wall seconds (None: read from an earlier run, not timed now)."""
    metrics = run_dir / "metrics.json"
    if metrics.is_file():
        return json.loads(metrics.read_text()), None
    if run_dir.exists():
        shutil.rmtree(run_dir)  # a run cut before its end: its wall time is lost, so it runs again whole
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        "experiment=cifar100_speedrun",
        f"data.root={data_root}",
        f"seed={seed}",
        f"hydra.run.dir={run_dir}",
        "trainer.enable_progress_bar=false",
        *overrides,
    ]
    print(f"seed {seed}: {' '.join(command[1:])}", flush=True)
    start = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    (run_dir.parent / f"seed{seed}.log").write_text(result.stdout + result.stderr)
    if result.returncode:
        raise SystemExit(f"seed {seed} failed (exit {result.returncode}): {result.stderr.strip().splitlines()[-1:]}")
    return json.loads(metrics.read_text()), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True, help="the directory holding cifar-100-python/")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out-dir", type=Path, default=Path("outputs/speedrun"), help="one run directory per seed")
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every seed (after --)")
    add_harness_arguments(parser, rounds=1, warmup=0)
    args = parser.parse_args()
    facts = begin(args, "speedrun", data_root=args.data_root)
    accuracies, walls = [], []
    for seed in args.seeds:
        metrics, seconds = run_seed(seed, args.data_root, args.out_dir / f"seed{seed}", args.overrides)
        test = metrics["test"]
        wall = seconds if seconds is not None else metrics.get("wall_seconds")
        timed = "whole command" if seconds is not None else "earlier run, training app's own clock"
        print(
            f"seed {seed}: top-1 {test['acc']:.2%}, top-5 {test['top5']:.2%}, NLL {test['nll']:.3f}, "
            f"ECE {test['ece']:.3f}, wall {wall / 60:.1f} min ({timed}), "
            f"{metrics.get('train_images_per_sec') or 0:.0f} training img/s",
            flush=True,
        )
        accuracies.append(test["acc"])
        walls.append(wall)
        if seconds is None:
            continue  # recorded when it ran
        case = f"seed {seed}"
        rows = [row(case, "wall", seconds, "s", notes="whole command: start, data, training, test")]
        rows += [row(case, f"test {name}", test[name], "") for name in METRICS]
        rows.append(row(case, "training images/s", metrics.get("train_images_per_sec"), "img/s"))
        finish(args, "speedrun", rows, facts)  # each seed as it ends: a campaign cut short keeps what it measured
    if len(accuracies) > 1:
        print(
            f"{len(accuracies)} seeds: top-1 {statistics.fmean(accuracies):.2%} ± {statistics.stdev(accuracies):.2%} "
            f"(sd), wall {statistics.fmean(walls) / 60:.1f} min mean, {max(walls) / 60:.1f} max",
            flush=True,
        )


if __name__ == "__main__":
    main()
