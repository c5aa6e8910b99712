"""Reproducibility and fault tolerance: determinism, SIGKILL-and-resume, atomic checkpoints, the NaN guard."""

import contextlib
import json
import math
import os
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.strategies import SingleDeviceStrategy

from alternet.apps.train import train
from alternet.errors import ConfigValueError
from alternet.runs.checkpoints import read_checkpoint
from alternet.training.callbacks import AtomicCheckpointIO
from alternet.training.resume import BATCH_KEY, check_resume_batch

from helpers import FAST, ROOT, compose_train, run_main, run_script, run_warm
from helpers.nonfinite import assert_same_state, fail_at, poison_inputs_at, record_batches, state_before_step

# Small batches make an epoch long enough (~80 steps) to be killed in its middle.
RESUMABLE = [
    "trainer.max_epochs=2",
    "recipe.batch_size=16",
    "trainer.enable_progress_bar=false",
    "data.val_size=180",
]


def test_identical_seeded_runs_give_identical_metrics(tmp_path):
    first = train(compose_train(*FAST, "seed=7", output_dir=tmp_path / "a"))
    second = train(compose_train(*FAST, "seed=7", output_dir=tmp_path / "b"))
    other = train(compose_train(*FAST, "seed=8", output_dir=tmp_path / "c"))
    assert first.test == second.test
    assert first.test != other.test


def _checkpoint_epoch(path: Path) -> int:
    return torch.load(path)["epoch"]


@pytest.mark.slow  # the default suite has the stricter mid-epoch version (tests/training/test_resume_mid_epoch.py)
def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(tmp_path):
    reference = run_script("train.py", *RESUMABLE, f"hydra.run.dir={tmp_path / 'reference'}")
    assert reference.returncode == 0, reference.stderr[-2000:]

    killed_dir = tmp_path / "killed"
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *RESUMABLE, f"hydra.run.dir={killed_dir}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    last = killed_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 120
    while not last.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # well into the second epoch
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (killed_dir / "metrics.json").exists(), "the run finished before it could be killed"
    assert _checkpoint_epoch(last) == 0  # only the first epoch was completed
    assert not list(last.parent.glob(".*.tmp")), "a temporary checkpoint file was left behind"

    resumed = run_script("train.py", *RESUMABLE, f"ckpt_path={last}", f"hydra.run.dir={tmp_path / 'resumed'}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    actual = json.loads((tmp_path / "resumed" / "metrics.json").read_text())
    assert actual["global_step"] == expected["global_step"]
    assert actual["test"] == expected["test"]


def test_last_ckpt_holds_the_last_epoch_when_a_later_epoch_is_not_the_best(tmp_path):
    """Lightning 2.6 wrote last.ckpt only beside a new best checkpoint: with the best at epoch 1 of 3, last.ckpt held
    epoch 1 and ckpt_path=last went back two epochs (training.callbacks.BestAndLastCheckpoint)."""
    worst_is_best = ["callbacks.checkpoint.mode=max"]  # the highest val/nll: the first epoch, as the model learns
    first = train(compose_train(*FAST, "trainer.max_epochs=3", *worst_is_best, output_dir=tmp_path))
    checkpoints = tmp_path / "checkpoints"
    assert read_checkpoint(Path(first.best_checkpoint))["global_step"] < first.global_step  # a stale best
    last = read_checkpoint(checkpoints / "last.ckpt")
    assert last["global_step"] == first.global_step
    keys = list(last["callbacks"])  # the state under ModelCheckpoint's key, as in checkpoints of before the fix
    assert any(key.startswith("ModelCheckpoint{") for key in keys) and not any("BestAndLast" in key for key in keys)
    kept = r"kept its best val/nll with callbacks.checkpoint.mode=max, and this run would keep it with mode=min, drop"
    with pytest.raises(ConfigValueError, match=kept):  # the record of the best, keyed by the mode, would be dropped
        train(compose_train(*FAST, "trainer.max_epochs=4", "ckpt_path=last", output_dir=tmp_path))
    resumed = train(compose_train(*FAST, "trainer.max_epochs=4", *worst_is_best, "ckpt_path=last", output_dir=tmp_path))
    assert resumed.global_step == first.global_step // 3 * 4  # one more epoch, not three
    assert resumed.best_checkpoint == first.best_checkpoint  # the best so far came back with the resume


def test_a_resume_whose_epochs_hold_other_step_counts_is_refused(tmp_path):
    """A quick look (trainer.limit_train_batches=2), then the real run from its last.ckpt: the schedule was rebuilt
    over the new count, its rate dropping and warming up again (or sitting at 0), and resumes.json said nothing."""
    first, again = ["recipe.epochs=2", "trainer.max_epochs=1"], ["recipe.epochs=2", "trainer.max_epochs=2"]
    train(compose_train(*FAST, *first, "trainer.limit_train_batches=2", output_dir=tmp_path))
    steps = r"with 3 optimizer steps per epoch where its schedule counted 2 \(trainer.limit_train_batches"
    with pytest.raises(ConfigValueError, match=steps):
        train(compose_train(*FAST, *again, "trainer.limit_train_batches=3", "ckpt_path=last", output_dir=tmp_path))
    assert not (tmp_path / "resumes.json").exists()
    resumed = train(
        compose_train(*FAST, *again, "trainer.limit_train_batches=2", "ckpt_path=last", output_dir=tmp_path)
    )
    assert resumed.global_step == 4


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    target.write_bytes(b"previous good checkpoint")

    def interrupted_save(self, checkpoint, path, storage_options=None):
        Path(path).write_bytes(b"half a checkp")
        raise KeyboardInterrupt

    monkeypatch.setattr("lightning.pytorch.plugins.io.TorchCheckpointIO.save_checkpoint", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        AtomicCheckpointIO().save_checkpoint({"state_dict": {}}, target)
    assert target.read_bytes() == b"previous good checkpoint"
    assert list(tmp_path.iterdir()) == [target]


def _lr_by_step(run_dir: Path) -> dict[int, float]:
    rows = (run_dir / "logs" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    step, lr = header.index("step"), header.index("train/lr")
    return {int(r.split(",")[step]): float(r.split(",")[lr]) for r in rows[1:] if r.split(",")[lr]}


SIX_STEPS = [*FAST, "trainer.limit_train_batches=6"]


def _path(name: str, monkeypatch) -> list[str]:
    """The guard's two paths: the eager step with a fused optimizer, and the compiled whole step, which flags and
    skips inside its update (traced by dynamo, without inductor's code generation: alternet/training/step.py)."""
    if name == "eager":
        return []
    from alternet.training import step

    monkeypatch.setattr(step, "BACKEND", "eager")
    return ["performance.compile=true"]


@pytest.fixture(params=["eager", "whole-step"])
def step_path(request, monkeypatch) -> list[str]:
    return _path(request.param, monkeypatch)


@contextlib.contextmanager
def _guard_collectives(monkeypatch):
    """The guard's own cross-rank agreements (``reduce_boolean_decision`` called from guard.py), in a list."""
    calls: list[str] = []
    agree = SingleDeviceStrategy.reduce_boolean_decision

    def record(self, decision, all=True):
        if sys._getframe(1).f_code.co_filename.endswith("guard.py"):
            calls.append(decision)
        return agree(self, decision, all=all)

    with monkeypatch.context() as patch:
        patch.setattr(SingleDeviceStrategy, "reduce_boolean_decision", record)
        yield calls


def test_a_non_finite_step_is_skipped_on_the_device_and_acted_on_one_step_later(tmp_path, monkeypatch, step_path):
    """The default (deferred) guard: no host sync or collective per step. Step 2's gradients are NaN; the fused
    optimizer skips its update on the device, and step 3 reads the flag, saves the state (as before step 2, one
    batch on) and stops. A lower learning rate resumes from it and finishes the run (on the eager path: resuming
    does not depend on the step's path, and a third traced run costs the whole step's case 4 s). The EMA too is as
    before step 2: step 2's update moved none of its weights, and the NaN statistics it took in are restored."""
    six_steps = [*SIX_STEPS, "recipe.ema.decay=0.9", *step_path]
    seen = record_batches(monkeypatch)
    before_step_2 = state_before_step(monkeypatch, 2, six_steps, tmp_path / "clean")
    clean_batches = dict(seen)
    message = (
        r"non-finite gradients \(training loss nan\) at global step 2, epoch 0, batch 2; its update was skipped "
        r"and the state at step 3 \(weights, optimizer and BatchNorm statistics as they were before step 2\)"
    )
    with _guard_collectives(monkeypatch) as collectives:
        saved, saved_path, command = fail_at(monkeypatch, 2, six_steps, tmp_path / "failed", message)
    assert collectives == []  # the synchronous test below shows this count sees the guard's collectives
    assert saved["global_step"] == 3
    assert_same_state(saved, before_step_2)
    assert f"hydra.run.dir={tmp_path / 'failed'}" in command and f"ckpt_path={saved_path}" in command
    assert "recipe.optimizer.lr=0.0002" in command  # a tenth of debug=fast's recipe lr
    if step_path:
        return

    seen.clear()
    summary = train(
        compose_train(*six_steps, f"ckpt_path={saved_path}", "recipe.optimizer.lr=2e-4", output_dir=tmp_path / "failed")
    )
    assert summary.global_step == 6  # batch 3 is retried; batch 2 stays skipped
    # the images of batches 3-5, at their own indices (the loader's position was one batch on: 4-6 trained)
    assert seen == {key: clean_batches[key] for key in ((0, 3), (0, 4), (0, 5))}
    assert math.isfinite(summary.test["nll"])
    clean, resumed = _lr_by_step(tmp_path / "clean"), _lr_by_step(tmp_path / "failed")
    assert resumed[1] == clean[1]  # rows of the run before the fault are kept
    for step in (3, 4, 5):  # the same schedule, a tenth as high
        assert resumed[step] == pytest.approx(clean[step] / 10, rel=1e-6)
    history = json.loads((tmp_path / "failed" / "resumes.json").read_text())
    assert history == [
        {"global_step": 3, "checkpoint": str(saved_path), "changed": {"recipe.optimizer.lr": [0.002, 2e-4]}}
    ]


def test_a_mid_epoch_checkpoint_reads_a_pending_flag_first_and_never_holds_a_skipped_steps_statistics(
    tmp_path, monkeypatch
):
    """last.ckpt every step: the one due after the bad step 2 would hold the NaN BatchNorm statistics its forward pass
    left (its flag is read one step later), and the guard's message offers last.ckpt as a remedy. The save reads
    the flag first and the guard stops there; last.ckpt stays the one written after step 1."""
    every_step = [*SIX_STEPS, "callbacks.checkpoint.every_n_train_steps=1"]
    fail_at(
        monkeypatch, 2, every_step, tmp_path / "failed", "at global step 2, epoch 0, batch 2; its update was skipped"
    )
    last = torch.load(tmp_path / "failed" / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 2
    assert all(value.isfinite().all() for value in last["state_dict"].values() if value.is_floating_point())
    # a mid-epoch checkpoint's loader counts each process's batches: another split of the same global batch is refused
    batch = last[BATCH_KEY][0]
    assert last[BATCH_KEY] == [batch, 1, 1]
    check_resume_batch("last.ckpt", last, [batch, 1, 1])
    last[BATCH_KEY] = [batch, 2, 1]
    with pytest.raises(ConfigValueError, match=r"saved mid-epoch with batch \d+ x 2 processes x 1 accumulated"):
        check_resume_batch("last.ckpt", last, [batch, 1, 2])


def test_a_resume_on_another_split_of_the_global_batch_is_refused_mid_epoch_only():
    """2 processes x 1 accumulated batch and 1 x 2 step alike, so an epoch's end resumes on either; mid-epoch the
    loader's position counts each process's batches. Another global batch is refused either way."""
    at = {"loops": {"fit_loop": {"state_dict": {"combined_loader": [{"epoch": 3, "batches": 195, "of": 195}]}}}}
    end = {BATCH_KEY: [128, 2, 1]} | at
    check_resume_batch("end.ckpt", end, [128, 1, 2])
    with pytest.raises(
        ConfigValueError,
        match=r"with 256 images per optimizer step \(batch 128 x 2 processes x 1 "
        r"accumulated\) where it trained with 128 \(batch 128 x 1 processes x 1 accumulated\)",
    ):
        check_resume_batch("end.ckpt", {BATCH_KEY: [128, 1, 1]} | at, [128, 2, 1])
    check_resume_batch("old.ckpt", {}, [128, 2, 1])  # saved before the global batch was: not checked


@pytest.fixture(params=["eager", pytest.param("whole-step", marks=pytest.mark.slow)])
def last_step_path(request, monkeypatch) -> list[str]:
    """:func:`step_path`'s, the whole step's case slow (the same flag as the step above, read at once)."""
    return _path(request.param, monkeypatch)


def test_a_non_finite_last_step_of_an_epoch_is_caught_before_its_update(tmp_path, monkeypatch, last_step_path):
    """No later step reads the epoch's last flag, so the guard reads it at once (one sync per epoch)."""
    before_step_5 = state_before_step(monkeypatch, 5, [*SIX_STEPS, *last_step_path], tmp_path / "clean")
    message = r"non-finite gradients \(training loss nan\) at global step 5, epoch 0, batch 5; the state before"
    saved, _, _ = fail_at(monkeypatch, 5, [*SIX_STEPS, *last_step_path], tmp_path / "failed", message)
    assert saved["global_step"] == 5
    assert_same_state(saved, before_step_5)


def test_a_skipped_first_sgd_step_leaves_no_uninitialised_momentum(tmp_path, monkeypatch):
    """Fused SGD allocates its momentum buffers (uninitialised) on the first step, even a skipped one."""
    sgd = [*SIX_STEPS, "recipe=speedrun"]  # SGD with nesterov momentum
    saved, _, _ = fail_at(monkeypatch, 0, sgd, tmp_path / "failed", "at global step 0")
    assert saved["global_step"] == 1 and saved["optimizer_states"][0]["state"] == {}


def test_without_a_fused_optimizer_the_loss_is_checked_before_backward(tmp_path, monkeypatch):
    """The synchronous path (fp16 with a GradScaler, other strategies): the state before the failing step, which
    the resumed run retries."""
    monkeypatch.setattr("alternet.training.module.fused_optimizer_supported", lambda device, precision: False)
    seen = record_batches(monkeypatch)
    before_step_2 = state_before_step(monkeypatch, 2, SIX_STEPS, tmp_path / "clean")
    clean_batches = dict(seen)
    message = r"non-finite training loss \(nan\) at global step 2, epoch 0, batch 2; the state before this step"
    with _guard_collectives(monkeypatch) as collectives:
        saved, saved_path, _ = fail_at(monkeypatch, 2, SIX_STEPS, tmp_path / "failed", message)
    assert len(collectives) == 3  # one agreement per step, steps 0-2, the one the deferred guard does without
    assert saved["global_step"] == 2
    assert_same_state(saved, before_step_2)
    seen.clear()
    summary = train(
        compose_train(*SIX_STEPS, f"ckpt_path={saved_path}", "recipe.optimizer.lr=2e-4", output_dir=tmp_path / "failed")
    )
    assert summary.global_step == 6 and math.isfinite(summary.test["nll"])
    assert seen == {key: clean_batches[key] for key in ((0, 2), (0, 3), (0, 4), (0, 5))}  # batch 2 retried, as said


def test_a_checkpoint_of_a_multi_tensor_optimizer_resumes(tmp_path, monkeypatch):
    """Checkpoints from before the optimizers were fused (and fp16 runs) restore ``fused=None`` into the optimizer:
    the resumed run keeps the multi-tensor step and the synchronous guard instead of failing on its first step."""
    with monkeypatch.context() as patch:
        patch.setattr("alternet.training.module.fused_optimizer_supported", lambda device, precision: False)
        train(compose_train(*FAST, output_dir=tmp_path))
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last)["optimizer_states"][0]["param_groups"][0]["fused"] is None
    summary = train(compose_train(*FAST, "trainer.max_epochs=2", f"ckpt_path={last}", output_dir=tmp_path))
    assert summary.global_step == 6 and math.isfinite(summary.test["nll"])


def test_a_run_resumed_from_its_best_checkpoint_is_not_warned_of_its_own_checkpoints(tmp_path, recwarn):
    """The advice after a damaged last.ckpt (resume from the newest intact one) was followed by Lightning's
    multi-line "Checkpoint directory .../checkpoints exists and is not empty.": the run directory's checks decide
    whether a run may write there, and had."""
    train(compose_train(*FAST, output_dir=tmp_path))
    best = next((tmp_path / "checkpoints").glob("best-*.ckpt"))
    summary = train(compose_train(*FAST, "trainer.max_epochs=2", f"ckpt_path={best}", output_dir=tmp_path))
    assert summary.epochs == 2
    assert not [w for w in recwarn if "exists and is not empty" in str(w.message)]


@pytest.mark.slow  # 9 s of two processes (-m slow); by default the guard's single-process cases above
@pytest.mark.xdist_group("processes")  # 2-process DDP: one at a time, on the processes worker (helpers.warm)
def test_two_ddp_ranks_stop_together_when_one_rank_goes_non_finite(tmp_path):
    """Only rank 0's inputs are poisoned; DDP's all-reduced gradients carry the NaN to rank 1, so both ranks skip
    the step and stop at the same step, with no collective of the guard's own (a hang would time out)."""
    result = run_warm("tests/scripts/ddp_nonfinite_probe.py", str(tmp_path / "run"), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / "run" / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for outcome in ranks:
        assert "at global step 2, epoch 0, batch 2; its update was skipped" in outcome["error"]
    assert (tmp_path / "run" / "checkpoints" / "nonfinite-step2.ckpt").exists()


def test_the_printed_recovery_command_recovers(tmp_path, monkeypatch, capsys):
    """End to end, as a user meets it: train.py (its real entry point, in this process, with inf inputs at step 2)
    fails on the NaN loss, and the command it prints (this interpreter, then train.py and its arguments) finishes
    the run (run here too: a fresh interpreter would only add its imports)."""
    run_dir = tmp_path / "run"
    poison_inputs_at(monkeypatch, 2)
    monkeypatch.setattr(sys, "argv", ["train.py", *FAST, f"hydra.run.dir={run_dir}"])
    with pytest.raises(SystemExit) as failed:
        runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
    message = str(failed.value.code)
    assert message.startswith("error: non-finite gradients") and "Traceback" not in capsys.readouterr().err
    command = message.split("with a lower learning rate: ", 1)[1].split("  — if the loss", 1)[0]
    # the advice names no setting already in force: precision=auto's choice here, and no clipping
    from alternet.training.precision import choose_precision

    in_fp32 = choose_precision("auto", "cpu").precision.startswith("32")
    assert message.endswith(  # no last.ckpt yet to name; clipping is a new run's (a resume keeps the recipe)
        "for a while, start a new run with recipe.grad_clip=1.0"
        if in_fp32
        else "for a while, add trainer.precision=32-true, or start a new run with recipe.grad_clip=1.0"
    )
    assert shlex.split(command)[0] == sys.executable and shlex.split(command)[1].endswith("train.py")
    monkeypatch.undo()  # the inputs are finite again
    _, script, *arguments = shlex.split(command)
    code, stderr = run_main(script, arguments, monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    assert "resuming with recipe.optimizer.lr 0.002 -> 0.0002" in stderr
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert math.isfinite(metrics["test"]["nll"]) and metrics["global_step"] == 3


def test_every_n_epochs_holds_for_last_ckpt_and_the_final_epoch_is_always_saved(tmp_path, monkeypatch):
    """A GPU CIFAR epoch's end is mostly its checkpoint: with every_n_epochs=2 over 3 epochs, last.ckpt is written
    after epochs 2 and 3 (the run's end), not after epoch 1."""
    from alternet.training.callbacks import BestAndLastCheckpoint

    saved, save = [], BestAndLastCheckpoint._save_last_checkpoint

    def spy(self, trainer, candidates):
        saved.append(trainer.current_epoch)
        return save(self, trainer, candidates)

    monkeypatch.setattr(BestAndLastCheckpoint, "_save_last_checkpoint", spy)
    summary = train(
        compose_train(*FAST, "trainer.max_epochs=3", "callbacks.checkpoint.every_n_epochs=2", output_dir=tmp_path)
    )
    assert sorted(set(saved)) == [1, 2]
    assert read_checkpoint(tmp_path / "checkpoints" / "last.ckpt")["global_step"] == summary.global_step


def test_a_checkpoint_written_in_the_background_holds_the_state_of_its_step(tmp_path, monkeypatch):
    """performance.async_checkpoint=true (the default on GPU runs: Lightning's AsyncCheckpointIO around ours): the
    write lags 0.3 s behind while the next epoch trains and changes the weights in place, yet each file holds the
    state it was saved at (its digest verifies), the last one the run's final state, and the run resumes from it."""
    from alternet.runs.checkpoints import DIGEST_KEY, verify_digest

    write, written = AtomicCheckpointIO.save_checkpoint, []

    def slow_write(self, checkpoint, path, storage_options=None):
        time.sleep(0.3)
        write(self, checkpoint, path, storage_options)
        written.append(torch.load(path, weights_only=True))  # as it was written, before a later save replaces it

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", slow_write)
    overrides = [*FAST, "performance.async_checkpoint=true", "trainer.max_epochs=3", "data.val_size=0"]
    summary = train(compose_train(*overrides, output_dir=tmp_path))
    assert [c["global_step"] for c in written] == [3, 6, 9] == [3, 6, summary.global_step]
    for checkpoint in written:
        verify_digest(checkpoint["state_dict"], checkpoint[DIGEST_KEY], "a checkpoint written in the background")
    resumed = train(compose_train(*overrides, "trainer.max_epochs=4", "ckpt_path=last", output_dir=tmp_path))
    assert resumed.global_step == summary.global_step // 3 * 4


def test_a_background_writer_removes_an_old_best_only_after_the_new_one_is_written(tmp_path, monkeypatch):
    """Lightning removed the old best at once while the new best was still queued: a run killed in between (or a
    write that failed) had neither."""
    from alternet.training.callbacks import OrderedAsyncCheckpointIO

    write = AtomicCheckpointIO.save_checkpoint

    def slow_write(self, checkpoint, path, storage_options=None):
        time.sleep(0.3)
        write(self, checkpoint, path, storage_options)

    monkeypatch.setattr(AtomicCheckpointIO, "save_checkpoint", slow_write)
    old, new = tmp_path / "best-epoch000.ckpt", tmp_path / "best-epoch001.ckpt"
    old.write_bytes(b"the old best")
    io = OrderedAsyncCheckpointIO(AtomicCheckpointIO())
    io.save_checkpoint({"w": torch.ones(2)}, new)
    io.remove_checkpoint(old)  # as ModelCheckpoint does right after queueing the new best
    assert old.is_file() and not new.exists()  # still being written: the old one stays
    io.teardown()
    assert new.is_file() and not old.exists()


def test_a_resumed_run_removes_what_a_killed_write_left_behind(tmp_path):
    """SIGKILL during a checkpoint write (in the background, say) leaves the atomic writer's temporary file beside
    the intact last.ckpt; the run that resumes in the directory (holding its lock) removes it, and nothing else."""
    first = train(compose_train(*FAST, output_dir=tmp_path))
    checkpoints = tmp_path / "checkpoints"
    stale = checkpoints / ".last.ckpt.k1ll3d.tmp"
    stale.write_bytes(b"half a checkp")
    mine = checkpoints / "notes.tmp"  # not the writer's pattern: kept
    mine.write_text("mine")
    resumed = train(compose_train(*FAST, "trainer.max_epochs=2", "ckpt_path=last", output_dir=tmp_path))
    assert resumed.global_step == 2 * first.global_step
    assert not stale.exists() and mine.read_text() == "mine"


def test_a_run_stopped_by_trainer_max_epochs_and_resumed_follows_the_recipes_schedule(tmp_path):
    """The schedule spans recipe.epochs: trainer.max_epochs only stops a run. It was built for max_epochs, so a
    run stopped at epoch 1 of 2 had decayed its learning rate to zero and, resumed, restarted it from the top."""
    common = [*FAST, "recipe.epochs=2", "recipe.warmup_epochs=0", "data.val_size=0", "trainer.precision=32"]
    whole = train(compose_train(*common, "trainer.max_epochs=2", output_dir=tmp_path / "whole"))
    train(compose_train(*common, "trainer.max_epochs=1", output_dir=tmp_path / "stopped"))
    resumed = train(compose_train(*common, "trainer.max_epochs=2", "ckpt_path=last", output_dir=tmp_path / "stopped"))
    assert resumed.global_step == whole.global_step == 6
    a, b = (torch.load(tmp_path / run / "checkpoints" / "last.ckpt")["state_dict"] for run in ("whole", "stopped"))
    assert all(torch.equal(a[key], b[key]) for key in a)


@pytest.mark.parametrize("how", ["copied", "moved"])
def test_a_run_resumed_in_another_folder_tests_its_own_best_checkpoint(tmp_path, how):
    """Lightning restored the saved absolute best path alone: a copy resumed there tested (and published) its
    original's best checkpoint, and a moved run failed with a traceback after training."""
    common = [*FAST, "recipe.epochs=2", "trainer.max_epochs=2", "data.val_size=180"]
    first = train(compose_train(*common, output_dir=tmp_path / "a"))
    target = tmp_path / "b"
    if how == "copied":
        shutil.copytree(tmp_path / "a", target)
        train(compose_train(*common, "seed=5", "reuse_run_dir=true", output_dir=tmp_path / "a"))  # a different run
    else:
        (tmp_path / "a").rename(target)
    (target / "metrics.json").unlink()  # stopped while testing: the resume tests its best checkpoint
    resumed = train(compose_train(*common, "ckpt_path=last", output_dir=target))
    assert resumed.tested_checkpoint == str(target / "checkpoints" / Path(first.best_checkpoint).name)
    assert resumed.test == first.test


def test_a_run_whose_test_pass_was_stopped_keeps_its_training_record_when_completed(tmp_path):
    """Its clean training NLL (and throughput) came from this session's logs alone: a resume that trained nothing
    wrote metrics.json without them, and a report then averaged the sweep over fewer runs than it printed."""
    run = [*FAST, "recipe.epochs=1", "data.val_size=180"]
    whole = train(compose_train(*run, output_dir=tmp_path))
    (tmp_path / "metrics.json").unlink()  # stopped while testing
    completed = train(compose_train(*run, "ckpt_path=last", output_dir=tmp_path))
    assert completed.train_clean == whole.train_clean and completed.train_clean["nll"] > 0
    assert completed.train_images_per_sec == pytest.approx(whole.train_images_per_sec)
    assert completed.best_val_score == whole.best_val_score and completed.test == whole.test


def test_a_resumed_run_keeps_its_csv_rows_and_says_nothing_false_about_them(tmp_path, recwarn):
    """Lightning told every resumed run that its earlier log files would be deleted; the rows are kept."""
    common = [*FAST, "recipe.epochs=2", "data.val_size=0"]
    train(compose_train(*common, "trainer.max_epochs=1", output_dir=tmp_path))
    rows = _rows(tmp_path / "logs" / "metrics.csv")
    train(compose_train(*common, "trainer.max_epochs=2", "ckpt_path=last", output_dir=tmp_path))
    assert not [w for w in recwarn if "Previous log files" in str(w.message)]
    kept = _rows(tmp_path / "logs" / "metrics.csv")
    trained = [row for row in rows if not any(key.startswith("test/") for key in row)]  # the test: done again
    assert len(kept) > len(rows) and all(row in kept for row in trained)


def _rows(path: Path) -> list[dict[str, str]]:
    """A CSV log's rows, each by its set columns (a resumed run's log may add columns)."""
    import csv

    with path.open(newline="") as file:
        return [{k: v for k, v in row.items() if v} for row in csv.DictReader(file)]


def test_a_checkpoint_of_the_earlier_schedule_stopped_early_is_said_to_resume_on_another_curve(tmp_path):
    """Saved before the schedule spanned recipe.epochs, a run stopped by trainer.max_epochs had compressed its
    cosine into those epochs; resumed, its learning rate jumps onto the recipe's curve: said, not silent."""
    from alternet.errors import AlternetWarning
    from alternet.training.resume import SCHEDULE_KEY

    common = [*FAST, "recipe.epochs=3", "data.val_size=0"]
    train(compose_train(*common, "trainer.max_epochs=1", output_dir=tmp_path))
    last = tmp_path / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint[SCHEDULE_KEY] == 3
    del checkpoint[SCHEDULE_KEY]  # as an earlier alternet saved it
    torch.save(checkpoint, last)
    with pytest.warns(AlternetWarning, match=r"spanned trainer.max_epochs=1; it now spans recipe.epochs=3"):
        train(compose_train(*common, "trainer.max_epochs=2", "ckpt_path=last", output_dir=tmp_path))


def test_an_epoch_resumed_inside_it_logs_the_training_accuracy_and_loss_of_all_its_steps(tmp_path):
    """They covered only the steps after the resume (0.69 where the uninterrupted epoch had 0.58): the curves and
    the report's HDVW training NLL read them."""
    common = [*FAST, "recipe.epochs=2", "trainer.max_epochs=2", "data.val_size=0", "trainer.precision=32"]
    train(compose_train(*common, output_dir=tmp_path / "whole"))
    train(compose_train(*common, "trainer.max_steps=2", output_dir=tmp_path / "stopped"))  # inside epoch 0 (3 steps)
    train(compose_train(*common, "ckpt_path=last", output_dir=tmp_path / "stopped"))

    def epoch_rows(run: str) -> dict[str, tuple[str, str]]:  # the last row of each epoch (a stop by max_steps
        rows = _rows(tmp_path / run / "logs" / "metrics.csv")  # ends its epoch early and logs it too)
        return {row["epoch"]: (row["train/acc"], row["train/nll_epoch"]) for row in rows if "train/acc" in row}

    assert epoch_rows("stopped") == epoch_rows("whole") and len(epoch_rows("whole")) == 2
