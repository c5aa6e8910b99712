"""Mid-epoch resume is exact: a run killed (SIGKILL) or pre-empted (SIGUSR1) in the middle of an epoch and resumed
with ckpt_path=last ends with the same weights as a run never interrupted — on the image-folder path and the LitData
shards path. These are also the regression tests for Lightning issue #20550: had the learning-rate schedule built the
train loader before the checkpoint was restored, the loader's saved position would be dropped and the weights differ."""

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml

from alternet.data.base import EpochSampler, ResumableLoader
from alternet.runs.directories import RunDir
from alternet.tracking import WandbSettings, finish
from alternet.training.loggers import build_loggers

from helpers import run_script
from helpers.callbacks import fit_loop_inside_an_epoch
from helpers.models import assert_same_weights

# pytest-xdist: the whole module on one worker, so that its uninterrupted run (session-scoped) is made once; the
# worker of the other tests that start processes of their own, so its 2-process DDP run overlaps none of theirs (a
# test's groups join: a second group here made the DDP test a group of its own, "ddp_test_resume_mid_epoch")
pytestmark = pytest.mark.xdist_group("processes")

SCRIPT = "tests/scripts/interrupted_train.py"


def _common(folder: Path) -> list[str]:
    # 40 training images in batches of 4: 10 steps per epoch; stochastic depth and RandAugment exercise the seeding
    return [
        "data=imagefolder",
        f"data.root={folder}",
        "data.image_size=16",
        "data.num_workers=0",
        "recipe.batch_size=4",
        "recipe.epochs=2",
        "recipe.warmup_epochs=1",
        "recipe.drop_path_rate=0.2",
        "trainer.enable_progress_bar=false",
        "callbacks.checkpoint.every_n_train_steps=1",
    ]


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 20
    return checkpoint["state_dict"]


def _interrupted_then_resumed(tmp_path: Path, overrides: list[str], how: str, at: int = 13, saved: int = 0) -> Path:
    run = tmp_path / how
    interrupted = run_script(SCRIPT, str(run), how, str(at), *overrides, timeout=300)
    if how == "KILL":
        assert interrupted.returncode == -9, interrupted.stderr[-2000:]
    else:
        assert interrupted.returncode == 1, interrupted.stderr[-2000:]
        assert f"stopped by SIG{how} at global step {at}" in interrupted.stderr
        assert f"hydra.run.dir={run} ckpt_path=last" in interrupted.stderr  # resumes in its own directory
    assert not (run / "metrics.json").exists()
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == (saved or at)
    resumed = run_script(SCRIPT, str(run), "NONE", "0", *overrides, "ckpt_path=last", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    with open(run / "logs" / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    steps = [int(row["step"]) for row in rows if row.get("train/loss")]
    # the interrupted run's rows kept (those its logger wrote by the epoch's end, at least), none twice
    assert steps == sorted(set(steps)) and 19 in steps and (at <= 10 or 9 in steps)
    summary = json.loads((run / "metrics.json").read_text())
    resumed_images = (20 - at) * 4  # the steps trained after the resume, batches of 4
    assert summary["train_images_per_sec"] >= resumed_images / summary["wall_seconds"]  # its seconds, not the boot's
    return run


@pytest.fixture(scope="session")
def uninterrupted(image_folder, tmp_path_factory) -> dict[str, torch.Tensor]:
    """The final weights of the image-folder run never interrupted."""
    reference = tmp_path_factory.mktemp("reference")
    result = run_script(SCRIPT, str(reference), "NONE", "0", *_common(image_folder), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return _final_weights(reference)


# All with -m slow (3 fresh interpreters each, 20-32 s). By default tests/test_faults.py covers both halves: an
# image-folder run stopped by SIGTERM to its group resumes exactly from the checkpoint the stop wrote, and one stopped
# at once by a second signal resumes exactly from its last periodic mid-epoch checkpoint (what SIGKILL leaves).
SIGNALS = [pytest.param(how, marks=pytest.mark.slow) for how in ("KILL", "USR1", "INT", "TERM")]


@pytest.mark.parametrize("how", SIGNALS)
def test_image_folder_run_interrupted_mid_epoch_resumes_exactly(tmp_path, image_folder, uninterrupted, how):
    assert_same_weights(uninterrupted, _final_weights(_interrupted_then_resumed(tmp_path, _common(image_folder), how)))


@pytest.mark.slow  # 3 fresh interpreters
def test_a_run_killed_after_an_epochs_last_step_resumes_exactly(tmp_path, image_folder, uninterrupted):
    """Killed after the epoch's last step (10 of 10), before its validation: the mid-epoch checkpoints skip that
    step (resumed from it, the run went on with the next epoch and never validated this one), so the resumed run
    trains step 10 again from step 9's checkpoint, validates, and ends with the uninterrupted run's weights."""
    overrides = _common(image_folder)
    run = _interrupted_then_resumed(tmp_path, overrides, "KILL", at=10, saved=9)
    assert_same_weights(uninterrupted, _final_weights(run))
    with open(run / "logs" / "metrics.csv", newline="") as file:
        assert sorted(row["epoch"] for row in csv.DictReader(file) if row.get("val/nll")) == ["0", "1"]


@pytest.mark.slow  # 3 fresh interpreters
def test_a_run_saving_every_second_epoch_killed_mid_epoch_resumes_exactly(tmp_path, image_folder, uninterrupted):
    """every_n_epochs=2 (the GPU CIFAR preset's cheap epoch ends) leaves resuming to the mid-epoch checkpoints."""
    overrides = [*_common(image_folder), "callbacks.checkpoint.every_n_epochs=2"]
    assert_same_weights(uninterrupted, _final_weights(_interrupted_then_resumed(tmp_path, overrides, "KILL")))


@pytest.mark.slow  # 36 s; the image-folder variants above run by default, and the shards' DDP stream test too
def test_shards_run_killed_mid_epoch_resumes_exactly(tmp_path, image_folder, image_shards):
    overrides = [*_common(image_folder), f"data.train_shards={image_shards}"]
    reference = tmp_path / "reference"
    result = run_script(SCRIPT, str(reference), "NONE", "0", *overrides, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_weights(
        _final_weights(reference), _final_weights(_interrupted_then_resumed(tmp_path, overrides, "KILL"))
    )


class _Indices(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 40

    def __getitem__(self, key: tuple[int, int]) -> int:
        return key[0]  # training keys are (index, augmentation seed)


def test_resumable_loader_continues_where_the_saved_position_left_off():
    dataset = _Indices()
    loader = ResumableLoader(dataset, batch_size=4, sampler=EpochSampler(40, seed=3, shuffle=True), drop_last=True)
    loader.sampler.set_epoch(1)
    full = [batch.tolist() for batch in loader]
    iterator = iter(loader)
    seen = [next(iterator).tolist() for _ in range(3)]
    state = loader.state_dict()
    assert state == {"epoch": 1, "batches": 3, "of": 10}

    resumed = ResumableLoader(dataset, batch_size=4, sampler=EpochSampler(40, seed=3, shuffle=True), drop_last=True)
    resumed.sampler.set_epoch(1)
    resumed.load_state_dict(state)
    rest = [batch.tolist() for batch in resumed]
    assert seen + rest == full
    assert [batch.tolist() for batch in resumed] == full  # the skip applies to the resumed epoch only


def test_a_resumed_run_continues_its_wandb_run(tmp_path):
    settings = WandbSettings(project="p", entity=None, group=None, name=None, tags=[], offline=True, init_timeout=5)
    first = build_loggers(settings, RunDir(tmp_path), {})[1]
    finish()
    again = build_loggers(settings, RunDir(tmp_path), {}, resume_step=13)[1]
    finish()
    assert first._wandb_init["id"] == again._wandb_init["id"] == (tmp_path / "wandb-run-id").read_text().strip()
    assert first.experiment.id == again.experiment.id == first._wandb_init["id"]  # the same W&B run, continued
    assert again._wandb_init["resume"] == "allow"
    assert build_loggers(settings, RunDir(tmp_path / "other"), {})[1]._wandb_init["id"] != first._wandb_init["id"]
    finish()


def test_only_rank_zero_keeps_the_wandb_run_id(tmp_path, monkeypatch):
    """Under torchrun or srun the ranks build their loggers at once: each wrote an id of its own when it found none,
    and the file could name another run than the one rank 0 started."""
    from lightning.pytorch.utilities import rank_zero_only

    settings = WandbSettings(project="p", entity=None, group=None, name=None, tags=[], offline=True, init_timeout=5)
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    silent = build_loggers(settings, RunDir(tmp_path), {})[1]
    assert silent._experiment is None and sorted(p.name for p in tmp_path.iterdir()) == []


def test_wandb_runs_say_what_ran_and_show_best_validation_values(tmp_path, monkeypatch):
    """Run name <model>-<data>-s<seed> (the model by its label: its name and the architecture keys changed),
    define_metric so the runs table shows best val accuracy (max) and NLL (min) and every chart is against the
    optimizer step, and the run's config as the run recorded it, on a real offline W&B run."""
    import wandb
    from wandb.sdk.wandb_run import Run

    from alternet.apps.train import train
    from alternet.training.loggers import BEST_OF

    from helpers import FAST, compose_train

    monkeypatch.setenv("WANDB_MODE", "offline")
    defined = {}
    define = Run.define_metric

    def spy(self, name, *args, **kwargs):
        defined[name] = kwargs.get("summary") or kwargs.get("step_metric")
        return define(self, name, *args, **kwargs)

    monkeypatch.setattr(Run, "define_metric", spy)
    seen = {}
    finish = wandb.finish

    def capture_then_finish(*args, **kwargs):
        if wandb.run is not None:
            seen.update(name=wandb.run.name, group=wandb.run.group, config=dict(wandb.run.config))
        return finish(*args, **kwargs)

    monkeypatch.setattr(wandb, "finish", capture_then_finish)
    changed = ["model.heads=[1,2,2]", "model.fused_attn=false"]  # an architecture key, and how it computes
    train(compose_train(*FAST, *changed, "logger=wandb", "logger.wandb.offline=true", "seed=3", output_dir=tmp_path))
    run_id = (tmp_path / "wandb-run-id").read_text().strip()
    assert seen["name"] == "alternet_tiny[heads=[1,2,2]]-digits-s3"  # not the named model's: its heads differ
    assert json.loads((tmp_path / "metrics.json").read_text())["model"] == "alternet_tiny[heads=[1,2,2]]"
    assert seen["group"] == run_id == (tmp_path / "wandb-group").read_text().strip()  # a single run: its own group
    assert defined["val/acc"] == "max" and defined["val/nll"] == "min"
    assert {name: defined.get(name) for name in BEST_OF} == BEST_OF
    assert defined["*"] == "trainer/global_step"  # W&B's own _step counts log calls, and restarts on a resume
    recorded = yaml.safe_load((tmp_path / "config.yaml").read_text())  # not overwritten by the module's hparams
    assert seen["config"]["data"] == recorded["data"] and "val_size" in recorded["data"]


@pytest.mark.parametrize(("rank_zero_says", "saved"), [(False, []), (True, [10])])
def test_a_time_based_mid_epoch_checkpoint_is_rank_zeros_decision(tmp_path, rank_zero_says, saved):
    """callbacks.checkpoint.train_time_interval: each rank reads its own clock, and a save waits at a barrier, so
    ranks that disagreed would hang; every rank saves when rank 0 says so (its decision broadcast every 10 steps,
    a broadcast being a collective and a host sync), and only then."""
    from types import SimpleNamespace

    from alternet.training.callbacks import INTERVAL_SYNC_STEPS, MidEpochCheckpoint

    written, broadcasts = [], []
    callback = MidEpochCheckpoint(tmp_path, train_time_interval=0.0)  # due at once by this rank's clock

    def broadcast(decision):  # what rank 0 decided, on every rank
        broadcasts.append(trainer.global_step)
        return rank_zero_says

    trainer = SimpleNamespace(
        global_step=0,
        accumulate_grad_batches=1,
        fit_loop=fit_loop_inside_an_epoch(),
        strategy=SimpleNamespace(broadcast=broadcast),
        save_checkpoint=lambda path, weights_only: written.append(trainer.global_step),
    )
    for step in range(1, 12):
        trainer.global_step = step
        callback.on_train_batch_end(trainer, None, None, None, batch_idx=step - 1)
    assert broadcasts == [INTERVAL_SYNC_STEPS] == [10] and written == saved
