"""``run_analyses``: name and config checks, the shipped configs, and every analysis end to end on a tiny
AlterNet with the embedded digits data (summaries, files, and the model left exactly as it was)."""

from __future__ import annotations

import csv
import json
import math
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from alternet.analysis import ANALYSES, AnalysisConfigError, parse_configs, run_analyses
from alternet.analysis.data import training_batches
from alternet.analysis.objective import Objective, nll_accuracy
from alternet.data import DigitsDataModule
from alternet.data.augment import FilesAugment
from alternet.errors import ConfigValueError
from alternet.models import create_model

from helpers import CONF, TINY_ANALYSIS_BUDGETS, paper_recipe_in_miniature

# pytest-xdist: the whole module on one worker, so that its analysed model (session-scoped) is made once
pytestmark = pytest.mark.xdist_group("test_analysis_run")

RECIPE = paper_recipe_in_miniature()
BUDGETS = TINY_ANALYSIS_BUDGETS


@pytest.fixture(scope="session")
def digits() -> DigitsDataModule:
    datamodule = DigitsDataModule(image_size=16, batch_size=8, augment=RECIPE.augment)  # the recipe's arrays section
    datamodule.setup()
    return datamodule


def test_shipped_configs_cover_every_analysis_and_equal_the_defaults():
    files = {path.stem: yaml.safe_load(path.read_text()) for path in (CONF / "analysis").glob("*.yaml")}
    assert sorted(files) == sorted(ANALYSES)
    defaults = parse_configs(ANALYSES, {})
    for name, values in files.items():
        assert parse_configs([name], {name: values})[name] == defaults[name], name


def test_unknown_names_and_keys_are_reported_with_the_valid_ones():
    with pytest.raises(AnalysisConfigError, match="valid names") as error:
        parse_configs(["fourier", "fourrier"], {})
    assert "fourrier" in str(error.value) and "landscape" in str(error.value)
    with pytest.raises(AnalysisConfigError, match="valid keys") as error:
        parse_configs(["hessian"], {"hessian": {"topk": 3}})
    assert "topk" in str(error.value) and "iterations" in str(error.value)
    with pytest.raises(AnalysisConfigError, match="odd"):
        parse_configs(["landscape"], {"landscape": {"points_2d": 4}})
    with pytest.raises(AnalysisConfigError, match=r"analysis.lesion.images=10.5 is invalid: must be an integer"):
        parse_configs(["lesion"], {"lesion": {"images": 10.5}})
    with pytest.raises(AnalysisConfigError, match="method"):
        parse_configs(["hessian"], {"hessian": {"method": "arnoldi"}})
    with pytest.raises(AnalysisConfigError, match=r"analysis.landscape.batch_size=0 is invalid: must be >= 1 or null"):
        parse_configs(["landscape"], {"landscape": {"batch_size": 0}})


@pytest.fixture(scope="session")
def analysed(tmp_path_factory, digits):
    """alternet_tiny (window attention) before and after running every analysis."""
    torch.manual_seed(0)
    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    out_dir = tmp_path_factory.mktemp("analysis")
    results = run_analyses(ANALYSES, model, digits, RECIPE, BUDGETS, out_dir)
    return model, state, results, out_dir


def test_mini_batch_maxima_mostly_unconverged_are_said_to_be(digits, tmp_path):
    """Their summaries (max_eig_*) were written as plain numbers with every mini-batch's Lanczos cut short."""
    from alternet.errors import AlternetWarning

    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    budgets = {"hessian": {**BUDGETS["hessian"], "minibatch_steps": 1}}
    with pytest.warns(AlternetWarning, match=r"3 of 3 mini-batches' Lanczos did not converge within minibatch_steps=1"):
        results = run_analyses(["hessian"], model, digits, RECIPE, budgets, tmp_path)
    assert results["hessian"]["max_eig_unconverged"] == 3


def test_every_analysis_writes_its_files_and_a_json_summary(analysed):
    _, _, results, out_dir = analysed
    assert list(results) == list(ANALYSES)
    json.dumps(results, allow_nan=False)  # strictly valid JSON
    for name, summary in results.items():
        assert summary["seconds"] > 0
        assert (out_dir / "analysis" / f"{name}.csv").is_file()
        assert any(Path(f).suffix == ".png" for f in summary["files"]), name
        assert all(Path(f).is_file() and Path(f).name.startswith(name) for f in summary["files"])
    fourier = list(csv.DictReader((out_dir / "analysis" / "fourier.csv").open()))
    assert {row["name"] for row in fourier} >= {"stem", "stages.1.1"}
    assert math.isfinite(results["fourier"]["high_freq_msa_minus_conv"])  # C|CM|CM: C and M share two stages
    assert results["attention"]["msa_blocks"] == 2
    assert set(results["hessian"]) >= {"eig_1", "eig_2", "negative_fraction", "trace", "max_eig_median"}
    assert results["hessian"]["hvps"] == BUDGETS["hessian"]["iterations"]
    assert results["hessian"]["minibatches"] == 3 and results["hessian"]["minibatch_size"] == RECIPE.batch_size
    assert results["hessian"]["max_eig_hvps"] <= 3 * BUDGETS["hessian"]["minibatch_steps"]
    assert 0 <= results["hessian"]["max_eig_unconverged"] <= 3
    # wd / ||w|| over the tensors the L2 term counts: the zero norm shifts of a new model count none (they gave 5e28)
    assert 0 < results["hessian"]["l2_curvature_max"] < 1e3
    maxima = [r for r in csv.DictReader((out_dir / "analysis" / "hessian.csv").open()) if r["kind"] == "minibatch_max"]
    assert len(maxima) == 3
    assert len([key for key in results["noise"] if key.startswith("drop_band_")]) == 9  # the paper's nine bands
    lesion = list(csv.DictReader((out_dir / "analysis" / "lesion.csv").open()))
    # alternet_tiny, C|CM|CM: the first blocks of stages 2 and 3 change width and resolution (a projection)
    assert [row["projection_shortcut"] for row in lesion] == ["False", "True", "False", "True", "False"]
    assert results["lesion"]["projection_blocks"] == 2
    assert results["lesion"]["max_drop_block"] in {"stages.0.0", "stages.1.1", "stages.2.1"}


def test_the_analyses_compute_in_full_float32_and_restore_the_settings_they_found(digits, tmp_path, monkeypatch):
    """No TF32 (torch allows it on GPUs by default: ~1e-3 relative, Lanczos' tolerance), whatever the run set."""
    import alternet.analysis.runner as analysis

    seen = []
    monkeypatch.setitem(analysis._RUNS, "variance", lambda *_: seen.append(_precision()) or {})
    before = _precision()
    torch.set_float32_matmul_precision("high")
    try:
        run_analyses(
            ["variance"], create_model("alternet_tiny", num_classes=10, img_size=16), digits, RECIPE, {}, tmp_path
        )
        assert seen == [("highest", False)] and _precision() == ("high", before[1])
    finally:
        torch.set_float32_matmul_precision(before[0])


def _precision() -> tuple[str, bool]:
    return torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32


def test_the_model_is_left_exactly_as_it_was(analysed):
    model, state, _, _ = analysed
    assert model.training
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert all(b.residual_scale == 1.0 for b in model.modules() if hasattr(b, "residual_scale"))


def test_landscape_origin_equals_the_models_loss_on_mixed_batches(analysed, digits):
    """The origin's loss is the soft-target NLL of the recipe's mixed batches plus wd * sum ||w|| (HDVW's)."""
    model, _, results, _ = analysed
    summary, budget = results["landscape"], BUDGETS["landscape"]
    batches = training_batches(
        digits, RECIPE, "training", budget["images"], budget["batch_size"], 0, torch.device("cpu"), "landscape"
    )
    assert all(targets.shape == (len(images), 10) for images, targets in batches)  # soft, mixed targets
    objective = Objective.from_recipe(model, RECIPE, "hdvw")
    nll, acc = nll_accuracy(model.eval(), batches, objective)
    with torch.no_grad():
        l2 = 0.05 * sum(float(p.norm()) for p in model.parameters())
    assert summary["nll_origin"] == nll
    assert summary["l2_origin"] == pytest.approx(l2, rel=1e-6)
    assert summary["loss_origin"] == pytest.approx(nll + l2, rel=1e-6)
    assert summary["acc_origin"] == acc


def test_focused_linear_attention_runs_through_attention_and_hessian(tmp_path: Path, digits):
    torch.manual_seed(0)
    model = create_model("alternet_tiny", num_classes=10, img_size=16, attention="focused_linear")
    hessian = dict(images=4, batch_size=4, k=2, iterations=2, minibatches=1, minibatch_steps=2, slq_runs=1)
    budgets = {**BUDGETS, "hessian": hessian}
    results = run_analyses(["attention", "hessian"], model, digits, RECIPE, budgets, tmp_path)
    assert results["attention"]["msa_blocks"] == 2
    assert results["hessian"]["hvps"] == 2


def test_the_hessian_by_power_iteration_and_with_hdvws_top_eigenvalues_per_minibatch(tmp_path: Path, digits):
    """method=power (the bulk's top eigenvalues by deflated power iteration) and per_minibatch=2 (HDVW's statistic:
    each mini-batch's top eigenvalues, pooled in the density): their rows, summary and figure."""
    torch.manual_seed(0)
    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    budget = dict(images=4, batch_size=4, k=2, iterations=3, method="power", slq_runs=0)
    budget |= dict(minibatches=2, minibatch_steps=3, per_minibatch=2)
    summary = run_analyses(["hessian"], model, digits, RECIPE, {"hessian": budget}, tmp_path)["hessian"]
    rows = list(csv.DictReader((tmp_path / "analysis" / "hessian.csv").open()))
    assert [r["kind"] for r in rows] == ["top"] * 2 + ["minibatch_top"] * 4
    assert rows[2]["weight"] == rows[2]["residual"] == "" and rows[2]["converged"] in ("True", "False")
    assert summary["top_eig_per_minibatch"] == 2 and summary["eig_1"] == pytest.approx(float(rows[0]["value"]))
    assert (tmp_path / "analysis" / "hessian_max_eigenvalues.png").is_file()


@pytest.mark.parametrize(
    ("name", "msa_blocks"), [("pit_mini_cifar", 4), pytest.param("swin_mini_cifar", 4, marks=pytest.mark.slow)]
)
def test_every_analysis_runs_on_pit_and_swin_and_leaves_the_model_as_it_was(name, msa_blocks, tmp_path, digits):
    """The paper's instruments on the presets' PiT and Swin (their taps: alternet/analysis/blocks.py)."""
    torch.manual_seed(0)
    shorter = {"depths": (1, 1, 1, 1)} if name == "swin_mini_cifar" else {}  # one block a stage: the suite's time
    model = create_model(name, num_classes=10, img_size=16, **shorter)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    results = run_analyses(ANALYSES, model, digits, RECIPE, BUDGETS, tmp_path)
    assert list(results) == list(ANALYSES)
    json.dumps(results, allow_nan=False)
    assert results["attention"]["msa_blocks"] == msa_blocks
    if name == "pit_mini_cifar":  # its last stage is 1x1 at 16 px: no spatial variance, left out of the summary
        assert "variance_last" not in results["variance"] and results["variance"]["variance_msa_mean"] > 0
    assert model.training and all(torch.equal(state[k], v) for k, v in model.state_dict().items())


def test_landscape_redraw_gives_each_point_its_own_images_and_the_options_reach_the_summary(tmp_path, digits):
    """The 1-D slice's and the 2-D grid's centres are both the trained weights: on one fixed sample they measure
    the same loss; with redraw=true (HDVW's protocol: a fresh draw at every point) two different draws."""
    torch.manual_seed(0)
    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    budget = BUDGETS["landscape"]
    centres = {}
    for redraw in (False, True):
        options = {**budget, "redraw": redraw, "nll": "log_of_softmax", "clip": 1.0}
        out = tmp_path / str(redraw)
        summary = run_analyses(["landscape"], model, digits, RECIPE, {"landscape": options}, out)["landscape"]
        assert (summary["redraw"], summary["nll"], summary["images"]) == (redraw, "log_of_softmax", budget["images"])
        rows = list(csv.DictReader((out / "analysis" / "landscape.csv").open()))
        centres[redraw] = {float(r["nll"]) for r in rows if float(r["x"]) == 0.0 and float(r["y"]) == 0.0}
    assert len(centres[False]) == 1 and len(centres[True]) == 2


def test_attention_on_a_model_without_an_msa_block_is_refused_before_any_work():
    """It ran the whole evaluation, then reported "analysis attention: 0 files" (evaluate calls this first)."""
    from alternet.analysis import check_applicable

    with pytest.raises(AnalysisConfigError, match=r"analysis=attention measures MSA blocks, and preresnet_tiny has"):
        check_applicable(["fourier", "attention"], create_model("preresnet_tiny", num_classes=10, img_size=16))
    check_applicable(["attention"], create_model("alternet_tiny", num_classes=10, img_size=16))
    check_applicable(["fourier"], create_model("preresnet_tiny", num_classes=10, img_size=16))


def test_the_analyses_restore_each_backends_precision_set_through_the_new_api(digits, tmp_path, monkeypatch):
    """torch's per-backend fp32_precision: the legacy getter alone raised once it was set (nothing ran), and its
    restore left cuda.matmul at 'ieee' where it had been 'none'."""
    import alternet.analysis.runner as analysis

    backends = torch.backends
    settings = (backends.cuda.matmul, backends.cudnn.conv, backends.cudnn.rnn, backends.mkldnn.matmul)
    settings += (backends.mkldnn.conv,)
    seen = []
    monkeypatch.setitem(analysis._RUNS, "variance", lambda *_: seen.append([s.fp32_precision for s in settings]) or {})
    legacy, before = _precision(), [setting.fp32_precision for setting in settings]
    try:
        for setting, precision in zip(settings, ("tf32", "tf32", "tf32", "bf16", "bf16")):
            setting.fp32_precision = precision
        run_analyses("variance", create_model("alternet_tiny", num_classes=10, img_size=16), digits, None, {}, tmp_path)
        assert seen == [["ieee"] * 5]  # no TF32, no bf16 within
        assert [setting.fp32_precision for setting in settings] == ["tf32", "tf32", "tf32", "bf16", "bf16"]
    finally:
        torch.set_float32_matmul_precision(legacy[0])
        backends.cudnn.allow_tf32 = legacy[1]
        for setting, precision in zip(settings, before):
            setting.fp32_precision = precision


def test_a_model_of_another_dtype_is_measured_in_float32_and_left_as_it_was(digits, tmp_path):
    torch.manual_seed(0)
    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    configs = {"fourier": {"images": 8, "batch_size": 8}, "lesion": {"images": 8, "batch_size": 8}}
    exact = run_analyses(["fourier", "lesion"], model, digits, None, configs, tmp_path / "fp32")
    half = model.to(torch.bfloat16)
    found = run_analyses(["fourier", "lesion"], half, digits, None, configs, tmp_path / "bf16")
    assert next(half.parameters()).dtype == torch.bfloat16
    assert found["fourier"]["high_freq_stem"] == pytest.approx(exact["fourier"]["high_freq_stem"], abs=0.05)
    assert found["lesion"]["baseline_acc"] == pytest.approx(exact["lesion"]["baseline_acc"], abs=2 / 8)


def _frozen(model):
    return model.requires_grad_(False)


@pytest.mark.parametrize(
    ("name", "model", "data", "recipe", "message"),
    [
        ("lesion", lambda: create_model("alternet_tiny", num_classes=5, img_size=16), None, None, "5 outputs against"),
        ("noise", lambda: create_model("alternet_tiny", num_classes=0, img_size=16), None, None, "0 outputs against"),
        ("hessian", None, None, None, "pass the recipe the model was trained with"),
        (
            "landscape",
            lambda: _frozen(create_model("alternet_tiny", num_classes=10, img_size=16)),
            None,
            RECIPE,
            "none",
        ),
        ("landscape", None, {"crop_padding": 2}, RECIPE, r"differs from the recipe's \(crop_padding, hflip"),
        ("attention", lambda: create_model("preresnet_tiny", num_classes=10, img_size=16), None, None, "MSA blocks"),
    ],
)
def test_what_an_analysis_cannot_measure_is_refused_in_one_line_before_any_work(
    name, model, data, recipe, message, digits, tmp_path
):
    model = model() if model else create_model("alternet_tiny", num_classes=10, img_size=16)
    datamodule = DigitsDataModule(image_size=16, batch_size=8, augment=data) if data else digits
    with pytest.raises(AnalysisConfigError, match=message) as error:
        run_analyses([name], model, datamodule, recipe, BUDGETS, tmp_path)
    assert "\n" not in str(error.value) and not any(tmp_path.iterdir())


def test_a_data_module_takes_the_recipes_whole_augment_section_or_its_own_stack():
    whole = DigitsDataModule(image_size=16, batch_size=8, augment=RECIPE.augment)
    assert whole.augment == RECIPE.augment.arrays
    with pytest.raises(ConfigValueError, match=r"augment takes recipe.augment.arrays \(ArraysAugment, .*got a Files"):
        DigitsDataModule(image_size=16, batch_size=8, augment=FilesAugment())


def test_trained_weights_measured_at_another_size_or_normalisation_are_warned_of(digits_run, tmp_path):
    """A 16 px digits model measured on DigitsDataModule()'s default 32 px scored 46% where it has 96%, and every
    number of every analysis was of inputs it never saw, in silence."""
    from alternet.errors import AlternetWarning
    from alternet.hub import load

    model = load(digits_run)
    budgets = {"lesion": {"images": 16}}
    with pytest.warns(AlternetWarning, match=r"^alternet_tiny \(weights of digits\) is measured on images of 32 px "):
        run_analyses(["lesion"], model, DigitsDataModule(batch_size=8), None, budgets, tmp_path)
    with pytest.warns(AlternetWarning, match=r"std \(0.5, 0.5, 0.5\) where it was trained with \(0.3187, .*std="):
        run_analyses(["lesion"], model, DigitsDataModule(image_size=16, std=(0.5,) * 3), None, budgets, tmp_path)
    fresh = create_model("alternet_tiny", num_classes=10, img_size=16)  # no weights: measured as given
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_analyses(["lesion"], model, DigitsDataModule(image_size=16, batch_size=8), None, budgets, tmp_path)
        run_analyses(["lesion"], fresh, DigitsDataModule(batch_size=8), None, budgets, tmp_path)


def test_no_budgets_mean_the_defaults_and_a_recipe_not_yet_built_is_said_to_be(digits, tmp_path):
    """configs=None was "'NoneType' object has no attribute 'get'", and the recipe a checkpoint records (a mapping,
    as the docs' example reads it) "'dict' object has no attribute 'augment'"."""
    five = create_model("alternet_tiny", num_classes=5, img_size=16)
    with pytest.raises(AnalysisConfigError, match=r"^analysis=lesion scores the model's 5 outputs"):  # past the budgets
        run_analyses(["lesion"], five, digits, None, None, tmp_path)
    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    with pytest.raises(AnalysisConfigError, match=r"^recipe is a mapping: build the recipe it records first, alternet"):
        run_analyses(["hessian"], model, digits, {"augment": {}}, {}, tmp_path)
