"""Shared fixtures: config composition, fast trainer overrides, the real CIFAR-100 files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "alternet" / "conf"
SHARED_DATA = Path(os.environ.get("ALTERNET_TEST_DATA", ROOT.parent / "shared" / "data"))

# A run that touches every stage but costs seconds: a few batches per loop (alternet/conf/debug/fast.yaml).
FAST = ["debug=fast"]
# A laptop-scale preset's jobs (CIFAR-100, experiment=paper/NAME or hybrids) cut to two training batches of 16 in fp32
# and one batch per evaluation loop: every job of a grid runs end to end in seconds.
PRESET_TWO_STEPS = [
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
    "trainer.limit_test_batches=1",
    "recipe.batch_size=16",
    "recipe.eval_batch_size=16",
    "data.train_clean_size=16",
    "trainer.precision=32-true",
]
# One epoch of 2-process CPU DDP (gloo), for the probes that Lightning re-executes per rank (tests/scripts/).
DDP_CPU = [
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "trainer.max_epochs=1",
    "trainer.enable_progress_bar=false",
]


def compose_train(*overrides: str, output_dir: Path | str = "unused"):
    """The training config as ``train.py`` would compose it, with the run directory set explicitly."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF), version_base="1.3"):
        return compose("train", overrides=[*overrides, f"paths.output_dir={output_dir}"])


def run_script(script: str, *args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run one of the repository's scripts in a fresh interpreter, as a user would."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def cifar100_root() -> Path:
    """The directory holding the original ``cifar-100-python/`` files (skips when absent)."""
    if not (SHARED_DATA / "cifar-100-python" / "train").is_file():
        pytest.skip(f"real CIFAR-100 not found under {SHARED_DATA} (set ALTERNET_TEST_DATA to its parent directory)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory) -> Path:
    """A small class-folder data set (3 classes, 12 training and 3 validation images each, plus odd formats)."""
    from imagefolders import make_image_folder

    return make_image_folder(tmp_path_factory.mktemp("folder"), size=20, splits={"train": 12, "val": 3})


@pytest.fixture(scope="session")
def image_shards(image_folder, tmp_path_factory) -> Path:
    """LitData shards of ``image_folder``'s training split, written once (litdata's start-up costs seconds)."""
    from alternet.data.files.shards import write_shards

    out = tmp_path_factory.mktemp("shards") / "shards"
    write_shards(image_folder, out, chunk_bytes="4KB", num_workers=1)
    return out
