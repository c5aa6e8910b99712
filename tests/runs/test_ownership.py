"""Nothing lost, nothing silently wrong: a run directory belongs to one run, a resumed run never claims settings it
did not use, and corrupted weights are refused by name (issue 14, items 1-4 and 6)."""

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from alternet import hub
from alternet.apps.evaluate import check_classes
from alternet.apps.train import train
from alternet.data import DigitsDataModule
from alternet.errors import CheckpointError, ConfigValueError
from alternet.hub import export, load_pretrained
from alternet.hub.sources import open_source
from alternet.models import create_model
from alternet.runs.checkpoints import DIGEST_KEY, read_checkpoint
from alternet.runs.directories import RunDir
from alternet.runs.ownership import RunDirLock

from helpers import DIGITS_RUN, FAST, compose_train, fingerprint, main_output, run_main


@pytest.fixture
def finished(digits_run, tmp_path) -> Path:
    """A copy of the shared finished digits run (these tests try to write into it)."""
    return Path(shutil.copytree(digits_run, tmp_path / "finished"))


def test_a_run_directory_in_use_refuses_a_second_run(tmp_path):
    holder = _hold_lock(tmp_path)
    try:
        with pytest.raises(ConfigValueError, match=r"run directory .* is in use by another run \(pid \d+"):
            train(compose_train(*FAST, output_dir=tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "metrics.json").exists() and (tmp_path / ".lock").is_file()


def test_a_finished_run_is_never_silently_overwritten(finished):
    run_dir = finished
    before = (run_dir / "metrics.json").read_text()
    with pytest.raises(ConfigValueError, match=r"already holds a finished run \(metrics.json\): resume it with"):
        train(compose_train(*FAST, "seed=3", output_dir=run_dir))
    assert (run_dir / "metrics.json").read_text() == before


def test_an_interrupted_run_is_resumed_or_explicitly_reused(tmp_path, capsys):
    first = train(compose_train(*FAST, output_dir=tmp_path))
    (tmp_path / "metrics.json").unlink()  # as if killed after its checkpoint
    with pytest.raises(ConfigValueError, match=r"already holds an interrupted run \(last.ckpt\)"):
        train(compose_train(*FAST, output_dir=tmp_path))
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "metrics.json").write_text("{}")  # an evaluation of the earlier run's weights
    (tmp_path / "wandb-run-id").write_text("earlier\n")
    (tmp_path / "wandb" / "offline-run-20260101_000000-earlier").mkdir(parents=True)  # its artifact names last.ckpt
    with pytest.raises(ConfigValueError, match=r"data.val_size=5000 is not smaller"):  # refused: nothing removed
        train(compose_train(*FAST, "reuse_run_dir=true", "data.val_size=5000", output_dir=tmp_path))
    assert (tmp_path / "checkpoints" / "last.ckpt").is_file() and (tmp_path / "eval" / "metrics.json").is_file()
    (tmp_path / "notes.png").write_bytes(b"a user's picture")  # not the run's: kept, and not listed as its file
    capsys.readouterr()
    again = train(compose_train(*FAST, "reuse_run_dir=true", output_dir=tmp_path))
    assert again.test == first.test
    said = capsys.readouterr()
    assert (
        "reuse_run_dir=true: removed the earlier run's checkpoints/best-epoch000.ckpt, checkpoints/last.ckpt, "
        f"curves.png, logs/metrics.csv, wandb-run-id, eval/, wandb/ from {tmp_path}\n"
    ) in said.err
    assert (tmp_path / "notes.png").read_bytes() == b"a user's picture" and "notes.png" not in said.out
    assert not (tmp_path / "eval").exists() and not (tmp_path / "wandb-run-id").exists()  # (no W&B in this run)
    assert not (tmp_path / "wandb").exists()  # its upload would have sent the new run's weights under the old name


def test_a_finished_run_continued_for_more_epochs_reads_as_in_progress_until_it_ends(tmp_path, monkeypatch):
    """Its earlier summary goes when it trains again, so that a report of its sweep never reads the old summary
    beside the new training's log."""
    from alternet.training.module import ClassificationModule

    first = train(compose_train(*FAST, output_dir=tmp_path))
    seen, start = [], ClassificationModule.on_train_start

    def started(module):
        seen.append((tmp_path / "metrics.json").exists())
        start(module)

    monkeypatch.setattr(ClassificationModule, "on_train_start", started)
    more = train(compose_train(*FAST, f"trainer.max_epochs={first.epochs + 1}", "ckpt_path=last", output_dir=tmp_path))
    assert seen == [False] and more.epochs == first.epochs + 1 and (tmp_path / "metrics.json").is_file()


def test_a_finished_run_stopped_before_its_export_is_exported_when_launched_again(tmp_path):
    """A requeue (ckpt_path=last) of a run stopped between its summary and its export trains nothing and exports."""
    exported = [*FAST, "export.after_training=true"]
    train(compose_train(*exported, output_dir=tmp_path))
    for stopped in ("before its export", "in it"):  # in it: its folder holds the export's lock alone
        shutil.rmtree(tmp_path / "export")
        if stopped == "in it":
            (tmp_path / "export").mkdir()
            (tmp_path / "export" / ".alternet-writing").write_text("pid 1 on elsewhere\n")
        train(compose_train(*exported, "ckpt_path=last", output_dir=tmp_path))
        assert (tmp_path / "export" / "config.json").is_file(), stopped


def test_ckpt_path_last_without_a_last_checkpoint_names_the_checkpoints_there(tmp_path, capsys):
    """A directory a stopped run left with only its non-finite step's checkpoint: the advice is not ckpt_path=last
    again, which was just given."""
    train(compose_train(*FAST, output_dir=tmp_path))
    (tmp_path / "metrics.json").unlink()
    (tmp_path / "checkpoints" / "last.ckpt").rename(tmp_path / "checkpoints" / "nonfinite-step0.ckpt")
    for best in (tmp_path / "checkpoints").glob("best-*.ckpt"):
        best.unlink()
    advice = r"it has no last.ckpt for ckpt_path=last: resume from one of its checkpoints"
    with pytest.raises(ConfigValueError, match=advice) as refused:
        train(compose_train(*FAST, "ckpt_path=last", output_dir=tmp_path))
    message = str(refused.value)
    assert "(ckpt_path=PATH: nonfinite-step0.ckpt)" in message and "resume it with ckpt_path=last" not in message
    assert "starts afresh" not in capsys.readouterr().err  # said before the refusal, it contradicted it


def test_ckpt_path_last_without_a_last_checkpoint_says_it_starts_from_scratch_once(tmp_path, monkeypatch, capsys):
    """A directory with a run's files but no last.ckpt: the pre-flight check and the run each said it."""
    train(compose_train(*FAST, output_dir=tmp_path))
    (tmp_path / "checkpoints" / "last.ckpt").unlink()
    arguments = [*FAST, "ckpt_path=last", "reuse_run_dir=true", f"hydra.run.dir={tmp_path}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    assert stderr.count("ckpt_path=last: no ") == 1, stderr


def test_resume_refuses_overrides_it_could_not_apply(finished):
    run_dir = finished
    with pytest.raises(ConfigValueError, match=r"recipe\.optimizer\.weight_decay: 0\.05 -> 0\.3.*would not apply"):
        train(compose_train(*DIGITS_RUN, "ckpt_path=last", "recipe.optimizer.weight_decay=0.3", output_dir=run_dir))
    assert "weight_decay: 0.3" not in (run_dir / "config.yaml").read_text()  # the run directory still tells the truth


@pytest.mark.parametrize(
    ("override", "change"),
    [
        ("seed=2", "seed: 0 -> 2"),
        ("data.val_size=300", "data.val_size: 180 -> 300"),
        ("data.subset=0.5", "data.subset: None -> 0.5"),
        ("data.split_seed=1", "data.split_seed: 0 -> 1"),
        ("data.train_clean_size=64", "data.train_clean_size: 2000 -> 64"),
    ],
)
def test_a_resume_that_would_train_other_images_is_refused(finished, override, change):
    """They were taken silently: a resumed run on another seed or hold-out trained on images it had validated on
    (or the other way round), and its config.yaml then said the whole run used the new value."""
    resumes = finished / "resumes.json"
    with pytest.raises(ConfigValueError, match=rf"{re.escape(change)}\).*images, so they would not apply"):
        train(compose_train(*DIGITS_RUN, "ckpt_path=last", "trainer.max_epochs=2", override, output_dir=finished))
    assert not resumes.exists() and override.replace("=", ": ") not in (finished / "config.yaml").read_text()


def test_a_resume_on_another_global_batch_is_refused_before_it_trains(finished):
    """The learning rate was scaled for the saved run's images per optimizer step and the schedule counts its steps;
    a resume keeps both, so 2 accumulated batches (or other devices) would silently halve its steps."""
    resumes = finished / "resumes.json"
    overrides = [*DIGITS_RUN, "ckpt_path=last", "trainer.max_epochs=2", "trainer.accumulate_grad_batches=2"]
    with pytest.raises(
        ConfigValueError,
        match=r"\(batch (\d+) x 1 processes x 2 accumulated\) where it trained "
        r"with \d+ \(batch \1 x 1 processes x 1 accumulated\)",
    ):
        train(compose_train(*overrides, output_dir=finished))
    assert not resumes.exists() and "accumulate_grad_batches: 2" not in (finished / "config.yaml").read_text()


def _write_hydra_records(run_dir: Path) -> None:
    """``run_dir/.hydra/`` as Hydra wrote it when the run started."""
    records = run_dir / ".hydra"
    records.mkdir(exist_ok=True)
    (records / "overrides.yaml").write_text("".join(f"- {o}\n" for o in DIGITS_RUN))
    (records / "config.yaml").write_text((run_dir / "config.yaml").read_text())


def _hydra_records(run_dir: Path) -> dict[str, bytes]:
    """Each file of ``run_dir/.hydra/`` by its bytes."""
    return {p.name: p.read_bytes() for p in sorted((run_dir / ".hydra").iterdir())}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["seed=3"], "already holds a finished run (metrics.json): resume it with ckpt_path=last"),
        (["ckpt_path=last", "recipe.optimizer.weight_decay=0.3"], "recipe.optimizer.weight_decay: 0.05 -> 0.3"),
        (["ckpt_path=last", "trainer.accumulate_grad_batches=2"], "x 2 accumulated) where it trained with"),
    ],
)
def test_a_run_refused_a_directory_holding_a_run_leaves_hydras_records_of_that_run(
    finished, arguments, message, monkeypatch, capsys
):
    """Hydra writes a run's .hydra/ into hydra.run.dir before the run starts; a run that must refuse the directory
    (a new run into a finished one, a resume with settings its checkpoint ignores) stops before that, not after
    rewriting the other run's records. A plain resume of the directory still runs."""
    _write_hydra_records(finished)
    records = _hydra_records(finished)
    code, stderr = run_main("train.py", [*DIGITS_RUN, *arguments, f"hydra.run.dir={finished}"], monkeypatch, capsys)
    assert code.startswith("error: ") and message in code and "\n" not in code and "Traceback" not in stderr
    assert _hydra_records(finished) == records
    code, stdout, _ = main_output(
        "train.py", [*DIGITS_RUN, "ckpt_path=last", f"hydra.run.dir={finished}"], monkeypatch, capsys
    )
    assert code == "0" and "holds a finished run (metrics.json): kept, nothing to train" in stdout


def test_ckpt_path_last_goes_through_the_safe_check(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    torch.save({"state_dict": {}, "payload": _Payload()}, tmp_path / "checkpoints" / "last.ckpt")
    with pytest.raises(
        CheckpointError, match=r"last.ckpt holds an object of [\w.]+, which torch\.load\(weights_only=True\) refuses"
    ):
        train(compose_train(*FAST, "ckpt_path=last", output_dir=tmp_path))


class _Payload:
    pass


def _zero_bytes_of_largest_tensor(path: Path, count: int = 4096) -> None:
    """Zero ``count`` bytes inside the largest tensor of a torch zip checkpoint, as bit rot would."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as file:
        file.seek(info.header_offset + 26)
        name_length, extra_length = (int.from_bytes(file.read(2), "little") for _ in range(2))
        file.seek(info.header_offset + 30 + name_length + extra_length + 64)
        file.write(bytes(min(count, info.file_size - 64)))


def test_bit_rot_in_a_checkpoint_or_an_export_is_refused_by_name(digits_summary, tmp_path):
    corrupt = tmp_path / "rotten.ckpt"
    corrupt.write_bytes(Path(digits_summary.last_checkpoint).read_bytes())
    read_checkpoint(corrupt)  # intact: reads
    _zero_bytes_of_largest_tensor(corrupt)
    with pytest.raises(
        CheckpointError, match=r"checkpoint .*rotten.ckpt is corrupt: its weights differ from the digest"
    ):
        read_checkpoint(corrupt)

    out = export(digits_summary.run_dir, tmp_path / "export")
    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    load_pretrained(model, str(out))  # intact: loads
    weights = out / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-2048:-1024] = bytes(1024)
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"weights file .*model.safetensors is corrupt"):
        load_pretrained(create_model("alternet_tiny", num_classes=10, img_size=16), str(out))


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda w: w | {"stem.conv.weight": torch.full_like(w["stem.conv.weight"], float("nan"))}, "NaN or infinite"),
        (lambda w: w | {"stem.conv.weight": w["stem.conv.weight"].to(torch.int8)}, "as integers"),
        (
            lambda w: w | {"head.fc.weight": w["head.fc.weight"][:7], "head.fc.bias": w["head.fc.bias"][:7]},
            "says 10 classes but its head head.fc.weight has 7 outputs",
        ),
    ],
    ids=["nan", "int8", "narrow-head"],
)
def test_weights_are_looked_at_before_they_load(digits_summary, tmp_path, tamper, message):
    """A third-party file (no digest) still gets its values checked: NaNs, integer casts, a self-contradicting head."""
    out = export(digits_summary.run_dir, tmp_path / "export")
    _third_party(out, tamper(load_file(out / "model.safetensors")))
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_pretrained(create_model("alternet_tiny", num_classes=10, img_size=16), str(out))


def _third_party(export_dir: Path, weights: dict) -> None:
    """``export_dir`` as another tool writes one: ``weights`` with no digest, and none recorded in config.json (an
    alternet config's digest refuses any other weights: tests/hub/test_hub_card.py)."""
    save_file(weights, export_dir / "model.safetensors")
    config = json.loads((export_dir / "config.json").read_text())
    del config["alternet"][DIGEST_KEY]
    (export_dir / "config.json").write_text(json.dumps(config))


def test_a_reinitialised_head_is_a_warning(digits_summary, tmp_path, caplog):
    out = export(digits_summary.run_dir, tmp_path / "export")
    with caplog.at_level(logging.WARNING, logger="alternet.hub"):
        load_pretrained(create_model("alternet_tiny", num_classes=3, img_size=16), str(out))
    assert any(
        r.levelno == logging.WARNING and "new classifier head (10 -> 3 classes" in r.message for r in caplog.records
    )


def test_a_head_left_at_initialisation_without_asking_is_an_error(digits_summary, tmp_path):
    out = export(digits_summary.run_dir, tmp_path / "export")
    weights = load_file(out / "model.safetensors")
    _third_party(out, {k: v for k, v in weights.items() if not k.startswith("head.fc.")})
    with pytest.raises(CheckpointError, match=r"no classifier head that fits its own 10 classes .*pass num_classes"):
        hub.load(str(out))
    assert hub.load(str(out), num_classes=10).num_classes == 10  # asked for: a new head, with a warning
    assert hub.load(str(out), features_only=True) is not None


def test_resuming_from_another_architecture_names_both_models(digits_summary, tmp_path):
    checkpoint = digits_summary.last_checkpoint
    with pytest.raises(ConfigValueError, match=r"model\.name: 'alternet_tiny' -> 'preresnet_tiny'"):
        train(compose_train(*FAST, f"ckpt_path={checkpoint}", "model=preresnet_tiny", output_dir=tmp_path))


def test_evaluating_at_another_input_size_warns_naming_both(digits_summary):
    source = open_source(digits_summary.last_checkpoint)
    datamodule = DigitsDataModule(image_size=32, batch_size=8)
    with pytest.warns(UserWarning, match=r"last\.ckpt expects data\.image_size=16 but is evaluated with 32"):
        check_classes(datamodule, source)


def test_only_a_run_directory_this_process_created_holds_and_left_unused_is_discarded(tmp_path):
    from alternet.runs.ownership import discard_unused_run_dir

    def run_dir(name: str, *files: str, existed: bool = False) -> tuple[RunDir, RunDirLock]:
        if existed:
            (tmp_path / name).mkdir()  # there before the run (a folder of the user's)
        lock = RunDirLock(RunDir(tmp_path / name)).acquire()
        for file in (".hydra/config.yaml", "train.log", "config.yaml", "environment.json", *files):
            (tmp_path / name / file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / file).write_text("x")
        return RunDir(tmp_path / name), lock

    run, lock = run_dir("setup-only", "logs/hparams.yaml")
    assert lock.created and discard_unused_run_dir(run)
    assert not run.path.exists() and RunDirLock.held(run) is None
    for kept in ("checkpoints/last.ckpt", "metrics.json", "logs/metrics.csv", "wandb/run/file", "notes.txt"):
        run, lock = run_dir(kept.replace("/", "-"), kept)
        assert not discard_unused_run_dir(run) and (run.path / kept).is_file(), kept
        lock.release()
    run, lock = run_dir("existed", existed=True)
    assert not lock.created and not discard_unused_run_dir(run) and run.config.is_file()
    lock.release()
    assert not discard_unused_run_dir(run)  # nor a directory this process does not hold


def _hold_lock(run_dir: Path) -> subprocess.Popen:
    """Another process holding ``run_dir``'s lock, as a live run does (its records written beside it)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(run_dir / ".lock")], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


HOLD_LOCK = """
import fcntl, os, sys, time
handle = open(sys.argv[1], "a+")
fcntl.flock(handle, fcntl.LOCK_EX)
handle.write(f"pid {os.getpid()} on the live run's host\\n")
handle.flush()
print("held", flush=True)
time.sleep(300)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: run directories are not locked on Windows")
@pytest.mark.parametrize("command", ["train.py", "evaluate.py"])
def test_a_second_launch_into_a_live_run_is_refused_in_one_line_and_changes_nothing(
    command, digits_run, tmp_path, monkeypatch, capsys
):
    """The live run holds its directory's lock and has written only Hydra's records (the moment a second launch
    used to remove it all as "unused"): the second launch is refused before Hydra writes, and the directory, its
    records and the lock's owner are as they were."""
    run_dir = tmp_path / "live"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("the live run's records\n")
    (run_dir / "train.log").write_text("")
    holder = _hold_lock(run_dir)
    try:
        before = fingerprint(run_dir)
        arguments = [*FAST, f"hydra.run.dir={run_dir}"] if command == "train.py" else [f"ckpt={digits_run}"]
        if command == "evaluate.py":
            arguments.append(f"hydra.run.dir={run_dir}")
        code, stderr = run_main(command, arguments, monkeypatch, capsys)
        what, option = ("run", "hydra.run.dir") if command == "train.py" else ("evaluation", "out_dir")
        assert code.startswith(f"error: {what} directory {run_dir} is in use by another run (pid {holder.pid} on")
        assert code.endswith(f"({option}=...)")  # the key its command sets the directory with
        assert "\n" not in code and "Traceback" not in stderr
        assert fingerprint(run_dir) == before
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # ~1 min: five pairs of real training processes
@pytest.mark.xdist_group("processes")
@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: run directories are not locked on Windows")
@pytest.mark.parametrize("when", ["at once", ".lock", ".hydra/config.yaml", "environment.json", "logs/metrics.csv"])
def test_two_launches_into_one_run_directory_leave_one_intact_run(when, tmp_path):
    """A double submit: the second launch comes at once, or once the first has taken the lock, written Hydra's
    records, its own setup records, or its first logs. One run trains to its end, intact; the other is refused in one
    line and removes nothing."""
    from helpers import ROOT, warm

    run_dir = tmp_path / "run"
    arguments = [*FAST, f"hydra.run.dir={run_dir}", "trainer.enable_progress_bar=false"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT / "tests")}  # helpers.callbacks
    # the first holds the directory at its second epoch's start until the second launch has ended (4 short epochs
    # were over before a second warm child started, on a fast machine)
    released = tmp_path / "second-ended"
    hold = f"callbacks.extra=[{{_target_:helpers.callbacks.HoldUntil,path:'{released}'}}]"
    first = warm.start(
        ROOT / "train.py", [*arguments, "trainer.max_epochs=2", hold], cwd=ROOT, env=env, stdout=tmp_path / "first.log"
    )
    deadline = time.monotonic() + 120
    while when != "at once" and not (run_dir / when).exists():
        assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()[-3000:]
        time.sleep(0.005)
    second = warm.start(ROOT / "train.py", arguments, cwd=ROOT, env=env, stdout=tmp_path / "second.log")
    codes = {"second": second.wait(300)}
    released.touch()
    codes["first"] = first.wait(300)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in codes}

    assert sorted(codes.values()) == [0, 1], logs
    loser = min(codes, key=lambda name: -codes[name])
    refusal = logs[loser].strip().splitlines()[-1]
    # "(pid N)", or "(another process)" when the winner holds the lock and has not yet written its pid
    assert refusal.startswith(f"error: run directory {run_dir} is in use by another run ("), logs[loser]
    assert "Traceback" not in logs[loser]
    if when != "at once":
        assert loser == "second"
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert summary["run_dir"] == str(run_dir) and (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert (run_dir / "logs" / "metrics.csv").is_file()


def test_a_file_where_the_run_keeps_its_checkpoints_is_refused_before_it_trains(finished):
    """It trained the whole epoch, then failed to save ("File exists ... Free space")."""
    shutil.rmtree(finished / "checkpoints")
    (finished / "checkpoints").write_text("not a folder\n")
    with pytest.raises(ConfigValueError, match=r"checkpoints is a file where a run keeps its checkpoints folder"):
        train(compose_train(*DIGITS_RUN, "reuse_run_dir=true", output_dir=finished))
    assert (finished / "checkpoints").read_text() == "not a folder\n"
