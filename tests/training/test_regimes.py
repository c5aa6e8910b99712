"""The paper's diagnostics as run settings: clean training metrics each epoch (data.train_clean_size) and
data-regime runs on a seeded, class-stratified fraction of the training split (data.subset)."""

import csv
import json
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from alternet.apps.train import train
from alternet.data import DigitsDataModule, ImageFolderDataModule
from alternet.errors import ConfigValueError
from alternet.runs.summary import RunSummary
from alternet.runs.weights import load_model

from helpers import FAST, compose_train


def _epoch_rows(run_dir, key):
    with open(run_dir / "logs" / "metrics.csv", newline="") as file:
        return [row for row in csv.DictReader(file) if row.get(key)]


def test_train_clean_metrics_are_the_training_subset_scored_in_eval_mode(tmp_path):
    """train_clean/nll is exactly what the epoch's final weights give on the fixed subset without augmentation."""
    run = tmp_path / "run"
    summary = train(
        compose_train(
            *FAST,
            "trainer.max_epochs=2",
            "trainer.limit_val_batches=1.0",
            "data.train_clean_size=150",
            "recipe.drop_path_rate=0.2",  # eval mode matters: stochastic depth would change the numbers
            output_dir=run,
        )
    )
    rows = _epoch_rows(run, "train_clean/nll")
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    assert {"train_clean/acc", "val/nll"} <= {k for k, v in rows[-1].items() if v}

    datamodule = DigitsDataModule(val_size=180, train_clean_size=150, image_size=16)  # as data=digits
    datamodule.setup()
    clean = datamodule.splits["train_clean"]
    assert len(clean) == 150
    images = torch.stack([clean[i][0] for i in range(len(clean))])
    labels = torch.tensor([clean[i][1] for i in range(len(clean))])
    assert torch.equal(images, torch.stack([clean[i][0] for i in range(len(clean))]))  # no random augmentation
    model, _ = load_model(run / "checkpoints" / "last.ckpt")
    with torch.no_grad():
        nll = F.cross_entropy(model.eval()(images), labels).item()
    # float32 means over other batchings: 1.2e-5 apart on an AVX-512 Zen 4; another definition would be far more
    assert float(rows[-1]["train_clean/nll"]) == pytest.approx(nll, rel=1e-4)
    assert summary.train_clean["nll"] == pytest.approx(nll, rel=1e-4)

    # the run's curves: a real PNG of the same per-epoch numbers
    from PIL import Image

    from alternet.report.runs import read_history

    assert summary.curves == str(run / "curves.png")
    with Image.open(run / "curves.png") as image:
        assert image.format == "PNG" and image.width > 1000
    history = read_history(run / "logs" / "metrics.csv")
    assert list(history["train_clean/nll"]) == [0, 1] and list(history["val/acc"]) == [0, 1]
    assert history["train_clean/nll"][1] == pytest.approx(nll, rel=1e-4)  # float32 batchings (see above)
    assert len(history["train/lr@step"]) == 6  # 3 steps per epoch
    # HDVW's training NLL: the epoch mean of the training loss on augmented batches, logged once per epoch
    assert list(history["train/nll_epoch"]) == [0, 1]
    for epoch in (0, 1):  # every step logged its loss here (debug=fast): their mean is the epoch's
        assert history["train/nll_epoch"][epoch] == pytest.approx(history["train/loss"][epoch], rel=1e-5)
    from alternet.report.figures import curve_panels

    (_, losses), (_, accuracies), (_, rates) = curve_panels(history)  # curves.png plots the epoch's mean loss: the
    assert losses["train/nll_epoch"] == history["train/nll_epoch"] and "train/loss" not in losses  # logged steps
    assert accuracies["val/acc"] == history["val/acc"] and len(rates["train/lr@step"]) == 6  # are a sample of it


def test_train_clean_runs_without_a_validation_split(tmp_path):
    summary = train(compose_train(*FAST, "data.val_size=0", "data.train_clean_size=64", output_dir=tmp_path))
    assert summary.best_checkpoint is None  # no validation split: no best checkpoint, as before
    assert summary.train_clean["acc"] is not None
    assert _epoch_rows(tmp_path, "train_clean/acc") and not _epoch_rows(tmp_path, "val/acc")


def test_train_clean_off_runs_no_validation_loop_without_a_split(tmp_path):
    summary = train(compose_train(*FAST, "data.val_size=0", "data.train_clean_size=0", output_dir=tmp_path))
    assert summary.train_clean is None and not _epoch_rows(tmp_path, "train_clean/acc")


def test_subset_is_seeded_stratified_and_the_same_for_every_model_seed():
    full = DigitsDataModule(val_size=180)
    full.setup()
    quarter = DigitsDataModule(val_size=180, subset=0.25, seed=0)
    quarter.setup()
    other_seed = DigitsDataModule(val_size=180, subset=0.25, seed=1)
    other_seed.setup()
    n_train = len(full.splits["train"])
    assert len(quarter.splits["train"]) == round(0.25 * n_train)
    assert np.array_equal(quarter.splits["train"].images, other_seed.splits["train"].images)
    assert np.array_equal(quarter.splits["val"].labels, full.splits["val"].labels)  # validation is untouched
    share = np.bincount(quarter.splits["train"].labels, minlength=10) / len(quarter.splits["train"])
    full_share = np.bincount(full.splits["train"].labels, minlength=10) / n_train
    assert np.abs(share - full_share).max() < 0.01  # class proportions kept
    train_clean = DigitsDataModule(val_size=180, subset=0.25, train_clean_size=2000)
    train_clean.setup()  # the clean subset comes from the thinned training split, capped at its size
    assert len(train_clean.splits["train_clean"]) == len(quarter.splits["train"])


def test_subset_is_recorded_in_config_and_metrics(tmp_path):
    summary = train(compose_train(*FAST, "data.subset=0.1", output_dir=tmp_path))
    assert summary.data_subset == 0.1 and summary.train_images == round(0.1 * 1257)
    assert json.loads((tmp_path / "metrics.json").read_text())["train_images"] == 126
    assert "subset: 0.1" in (tmp_path / "config.yaml").read_text()


def test_subset_repeat_gives_every_fraction_the_full_splits_steps():
    """data.subset_repeat: a fixed optimiser-step budget across fractions (the data-regime preset); each image of
    the subset comes back about 1/fraction times an epoch, with fresh augmentation seeds each pass."""
    full = DigitsDataModule(val_size=180, batch_size=32)
    full.setup()
    tenth = DigitsDataModule(val_size=180, batch_size=32, subset=0.1, subset_repeat=True)
    tenth.setup()
    plain = DigitsDataModule(val_size=180, batch_size=32, subset=0.1)
    plain.setup()
    assert tenth.train_batches() == full.train_batches() == 1257 // 32
    assert plain.train_batches() == 126 // 32  # equal epochs: a tenth of the steps
    keys = list(tenth._sampler("train", shuffle=True))
    indices = [index for index, _ in keys]
    assert len(keys) == 1257 and set(indices) == set(range(126))
    assert np.bincount(indices).min() >= 9 and np.bincount(indices).max() <= 10  # every image 1257/126 times
    seeds_of_0 = [seed for index, seed in keys if index == 0]
    assert len(set(seeds_of_0)) == len(seeds_of_0)  # a fresh augmentation on each pass
    assert len(tenth.splits["train"]) == 126  # train_images still counts distinct images
    first_pass = keys[:126]
    assert sorted(i for i, _ in first_pass) == list(range(126))  # passes are whole permutations


def test_subset_repeat_shards_disjointly_and_resumes_mid_epoch():
    from alternet.data import EpochSampler

    ranks = [list(EpochSampler(10, 0, shuffle=True, rank=r, world_size=2, draws=35)) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == 17
    both = ranks[0] + ranks[1]
    assert len(set(both)) == len(both)  # no (image, augmentation) pair drawn twice across ranks
    sampler = EpochSampler(10, 0, shuffle=True, draws=35)
    whole = list(sampler)
    sampler.skip = 12
    assert list(sampler) == whole[12:]


def test_subset_repeat_must_be_a_boolean():
    with pytest.raises(ConfigValueError, match=r"data.subset_repeat='yes' is invalid: true or false"):
        DigitsDataModule(subset=0.1, subset_repeat="yes")


def test_subset_of_an_image_folder(image_folder, image_shards):
    full = ImageFolderDataModule(root=str(image_folder), image_size=16)
    full.setup()
    half = ImageFolderDataModule(root=str(image_folder), image_size=16, subset=0.5)
    half.setup()
    counts, full_counts = np.bincount(half.files["train"].labels), np.bincount(full.files["train"].labels)
    assert counts.sum() == round(0.5 * full_counts.sum()) and np.abs(counts - full_counts / 2).max() <= 1
    assert len(half.splits["train"]) == counts.sum() and len(half.splits["val"]) == len(full.splits["val"])
    with pytest.raises(ConfigValueError, match=r"data\.subset cannot thin streamed shards"):  # before any listing
        ImageFolderDataModule(root=str(image_folder), train_shards=str(image_shards), subset=0.5)
    with pytest.raises(ConfigValueError, match=r"data\.interpolation='bogus' is not one of"):  # as the config's
        ImageFolderDataModule(root=str(image_folder), interpolation="bogus")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"subset": 1.5}, r"data.subset=1.5 is invalid: a fraction of the training split in \(0, 1\]"),
        ({"subset": 0}, r"data.subset=0 is invalid"),
        ({"train_clean_size": -1}, r"data.train_clean_size=-1 is invalid: an image count >= 0"),
    ],
)
def test_bad_regime_settings_fail_before_data_is_read(kwargs, message):
    with pytest.raises(ConfigValueError, match=message):
        DigitsDataModule(**kwargs)


CPU_PRESETS = (
    "inductive_bias",
    "data_regime",
    "specificity",
    "locality",
    "locality_vit",
    "locality_swin",
    "spectra",
    "buildup",
)
PRESETS = [f"{name}{scale}" for name in CPU_PRESETS for scale in ("", "_full")]


def preset_jobs(preset: str) -> tuple[object, list[list[str]]]:
    """The preset's composed multirun config and the overrides of every job of its sweep grid, as Hydra's
    BasicSweeper expands them (the cartesian product, in order)."""
    import itertools

    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from helpers import CONF

    with initialize_config_dir(str(CONF), version_base="1.3"):
        config = compose("train", overrides=[f"experiment=paper/{preset}", "data.root=/data"], return_hydra_config=True)
    params = [f"{key}={value}" for key, value in config.hydra.sweeper.params.items()]
    axes = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        for o in OverridesParser.create().parse_overrides(params)
    ]
    return config, [list(job) for job in itertools.product(*axes)]


@pytest.mark.parametrize("preset", PRESETS)
def test_paper_presets_are_multiruns_of_real_configs(preset):
    """Each preset composes, sweeps something, and every job of its grid is a config train.py accepts."""
    import copy

    from hydra import compose, initialize_config_dir
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from helpers import CONF

    config, jobs = preset_jobs(preset)
    assert str(config.hydra.mode) == "RunMode.MULTIRUN" and len(jobs) > 1
    # the jobs that choose the same config-group options are one composition, each job's values then set on a copy
    # as Hydra sets a value override (interpolations of ${seed} and the rest resolve to each job's): a few
    # compositions a preset instead of one a job
    groups = {path.name for path in CONF.iterdir() if path.is_dir()}
    parser = OverridesParser.create()
    by_choice: dict[tuple[str, ...], list[list]] = {}
    for job_overrides in jobs:
        parsed = parser.parse_overrides(job_overrides)
        choice = tuple(o.input_line for o in parsed if o.key_or_group in groups)
        values = [(o.key_or_group, o.value()) for o in parsed if o.key_or_group not in groups]
        by_choice.setdefault(choice, []).append(values)
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for choice, job_values in by_choice.items():
            overrides = [f"experiment=paper/{preset}", "data.root=/data", *choice]
            if preset.endswith("_full") and not torch.cuda.is_available():
                overrides.append("trainer.accelerator=cpu")  # the paper's scale asks for a GPU, which CI lacks
            composed = compose("train", overrides=[*overrides, "paths.output_dir=unused"])
            for values in job_values:
                job = copy.deepcopy(composed)
                for key, value in values:
                    OmegaConf.update(job, key, value, merge=True)
                check_job(preset, OmegaConf.to_container(job, resolve=True))


def check_job(preset: str, plain: dict) -> None:
    """One job of a paper preset's grid: a config train.py accepts, at the preset's scale."""
    from alternet.apps.checks import validate_train_config

    validate_train_config(plain)
    assert plain["data"]["name"] == "cifar100" and plain["data"]["train_clean_size"] > 0
    assert (plain["recipe"]["name"] == "paper") == preset.endswith("_full")  # the paper's scale, its recipe
    if not preset.endswith("_full"):  # the laptop scale: all of CIFAR-100 (or a fraction), the speedrun's
        assert plain["recipe"]["name"] == "speedrun" and plain["trainer"]["precision"] == "auto"
        assert plain["evaluate"]["after_training"] is True  # predictions.npz: the test set's noise in a CI
    assert plain["model"].get("window") != 1  # a softmax over one key is not attention


def test_the_laptop_presets_seed_every_arm_three_times_seeds_outermost():
    """Verdicts need >= 3 seeds an arm (fewer: 'insufficient seeds'); seeds first, so a sweep cut short holds
    every arm at its first seeds. spectra reads a distribution within one run, so it has one."""
    for preset in CPU_PRESETS:
        config, _ = preset_jobs(preset)
        keys = list(config.hydra.sweeper.params)
        if preset == "spectra":
            continue
        seeds = "0,1" if preset == "locality_swin" else "0,1,2"  # locality_swin: 2 seeds, its docs say
        assert keys[0] == "seed" and str(config.hydra.sweeper.params.seed) == seeds, preset


def test_the_pre_declared_run_is_inductive_bias_with_fresh_seeds_and_a_fixed_precision():
    """paper/alternet_vs_twin (docs/reproduction.md's pre-declared test): the AlterNet and its twin, 7 seeds an arm
    outermost, none of the pilot's, on exactly inductive_bias's recipe but for the precision, fixed so that a
    resumed sweep cannot change it on a CPU without native bf16."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from helpers import CONF

    config, jobs = preset_jobs("alternet_vs_twin")
    pilot, _ = preset_jobs("inductive_bias")
    params = config.hydra.sweeper.params
    assert list(params) == ["seed", "model"] and str(params.model) == "preresnet_laptop,alternet_laptop"
    seeds = [int(s) for s in str(params.seed).split(",")]
    assert len(seeds) == 7 == len(set(seeds)) and not set(seeds) & {
        int(s) for s in str(pilot.hydra.sweeper.params.seed).split(",")
    }
    assert len(jobs) == 14 and jobs[0] == ["seed=10", "model=preresnet_laptop"]
    with initialize_config_dir(str(CONF), version_base="1.3"):
        for model in ("preresnet_laptop", "alternet_laptop"):
            run, reference = (
                OmegaConf.to_container(
                    compose(
                        "train",
                        [
                            f"experiment=paper/{name}",
                            "data.root=/data",
                            f"model={model}",
                            "seed=10",
                            "paths.output_dir=unused",
                        ],
                    ),
                    resolve=True,
                )
                for name in ("alternet_vs_twin", "inductive_bias")
            )
            assert run["trainer"].pop("precision") == "bf16-mixed" and reference["trainer"].pop("precision") == "auto"
            check_job("alternet_vs_twin", {**run, "trainer": {**run["trainer"], "precision": "auto"}})
            assert run == reference


def test_the_data_regime_gives_every_fraction_the_same_steps():
    config, jobs = preset_jobs("data_regime")
    assert config.data.subset_repeat is True
    assert {job[2] for job in jobs} == {"data.subset=0.02", "data.subset=0.1", "data.subset=0.5"}


@pytest.mark.slow
@pytest.mark.parametrize("preset", CPU_PRESETS)
def test_every_laptop_preset_job_trains_two_steps_on_real_cifar100(preset, cifar100_root, tmp_path):
    """The whole grid, as the campaign runs it (python train.py experiment=paper/NAME), two steps a job."""
    from helpers import PRESET_TWO_STEPS, run_script

    _, jobs = preset_jobs(preset)
    result = run_script(
        "train.py",
        f"experiment=paper/{preset}",
        f"data.root={cifar100_root}",
        f"hydra.sweep.dir={tmp_path}",
        *PRESET_TWO_STEPS,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for index in range(len(jobs)):
        assert (tmp_path / str(index) / "metrics.json").is_file(), f"job {index}: {jobs[index]}"


@pytest.mark.slow
@pytest.mark.parametrize("preset", [f"{name}_full" for name in CPU_PRESETS])
def test_every_paper_scale_preset_first_job_trains_two_steps_on_cpu(preset, cifar100_root, tmp_path):
    """One command per claim at the paper's scale: the first job of each _full grid (its model at full size, the
    paper's recipe, bf16 set aside for the CPU) trains two steps. inductive_bias_full also scores the tested weights
    as every _full job does after training, against CIFAR-100-C files of the first 16 test images in Hendrycks'
    layout (the real files are 2.9 GB), so the scoring paper/_gpu.yaml asks for runs end to end."""
    from alternet.data.corrupted.names import CORRUPTIONS

    from helpers import PRESET_TWO_STEPS, run_script

    _, jobs = preset_jobs(preset)
    scoring = preset == "inductive_bias_full"
    if scoring:
        batch = pickle.loads((cifar100_root / "cifar-100-python" / "test").read_bytes(), encoding="latin1")
        images = batch["data"][:16].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        corrupted = tmp_path / "CIFAR-100-C"
        corrupted.mkdir()
        for name in CORRUPTIONS:
            np.save(corrupted / f"{name}.npy", np.concatenate([images] * 5))
        np.save(corrupted / "labels.npy", np.concatenate([np.asarray(batch["fine_labels"][:16], np.uint8)] * 5))
        evaluation = [f"evaluate.robustness.root={corrupted}", "evaluate.robustness.max_images=16"]
    else:
        evaluation = ["evaluate.after_training=false"]
    result = run_script(
        "train.py",
        f"experiment=paper/{preset}",
        "hydra.mode=RUN",
        *jobs[0],
        f"data.root={cifar100_root}",
        f"hydra.run.dir={tmp_path / 'job'}",
        "trainer.accelerator=cpu",
        *PRESET_TWO_STEPS,
        *evaluation,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = RunSummary.from_json(tmp_path / "job" / "metrics.json")
    assert summary.global_step == 2
    if scoring:
        assert summary.robustness.source == "real" and (tmp_path / "job" / "eval" / "predictions.npz").is_file()


@pytest.mark.parametrize("model", ["vit_mini_cifar", "pit_mini_cifar", "swin_mini_cifar"])
def test_the_presets_transformers_train_through_train_py(model, tmp_path):
    """The presets' ViT/PiT/Swin (some without any buffers) go through the whole training path."""
    summary = train(compose_train(*FAST, f"model={model}", "data.image_size=32", output_dir=tmp_path))
    assert summary.model == model and summary.train_clean["nll"] is not None


def test_evaluate_reads_packaged_data_options_with_their_defaults_lists():
    """evaluate.py falls back to a data set's packaged option; it must see the keys that option inherits."""
    from alternet.apps.evaluate import packaged_data

    imagenet = packaged_data("imagenet", "/data")
    assert imagenet["name"] == "imagenet" and imagenet["crop_pct"] == 0.875  # from data/imagefolder
    assert imagenet["train_clean_size"] == 2000 and "defaults" not in imagenet  # from data/_base
    assert packaged_data("cifar100", "/data")["val_size"] == 0
    assert packaged_data("cifar100", "/data")["root"] == "/data"
