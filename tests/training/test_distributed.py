"""A real 2-process CPU DDP run (gloo), launched as a subprocess as a user would launch it."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from alternet.apps.train import train
from alternet.runs.directories import RunDir

from helpers import DDP_CPU, ROOT, compose_train, run_warm


@pytest.mark.xdist_group("processes")  # 2-process DDP: one at a time, on the processes worker (helpers.warm)
def test_two_process_ddp_shards_data_and_agrees_on_metrics(image_folder, image_shards, tmp_path):
    """Three fits in one pair of DDP processes (tests/scripts/ddp_probe.py): from arrays, then from LitData shards,
    then the shards run resumed in a new process group."""
    result = run_warm("tests/scripts/ddp_probe.py", str(tmp_path), str(image_folder), str(image_shards), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "distributed_backend=gloo" in result.stderr + result.stdout
    assert "sync_dist=True" not in result.stderr  # Lightning's advice for a metric logged per epoch unsynced

    # arrays: each rank its own half of the epoch, metrics synced, written once, no host sync on a quiet step
    ranks = [json.loads((tmp_path / "arrays" / f"rank{r}.json").read_text()) for r in range(2)]
    seen = [set(r["train_indices"]) for r in ranks]
    assert len(ranks[0]["train_indices"]) == len(ranks[1]["train_indices"]) > 0
    assert not seen[0] & seen[1], "ranks loaded overlapping training samples"
    assert len(seen[0] | seen[1]) >= 0.9 * 1257  # together they cover the epoch (minus the dropped tail)
    assert ranks[0]["test"] == ranks[1]["test"]  # metrics are synced across ranks
    assert (tmp_path / "arrays" / "metrics.json").is_file()  # written once, by rank 0
    for rank in ranks:  # no host sync on a step that logs nothing, Lightning's per-step SIGTERM broadcast included
        assert len(rank["syncs"]) > 3 and not any(rank["syncs"]), rank["syncs"]

    # shards: disjoint, equal shares streamed; the schedule counts this rank's batches
    ranks = [json.loads((tmp_path / "shards" / f"rank{r}.json").read_text()) for r in range(2)]
    shares = [r["streamed"] for r in ranks]
    assert len(shares[0]) == len(shares[1]) >= 12
    assert not set(shares[0]) & set(shares[1]), "ranks streamed overlapping images"
    assert len(set(shares[0]) | set(shares[1])) >= 40 - 2 * 4  # together the epoch, less the dropped tail
    assert ranks[0]["test"] == ranks[1]["test"]
    # not the whole epoch's batches divided again by the world size
    assert [r["scheduled"] for r in ranks] == [[len(shares[0]) // 4]] * 2

    # resumed for a second epoch: each rank counts and streams its own share again (the data set is built before the
    # process group to count the batches: it read every chunk on every rank, and the resume was refused as a change
    # of steps per epoch)
    resumed = [json.loads((tmp_path / "shards" / f"resumed{r}.json").read_text()) for r in range(2)]
    again = [r["streamed"] for r in resumed]
    assert len(again[0]) == len(again[1]) == len(shares[0])
    assert not set(again[0]) & set(again[1]), "resumed ranks streamed overlapping images"
    assert all(r["scheduled"] and set(r["scheduled"]) == {len(shares[0]) // 4} for r in resumed), resumed


# One optimizer step of a LayerNorm ViT (no BatchNorm, whose statistics are per device) on digits, no validation.
ONE_STEP = [
    "debug=fast",
    "model=vit_mini_cifar",
    "trainer.max_steps=1",
    "trainer.limit_val_batches=0",
    "trainer.limit_test_batches=1",
    "data.val_size=0",
    "trainer.precision=32-true",  # auto is bf16 where the CPU has it natively: a first step equal to rounding in fp32
]


def _first_step(run_dir) -> tuple[float, dict]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    lr = checkpoint["optimizer_states"][0]["param_groups"][0]["initial_lr"]
    return lr, {k: v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}


@pytest.mark.slow  # ~45 s: a 2-process run beside a single one
@pytest.mark.xdist_group("processes")
def test_the_learning_rate_follows_the_global_batch_across_processes(tmp_path):
    """2-process gloo DDP at 8 images per device and one process at 16 take the same global batch of 16: both
    train at the digits recipe's lr scaled from its 64 to 16, and take the same first step (the two ranks' first
    batches together are the single process's first batch, each image augmented alike)."""
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    train(compose_train(*ONE_STEP, "recipe.batch_size=16", output_dir=single))
    result = run_warm(
        "train.py", *ONE_STEP, *DDP_CPU, "recipe.batch_size=8", f"paths.output_dir={ddp}", f"hydra.run.dir={ddp}"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "batch 8 per device, 16 global" in result.stdout
    (lr_single, weights_single), (lr_ddp, weights_ddp) = _first_step(single), _first_step(ddp)
    assert lr_single == lr_ddp == pytest.approx(2e-3 * 16 / 64)
    for key, value in weights_single.items():
        torch.testing.assert_close(weights_ddp[key], value, rtol=0, atol=2e-5)


@pytest.mark.parametrize("compression", [None, "bf16"])
def test_ddp_shares_gradient_buffers_and_compresses_on_request(compression, tmp_path):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

    from alternet.apps.config import train_config
    from alternet.training.builders import build_trainer

    overrides = [*DDP_CPU, "trainer.precision=32-true", f"performance.ddp_compression={compression or 'null'}"]
    config = train_config(OmegaConf.to_container(compose_train(*overrides, output_dir=tmp_path), resolve=True))
    trainer = build_trainer(
        config.trainer, config.callbacks, config.performance, 0, RunDir(tmp_path), False, loggers=[]
    )
    strategy = trainer.strategy
    assert strategy._ddp_kwargs["gradient_as_bucket_view"] is True
    assert strategy._ddp_comm_hook is (bf16_compress_hook if compression else None)


@pytest.mark.slow  # ~1.5 minutes: two torchrun launches of 2 processes each
@pytest.mark.xdist_group("processes")
def test_torchrun_ranks_share_one_run_directory_that_a_relaunch_resumes(tmp_path):
    """Under torchrun each rank composes its own config: the run directory is named after the job
    (runs/torchrun-ID), so both ranks write to one, and the same launch with ckpt_path=last resumes it."""
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        port = probe.getsockname()[1]
    torchrun = [
        str(Path(sys.executable).with_name("torchrun")),
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"localhost:{port}",
        "--rdzv-id",
        "probe",
        "train.py",
        *DDP_CPU,
        "debug=fast",
        f"paths.log_dir={tmp_path}",
    ]
    first = subprocess.run(torchrun, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["torchrun-probe"]
    run = tmp_path / "runs" / "torchrun-probe"
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 1
    again = subprocess.run(
        [*torchrun, "ckpt_path=last", "trainer.max_epochs=2"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["torchrun-probe"]
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 2


@pytest.mark.slow  # ~40 s: a fresh interpreter and a 2-process run
@pytest.mark.xdist_group("processes")
def test_python_m_alternet_train_survives_lightnings_relaunch_of_rank_1(tmp_path):
    """Lightning's DDP launcher re-runs ``sys.argv`` for rank 1; under ``python -m alternet train`` that holds the
    overrides alone, which the command recognises as a rank of ``train`` (apps.cli.lightning_rank). ``python
    train.py``'s re-launch: test_the_learning_rate_follows_the_global_batch_across_processes."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "alternet", "train", *DDP_CPU, "debug=fast", f"paths.log_dir={tmp_path}"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "unknown command" not in result.stderr and "cpu x2" in result.stdout
    (metrics,) = tmp_path.glob("runs/*/*/metrics.json")
    assert json.loads(metrics.read_text())["epochs"] == 1
