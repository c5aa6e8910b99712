"""How a run stops (alternet/training/stopping/): the pre-emption callback's requeue and its agreement across
ranks, Ctrl-C noted and ended on a command's stop line, and Lightning's own Ctrl-C exit raised on. The end-to-end
stops of real runs (signals to a training process and its workers, resume after them) are tests/test_faults.py's
and tests/training/test_resume_mid_epoch.py's."""

import csv
import gc
import inspect
import json
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from alternet.errors import ConfigValueError
from alternet.runs.directories import RunDir
from alternet.training.callbacks import AtomicCheckpointIO
from alternet.training.stopping import (
    Preempted,
    PreemptionCheckpoint,
    StoppedWithoutSaving,
    ctrl_c_noted,
    ends_on_its_stop_line,
    lightning_ctrl_c_raised,
    raised_by_a_stop,
    requeue_slurm_job,
)

from helpers import run_script
from helpers.callbacks import fit_loop_inside_an_epoch, step_logs
from helpers.processes import run_command

# the DDP probe starts processes of its own: on the worker of the other tests that do (pytest-xdist)
pytestmark = pytest.mark.xdist_group("processes")


@pytest.fixture
def pythons_ctrl_c():
    """SIGINT handled as Python does by default (a test runner's worker may have set it otherwise)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _ctrl_c() -> None:
    signal.raise_signal(signal.SIGINT)


def test_ctrl_c_in_a_command_ends_on_its_stop_line(pythons_ctrl_c):
    @ends_on_its_stop_line("stopped by SIGINT; run it again")
    def main():
        _ctrl_c()

    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == "error: stopped by SIGINT; run it again"


def test_an_error_that_ctrl_c_caused_ends_on_the_stop_line_too(pythons_ctrl_c):
    """Where Ctrl-C lands inside Hydra's code, its clean-up may raise another error (or exit 1) in its place."""

    @ends_on_its_stop_line("stopped")
    def broken():
        try:
            _ctrl_c()
        except KeyboardInterrupt:
            raise RuntimeError("a library's clean-up failed") from None

    @ends_on_its_stop_line("stopped")
    def exits():
        try:
            _ctrl_c()
        except KeyboardInterrupt:
            raise SystemExit(1) from None

    for main in (broken, exits):
        with pytest.raises(SystemExit) as exited:
            main()
        assert exited.value.code == "error: stopped"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's handler is back


def test_other_errors_and_exits_pass_through_when_no_ctrl_c_came(pythons_ctrl_c):
    @ends_on_its_stop_line("stopped")
    def broken():
        raise RuntimeError("a real failure")

    @ends_on_its_stop_line("stopped")
    def exits():
        raise SystemExit("error: a bad key")

    with pytest.raises(RuntimeError, match="a real failure"):
        broken()
    with pytest.raises(SystemExit, match="error: a bad key"):
        exits()


def test_a_sigint_that_was_ignored_stays_ignored_and_unnoted():
    """A shell's background job starts with SIGINT ignored: the command leaves it so."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with ctrl_c_noted() as noted:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            _ctrl_c()  # ignored: nothing raised
        assert not noted.came
    finally:
        signal.signal(signal.SIGINT, previous)


def test_lightnings_ctrl_c_exit_is_raised_on_as_the_ctrl_c_it_was():
    """Lightning answers Ctrl-C inside fit/test with sys.exit(1) and marks the trainer interrupted; any other exit
    passes unchanged."""
    with pytest.raises(KeyboardInterrupt), lightning_ctrl_c_raised(SimpleNamespace(interrupted=True)):
        raise SystemExit(1)
    with pytest.raises(SystemExit), lightning_ctrl_c_raised(SimpleNamespace(interrupted=False)):
        raise SystemExit(1)


def test_an_object_the_second_signal_left_half_built_fails_quietly_at_its_end(tmp_path, monkeypatch):
    """A suite run's last line was ``AttributeError: 'StorageWeakRef' object has no attribute '_free_weak_ref'``: the
    stop landed inside the constructor, and the object's __del__ failed after the one error line."""
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    callback = PreemptionCheckpoint(RunDir(tmp_path), ["SIGTERM"], requeue=False)
    callback._handle(signal.SIGTERM, None)

    class HalfBuilt:
        def __init__(self):
            callback._handle(signal.SIGINT, None)  # the second signal, before the attribute is set
            self.ref = 1

        def __del__(self):
            del self.ref

    with pytest.raises(StoppedWithoutSaving):
        HalfBuilt()
    gc.collect()
    assert reported == []  # its AttributeError is dropped

    class Broken:
        def __del__(self):
            raise ValueError("a real fault")

    Broken()
    gc.collect()
    assert [type(r.exc_value) for r in reported] == [ValueError]  # anything else is still reported


def a_second_signal_inside_getfullargspec(tmp_path: Path) -> BaseException:
    """What a CI run met (a race): the second stop signal lands while Lightning's step is inside
    ``inspect.getfullargspec``, which raises ``TypeError: unsupported callable`` in place of the stop."""
    callback = PreemptionCheckpoint(RunDir(tmp_path), ["SIGTERM"], requeue=False)
    callback._handle(signal.SIGTERM, None)  # the first: save after this step

    class Hook:
        @property
        def __signature__(self):
            callback._handle(signal.SIGINT, None)  # the second, arriving here

        def __call__(self, batch):
            return batch

    try:
        inspect.getfullargspec(Hook())
    except TypeError as error:
        return error
    raise AssertionError("getfullargspec did not raise")


def test_a_stop_that_other_code_replaced_with_its_own_error_still_ends_on_the_stop_line(tmp_path, monkeypatch, capsys):
    error = a_second_signal_inside_getfullargspec(tmp_path)
    assert str(error) == "unsupported callable" and isinstance(raised_by_a_stop(error), StoppedWithoutSaving)
    assert raised_by_a_stop(ValueError("no stop in its chain")) is None

    def train(cfg):
        raise a_second_signal_inside_getfullargspec(tmp_path)

    monkeypatch.setattr("alternet.apps.train.train", train)
    code, stderr = run_command(["train", f"hydra.run.dir={tmp_path / 'run'}"], monkeypatch, capsys)
    assert code.startswith("error: stopped at once by a second signal (SIGINT) before the pre-emption checkpoint")
    assert "Traceback" not in stderr and "unsupported callable" not in code


def test_preemption_under_slurm_requeues_the_job_with_scontrol(tmp_path, monkeypatch):
    """The cluster's own ``scontrol`` is called as ``scontrol requeue <job>`` (a recording stand-in here)."""
    calls = tmp_path / "calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert requeue_slurm_job()
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4200")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "7")
    assert requeue_slurm_job()
    assert calls.read_text().splitlines() == ["requeue 4242", "requeue 4200_7"]
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # a container on a SLURM node: no scontrol (a traceback took
    assert not requeue_slurm_job()  # the stop line's place)
    monkeypatch.delenv("SLURM_JOB_ID")
    assert not requeue_slurm_job()  # not under SLURM: nothing to requeue


class _Ranks:
    """A two-rank trainer's surface as PreemptionCheckpoint sees it, recording the steps that ran a collective."""

    def __init__(self, tmp_path: Path):
        self.world_size, self.global_step, self.accumulate_grad_batches = 2, 0, 1
        self.default_root_dir, self.current_epoch, self.is_global_zero = str(tmp_path), 0, True
        self.collectives, self.saved = [], []
        self.strategy = SimpleNamespace(
            reduce_boolean_decision=self._agree, checkpoint_io=AtomicCheckpointIO(), barrier=lambda name: None
        )
        self.fit_loop, self._logger_connector = fit_loop_inside_an_epoch(), step_logs()

    def _agree(self, decision: bool, all: bool) -> bool:
        self.collectives.append(self.global_step)
        return decision

    def save_checkpoint(self, path: Path, weights_only: bool | None = None) -> None:
        self.saved.append((self.global_step, Path(path).name))


def test_ddp_ranks_agree_on_a_preemption_every_n_steps_not_every_step(tmp_path):
    """Agreeing is a collective and a host sync: under DDP it must not run on every optimizer step."""
    callback = PreemptionCheckpoint(RunDir(tmp_path), ["SIGUSR1"], requeue=False, sync_every_n_steps=10)
    trainer = _Ranks(tmp_path)
    with pytest.raises(Preempted, match="stopped by SIGUSR1 at global step 20"):
        for step in range(1, 31):
            trainer.global_step = step
            if step == 13:
                callback.received = signal.SIGUSR1
            callback.on_train_batch_end(trainer, None, None, None, step - 1)
    assert trainer.collectives == [10, 20]
    assert trainer.saved == [(20, "last.ckpt")]


def test_a_stop_asked_for_in_an_epochs_last_batch_waits_for_its_validation(tmp_path):
    """Saved after the epoch's last batch but before its validation, the resumed run went on with the next epoch:
    that epoch's validation (its best-checkpoint candidate and curve point) was never run."""
    from alternet.apps.train import train
    from alternet.report.runs import read_history

    from helpers import FAST, compose_train

    common = [*FAST, "recipe.epochs=2", "trainer.max_epochs=2"]  # 3 steps an epoch
    signal_at_3 = "callbacks.extra=[{_target_:helpers.callbacks.SignalBeforeStep,step:3}]"
    with pytest.raises(Preempted, match=r"stopped by SIGTERM at global step 3 \(in epoch 1\)"):
        train(compose_train(*common, signal_at_3, output_dir=tmp_path / "cut"))
    resumed = train(compose_train(*common, "ckpt_path=last", output_dir=tmp_path / "cut"))
    whole = train(compose_train(*common, output_dir=tmp_path / "whole"))
    cut, uncut = (read_history(RunDir(tmp_path / name).metrics_csv) for name in ("cut", "whole"))
    assert list(cut["val/nll"]) == [0, 1] and cut["val/nll"] == pytest.approx(uncut["val/nll"], abs=1e-6)
    assert cut["train/acc"] == pytest.approx(uncut["train/acc"], abs=1e-6)  # the epoch's end logged before the stop
    assert (resumed.best_epoch, resumed.test) == (whole.best_epoch, whole.test)


def test_a_stop_inside_an_epoch_keeps_its_curves_as_an_uninterrupted_run_has_them(tmp_path):
    """A signal's stop is raised in on_train_batch_end, before Lightning writes the step's train/loss and train/lr
    row, and the resumed run starts at the next step: the row was lost for good."""
    from alternet.apps.train import train

    from helpers import FAST, compose_train

    common = [*FAST, "recipe.epochs=2", "trainer.max_epochs=2"]  # 3 steps an epoch
    signal_at_2 = "callbacks.extra=[{_target_:helpers.callbacks.SignalBeforeStep,step:2}]"
    with pytest.raises(Preempted, match=r"stopped by SIGTERM at global step 2 \(in epoch 1\)"):
        train(compose_train(*common, signal_at_2, output_dir=tmp_path / "cut"))
    train(compose_train(*common, "ckpt_path=last", output_dir=tmp_path / "cut"))
    train(compose_train(*common, output_dir=tmp_path / "whole"))
    for key in ("train/loss", "train/lr"):
        cut, uncut = (_by_step(RunDir(tmp_path / name).metrics_csv, key) for name in ("cut", "whole"))
        assert list(cut) == list(uncut) == list(range(6)), key
        assert cut == pytest.approx(uncut, abs=1e-6), key
    # an epoch cut by trainer.max_steps (Lightning ends it there) logged its means over the steps so far, and the
    # resumed run its true ones: two train/acc and train/nll_epoch rows for epoch 1
    train(compose_train(*common, "trainer.max_steps=4", output_dir=tmp_path / "steps"))
    train(compose_train(*common, "ckpt_path=last", output_dir=tmp_path / "steps"))
    for key in ("train/acc", "train/nll_epoch"):
        cut, uncut = (_by_step(RunDir(tmp_path / name).metrics_csv, key) for name in ("steps", "whole"))
        assert list(cut) == list(uncut) == [2, 5] and cut == pytest.approx(uncut, abs=1e-6), key


def _by_step(path, key: str) -> dict[int, float]:
    with open(path) as f:
        return {int(row["step"]): float(row[key]) for row in csv.DictReader(f) if row.get(key)}


def test_a_run_early_stopping_stopped_stays_stopped_when_resumed(tmp_path):
    """EarlyStopping's decision was not in the checkpoint (its counts were): a stop signal in the last batch of the
    epoch where it stopped the run, resumed, trained on past it (3 epochs to the uninterrupted run's 2)."""
    from alternet.apps.train import train

    from helpers import FAST, compose_train

    common = [
        *FAST,
        "recipe.epochs=5",
        "trainer.max_epochs=5",
        "+callbacks.early_stopping={monitor:val/nll,mode:max,patience:1}",
    ]
    signal_at_6 = "callbacks.extra=[{_target_:helpers.callbacks.SignalBeforeStep,step:6}]"  # epoch 2's last step
    with pytest.raises(Preempted, match=r"at global step 6 \(in epoch 2\)"):
        train(compose_train(*common, signal_at_6, output_dir=tmp_path / "cut"))
    resumed = train(compose_train(*common, "ckpt_path=last", output_dir=tmp_path / "cut"))
    whole = train(compose_train(*common, output_dir=tmp_path / "whole"))
    assert (
        (resumed.epochs, resumed.global_step, resumed.test)
        == (whole.epochs, whole.global_step, whole.test)
        == (2, 6, whole.test)
    )


@pytest.mark.parametrize("every", [0, -3, 2.5, True, "10"])
def test_a_bad_sync_interval_is_refused_when_the_callback_is_built(tmp_path, every):
    with pytest.raises(ConfigValueError, match=r"callbacks\.preemption\.sync_every_n_steps must be a positive integer"):
        PreemptionCheckpoint(RunDir(tmp_path), ["SIGUSR1"], sync_every_n_steps=every)


@pytest.mark.slow
def test_two_ddp_ranks_stop_together_when_one_rank_is_signalled(tmp_path):
    """Only rank 1 gets SIGUSR1 (after step 2); both ranks stop at the next agreement (step 4), rank 0 saying the
    signal came to another rank, and the checkpoint holds step 4 (a hang or a rank training on would fail)."""
    result = run_script("tests/scripts/ddp_preemption_probe.py", str(tmp_path / "run"), timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    errors = [json.loads((tmp_path / "run" / f"rank{rank}.json").read_text())["error"] for rank in (0, 1)]
    assert "stopped by a signal on another rank at global step 4" in errors[0]
    assert "stopped by SIGUSR1 at global step 4" in errors[1]
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4


@pytest.mark.parametrize("started_with", ["submitit's handler", "none"])
def test_preemption_writes_before_a_requeue_and_requeues_once(tmp_path, monkeypatch, started_with):
    """The asynchronous write finishes before anything may end the job (scontrol requeue sends SIGTERM, then
    SIGKILL), our handlers are gone by then (the requeue's SIGTERM is no "second signal before saving"), and where
    the run started under submitit's handler, that handler requeues, not a second scontrol."""
    from alternet.training.stopping import Preempted, preemption

    calls = []
    monkeypatch.setattr(preemption, "requeue_slurm_job", lambda: calls.append("scontrol requeue") or True)

    def checkpoint_and_try_requeue(signum, frame):  # submitit's SignalHandler method, by its module
        calls.append("submitit")

    checkpoint_and_try_requeue.__module__ = "submitit.core.job_environment"
    callback = PreemptionCheckpoint(RunDir(tmp_path), ["SIGUSR2"], requeue=True)
    callback._before_run = {signal.SIGUSR2: checkpoint_and_try_requeue if started_with != "none" else signal.SIG_DFL}
    callback._displaced = {signal.SIGUSR2: signal.getsignal(signal.SIGUSR2)}
    callback.received = signal.SIGUSR2
    trainer = SimpleNamespace(
        world_size=1,
        accumulate_grad_batches=1,
        is_global_zero=True,
        global_step=5,
        current_epoch=0,
        fit_loop=fit_loop_inside_an_epoch(),
        _logger_connector=step_logs(),
        strategy=SimpleNamespace(
            checkpoint_io=SimpleNamespace(teardown=lambda: calls.append("written")),
            barrier=lambda name: calls.append("every rank waits"),
        ),
        save_checkpoint=lambda path, weights_only: calls.append("queued") or calls.append(callback._displaced.copy()),
    )
    with pytest.raises(Preempted):
        callback.on_train_batch_end(trainer, None, None, None, 0)
    # no rank ends before rank 0 has written and run its own requeue; submitit's handler (which exits) comes last
    then = ["scontrol requeue", "every rank waits"] if started_with == "none" else ["every rank waits", "submitit"]
    assert calls[0] == "queued" and calls[2:] == ["written", *then]
    assert callback._displaced == {}  # ours restored before the requeue
