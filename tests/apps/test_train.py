"""End to end: train.py through Hydra and the real Trainer, checkpoints, resume, W&B offline, real CIFAR-100."""

import json
import math
from pathlib import Path

import pytest
import torch

from alternet.apps.train import train
from alternet.errors import CheckpointError, ConfigValueError
from alternet.report.runs import read_history
from alternet.runs.directories import RunDir
from alternet.training.module import ClassificationModule
from alternet.training.precision import choose_precision

from helpers import FAST, compose_train, run_script
from helpers.models import assert_same_weights


def test_train_cli_on_digits_writes_a_complete_run_directory_and_says_so(tmp_path):
    run_dir = tmp_path / "run"
    result = run_script("train.py", "recipe.epochs=2", f"hydra.run.dir={run_dir}")  # a whole schedule of 2 epochs
    assert result.returncode == 0, result.stderr[-3000:]
    # the start: where, what, on which data and hardware
    assert f"Run directory: {run_dir}" in result.stdout
    assert "Model:         alternet_tiny C|CM|CM (411,724 parameters)" in result.stdout
    assert "Data:          digits: 10 classes, 16px (train 1257, val 180, train_clean 1257, test 360)" in result.stdout
    chosen = choose_precision("auto", "cpu")  # the default, trainer.precision=auto, on this machine
    assert f"Device:        cpu x1, precision {chosen.precision} ({chosen.reason})" in result.stdout
    # progress in a log file: one line per epoch, no carriage-return frames, no logger-version noise
    assert "\r" not in result.stderr and "v_num" not in result.stderr + result.stdout
    assert "epoch 1/2 done in" in result.stderr and "epoch 2/2 done in" in result.stderr
    assert "Tip:" not in result.stderr
    # Lightning's INFO lines once each (its own console handler and Hydra's printed them twice), and in train.log
    said = [line for line in (result.stdout + result.stderr).splitlines() if "`Trainer.fit` stopped" in line]
    assert len(said) == 1, said
    assert "`Trainer.fit` stopped" in (run_dir / "train.log").read_text()
    # the end: numbers with top-5, the best epoch, speed, and the files written
    assert "Finished alternet_tiny on digits in" in result.stdout and "training images/s" in result.stdout
    assert "Best val/nll" in result.stdout and "after epoch" in result.stdout
    table = result.stdout[result.stdout.index("Test (") :]
    assert "acc" in table and "top5" in table and "nll" in table and "ece" in table
    for name in ("checkpoints/last.ckpt", "metrics.json", "curves.png", "logs/metrics.csv"):
        assert f"  {name}\n" in table
    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("acc", "nll", "ece", "top5"):
        assert math.isfinite(metrics["test"][key])
    # two epochs are plenty to beat chance (10%): 0.925-0.972 over seeds 0-3 x {AVX-512 bf16, AVX2 fp32} on a Zen 5
    assert metrics["test"]["acc"] > 0.5
    assert metrics["epochs"] == 2
    assert metrics["best_epoch"] in (1, 2) and metrics["train_images_per_sec"] > 0 and metrics["wall_seconds"] > 0
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert Path(metrics["best_checkpoint"]).is_file()
    header = (run_dir / "logs" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "train/images_per_sec" in header and "lr-AdamW/pg1" in header  # throughput; every group's lr per step
    assert "model:\n  name: alternet_tiny" in (run_dir / "config.yaml").read_text()
    environment = json.loads((run_dir / "environment.json").read_text())
    assert environment["packages"]["torch"] == torch.__version__.split("+")[0] or environment["packages"]["torch"]
    assert (run_dir / "logs" / "metrics.csv").is_file()


def fit(tmp_path: Path, *overrides: str) -> dict:
    return train(compose_train(*FAST, *overrides, output_dir=tmp_path))


def test_checkpoints_reload_with_torch_defaults_and_rebuild_the_model(tmp_path):
    summary = fit(tmp_path)
    checkpoint = torch.load(summary.last_checkpoint)  # weights_only=True is torch's default
    assert checkpoint["hyper_parameters"]["model"]["name"] == "alternet_tiny"
    module = ClassificationModule.load_from_checkpoint(summary.last_checkpoint, map_location="cpu")
    assert sum(p.numel() for p in module.model.parameters()) > 0
    torch.testing.assert_close(module.state_dict(), {k: v for k, v in checkpoint["state_dict"].items()})


def test_resume_continues_epoch_and_step_count_and_wall_time(tmp_path):
    """A resumed run counted its epochs, steps and images/s over every session, and its wall time over the last:
    a build-up search's --max-hours budget, summed from the jobs' wall times, missed a requeued job's first hours."""
    first = fit(tmp_path / "a", "trainer.max_epochs=2")
    assert (first.epochs, first.global_step) == (2, 6)
    checkpoint = torch.load(first.last_checkpoint, weights_only=False)
    assert 0 < checkpoint["callbacks"]["Throughput"]["wall"] <= first.wall_seconds  # saved before the test
    checkpoint["callbacks"]["Throughput"]["wall"] = 3600.0  # as if its first session had taken an hour
    torch.save(checkpoint, hour := tmp_path / "hour.ckpt")
    resumed = fit(tmp_path / "b", "trainer.max_epochs=3", f"ckpt_path={hour}")
    assert (resumed.epochs, resumed.global_step) == (3, 9)
    assert 3600 < resumed.wall_seconds < 3600 + 600  # the hour, and this session's seconds


def test_trainer_max_steps_stops_a_long_recipe_after_that_many_steps(tmp_path):
    """A short look at a long recipe (issue 38's ``experiment=alternet_r50_cifar100 trainer.max_steps=300``): the
    key exists in the trainer config, so it is set without Hydra's ``+``, and training stops mid-epoch there."""
    summary = train(compose_train(*FAST, "trainer.max_steps=2", output_dir=tmp_path))
    assert summary.global_step == 2 and math.isfinite(summary.test["nll"])


def test_resuming_another_runs_checkpoint_that_has_nothing_left_to_train_is_refused(tmp_path):
    """Another run's checkpoint at its epoch limit, resumed into a new directory, trained nothing and "finished" a
    run with no checkpoint of its own: refused before any work, pointing at model.pretrained."""
    first = fit(tmp_path / "a", "trainer.max_epochs=1")
    with pytest.raises(ConfigValueError) as refused:
        fit(tmp_path / "b", "trainer.max_epochs=1", f"ckpt_path={first.last_checkpoint}")
    assert str(refused.value).startswith(f"{first.last_checkpoint} has trained 1 epoch (trainer.max_epochs=1)")
    assert f"model.pretrained={first.last_checkpoint}" in str(refused.value)
    assert not (tmp_path / "b" / "metrics.json").exists()
    resumed = fit(tmp_path / "c", "trainer.max_epochs=2", f"ckpt_path={first.last_checkpoint}")  # more to train
    assert (resumed.epochs, resumed.global_step) == (2, 6)
    every = fit(tmp_path / "d", "trainer.max_epochs=2", "+trainer.check_val_every_n_epoch=2")  # saved at validation's
    with pytest.raises(ConfigValueError, match=r"has trained 2 epochs \(trainer.max_epochs=2\)"):  # end, its last
        fit(tmp_path / "e", "trainer.max_epochs=2", f"ckpt_path={every.last_checkpoint}")  # epoch not yet counted


def test_a_run_stopped_inside_an_epoch_by_max_steps_resumes_there(tmp_path):
    """``trainer.max_steps`` stopping inside an epoch leaves a last.ckpt of that place (Lightning counts the epoch as
    done): ``ckpt_path=last`` without the limit trains the rest of that epoch, not the next one."""
    first = fit(tmp_path / "cut", "trainer.max_epochs=2", "trainer.max_steps=4")  # 3 steps an epoch: 1 into the 2nd
    assert (first.epochs, first.global_step) == (1, 4)  # whole epochs, as the report reads them
    again = fit(tmp_path / "cut", "trainer.max_epochs=2", "trainer.max_steps=4", "ckpt_path=last")  # a requeue
    assert again == first  # kept: it reached its step limit
    resumed = fit(tmp_path / "cut", "trainer.max_epochs=2", "ckpt_path=last")
    assert (resumed.epochs, resumed.global_step) == (2, 6)
    whole = fit(tmp_path / "whole", "trainer.max_epochs=2")
    assert_same_weights(*[torch.load(run.last_checkpoint)["state_dict"] for run in (resumed, whole)])  # the epoch's
    # other batches, in their order
    # the curves: the cut epoch's partial row is replaced by its resumed whole one, not averaged with it
    cut, uncut = (read_history(RunDir(path).metrics_csv) for path in (tmp_path / "cut", tmp_path / "whole"))
    for key in ("train/acc", "train/nll_epoch", "val/acc", "val/nll"):
        assert cut[key] == pytest.approx(uncut[key], abs=1e-6), key


def test_the_runs_throughput_counts_every_epoch_not_the_tested_checkpoints(tmp_path):
    """Testing the best checkpoint restored its callbacks' state: the summary's images/s was the best epoch's count."""
    summary = fit(tmp_path, "recipe.epochs=2", "trainer.max_epochs=2", "callbacks.checkpoint.mode=max")  # best: a
    assert summary.best_epoch == 1  # worst-NLL epoch, the first (best_epoch counts from 1)
    saved = torch.load(summary.last_checkpoint)["callbacks"]["Throughput"]  # the whole run's count
    assert summary.train_images_per_sec == pytest.approx(saved["images"] / saved["seconds"])


def test_a_run_without_a_validation_split_tests_its_last_checkpoint_where_it_holds_the_final_weights(tmp_path):
    """No monitor picks a best without validation (CIFAR's val_size 0): the final weights were tested and recorded as
    "final weights", and the model card of last.ckpt's export denied its own test numbers."""
    summary = fit(tmp_path / "a", "data.val_size=0", "trainer.max_epochs=2")
    assert summary.best_checkpoint is None and summary.tested_checkpoint == summary.last_checkpoint
    unsaved = fit(tmp_path / "b", "data.val_size=0", "callbacks.checkpoint.save_last=false")
    assert unsaved.tested_checkpoint == "final weights"  # held by no checkpoint


def test_unreadable_checkpoint_is_rejected(tmp_path):
    bad = tmp_path / "broken.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match=r"broken\.ckpt is not a torch checkpoint: it does not begin as"):
        fit(tmp_path, f"ckpt_path={bad}")


def test_wandb_offline_run_writes_files_and_finishes(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    fit(tmp_path, "logger=wandb", "logger.wandb.offline=true")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("run-*.wandb"))
    assert wandb.run is None  # finished


def test_wandb_without_api_key_falls_back_to_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("HOME", str(tmp_path))
    from alternet.tracking import offline_reason

    assert "no W&B API key" in offline_reason(False)


def test_training_on_real_cifar100(cifar100_root, tmp_path):
    summary = fit(
        tmp_path,
        "data=cifar100",
        f"data.root={cifar100_root}",
        "data.num_workers=0",
        "data.val_size=500",
        "model=alternet_tiny",
        "recipe=fast",
        "recipe.batch_size=16",
    )
    assert summary.data == "cifar100"
    assert 0.0 <= summary.test["acc"] <= 1.0
    assert math.isfinite(summary.test["nll"])


@pytest.mark.slow  # 11M parameters, ~11 s: test_training_on_real_cifar100 trains on the real files by default
def test_alternet_r18_learns_on_real_cifar100(cifar100_root):
    from alternet.data import CIFAR100DataModule
    from alternet.models import create_model

    module = CIFAR100DataModule(root=str(cifar100_root), batch_size=32)
    module.setup()
    images, labels = next(iter(module.train_dataloader()))
    torch.manual_seed(0)
    model = create_model("alternet_r18", num_classes=100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(6):
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses


def test_ckpt_path_last_resumes_from_the_run_directory_when_present(tmp_path):
    from alternet.runs.checkpoints import resume_checkpoint
    from alternet.runs.directories import RunDir

    assert resume_checkpoint("last", RunDir(tmp_path)) is None  # a fresh job starts from scratch
    first = fit(tmp_path, "trainer.max_epochs=1")
    assert resume_checkpoint("last", RunDir(tmp_path)) == first.last_checkpoint
    again = fit(tmp_path, "trainer.max_epochs=2", "ckpt_path=last")  # a requeued job continues
    assert again.epochs == 2 and again.global_step == 6


def test_the_summary_records_how_many_test_images_were_scored_and_the_rate_trained_at(digits_summary, tmp_path):
    """The shared run tests the whole split; trainer.limit_test_batches scores its first batches, and the summary
    says so (the console and the model card read it). The learning rate is the recipe's scaled to the global batch."""
    assert digits_summary.test_images.scored == digits_summary.test_images.of > 0
    summary = train(
        compose_train(
            *FAST,
            "recipe.eval_batch_size=16",
            "trainer.limit_test_batches=1",
            "recipe.batch_size=32",
            "recipe.optimizer.lr=0.002",
            "recipe.lr_scale_batch=64",
            "recipe.lr_scale_rule=linear",
            output_dir=tmp_path,
        )
    )
    assert (summary.test_images.scored, summary.test_images.of) == (16, digits_summary.test_images.of)
    assert (summary.global_batch, summary.lr) == (32, 0.001)
    assert summary.precision == choose_precision("auto", "cpu", False).precision  # what trained and tested: auto's
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert (written["test_images"], written["global_batch"], written["lr"]) == ({"scored": 16, "of": 360}, 32, 0.001)


def test_a_disk_without_room_for_the_checkpoints_is_refused_before_the_first_epoch(tmp_path, monkeypatch):
    """A full disk was found as the first epoch ended, when its checkpoint could not be written: the epoch lost."""
    from collections import namedtuple

    from alternet.apps import checks

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(checks.shutil, "disk_usage", lambda path: usage(2**30, 2**30 - 2**16, 2**16))  # 64 KiB
    with pytest.raises(ConfigValueError, match=r"has 0 MiB free; a checkpoint of this model takes about \d+ MiB"):
        fit(tmp_path / "a")
    assert not (tmp_path / "a" / "checkpoints").exists()  # no epoch trained
    monkeypatch.undo()
    assert fit(tmp_path / "b").epochs > 0  # the same run where the disk has room
