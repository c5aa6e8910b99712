"""Run directories (one rule for which checkpoint stands for a run), the kernel's files and seeds, and the
metric a sweep optimises."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from alternet.apps.checks import reported_metrics, validate_train_config
from alternet.apps.train import train
from alternet.data.corrupted.cifar_c import task_seed
from alternet.errors import AlternetWarning, CheckpointError, ConfigValueError
from alternet.files import atomic_write, read_json, write_csv, write_json
from alternet.hub.sources import open_source
from alternet.metrics import BinnedCalibrationError, calibration_metrics
from alternet.runs.checkpoint_files import find_checkpoint, select_checkpoint
from alternet.runs.directories import RunDir
from alternet.runs.records import record_resume
from alternet.runs.summary import RunSummary
from alternet.runs.weights import OFF_WAS_NULL, load_model, saved_hyperparameters
from alternet.seeds import derive_seed
from alternet.training.config import RecipeConfig
from alternet.typed import build

from helpers import FAST, compose_train, resolved, run_main, typed


def test_a_copied_run_directory_stands_for_its_own_checkpoints(digits_summary, tmp_path):
    original = digits_summary.run_dir
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    # metrics.json still names the original's files by absolute path: they must not be followed out of the copy
    assert json.loads((copy / "metrics.json").read_text())["best_checkpoint"].startswith(str(original))
    best = copy / "checkpoints" / f"{digits_summary.best_checkpoint.rsplit('/', 1)[-1]}"
    assert select_checkpoint(RunDir(copy)) == best
    assert find_checkpoint(copy) == (best, RunDir(copy))
    assert open_source(copy).checkpoint == best  # export, load, fine-tune


def test_a_run_directory_without_a_best_checkpoint_stands_for_its_last(digits_summary, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(digits_summary.run_dir, copy)
    for best in (copy / "checkpoints").glob("best-*.ckpt"):
        best.unlink()
    with pytest.warns(AlternetWarning, match=r"best checkpoint best-.*\.ckpt is missing: its last\.ckpt \(the final"):
        assert select_checkpoint(RunDir(copy)) == copy / "checkpoints" / "last.ckpt"
    shutil.rmtree(copy / "checkpoints")
    (copy / "checkpoints").mkdir()
    with pytest.raises(CheckpointError, match="has no checkpoints"):
        select_checkpoint(RunDir(copy))


def test_the_bare_model_of_a_checkpoint_gives_the_trained_logits(digits_summary):
    model, weights = load_model(digits_summary.best_checkpoint)
    assert weights.architecture == "alternet_tiny" and weights.model_args["layout"] == "C|CM|CM"
    module_state = torch.load(digits_summary.best_checkpoint, weights_only=True)["state_dict"]
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, module_state[f"model.{key}"])
    assert not model.training


def test_a_tagged_model_name_records_its_architecture(digits_summary, tmp_path):
    """alternet_tiny.cifar10 (a name with timm's tag) recorded no architecture: the zoo's spec was looked up under
    the tagged name, so an export's model_args held no layout and the model was rebuilt from the zoo of the day."""
    checkpoint = torch.load(digits_summary.best_checkpoint, weights_only=True)
    checkpoint["hyper_parameters"]["model"]["name"] = "alternet_tiny.cifar10"
    torch.save(checkpoint, tmp_path / "tagged.ckpt")
    _, weights = load_model(tmp_path / "tagged.ckpt")
    assert weights.model_args["layout"] == "C|CM|CM" and "widths" in weights.model_args


def test_training_and_evaluation_record_the_same_metric_names_and_ece(digits_summary):
    summary = digits_summary  # evaluated after training
    assert set(summary.test) == {"acc", "top5", "nll", "ece"} <= set(summary.calibration)
    # one definition, computed batch by batch and on the whole split: counts, equal where both ran in float32; the
    # training's test runs at the run's precision and the evaluation in float32, and bf16 logits of the barely
    # trained tiny model tie where float32 ones do not (top-5 moved by half an image of 360 on a Zen 5, ties counted
    # at their expectation in both): there, two images' worth
    precision = OmegaConf.load(Path(summary.run_dir) / "config.yaml").trainer.precision
    tolerance = 1e-6 if str(precision).startswith("32") else 2 / summary.test_images.scored
    for name in ("acc", "top5"):
        assert summary.test[name] == pytest.approx(summary.calibration[name], abs=tolerance), (name, precision)
    # ECE sums float32 confidences per bin, batch by batch against the whole split at once: the two orders of
    # summation differ by ~1e-5 on an AVX-512 CPU (1.1e-5 measured on a Zen 4), while another binning or
    # definition would differ by ~1e-3 (one image of 360 moving bins)
    assert summary.test["ece"] == pytest.approx(summary.calibration["ece"], abs=1e-4)
    assert summary.test["nll"] == pytest.approx(summary.calibration["nll"], rel=1e-4)


def test_streaming_ece_equals_the_whole_split_definition():
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(1000, 7, generator=generator)
    probs, labels = logits.softmax(dim=1), torch.randint(0, 7, (1000,), generator=generator)
    probs[0] = torch.tensor([0.9, 0.1, 0, 0, 0, 0, 0])  # exactly on a bin edge: (0.8, 0.9]
    metric = BinnedCalibrationError(n_bins=10)
    for start in range(0, 1000, 64):
        metric.update(probs[start : start + 64], labels[start : start + 64])
    expected = calibration_metrics(probs.double().numpy(), labels.numpy())["ece"]
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-6)


# the metric a sweep optimises --------------------------------------------------------------------


def test_optimized_metric_names_a_metric_the_run_reports():
    validate_train_config(resolved("optimized_metric=val/nll"))  # digits holds out a validation split
    validate_train_config(resolved("optimized_metric=test/acc", "data.val_size=0"))
    assert "test_ema/acc" in reported_metrics(validate_train_config(resolved("recipe.ema.decay=0.99")))
    with pytest.raises(ConfigValueError, match=r"optimized_metric=val/nll .*data\.val_size > 0"):
        validate_train_config(resolved("optimized_metric=val/nll", "data.val_size=0"))
    with pytest.raises(ConfigValueError, match=r"optimized_metric=test/accuracy is not a metric .*'test/acc'"):
        validate_train_config(resolved("optimized_metric=test/accuracy"))


def test_the_optimized_metric_is_recorded_and_returned(tmp_path):
    summary = train(compose_train(*FAST, "optimized_metric=val/nll", output_dir=tmp_path / "val"))
    assert summary.to_json()["optimized_metric"] == {"name": "val/nll", "value": summary.best_val_score}
    summary = train(compose_train(*FAST, "optimized_metric=test/acc", output_dir=tmp_path / "test"))
    assert summary.to_json()["optimized_metric"] == {"name": "test/acc", "value": summary.test["acc"]}


_SUMMARY = {  # a finished run's metrics.json, as written
    "model": "alternet_tiny",
    "data": "digits",
    "test": {"acc": 0.9, "top5": 1.0, "nll": 0.3, "ece": 0.02},
    "best_val_score": 0.25,
    "monitor": "val/nll",
    "epochs": 2,
    "global_step": 20,
}


def test_an_optimized_metric_that_is_not_finite_is_said_and_recorded_as_null(tmp_path):
    """A run whose validation NLL diverged (NaN, written as null) finishes and says so; a sweeper gets NaN. It was
    refused as 'not recorded by this run' with the whole summary in the line, and left no metrics.json."""
    from dataclasses import replace

    from alternet.apps.train import optimized_metric
    from alternet.errors import AlternetWarning

    summary = RunSummary.from_payload({**_SUMMARY, "run_dir": str(tmp_path)}, where="a test's")
    diverged = replace(summary, best_val_score=None)
    with pytest.warns(AlternetWarning, match=r"^optimized_metric=val/nll has no finite value in this run \(NaN"):
        assert optimized_metric("val/nll", diverged).value is None
    assert optimized_metric("test/acc", diverged).value == summary.test["acc"]


def test_a_sweep_on_a_metric_that_does_not_exist_fails_before_training(tmp_path, monkeypatch, capsys):
    # train.py in this process: its exit message is the last line of stderr, status 1 (tests/apps/test_bad_inputs.py)
    arguments = [*FAST, "optimized_metric=val/acc", "data.val_size=0", f"hydra.run.dir={tmp_path}"]
    code, _ = run_main("train.py", arguments, monkeypatch, capsys)
    assert code != "0"
    assert code.startswith("error: optimized_metric=val/acc is not a metric")
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "config.yaml").exists()


# kernel: files and seeds -----------------------------------------------------------------------


def test_atomic_write_leaves_the_old_file_and_no_temporary_on_failure(tmp_path):
    path = write_json(tmp_path / "a.json", {"x": float("nan"), "y": np.float32(1.5)})
    assert read_json(path) == {"x": None, "y": 1.5}

    def fail(tmp):
        tmp.write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(path, fail)
    assert read_json(path) == {"x": None, "y": 1.5} and [p.name for p in tmp_path.iterdir()] == ["a.json"]
    write_csv(tmp_path / "t.csv", [{"a": 1}, {"a": 2, "b": 3}])
    assert (tmp_path / "t.csv").read_text().splitlines() == ["a,b", "1,", "2,3"]


def test_atomic_write_gives_a_new_file_the_umasks_permissions_and_keeps_an_old_files(tmp_path):
    """A temporary file is private (0600); the file it becomes is not: exports, metrics and reports were 0600,
    unreadable by the others on a shared machine, while checkpoints were 0644."""
    mask = os.umask(0o022)
    os.umask(mask)
    new = atomic_write(tmp_path / "new.json", lambda tmp: tmp.write_text("{}"))
    assert new.stat().st_mode & 0o777 == 0o666 & ~mask
    old = tmp_path / "old.json"
    old.write_text("{}")
    old.chmod(0o640)
    write_json(old, {"a": 1})
    assert old.stat().st_mode & 0o777 == 0o640


def test_seed_streams_are_distinct_and_stable():
    assert derive_seed(0, "augment", 1, 5) == derive_seed(0, "augment", 1, 5)
    seeds = {derive_seed(0, "augment", 1, 5), derive_seed(0, "order", 1, 5), derive_seed(1, "augment", 1, 5)}
    assert len(seeds) == 3 and all(0 <= s < 2**32 for s in seeds)
    # generated CIFAR-C caches written before the seed derivation moved to alternet.seeds stay valid
    expected = np.random.SeedSequence([3, 3_703_756_812, 2, 0]).generate_state(1)[0]
    assert task_seed(3, "gaussian_noise", 2, 0) == expected


def test_a_run_resumed_twice_records_both_resumes(tmp_path):
    """resumes.json is a list that each resume extends; reading it back for the second resume once failed ("should
    hold a JSON object, found list"), so a run could not be resumed a second time."""
    record_resume(RunDir(tmp_path), "first.ckpt", 546, {})
    record_resume(RunDir(tmp_path), "second.ckpt", 869, {"recipe.optimizer.lr": [0.2, 0.1]})
    history = json.loads((tmp_path / "resumes.json").read_text())
    assert [entry["global_step"] for entry in history] == [546, 869]
    assert history[1] == {
        "global_step": 869,
        "checkpoint": "second.ckpt",
        "changed": {"recipe.optimizer.lr": [0.2, 0.1]},
    }


def test_an_export_given_where_a_checkpoint_is_needed_is_named_as_an_export(digits_run, tmp_path):
    """The message listed "an export directory (no config.json)" among what a checkpoint path may be, for a folder
    that held a config.json, and export and evaluate take none."""
    from alternet.runs.checkpoint_files import find_checkpoint

    with pytest.raises(CheckpointError, match=r"is an export \(model.safetensors, config.json: weights without"):
        find_checkpoint(digits_run / "export")
    with pytest.raises(CheckpointError, match=r"is neither a run directory .* nor a folder with one .ckpt file"):
        find_checkpoint(tmp_path)
    run = shutil.copytree(digits_run, tmp_path / "run", ignore=shutil.ignore_patterns("checkpoints"))
    with pytest.raises(
        CheckpointError, match=f"run directory {run} has no checkpoints/ folder .*: its export {run}/export holds"
    ):
        find_checkpoint(run)  # its checkpoints removed, to save space
    shutil.rmtree(run / "export")
    with pytest.raises(CheckpointError, match=r"has no checkpoints/ folder .*: it holds no weights to read$"):
        find_checkpoint(run)


def test_an_evaluations_or_a_sweeps_folder_given_as_a_model_is_named_as_such(tmp_path):
    """Both were refused as "run directory ... has no checkpoints/ folder" or "neither a run directory nor a folder
    with one .ckpt file", with no word of what they are or which folder to give instead."""
    from alternet.files import mark_output
    from alternet.runs.checkpoint_files import find_checkpoint

    evaluation = tmp_path / "ev"
    evaluation.mkdir()
    mark_output(evaluation, "evaluate")
    (evaluation / "metrics.json").write_text("{}")
    with pytest.raises(CheckpointError, match=rf"^{evaluation} is an evaluation's folder \(alternet evaluate's\), not"):
        find_checkpoint(evaluation)
    sweep = tmp_path / "sweep"
    for job in ("0", "1", "2"):
        (sweep / job / ".hydra").mkdir(parents=True)
        (sweep / job / ".hydra" / "overrides.yaml").write_text(f"- seed={job}\n")
    said = (
        f"{sweep} is a sweep's folder (jobs 0, 1, 2), not a run: give one job, e.g. {sweep / '0'} (alternet evaluate "
        f"takes several: ckpt=[{sweep / '0'},{sweep / '1'}])"
    )
    with pytest.raises(CheckpointError, match=f"^{re.escape(said)}$"):
        find_checkpoint(sweep)


def test_a_damaged_last_checkpoint_names_the_intact_ones_beside_it(digits_run, tmp_path, monkeypatch, capsys):
    """Resuming from a last.ckpt cut short by a full disk: the error says it is truncated and names the checkpoints
    beside it that read whole, with the ckpt_path that resumes from the newest; with none intact, it says so."""
    from alternet.runs.checkpoints import resume_checkpoint

    run = RunDir(shutil.copytree(digits_run, tmp_path / "run"))
    data = run.last_checkpoint.read_bytes()
    run.last_checkpoint.write_bytes(data[: len(data) // 3])
    intact = sorted(p.name for p in run.checkpoints.glob("*.ckpt") if p != run.last_checkpoint)
    assert intact  # the digits run keeps its best checkpoint beside last.ckpt
    with pytest.raises(CheckpointError) as refused:
        resume_checkpoint("last", run)
    message = str(refused.value)
    assert message.startswith(f"checkpoint {run.last_checkpoint} is truncated: a torch checkpoint archive cut short")
    assert f"intact beside it: {', '.join(intact)}" in message or all(name in message for name in intact)
    advised = message.rsplit("ckpt_path=", 1)[1]
    assert resume_checkpoint(advised, run) == advised  # the advice reads whole
    for other in run.checkpoints.glob("*.ckpt"):
        if other != run.last_checkpoint:
            other.write_text("damaged too")
    with pytest.raises(CheckpointError, match=f"no other checkpoint in {run.checkpoints} reads whole$"):
        resume_checkpoint("last", run)


def test_a_directory_given_as_a_checkpoint_is_named_as_one(digits_run, tmp_path):
    """ckpt_path=DIR: a run directory names its checkpoints (last.ckpt first), any other folder asks for a file;
    neither is called missing."""
    from alternet.runs.checkpoint_files import find_checkpoint
    from alternet.runs.checkpoints import resume_checkpoint

    names = ", ".join(sorted((p.name for p in RunDir(digits_run).checkpoint_files()), key=lambda n: n != "last.ckpt"))
    with pytest.raises(CheckpointError) as refused:
        resume_checkpoint(str(digits_run), RunDir(tmp_path / "new"))
    assert str(refused.value) == (
        f"checkpoint {digits_run} is a directory, not a checkpoint: pass a .ckpt, e.g. "
        f"{RunDir(digits_run).last_checkpoint} (of {names})"
    )
    with pytest.raises(CheckpointError) as refused:
        resume_checkpoint(str(tmp_path), RunDir(tmp_path / "new"))
    assert str(refused.value) == f"checkpoint {tmp_path} is a directory, not a checkpoint: pass a .ckpt file"
    with pytest.raises(CheckpointError, match=r"^ckpt_path=best names no file: give a checkpoint's path"):
        resume_checkpoint("best", RunDir(tmp_path / "new"))  # a word: said as one, not as a missing file in .
    with pytest.raises(
        CheckpointError, match=r"checkpoints holds 2 checkpoints \(best-epoch000.ckpt, last.ckpt\): pass"
    ):
        find_checkpoint(RunDir(digits_run).checkpoints)


def test_a_recipe_saved_with_null_sections_reads_as_their_off_values():
    """alternet 0.1 saved an EMA, mixup or progressive resizing that was off as null; "off" is a value inside each
    section now, and such a checkpoint reads as it (the sections it set keep their values)."""
    recipe = typed().recipe.to_dict() | {"ema": None, "mixup": None, "progressive_resize": None}
    hparams = saved_hyperparameters({"hyper_parameters": {"recipe": recipe}}, "old.ckpt")
    read = build(RecipeConfig, hparams["recipe"], "recipe.")
    assert not (read.ema.enabled or read.mixup.enabled or read.progressive_resize.enabled)
    assert read.to_dict() == typed().recipe.to_dict() | {k: hparams["recipe"][k] for k in OFF_WAS_NULL}
    kept = saved_hyperparameters(
        {"hyper_parameters": {"recipe": recipe | {"ema": {"decay": 0.9, "warmup": True}}}}, "x"
    )
    assert kept["recipe"]["ema"] == {"decay": 0.9, "warmup": True} and recipe["ema"] is None  # the caller's, untouched


def test_a_run_whose_best_checkpoint_is_truncated_names_the_intact_ones(digits_summary, tmp_path):
    """evaluate and export said "is truncated" alone; a resume named the intact checkpoints beside it."""
    copy = Path(shutil.copytree(digits_summary.run_dir, tmp_path / "copy"))
    best = copy / "checkpoints" / Path(digits_summary.best_checkpoint).name
    best.write_bytes(best.read_bytes()[: best.stat().st_size // 2])
    with pytest.raises(
        CheckpointError,
        match=r"is truncated: .*; intact beside it: last\.ckpt; pass one of them by its path instead \(the newest: ",
    ):
        open_source(copy)
