"""The out-of-distribution pass and selective classification, end to end on the shared digits run: an image folder
and a CIFAR-format set as ood.root, the metrics recomputed from the saved predictions, bad settings refused."""

from __future__ import annotations

import json
import pickle
from dataclasses import asdict

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from alternet.apps.evaluate import run_evaluate
from alternet.metrics.uncertainty import ood_metrics, ood_scores, selective_metrics
from alternet.runs.results import EvaluationReport

from helpers import CONF, assert_one_line_error, run_main
from helpers.imagefolders import make_image_folder


def evaluate(*overrides: str, out) -> dict:
    with initialize_config_dir(str(CONF), version_base="1.3"):
        return run_evaluate(compose("evaluate", overrides=[*overrides, f"paths.output_dir={out}"]))[0]


def cifar_format(root, n: int = 40):
    """A CIFAR-10-format test batch of random images (the test split is read without its checksums)."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batch = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": list(rng.integers(0, 10, n))}
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(batch, f)
    return root


@pytest.mark.parametrize("layout", ["folder", "cifar10"])
def test_ood_and_selective_metrics_are_those_of_the_saved_predictions(digits_run, tmp_path, layout):
    if layout == "folder":
        root = make_image_folder(tmp_path / "ood", per_class=5, size=24, odd_formats=False)
    else:
        root = cifar_format(tmp_path / "ood")
    out = tmp_path / "eval"
    report = evaluate(f"ckpt={digits_run}", f"ood.root={root}", "ood.max_images=12", out=out)
    ood = report.ood
    assert ood.layout == layout and ood.n_out == 12 and ood.n_in == 360 and list(ood.scores) == ["msp", "energy"]
    saved = np.load(out / "predictions.npz")
    inside = ood_scores(saved["logits"])
    for name in ("msp", "energy"):
        assert asdict(ood.scores[name]) == pytest.approx(ood_metrics(inside[name], saved[f"ood/{name}"]))
    expected = selective_metrics(saved["probs"], saved["labels"])
    assert asdict(report.selective) == pytest.approx(expected, abs=1e-6)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ood"]["msp"]["auroc"] == ood.scores["msp"].auroc and "ece_classwise" in metrics["test"]
    assert metrics["ood"] == ood.to_json() and EvaluationReport.from_json(out / "metrics.json").ood == ood
    assert (out / "ood_scores.png").is_file() and (out / "risk_coverage.png").is_file()


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("ood.root={tmp}/missing", "ood.root={tmp}/missing is not a directory"),
        ("ood.root={tmp}", "holds no images"),
        ("ood.max_images=0", "ood.max_images=0 is invalid: must be >= 1 or null"),
        ("robustness.root={tmp}/empty.txt", "robustness.root={tmp}/empty.txt is a file: give the folder of the"),
    ],
)
def test_bad_ood_settings_are_one_line_before_any_work(digits_run, tmp_path, monkeypatch, capsys, setting, says):
    (tmp_path / "empty.txt").write_text("not an image")
    args = [f"ckpt={digits_run}", setting.format(tmp=tmp_path), f"hydra.run.dir={tmp_path / 'out'}"]
    code, stderr = run_main("evaluate.py", args, monkeypatch, capsys)
    assert_one_line_error(code, stderr, says.format(tmp=tmp_path))
    assert not (tmp_path / "out").exists()


def test_an_unreadable_ood_image_is_named_with_advice_evaluate_takes(digits_run, tmp_path, monkeypatch, capsys):
    """Its advice was training's (data.skip_corrupt=true, no key of evaluate): the OOD images are read whole."""
    root = make_image_folder(tmp_path / "ood", per_class=2, odd_formats=False, corrupt=True)  # train/<class>/
    args = [f"ckpt={digits_run}", f"ood.root={root}", "robustness.enabled=false", f"hydra.run.dir={tmp_path / 'o'}"]
    code, stderr = run_main("evaluate.py", args, monkeypatch, capsys)
    assert_one_line_error(code, stderr, "broken.JPEG", f"Replace or delete the file in ood.root={root}")
    assert "skip_corrupt" not in code


def test_ood_images_of_an_image_folder_go_through_the_test_splits_own_pipeline(tmp_path):
    """The test split as its own OOD set must give the same inputs, hence AUROC 0.5 exactly: the OOD images went
    through another resize (OpenCV's, no antialiasing, round() for floor(), the data's interpolation and crop mode
    ignored) and read AUROC 0.52 (MSP) and 0.45 (energy)."""
    import torch

    from alternet.data import ImageFolderDataModule
    from alternet.evaluation.config import OodConfig
    from alternet.evaluation.ood import open_ood_set

    folder = make_image_folder(tmp_path / "images", splits={"train": 2, "test": 2}, odd_formats=False, size=37)
    datamodule = ImageFolderDataModule(
        root=str(folder), image_size=16, batch_size=2, crop_pct=0.9, interpolation="bicubic"
    )
    datamodule.setup()
    ood = open_ood_set(OodConfig(root=str(folder / "test"), max_images=None), datamodule)
    test = datamodule.splits["test"]
    assert len(ood.dataset) == len(test) == 6
    for index in range(len(test)):  # the same files in the same (sorted) order
        torch.testing.assert_close(ood.dataset[index][0], test[index][0], rtol=0, atol=0)


def test_large_ood_photos_are_shrunk_to_a_small_models_input_without_aliasing():
    """A CIFAR model's OOD photos shrink ~15x: cv2's bilinear alone sampled a photo's fine stripes into full-contrast
    moiré (pixel sd 1.47 against 0.23 for PIL's resize, measured), an artefact that tells OOD images apart."""
    from alternet.data.corrupted.imagenet_c import crop_transform

    stripes = np.zeros((480, 640, 3), np.uint8)
    stripes[:, ::2] = 255  # one-pixel stripes: their mean grey is all a 32-px image can hold
    shrunk = crop_transform((0.0,) * 3, (1.0,) * 3, 32, "resize_center_crop", 1.0)(image=stripes)["image"]
    assert shrunk.shape == (3, 32, 32)
    assert float(shrunk.std()) < 0.05 and abs(float(shrunk.mean()) - 0.5) < 0.05


def test_the_cifar_folders_the_config_check_knows_are_the_data_modules():
    """``ood.root`` is checked by its folder names before torch is imported: the CIFAR sets' names there are the
    data modules' (torchvision's)."""
    from alternet.data import CIFAR10DataModule, CIFAR100DataModule
    from alternet.data.files.listing import CIFAR_FOLDERS

    assert {module.folder: module.name for module in (CIFAR10DataModule, CIFAR100DataModule)} == CIFAR_FOLDERS
