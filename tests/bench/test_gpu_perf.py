"""bench/gpu_perf.sh, the one prepared GPU run, smoke-tested on a CPU at tiny sizes (``--device cpu``): every phase
runs to its end with status 0 and leaves its log, and the benches record their rows (what they measure on a GPU is
the GPU session's to read, not this test's)."""

import os
import re
import subprocess
import sys

import pytest

from helpers import ROOT

PHASES = [
    "machine",
    "pytest_gpu",
    "imagenet_feed",
    "train_graphs",
    "step_goals_224",
    "profile_graphs",
    "train_auto",
    "train_eager",
    "step_formats",
    "profile_32",
    "step_goals_32",
    "concurrent",
]


@pytest.mark.slow  # ~6 minutes on 2 cores: eleven phases, four of them training runs
def test_every_phase_of_the_gpu_run_ends_cleanly_on_a_cpu(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "BUDGET": "1500"}
    result = subprocess.run(
        ["bash", "bench/gpu_perf.sh", "--device", "cpu", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ends = dict(re.findall(r"^=== (\w+): exit (\d+) after", result.stdout, re.MULTILINE))
    assert ends == {phase: "0" for phase in PHASES}, result.stdout[-5000:]
    assert all((tmp_path / f"{phase}.log").is_file() for phase in PHASES)
    recorded = {path.name.split("-cpu")[0] for path in tmp_path.glob("*.csv")}
    assert {"gpu_train", "gpu", "profile_step"} <= recorded, recorded
    assert "syncs" in (tmp_path / "train_eager.log").read_text()
    rows = (tmp_path / "gpu_train-cpu").parent.glob("gpu_train-*.csv")
    assert any("reduce-overhead-wauto" in line and "loader workers" in line for p in rows for line in p.open())
