"""Wall time of each analysis on alternet_r18 (CIFAR-100, 32x32, random init) on the CPU, with the default
budgets of ``conf/analysis/*.yaml`` (printed alongside). Data: the real CIFAR-100 with the paper's recipe
(augmented batches use crop + flip + RandAugment).

    python bench/analysis.py [--root /work/shared/data] [--threads 2] [--only hessian,landscape]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from alternet.analysis import ANALYSES, run_analyses
from alternet.data import build_datamodule
from alternet.models import create_model

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"
TARGET_SECONDS = 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=DEFAULT_DATA, help="directory holding cifar-100-python/")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--only", default=",".join(ANALYSES), help="comma-separated analyses to time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with initialize_config_dir(str(ROOT / "alternet" / "conf"), version_base="1.3"):
        config = compose("train", overrides=["data=cifar100", f"data.root={args.root}", "recipe=paper"])
    data = OmegaConf.to_container(config.data, resolve=True)
    recipe = OmegaConf.to_container(config.recipe, resolve=True)
    datamodule = build_datamodule(data, recipe, seed=0)
    datamodule.setup()
    torch.manual_seed(0)
    model = create_model("alternet_r18", num_classes=100, img_size=32)
    params = sum(p.numel() for p in model.parameters())
    print(f"alternet_r18, {params / 1e6:.2f} M parameters, 32x32, CPU threads {torch.get_num_threads()}")

    rows = []
    with tempfile.TemporaryDirectory() as out_dir:
        for name in args.only.split(","):
            budget = yaml.safe_load((ROOT / "alternet" / "conf" / "analysis" / f"{name}.yaml").read_text())
            start = time.perf_counter()
            summary = run_analyses([name], model, datamodule, recipe, {name: budget}, Path(out_dir))[name]
            seconds = time.perf_counter() - start
            rows.append((name, seconds, budget))
            numbers = {k: v for k, v in summary.items() if isinstance(v, float | int) and k != "seconds"}
            print(f"{name:10s} {seconds:7.1f} s  budget {budget}\n{'':10s} {numbers}", flush=True)
    print(f"\n{'analysis':10s} {'seconds':>8s}  under {TARGET_SECONDS} s")
    for name, seconds, _ in rows:
        print(f"{name:10s} {seconds:8.1f}  {'yes' if seconds < TARGET_SECONDS else 'NO'}")


if __name__ == "__main__":
    main()
