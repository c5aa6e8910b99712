"""evaluate.py end to end: outputs, robustness from generated and real-layout files, and bad input."""

import csv
import json
import re

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from alternet.apps.evaluate import run_evaluate
from alternet.apps.train import train
from alternet.metrics import calibration_metrics

from helpers import CONF, FAST, compose_train, run_main, run_script

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
    # every number can be recomputed from predictions.npz
    recomputed = calibration_metrics(predictions["probs"], predictions["labels"])
    for key, value in recomputed.items():  # NaN (e.g. acc90 with no confident prediction) is null in JSON
        assert report["test"][key] == (None if np.isnan(value) else pytest.approx(value)), key
    robustness = report["robustness"]
    assert robustness["source"] == "generated" and len(robustness["table"]) == 75
    row = next(r for r in robustness["table"] if (r["corruption"], r["severity"]) == ("fog", 3))
    correct = predictions["corrupted/fog/3/pred"] == predictions["corrupted/fog/3/labels"]
    assert row["acc"] == pytest.approx(correct.mean())
    assert row["nll"] == pytest.approx(
        -np.log(predictions["corrupted/fog/3/p_true"].astype(np.float64)).mean(), rel=1e-4
    )
    scaled = report["temperature_scaling"]
    assert scaled["temperature"] > 0 and scaled["test"]["acc"] == pytest.approx(report["test"]["acc"])
    with open(out / "robustness_accuracy.csv") as f:
        assert len(list(csv.reader(f))) == 1 + 15 + 1  # header, corruptions, mean


def evaluate_in_process(*overrides: str, out) -> list[dict]:
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
    from alternet.data.corrupted.corruptions import CORRUPTIONS

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
        assert len(list(csv.DictReader(f))) == 2


def test_truncated_checkpoint_is_named(digits_run, tmp_path, monkeypatch, capsys):
    broken = tmp_path / "broken.ckpt"
    broken.write_bytes((digits_run / "checkpoints" / "last.ckpt").read_bytes()[:5000])
    code, stderr = run_main("evaluate.py", [f"ckpt={broken}", f"hydra.run.dir={tmp_path / 'out'}"], monkeypatch, capsys)
    assert f"error: checkpoint {broken} is unreadable or truncated" in code + stderr


def test_evaluation_after_training_joins_the_run(digits_run, digits_summary):
    summary = digits_summary  # trained with evaluate.after_training=true
    assert summary["calibration"]["acc"] == pytest.approx(summary["test"]["acc"], abs=1e-6)
    assert (digits_run / "eval" / "reliability.png").is_file()
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
    assert "error: analysis 'fourier': images must be >= 1, got -1" in code + stderr
    assert not (tmp_path / "x" / "metrics.json").exists()  # rejected before any evaluation


def test_test_flip_predicts_alike_in_training_and_in_evaluate(tmp_path):
    """recipe.test_flip averages the logits of each test image and its mirror: the same seeded weights score
    differently with it, and evaluate.py reproduces the training run's flipped test numbers."""
    fp32 = ["trainer.max_epochs=2", "trainer.precision=32-true"]  # evaluate.py scores at precision 32, as this
    plain = train(compose_train(*FAST, *fp32, output_dir=tmp_path / "plain"))
    flipped = train(compose_train(*FAST, *fp32, "recipe.test_flip=true", output_dir=tmp_path / "flip"))
    assert flipped["test"]["nll"] != pytest.approx(plain["test"]["nll"], rel=1e-4)
    (report,) = evaluate_in_process(f"ckpt={tmp_path / 'flip'}", out=tmp_path / "eval")
    assert report["test_flip"] is True
    assert report["test"]["nll"] == pytest.approx(flipped["test"]["nll"], rel=1e-5)
    assert report["test"]["acc"] == pytest.approx(flipped["test"]["acc"], abs=1e-6)


def test_a_data_set_of_other_class_names_warns_and_the_same_ones_in_another_order_are_refused(tmp_path):
    """Only the class count was compared: a folder of cat/dog scored a model trained on a/b by position, silently."""
    from PIL import Image

    from alternet.apps.evaluate import check_class_names
    from alternet.data import build_datamodule
    from alternet.errors import AlternetWarning, CheckpointError

    for name in ("cat", "dog"):
        (tmp_path / "train" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "train" / name / "0.png")
    data = build_datamodule({"name": "imagefolder", "root": str(tmp_path), "image_size": 8}, {"batch_size": 1}, seed=0)
    check_class_names(["cat", "dog"], data, tmp_path / "x.ckpt")
    with pytest.warns(AlternetWarning, match="label 0 is 'a' in the checkpoint .* but 'cat' in data=imagefolder"):
        check_class_names(["a", "b"], data, tmp_path / "x.ckpt")
    with pytest.raises(CheckpointError, match="the data's classes are the checkpoint's in another order"):
        check_class_names(["dog", "cat"], data, tmp_path / "x.ckpt")
