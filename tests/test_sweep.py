"""Multirun: separate job directories, a W&B run per job, and the sweep summary CSV."""

import csv

from conftest import run_script


def test_multirun_writes_job_directories_and_a_summary(tmp_path):
    result = run_script(
        "train.py",
        "-m",
        "model=alternet_tiny,preresnet_tiny",
        "debug=fast",
        "trainer.limit_val_batches=1",
        "logger=wandb",
        "logger.wandb.offline=true",
        f"hydra.sweep.dir={tmp_path}",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for job in ("0", "1"):
        assert (tmp_path / job / "metrics.json").is_file()
        assert len(list((tmp_path / job / "wandb").glob("offline-run-*"))) == 1  # each job its own W&B run
    with open(tmp_path / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["model"] for r in rows] == ["alternet_tiny", "preresnet_tiny"]
    assert all(r["status"] == "ok" and 0 <= float(r["test/acc"]) <= 1 for r in rows)
    assert f"Sweep summary: {tmp_path / 'summary.csv'}" in result.stdout
