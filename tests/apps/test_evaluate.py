"""evaluate.py end to end: outputs, robustness from generated and real-layout files, and bad input."""

import csv
import itertools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from hydra import compose, initialize_config_dir
from PIL import Image
from timm.models import save_for_hf

from alternet import hub, tracking
from alternet.apps.evaluate import run_evaluate
from alternet.apps.train import train
from alternet.data import DigitsDataModule
from alternet.dataset_facts import FACTS
from alternet.errors import ConfigValueError
from alternet.evaluation.robustness import RobustnessError
from alternet.metrics import apply_temperature, calibration_metrics, fit_temperature, softmax
from alternet.metrics.uncertainty import adaptive_ece, classwise_ece, selective_metrics
from alternet.runs.results import EvaluationReport
from alternet.runs.summary import RunSummary

from helpers import (
    CONF,
    FAST,
    assert_one_line_error,
    cached_repo,
    compose_train,
    main_output,
    run_main,
    run_script,
)
from helpers.hdvw import alternet_to_hdvw, randomized, save_as_hdvw
from helpers.imagefolders import COLOURS, make_image_folder

FEW = ["robustness.max_images=24", "robustness.workers=1"]


def test_evaluate_cli_writes_every_output(digits_run, tmp_path):
    out = tmp_path / "eval"
    result = run_script(
        "evaluate.py",
        f"ckpt={digits_run}",
        "robustness.enabled=true",
        f"robustness.cache_dir={tmp_path / 'cache'}",
        "calibration.temperature_scaling=true",
        *FEW,
        f"hydra.run.dir={out}",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"robustness \(generated corruptions(, bf16)?\): mean acc", result.stdout)
    # progress in a log file: the clean pass, the generation, one line per corrupted set with its running mean
    assert "\r" not in result.stderr
    assert "test: 1/1 batches" in result.stderr and "generating 15 CIFAR-C files in" in result.stderr
    assert "generated corruptions (the first 24 images of each, robustness.max_images=24): 1/75 sets, " in result.stderr
    assert "gaussian_noise/1 acc " in result.stderr
    assert "ETA" in result.stderr and "running mean" in result.stderr
    assert "generated corruptions (the first 24 images of each, robustness.max_images=24): 75/75 sets" in result.stderr
    # the end: families, the worst conditions, the frost caveat, the files written
    assert "  per family: noise " in result.stdout and " weather " in result.stdout
    worst = next(line for line in result.stdout.splitlines() if line.startswith("  worst conditions: "))
    assert len(worst.split(": ", 1)[1].split("  ")) == 5  # the five worst conditions
    assert "generated frost uses a procedural ice texture" in result.stdout
    listed = result.stdout[result.stdout.index(f"  files in {out}:") :]
    for name in ("metrics.json", "predictions.npz", "reliability.png", "robustness_heatmap.png"):
        assert f"    {name}\n" in listed
    for name in (
        "metrics.json",
        "predictions.npz",
        "reliability.png",
        "reliability_temperature.png",
        "robustness_table.csv",
        "robustness_accuracy.csv",
        "robustness_heatmap.png",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    report = json.loads((out / "metrics.json").read_text())
    predictions = np.load(out / "predictions.npz")
    assert_recomputes_from_predictions(report, predictions)
    robustness = report["robustness"]
    assert robustness["source"] == "generated" and len(robustness["table"]) == 75
    scaled = report["temperature_scaling"]
    assert scaled["temperature"] > 0 and scaled["test"]["acc"] == pytest.approx(report["test"]["acc"])
    with open(out / "robustness_accuracy.csv") as f:
        assert len(list(csv.reader(f))) == 1 + 15 + 1  # header, corruptions, mean


def _same(saved, value) -> bool:
    """A metrics.json number and its recomputation: equal to the last bit (JSON keeps a float's every digit); a
    NaN (acc90 with no confident prediction) is saved as null."""
    return saved is None if np.isnan(value) else saved == value


def assert_recomputes_from_predictions(report: dict, predictions) -> None:
    """Every number of metrics.json recomputes exactly from predictions.npz: the test split's and the selective
    ones from its logits (softmax in float64, as the evaluation computes), the temperature from the validation
    logits, each corrupted set's accuracy, NLL and ECE from its columns."""
    logits, labels = predictions["logits"], predictions["labels"]
    probs = softmax(logits)
    test = calibration_metrics(probs, labels, 10, logits=logits)
    test |= {"ece_adaptive": adaptive_ece(probs, labels, 10), "ece_classwise": classwise_ece(probs, labels, 10)}
    assert {k: _same(report["test"][k], v) for k, v in test.items()} == dict.fromkeys(test, True), report["test"]
    selective = selective_metrics(probs, labels)
    assert {k: _same(report["selective"][k], v) for k, v in selective.items()} == dict.fromkeys(selective, True)
    if "temperature_scaling" in report:
        temperature = fit_temperature(predictions["val/logits"], predictions["val/labels"])
        assert report["temperature_scaling"]["temperature"] == temperature
        divided = logits.astype(np.float64) / temperature  # in float64, as apply_temperature divides
        scaled = calibration_metrics(apply_temperature(logits, temperature), labels, 10, logits=divided)
        recorded = report["temperature_scaling"]["test"]
        assert {k: _same(recorded[k], v) for k, v in scaled.items()} == dict.fromkeys(scaled, True), recorded
    for row in (report.get("robustness") or {}).get("table", []):
        key = f"corrupted/{row['corruption']}/{row['severity']}"
        confidence = predictions[f"{key}/confidence"]
        correct = predictions[f"{key}/pred"] == predictions[f"{key}/labels"]
        assert row["acc"] == correct.mean() and row["nll"] == predictions[f"{key}/nll"].mean(), key
        index = np.clip(np.searchsorted(np.arange(11) / 10, confidence, side="left") - 1, 0, 9)
        gaps = [abs(correct[index == b].sum() - confidence[index == b].sum()) for b in range(10)]
        assert row["ece"] == pytest.approx(sum(gaps) / len(confidence), rel=1e-12, abs=1e-15), key


def evaluate_in_process(*overrides: str, out) -> list[EvaluationReport]:
    """evaluate.py's work without a fresh interpreter (the CLI itself is tested above)."""
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return run_evaluate(compose("evaluate", overrides=[*overrides, f"paths.output_dir={out}"]))


def test_generated_corruptions_are_cached(digits_run, tmp_path):
    args = [f"ckpt={digits_run}", "robustness.enabled=true", f"robustness.cache_dir={tmp_path / 'cache'}", *FEW]
    args.append("robustness.corruptions=[fog,contrast]")  # caching is per file: two of the fifteen show it
    evaluate_in_process(*args, out=tmp_path / "a")
    cached = sorted((tmp_path / "cache").rglob("*.npy"))
    stamps = [p.stat().st_mtime_ns for p in cached]
    evaluate_in_process(*args, out=tmp_path / "b")
    assert [p.stat().st_mtime_ns for p in cached] == stamps
    a, b = (json.loads((tmp_path / d / "metrics.json").read_text())["robustness"] for d in "ab")
    assert a["summary"]["robustness"] == b["summary"]["robustness"]


def test_real_cifar_c_layout_is_evaluated_as_real(digits_run, tmp_path, monkeypatch, capsys):
    from alternet.data import DigitsDataModule
    from alternet.data.corrupted.names import CORRUPTIONS

    test = DigitsDataModule(image_size=16, batch_size=8)
    test.setup()
    images, labels = test.splits["test"].images[:10], test.splits["test"].labels[:10]
    root = tmp_path / "DIGITS-C"
    root.mkdir()
    for name in CORRUPTIONS:  # Hendrycks' layout: 5 severities stacked, no manifest
        np.save(root / f"{name}.npy", np.concatenate([images] * 5))
    np.save(root / "labels.npy", np.concatenate([labels] * 5))
    out = tmp_path / "eval"
    args = [f"ckpt={digits_run}", f"robustness.root={root}"]
    code, stderr = run_main(
        "evaluate.py", [*args, "robustness.max_images=10", f"hydra.run.dir={out}"], monkeypatch, capsys
    )
    assert code == "0", stderr[-2000:]
    report = json.loads((out / "metrics.json").read_text())
    assert report["robustness"]["source"] == "real"
    # files that are not this test split's (here: 10 images, not the 360 of digits' test split) are refused
    code, _ = run_main("evaluate.py", [*args, f"hydra.run.dir={tmp_path / 'refused'}"], monkeypatch, capsys)
    assert code.startswith("error: ") and "\n" not in code
    assert "does not corrupt this model's digits test split: 10 images per severity, the test split has 360" in code
    accuracies = {r["acc"] for r in report["robustness"]["table"]}  # identical images: identical accuracy
    assert len(accuracies) == 1


def test_several_checkpoints_and_a_baseline(digits_run, tmp_path, capsys):
    first = tmp_path / "first"
    evaluate_in_process(
        f"ckpt={digits_run}", "robustness.enabled=true", *FEW, f"robustness.cache_dir={tmp_path / 'cache'}", out=first
    )
    last = digits_run / "checkpoints" / "last.ckpt"
    out = tmp_path / "both"
    capsys.readouterr()
    evaluate_in_process(  # in this process: what evaluate.py prints is run_evaluate's (the CLI: the first test)
        f"ckpt=[{digits_run},{last}]",
        "robustness.enabled=true",
        *FEW,
        f"robustness.cache_dir={tmp_path / 'cache'}",
        f"robustness.baseline={first / 'metrics.json'}",
        out=out,
    )
    assert "mCE 100.0%" in capsys.readouterr().out  # the best checkpoint against itself
    with open(out / "comparison.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 and {row["data"] for row in rows} == {"digits"}  # the data set each was scored on
    assert [row["folder"] for row in rows] == [f"0-{digits_run.name}", f"1-{digits_run.name}"]
    # the whole grid of conditions, of the first 24 test images each (FEW): not the whole benchmark
    complete = {(row["robustness_conditions"], row["robustness_images"], row["robustness_complete"]) for row in rows}
    assert complete == {("75", "24", "False")}
    assert {(row["ema"], row["test_flip"]) for row in rows} == {("False", "False")}
    assert {row["test_images"] for row in rows} == {"360"} and all(float(row["aurc"]) >= 0 for row in rows)


def test_truncated_checkpoint_is_named(digits_run, tmp_path, monkeypatch, capsys):
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes((digits_run / "checkpoints" / "last.ckpt").read_bytes()[:5000])
    code, stderr = run_main("evaluate.py", [f"ckpt={broken}", f"hydra.run.dir={tmp_path / 'out'}"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, f"checkpoint {broken} is truncated: a torch checkpoint archive cut short (5000")


def test_temperature_scaling_without_a_validation_split_is_refused_before_any_work(
    digits_run, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    args = [f"ckpt={digits_run}", "data=digits", "data.val_size=0", "calibration.temperature_scaling=true"]
    code, stderr = run_main("evaluate.py", [*args, f"out_dir={out}"], monkeypatch, capsys)  # the command line's
    assert_one_line_error(code, stderr, "calibration.temperature_scaling=true needs a validation split")  # val_size
    assert not any(out.rglob("*.png"))  # nothing scored, nothing plotted


def test_data_naming_the_runs_own_data_set_keeps_its_validation_split(tmp_path, monkeypatch, capsys):
    """``data=digits`` for a run trained on digits with its own hold-out: the temperature is fitted on the run's
    validation images (the group's default hold-out would take images it trained on); one set on the command line
    is used, and said."""
    monkeypatch.chdir(tmp_path)
    trained = train(compose_train(*FAST, "data.val_size=100", "data.split_seed=3", output_dir=tmp_path / "run"))
    run = trained.run_dir
    scaled = [f"ckpt={run}", "data=digits", "calibration.temperature_scaling=true", "robustness.enabled=false"]
    code, stderr = run_main("evaluate.py", [*scaled, f"out_dir={tmp_path / 'kept'}"], monkeypatch, capsys)
    assert code == "0" and "trained with" not in stderr, stderr[-2000:]
    held_out = np.load(tmp_path / "kept" / "predictions.npz")["val/labels"]
    assert len(held_out) == 100
    code, stderr = run_main(
        "evaluate.py", [*scaled, "data.val_size=500", f"out_dir={tmp_path / 'other'}"], monkeypatch, capsys
    )
    assert code == "0" and "data.val_size=500 (trained with 100): the temperature is fitted" in stderr
    assert len(np.load(tmp_path / "other" / "predictions.npz")["val/labels"]) == 500
    export = hub.export(run, tmp_path / "export")  # the export records the hold-out, and is scored with it
    code, stderr = run_main(
        "evaluate.py", [*scaled[2:], f"ckpt={export}", f"out_dir={tmp_path / 'x'}"], monkeypatch, capsys
    )
    assert code == "0" and "does not record" not in stderr, stderr[-2000:]
    np.testing.assert_array_equal(np.load(tmp_path / "x" / "predictions.npz")["val/labels"], held_out)
    bare = shutil.copy(trained.tested_checkpoint, tmp_path / "bare.ckpt")  # no run beside it: no split recorded
    code, stderr = run_main(
        "evaluate.py", [*scaled[2:], f"ckpt={bare}", f"out_dir={tmp_path / 'bare'}"], monkeypatch, capsys
    )
    assert code == "0" and f"data.val_size=180, data.split_seed=0 ({bare} does not record its split)" in stderr


def test_data_root_for_a_bundled_data_set_is_said_to_be_unused(digits_run, tmp_path, monkeypatch, capsys):
    arguments = [f"ckpt={digits_run}", "data_root=/nonexistent", "max_images=20", f"out_dir={tmp_path / 'out'}"]
    code, stderr = run_main("evaluate.py", [*arguments, "robustness.enabled=false"], monkeypatch, capsys)
    assert code == "0" and "data=digits reads no files of its own: data.root=/nonexistent is not used" in stderr


def test_use_ema_scores_the_ema_weights_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the tests' WANDB_MODE=disabled switches W&B off
    run = train(compose_train(*FAST, "recipe.ema.decay=0.9", output_dir=tmp_path / "run")).run_dir
    arguments = [f"ckpt={run}", "use_ema=true", "robustness.enabled=false", f"out_dir={tmp_path / 'out'}"]
    started = []  # the W&B run's name: apart from an evaluation of the raw weights
    real_start = tracking.start_evaluation_run
    monkeypatch.setattr(tracking, "start_evaluation_run", lambda *a, **k: started.append(a[1]) or real_start(*a, **k))
    code, stdout, stderr = main_output("evaluate.py", [*arguments, "logger=wandb"], monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    assert "(its EMA weights)" in next(line for line in stdout.splitlines() if line.startswith("Evaluating"))
    assert f"alternet_tiny on digits ({run}/checkpoints/" in stdout and ", its EMA weights)" in stdout
    assert started == [f"eval-alternet_tiny-{Path(run).name}-ema"]
    assert EvaluationReport.from_json(tmp_path / "out" / "metrics.json").ema is True
    exported = hub.export(run, tmp_path / "export", ema=True)  # its weights are the EMA's: no use_ema needed, or taken
    (report,) = evaluate_in_process(f"ckpt={exported}", "robustness.enabled=false", out=tmp_path / "export-eval")
    expected = EvaluationReport.from_json(tmp_path / "out" / "metrics.json").test
    assert report.ema is True and (report.test["acc"], report.test["nll"]) == (expected["acc"], expected["nll"])


def test_a_run_still_training_is_scored_with_a_warning(digits_run, tmp_path):
    """Its best checkpoint so far may be replaced: scored, and said (the run's lock, asked without changing it)."""
    from alternet.runs.directories import RunDir

    run = shutil.copytree(digits_run, tmp_path / "run")  # the shared run's own lock file stays as it is
    holding = "import sys, time; from pathlib import Path; from alternet.files import lock_file\n"
    holding += "held = lock_file(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
    lock = RunDir(run).lock
    holder = subprocess.Popen([sys.executable, "-c", holding, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.warns(UserWarning, match=r"is still training \(pid \d+ on .*\): .*best-epoch\d+\.ckpt is its"):
            evaluate_in_process(f"ckpt={run}", "robustness.enabled=false", out=tmp_path / "out")
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / "out" / "metrics.json").is_file()


def _files(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != ".lock"}


def test_a_new_evaluation_replaces_the_earlier_one_whole_and_a_stopped_one_changes_nothing(
    digits_run, tmp_path, monkeypatch
):
    """An evaluation into a folder of an earlier one: stopped mid-way (plots written, not its predictions), the
    earlier files are as they were and nothing of the new one is left; finished, its files replace the earlier
    ones whole (an earlier comparison of two models is gone, not left beside one model's scores), the user's own
    file stays, and metrics.json names the files where they are."""
    from alternet.evaluation import evaluator

    out, few = tmp_path / "scores", "robustness.enabled=false"
    evaluate_in_process(f"ckpt=[{digits_run},{digits_run / 'checkpoints' / 'last.ckpt'}]", few, out=out)
    (out / "notes.txt").write_text("mine\n")
    before = _files(out)
    assert "comparison.csv" in before and any(name.startswith("0-") for name in before)
    model = next(p for p in out.iterdir() if p.name.startswith("0-"))
    (model / "mine.txt").write_text("mine too\n")  # inside a model's folder, which is replaced whole: refused
    with pytest.raises(ConfigValueError, match=rf"^{model} holds files that are not an evaluation's \(mine.txt\)"):
        evaluate_in_process(f"ckpt={digits_run}", few, out=out)
    (model / "mine.txt").unlink()
    assert _files(out) == before

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(evaluator, "write_npz", stopped)
        evaluate_in_process(f"ckpt={digits_run}", few, out=out)
    assert _files(out) == before and not [p for p in out.iterdir() if p.name.startswith(".products.")]
    evaluate_in_process(f"ckpt={digits_run}", few, out=out)
    names = {p.name for p in out.iterdir()}
    assert {"metrics.json", "predictions.npz", "reliability.png", "notes.txt"} <= names
    assert "comparison.csv" not in names and not [n for n in names if n.startswith(("0-", "1-", ".products."))]
    report = EvaluationReport.from_json(out / "metrics.json")
    assert report.files and all(Path(f).parent == out and Path(f).is_file() for f in report.files)


def test_evaluation_after_training_joins_the_run(digits_run, digits_summary):
    summary = digits_summary  # trained with evaluate.after_training=true
    assert summary.calibration["acc"] == pytest.approx(summary.test["acc"], abs=1e-6)
    assert (digits_run / "eval" / "reliability.png").is_file()
    files = EvaluationReport.from_json(digits_run / "eval" / "metrics.json").files  # named where they are
    assert files and all(Path(f).parent == digits_run / "eval" and Path(f).is_file() for f in files)
    assert json.loads((digits_run / "metrics.json").read_text())["calibration"]["brier"] >= 0


def test_evaluate_runs_analyses_with_budgets_from_the_command_line(digits_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "eval"
    arguments = [f"ckpt={digits_run}", "analysis=[fourier,lesion,attention]", "analysis.fourier.images=32"]
    arguments += ["analysis.lesion.images=64", f"hydra.run.dir={out}"]
    code, stderr = run_main("evaluate.py", arguments, monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    report = json.loads((out / "metrics.json").read_text())
    assert set(report["analysis"]) == {"fourier", "lesion", "attention"}
    for name in ("fourier.csv", "lesion.csv", "attention.csv", "lesion.png"):
        assert (out / "analysis" / name).is_file(), name
    overrides = ["analysis=fourier", "analysis.fourier.images=-1", f"hydra.run.dir={tmp_path / 'x'}"]
    code, stderr = run_main("evaluate.py", [f"ckpt={digits_run}", *overrides], monkeypatch, capsys)  # in this process
    assert "error: analysis.fourier.images=-1 is invalid: must be >= 1" in code + stderr
    assert not (tmp_path / "x" / "metrics.json").exists()  # rejected before any evaluation


def test_test_flip_predicts_alike_in_training_and_in_evaluate(tmp_path):
    """recipe.test_flip averages the logits of each test image and its mirror: the same seeded weights score
    differently with it, and evaluate.py and the evaluation after training reproduce the run's flipped test numbers."""
    fp32 = ["trainer.max_epochs=2", "trainer.precision=32-true"]  # evaluate.py scores at precision 32, as this
    fp32 += ["recipe.batch_size=64"]  # weights far enough from a uniform guess that a mirror image changes the NLL
    fp32 += ["trainer.limit_test_batches=1.0"]  # the whole test split, as evaluate.py scores it
    plain = train(compose_train(*FAST, *fp32, output_dir=tmp_path / "plain"))
    flip = ["recipe.test_flip=true", "evaluate.after_training=true"]
    flipped = train(compose_train(*FAST, *fp32, *flip, output_dir=tmp_path / "flip"))
    assert flipped.test["nll"] != pytest.approx(plain.test["nll"], rel=1e-4)
    assert flipped.test_flip and not plain.test_flip  # recorded beside the numbers it changes
    assert flipped.calibration["nll"] == pytest.approx(flipped.test["nll"], rel=1e-5)  # after training too
    (report,) = evaluate_in_process(f"ckpt={tmp_path / 'flip'}", out=tmp_path / "eval")
    assert report.test_flip is True
    assert report.test["nll"] == pytest.approx(flipped.test["nll"], rel=1e-5)
    assert report.test["acc"] == pytest.approx(flipped.test["acc"], abs=1e-6)
    (one_view,) = evaluate_in_process(f"ckpt={tmp_path / 'flip'}", "test_flip=false", out=tmp_path / "one")
    assert not one_view.test_flip and one_view.test["nll"] != pytest.approx(report.test["nll"], rel=1e-4)
    (averaged,) = evaluate_in_process(f"ckpt={tmp_path / 'plain'}", "test_flip=true", out=tmp_path / "two")
    assert averaged.test_flip and averaged.test["nll"] != pytest.approx(plain.test["nll"], rel=1e-4)


def test_a_data_set_of_other_class_names_warns_and_the_same_ones_in_another_order_are_refused(tmp_path):
    """Only the class count was compared: a folder of cat/dog scored a model trained on a/b by position, silently."""
    from PIL import Image

    from alternet.apps.evaluate import check_class_names
    from alternet.data import ImageFolderDataModule
    from alternet.errors import AlternetWarning, CheckpointError

    for name in ("cat", "dog"):
        (tmp_path / "train" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "train" / name / "0.png")
    data = ImageFolderDataModule(root=str(tmp_path), image_size=8, batch_size=1)
    check_class_names(["cat", "dog"], data, "x.ckpt")
    with pytest.warns(AlternetWarning, match="label 0 is 'a' in x.ckpt but 'cat' in data=imagefolder"):
        check_class_names(["a", "b"], data, "x.ckpt")
    with pytest.raises(CheckpointError, match="the data's classes are the model's in another order"):
        check_class_names(["dog", "cat"], data, "x.ckpt")
    with pytest.warns(AlternetWarning, match="label 1 is 'cow'"):  # a class renamed in place: scored by position
        check_class_names(["cat", "cow"], data, "x.ckpt")
    with pytest.raises(CheckpointError, match=r"; 'dog' is label 0 for the model, 1 in the data\): its images would"):
        check_class_names(["dog", "ant"], data, "x.ckpt")  # a shared name at another label: never by position


# any model: every source alternet.hub.load reads ---------------------------------------------------


def direct_predictions(model: torch.nn.Module, batches: int | None = None, **data) -> np.ndarray:
    """The test split's class probabilities (its first ``batches`` of 64), computed here without the evaluator."""
    datamodule = DigitsDataModule(num_workers=0, batch_size=64, **data)
    datamodule.setup()
    loader = itertools.islice(datamodule.test_dataloader(), batches)
    with torch.no_grad():
        return np.concatenate([model.eval()(x).softmax(1).numpy() for x, _ in loader])


def scored_predictions(out) -> np.ndarray:
    return np.load(out / "predictions.npz")["probs"]


def test_an_export_is_scored_as_its_checkpoint(digits_run, tmp_path):
    export = hub.export(digits_run, tmp_path / "export")
    from_export = evaluate_in_process(f"ckpt={export}", out=tmp_path / "a")[0]
    from_run = evaluate_in_process(f"ckpt={digits_run}", out=tmp_path / "b")[0]
    assert from_export.source == str(export) and from_export.model == from_run.model
    assert {k: from_export.test[k] for k in ("acc", "nll")} == {k: from_run.test[k] for k in ("acc", "nll")}
    np.testing.assert_array_equal(scored_predictions(tmp_path / "a"), scored_predictions(tmp_path / "b"))


def test_an_hdvw_checkpoint_is_scored_with_its_own_preprocessing(tmp_path):
    """HDVW's AlterNet-18 with ten classes is a CIFAR-10 model: on digits it gets CIFAR-10's 32 px and statistics."""
    model = randomized("alternet_r18", num_classes=10)
    file = save_as_hdvw(tmp_path / "alternet_18_cifar10.pth.tar", "alternet_18", alternet_to_hdvw(model))
    report = evaluate_in_process(f"ckpt=hdvw:{file}", "data=digits", "max_images=64", out=tmp_path / "eval")[0]
    assert report.model == "alternet_r18" and report.source == f"hdvw:{file}"
    cifar10 = FACTS["cifar10"]
    # the first 64 images (max_images): the preprocessing shows in every row, and AlterNet-18 is slow on a CPU core
    expected = direct_predictions(model, 1, image_size=32, mean=list(cifar10.mean), std=list(cifar10.std))
    np.testing.assert_allclose(scored_predictions(tmp_path / "eval")[:64], expected, atol=1e-5)


def test_a_timm_save_is_scored_with_the_preprocessing_it_records_unless_the_command_line_sets_it(
    tmp_path, monkeypatch, capsys
):
    torch.manual_seed(0)
    preprocessing = {"input_size": (3, 24, 24), "mean": (0.4, 0.4, 0.4), "std": (0.3, 0.3, 0.3), "crop_pct": 1.0}
    model = timm.create_model("test_resnet", num_classes=10, pretrained_cfg_overlay=preprocessing).eval()
    saved = tmp_path / "saved"
    save_for_hf(model, saved)  # timm's default: pytorch_model.bin, read with weights_only=True
    assert sorted(p.name for p in saved.iterdir()) == ["config.json", "pytorch_model.bin"]
    report = evaluate_in_process(f"ckpt=local-dir:{saved}", "data=digits", out=tmp_path / "own")[0]
    assert report.model == "test_resnet"
    own = direct_predictions(model, image_size=24, mean=[0.4] * 3, std=[0.3] * 3)
    np.testing.assert_allclose(scored_predictions(tmp_path / "own"), own, atol=1e-5)

    out = tmp_path / "set"
    args = [f"ckpt=local-dir:{saved}", "data=digits", "data.image_size=16", f"hydra.run.dir={out}"]
    code, stderr = run_main("evaluate.py", args, monkeypatch, capsys)
    assert code == "0" and "expects data.image_size=24 but is evaluated with 16" in stderr
    set_here = direct_predictions(model, image_size=16, mean=[0.4] * 3, std=[0.3] * 3)
    np.testing.assert_allclose(scored_predictions(out), set_here, atol=1e-5)


def test_a_hub_model_gets_imagenet_c_and_mce_on_an_image_folder(hub_cache, tmp_path):
    """A model alternet did not train, from the Hugging Face cache offline, on class folders with ImageNet-C files
    of the same classes: scored clean and corrupted, with mCE against AlexNet."""
    torch.manual_seed(0)
    model = timm.create_model("test_resnet", num_classes=3, pretrained_cfg_overlay={"input_size": (3, 16, 16)})
    save_for_hf(
        model,
        cached_repo(hub_cache, "someone/tiny"),
        safe_serialization=True,
        model_config={"label_names": sorted(COLOURS)},
    )
    folder = make_image_folder(tmp_path / "images", splits={"train": 2, "test": 4}, odd_formats=False, size=20)
    tree = write_imagenet_c(tmp_path / "ImageNet-C", sorted(COLOURS), corruptions=["fog"])
    report = evaluate_in_process(
        "ckpt=hf-hub:someone/tiny",
        "data=imagefolder",
        f"data.root={folder}",
        "data.num_workers=0",
        f"robustness.root={tree}",
        "robustness.corruptions=[fog]",
        "robustness.baseline=alexnet",
        out=tmp_path / "eval",
    )[0]
    assert report.model == "test_resnet" and report.data == "imagefolder"
    used = report.preprocessing  # the model's, as timm's validate.py resolves it, recorded in metrics.json
    assert {k: used[k] for k in ("image_size", "crop_pct", "crop_mode")} == {
        "image_size": 16,
        "crop_pct": 0.95,  # test_resnet's own
        "crop_mode": "center",
    }
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["preprocessing"] == used
    robustness = report.robustness
    assert robustness.images.layout == "imagenet-c" and robustness.source == "real"
    assert [row.n for row in robustness.table] == [3] * 5
    assert robustness.summary.mce is not None


def write_imagenet_c(root, classes, corruptions, per_class=1):
    """<root>/<corruption>/<severity>/<class>/<i>.JPEG, 16 px: the model's input, as ImageNet-C's 224 px are a
    224-px model's."""
    rng = np.random.default_rng(0)
    for corruption in corruptions:
        for severity in range(1, 6):
            for name in classes:
                folder = root / corruption / str(severity) / name
                folder.mkdir(parents=True)
                for i in range(per_class):
                    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(folder / f"{i}.JPEG")
    return root


def test_a_source_that_names_nothing_is_one_line_listing_what_is_accepted(tmp_path, monkeypatch, capsys):
    for source, says in [
        (tmp_path / "missing", "does not exist: expected a run directory, a checkpoint (.ckpt), an export directory"),
        ("timm:resnet50.nope", "timm:resnet50.nope: Invalid pretrained tag (nope) for resnet50."),
        ("timm:alternet_tiny", "timm:alternet_tiny: timm has no pretrained weights for 'alternet_tiny'"),
        ("timm:resnet5O", "unknown model 'resnet5O'"),
        ("hf-hub:tiny", "hf-hub:tiny names no repository: expected hf-hub:OWNER/REPO[@REVISION]"),
        (f"local-dir:{tmp_path}", "has no config.json: expected a folder as timm's save_for_hf"),
    ]:
        code, stderr = run_main(
            "evaluate.py", [f"ckpt={source}", f"hydra.run.dir={tmp_path / 'out'}"], monkeypatch, capsys
        )
        assert_one_line_error(code, stderr, says)
        assert not (tmp_path / "out").exists()


def test_a_list_with_a_file_that_is_no_checkpoint_is_refused_before_the_first_model_is_scored(
    digits_run, tmp_path, monkeypatch, capsys
):
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    arguments = [f"ckpt=[{digits_run},{tmp_path / 'notes.ckpt'}]", f"hydra.run.dir={tmp_path / 'out'}"]
    code, stdout, stderr = main_output("evaluate.py", arguments, monkeypatch, capsys)
    assert_one_line_error(code, stderr, "notes.ckpt is not a torch checkpoint: it does not begin as torch.save's")
    assert "Evaluating" not in stdout and not (tmp_path / "out").exists()


def test_a_model_that_records_no_data_set_asks_for_one(hub_cache, tmp_path, monkeypatch, capsys):
    model = timm.create_model("test_resnet", num_classes=3)
    save_for_hf(model, cached_repo(hub_cache, "someone/tiny"), safe_serialization=True)
    args = ["ckpt=hf-hub:someone/tiny", f"hydra.run.dir={tmp_path / 'out'}"]
    code, stderr = run_main("evaluate.py", args, monkeypatch, capsys)
    assert_one_line_error(code, stderr, "hf-hub:someone/tiny does not say which data set it was trained on")


def test_a_lone_checkpoint_of_a_users_data_set_asks_for_the_module_that_registers_it(
    digits_run, tmp_path, monkeypatch, capsys
):
    """It said the checkpoint did not say its data set ("it records 'blobs'"), and offered alternet's alone."""
    checkpoint = torch.load(digits_run / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["data"]["name"] = "blobs"  # as a run on a user's registered data set saves it
    torch.save(checkpoint, tmp_path / "lone.ckpt")
    args = [f"ckpt={tmp_path / 'lone.ckpt'}", f"hydra.run.dir={tmp_path / 'out'}"]
    code, stderr = run_main("evaluate.py", args, monkeypatch, capsys)
    assert_one_line_error(code, stderr, "was trained on 'blobs', which no imported module registers: give the module")


def test_the_analyses_take_a_timm_model_and_ask_for_its_recipe_where_they_measure_the_training_loss(
    tmp_path, monkeypatch, capsys
):
    torch.manual_seed(0)
    saved = tmp_path / "saved"
    save_for_hf(timm.create_model("test_vit", num_classes=10, img_size=16), saved, model_args={"img_size": 16})
    hessian = ["analysis.hessian.images=8", "analysis.hessian.k=1", "analysis.hessian.iterations=2"]
    budgets = ["analysis.attention.images=8", *hessian, "analysis.hessian.minibatches=0"]
    args = [f"ckpt=local-dir:{saved}", "data=digits", "analysis=[attention,hessian]", *budgets]
    code, stderr = run_main("evaluate.py", [*args, f"hydra.run.dir={tmp_path / 'no-recipe'}"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, "analysis=hessian measures the training objective", "recipe=imagenet")
    assert not (tmp_path / "no-recipe").exists()
    code, _ = run_main(
        "evaluate.py", [*args, "recipe=digits", f"hydra.run.dir={tmp_path / 'out'}"], monkeypatch, capsys
    )
    analysis = json.loads((tmp_path / "out" / "metrics.json").read_text())["analysis"]
    assert code == "0" and set(analysis) == {"attention", "hessian"}


def test_out_dir_holds_the_whole_evaluation_and_takes_one_writer(digits_run, tmp_path, monkeypatch, capsys):
    """``out_dir=DIR`` is the evaluation's directory: its scores and its records (.hydra/, evaluate.log) go there
    and nothing under ./outputs/; a second evaluation into it while the first holds it stops in one line and
    changes nothing."""
    from alternet.runs.directories import RunDir
    from alternet.runs.ownership import RunDirLock

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "scores"
    arguments = [f"ckpt={digits_run}", f"out_dir={out}", "robustness.enabled=false"]
    code, stderr = run_main("evaluate.py", arguments, monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    assert not (tmp_path / "outputs").exists()
    assert {"metrics.json", "predictions.npz", ".hydra", "evaluate.log"} <= {p.name for p in out.iterdir()}
    RunDirLock.held(RunDir(out)).release()  # as the command's end does (it is a process of its own)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    holding = "import sys, time; from pathlib import Path; from alternet.files import lock_file\n"
    holding += "held = lock_file(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", holding, str(RunDir(out).lock)], stdout=subprocess.PIPE, text=True)
    try:  # another evaluation into it holds it while it scores
        assert holder.stdout.readline().strip() == "held"
        code, stderr = run_main("evaluate.py", arguments, monkeypatch, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert_one_line_error(code, stderr, str(out))
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == {
        p: t for p, t in before.items() if p.name != ".lock"
    }
    holder = subprocess.Popen([sys.executable, "-c", holding, str(RunDir(out).lock)], stdout=subprocess.PIPE, text=True)
    try:  # the output named as paths.output_dir, Hydra's records elsewhere: the same one writer
        assert holder.stdout.readline().strip() == "held"
        elsewhere = [arguments[0], f"paths.output_dir={out}", f"hydra.run.dir={tmp_path / 'records'}", arguments[2]]
        code, stderr = run_main("evaluate.py", elsewhere, monkeypatch, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert_one_line_error(code, stderr, f"evaluation output {out} is being written by another evaluation")
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".lock"} == {
        p: t for p, t in before.items() if p.name != ".lock"
    }


def test_max_images_scores_the_first_test_images_and_says_so(digits_run, tmp_path, monkeypatch, capsys):
    """A quick look: the first N test images, every number from them (the corrupted sets' too), said in the
    printout and in metrics.json; a robustness subset larger than it is refused before any work."""
    arguments = [f"ckpt={digits_run}", "max_images=40", "robustness.enabled=true", *FEW[1:]]
    arguments += [f"robustness.cache_dir={tmp_path / 'cache'}", "robustness.corruptions=[fog]"]
    code, stdout, stderr = main_output("evaluate.py", [*arguments, f"out_dir={tmp_path / 'a'}"], monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    report = json.loads((tmp_path / "a" / "metrics.json").read_text())
    total = report["test_images"]["of"]
    assert report["test_images"] == {"scored": 40, "of": total} and total > 40
    assert f"a quick look: the first 40 of {total} test images (max_images)" in stdout
    predictions = np.load(tmp_path / "a" / "predictions.npz")
    assert len(predictions["labels"]) == 40 and len(predictions["corrupted/fog/1/labels"]) == 40
    assert_recomputes_from_predictions(report, predictions)
    code, stderr = run_main("evaluate.py", [*arguments, "robustness.max_images=41"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, "robustness.max_images=41 is more than max_images=40")


@pytest.mark.parametrize(
    ("analysis", "says"),
    [
        (
            ["analysis=[noise]", "analysis.noise.bands=rings", "analysis.noise.rings=40"],
            "the frequency band [0.025, 0.050]π holds no FFT bin of a 16x16 image; use larger images",
        ),
        (
            ["analysis=[landscape]", "analysis.landscape.images=5", "analysis.landscape.batch_size=4"],
            "analysis 'landscape': the recipe's mixup pairs images within a batch, so every batch needs an even size "
            "(got 1)",
        ),
        (
            ["analysis=[hessian]", "analysis.hessian.images=6", "analysis.hessian.batch_size=3"],
            "analysis 'hessian': the recipe's mixup pairs images within a batch, so every batch needs an even size "
            "(got 3)",
        ),
    ],
)
def test_an_analysis_the_data_rules_out_is_refused_before_anything_is_scored(
    analysis, says, digits_mixup_run, tmp_path, monkeypatch, capsys
):
    """What an analysis would find only when it runs, after the test split was scored: a noise band without a
    frequency of the test images' size, a mixed objective's odd batch."""
    out = tmp_path / "out"
    arguments = [f"ckpt={digits_mixup_run}", *analysis, f"out_dir={out}"]
    code, stdout, stderr = main_output("evaluate.py", arguments, monkeypatch, capsys)
    assert_one_line_error(code, stderr, says)
    assert "Evaluating" not in stdout and not out.exists()


@pytest.fixture(scope="module")
def digits_mixup_run(tmp_path_factory):
    """A digits run trained with mixup: its objective's batches are mixed in pairs."""
    out = tmp_path_factory.mktemp("mixup") / "run"
    return train(compose_train(*FAST, "recipe.mixup.mixup_alpha=0.2", output_dir=out)).run_dir


def test_the_root_of_a_checkpoints_own_data_is_asked_for_as_data_root(digits_run, tmp_path, monkeypatch, capsys):
    """An export of a model trained on image folders records no root: the message said data.root, which evaluate
    then refuses for the checkpoint's own data (data.X sets a chosen data=NAME's keys)."""
    export = tmp_path / "export"
    shutil.copytree(digits_run / "export", export)
    config = json.loads((export / "config.json").read_text())
    config["alternet"]["data"]["name"] = "imagefolder"
    (export / "config.json").write_text(json.dumps(config))
    code, stderr = run_main("evaluate.py", [f"ckpt={export}", f"out_dir={tmp_path / 'out'}"], monkeypatch, capsys)
    assert_one_line_error(code, stderr, "data_root must be set: e.g. alternet evaluate data_root=...")


def test_class_folders_named_in_another_unicode_normalisation_are_said_to_be(tmp_path):
    """macOS writes decomposed names (NFD): the same names sort in another order, and the refusal said to give the
    folders the model's names, which they print as already."""
    import unicodedata

    from PIL import Image

    from alternet.apps.evaluate import check_class_names
    from alternet.data import ImageFolderDataModule
    from alternet.errors import CheckpointError

    names = ["chat_noir", "Ünïcødé"]
    for name in names:
        (tmp_path / "train" / unicodedata.normalize("NFD", name)).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "train" / unicodedata.normalize("NFD", name) / "0.png")
    data = ImageFolderDataModule(root=str(tmp_path), image_size=8, batch_size=1)
    with pytest.raises(CheckpointError, match=r"written in another Unicode normalisation .* composed names \(NFC"):
        check_class_names(sorted(names), data, "x.ckpt")


def test_an_evaluation_that_does_not_end_leaves_the_earlier_ones_records(digits_run, tmp_path, monkeypatch, capsys):
    """Hydra rewrote .hydra/ as the refused command started: the folder's records named a command that wrote none
    of its files."""
    out = tmp_path / "eval"
    args = [f"ckpt={digits_run}", "max_images=16", "robustness.enabled=false", f"out_dir={out}"]
    code, _ = run_main("evaluate.py", args, monkeypatch, capsys)
    assert code == "0"
    records = {path.name: path.read_text() for path in (out / ".hydra").iterdir()}
    code, stderr = run_main(
        "evaluate.py", [f"ckpt={tmp_path / 'missing.ckpt'}", "max_images=9", f"out_dir={out}"], monkeypatch, capsys
    )
    assert_one_line_error(code, stderr, "missing.ckpt does not exist")
    assert {path.name: path.read_text() for path in (out / ".hydra").iterdir()} == records


def test_a_loose_checkpoints_folder_among_several_is_named_after_it(digits_run, tmp_path):
    """Its folder's parent named it (``0-tmp``, ``1-tmp`` for two checkpoints side by side)."""
    from alternet.apps.evaluate import short_name

    loose = tmp_path / "mine" / "allcorrect.ckpt"
    loose.parent.mkdir()
    shutil.copy(digits_run / "checkpoints" / "last.ckpt", loose)
    assert short_name(str(loose)) == "allcorrect"
    assert short_name(str(digits_run / "checkpoints" / "last.ckpt")) == digits_run.name  # a run's: the run's name


def test_a_baseline_scored_on_other_images_is_refused_before_any_inference():
    """Another robustness.max_images (fewer images of each condition): its mCE was printed without a word. A
    built-in table of published results is of the whole sets."""
    from types import SimpleNamespace

    from alternet.evaluation.evaluator import check_same_images
    from alternet.evaluation.robustness import RobustnessBaseline, RobustnessRow

    row = RobustnessRow("fog", 1, acc=0.5, nll=1.0, ece=0.1, n=24, source="generated")
    sets = SimpleNamespace(conditions=(("fog", 1),), datasets=(range(12),))
    check_same_images(sets, RobustnessBaseline("alexnet (cifar10-c)", (row,), None, published=True))
    with pytest.raises(RobustnessError, match=r"baseline 'mine' was scored on 24 images of fog/1, this evaluation "):
        check_same_images(sets, RobustnessBaseline("mine", (row,), None))


def test_an_evaluation_records_the_weights_precision_and_bins_it_scored(digits_run, tmp_path, monkeypatch, capsys):
    """Two metrics.json of one checkpoint could differ with nothing in them saying why: the run's own evaluation
    named no weights, and neither said its precision or its ECE's bin count (calibration.n_bins)."""
    summary = RunSummary.from_json(digits_run / "metrics.json")
    after = EvaluationReport.from_json(digits_run / "eval" / "metrics.json")
    assert (after.checkpoint, after.ema, after.ece_bins) == (summary.tested_checkpoint, False, 10)
    assert after.precision == "32"  # the evaluation's default, whatever the run trained in
    arguments = [f"ckpt={digits_run}", "max_images=40", "calibration.n_bins=15", f"out_dir={tmp_path / 'a'}"]
    code, stdout, stderr = main_output("evaluate.py", arguments, monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    report = EvaluationReport.from_json(tmp_path / "a" / "metrics.json")
    assert (report.precision, report.ece_bins) == ("32", 15) and "(precision 32, ece in 15 bins)" in stdout
