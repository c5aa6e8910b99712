"""Wall time of each analysis on alternet_r18 (CIFAR-100, 32x32, random init) on the CPU, with the default
budgets of ``conf/analysis/*.yaml`` (printed alongside). Data: the real CIFAR-100 with the paper's recipe
(augmented batches use crop + flip + RandAugment).

    python -m bench.analysis [--root /work/shared/data] [--threads 2] [--only hessian,landscape] [--no-record]

Each analysis is one case of ``bench/harness.py``'s ``interleave`` (``--rounds`` rounds, 1 by default: an analysis
takes minutes; no warm-up by default), printed as it finishes; the table gives the median.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import torch
import yaml
from omegaconf import OmegaConf

from alternet.analysis import ANALYSES, run_analyses
from alternet.apps.config import compose, train_config
from alternet.data import build_datamodule
from alternet.models import create_model

from .harness import add_harness_arguments, begin, finish, interleave, summarise, timing_row

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
TARGET_SECONDS = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=DEFAULT_DATA, help="directory holding cifar-100-python/")
    parser.add_argument("--only", default=",".join(ANALYSES), help="comma-separated analyses to time")
    add_harness_arguments(parser, rounds=1, warmup=0, threads=2)
    args = parser.parse_args()
    facts = begin(args, "analysis", data_root=args.root)

    config = train_config(
        OmegaConf.to_container(
            compose("train", ["data=cifar100", f"data.root={args.root}", "recipe=paper", "paths.output_dir=unused"]),
            resolve=True,
        )
    )
    recipe = config.recipe
    datamodule = build_datamodule(config.data, batch_size=recipe.batch_size, augment=recipe.augment, seed=0)
    datamodule.setup()
    torch.manual_seed(0)
    model = create_model("alternet_r18", num_classes=100, img_size=32)
    params = sum(p.numel() for p in model.parameters())
    print(f"alternet_r18, {params / 1e6:.2f} M parameters, 32x32, CPU threads {torch.get_num_threads()}")

    budgets = {
        name: yaml.safe_load((ROOT / "conf" / "analysis" / f"{name}.yaml").read_text()) for name in args.only.split(",")
    }
    with tempfile.TemporaryDirectory() as out_dir:

        def analysis(name: str):
            def run() -> None:
                summary = run_analyses([name], model, datamodule, recipe, {name: budgets[name]}, Path(out_dir))[name]
                numbers = {k: v for k, v in summary.items() if isinstance(v, float | int) and k != "seconds"}
                print(f"{name:10s} done, budget {budgets[name]}\n{'':10s} {numbers}", flush=True)

            return run

        times = interleave({name: analysis(name) for name in budgets}, args.rounds, args.warmup)
    print(f"\n{'analysis':10s} {'seconds':>8s}  under {TARGET_SECONDS} s")
    rows = []
    for name, seconds in times.items():
        median = summarise(seconds).median
        print(f"{name:10s} {median:8.1f}  {'yes' if median < TARGET_SECONDS else 'NO'}")
        case = f"alternet_r18 cifar100 32px {name}"
        rows.append(timing_row(case, "wall median", seconds, unit="s", notes=f"budget {budgets[name]}"))
    finish(args, "analysis", rows, facts)


if __name__ == "__main__":
    main()
