"""``recipe.augment`` in one section per data family (issue 37, item 1): every shipped recipe augments every data
family as it did before the sections, the flat spellings of before fail before any work naming their new key, and
checkpoints and run directories saved with the flat keys still evaluate, export and resume."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from alternet.apps import cli
from alternet.apps import evaluate as evaluate_app
from alternet.apps.checks import validate_train_config
from alternet.apps.evaluate import run_evaluate
from alternet.apps.train import train
from alternet.data import build_datamodule
from alternet.data.augment import SECTIONS, check_augment, fill_from_mean, upgrade
from alternet.errors import ConfigValueError
from alternet.hub import export
from alternet.runs import read_weights, resume_conflicts, run_config, upgrade_record

from helpers import CONF, FAST, compose_train

RECIPES = sorted(p.stem for p in (CONF / "recipe").glob("*.yaml") if not p.stem.startswith("_"))
FAMILY = {"digits": "arrays", "cifar10": "arrays", "cifar100": "arrays", "imagefolder": "files", "imagenet": "files"}
NORMALISE = {"Normalize", "ToTensorV2", "ToTensor", "MaybeToTensor"}  # the pipelines' fixed tails

# recipe.augment of each shipped recipe before the sections: the flat list its YAML composed to (_base's seven keys,
# then the recipe's own), written out by hand from the recipe files of before
BASE_FLAT = {
    "crop_padding": 4,
    "hflip": True,
    "randaugment": None,
    "cutout": None,
    "random_resized_crop": None,
    "interpolation": "bilinear",
    "random_erasing": 0.0,
}
CROP = {"scale": [0.08, 1.0], "ratio": [0.75, 1.3333333]}
PAPER_FLAT = BASE_FLAT | {"randaugment": "rand-m9-n2-mstd1.0"}
IMAGEFOLDER_FLAT = BASE_FLAT | {
    "crop_padding": 0,
    "random_resized_crop": CROP,
    "interpolation": "random",
    "randaugment": "rand-m9-n2-mstd0.5",
}
OLD_FLAT = {
    "paper": PAPER_FLAT,
    "cifar10": PAPER_FLAT,
    "cifar100": PAPER_FLAT,
    "weak": BASE_FLAT,
    "fast": BASE_FLAT,
    "speedrun": BASE_FLAT,
    "digits": BASE_FLAT | {"crop_padding": 2, "hflip": False},
    "imagefolder": IMAGEFOLDER_FLAT,
    "imagenet": IMAGEFOLDER_FLAT | {"hflip": True, "random_erasing": 0.25},
    "imagenet_weak": BASE_FLAT | {"crop_padding": 0, "random_resized_crop": CROP},
}
FILE_RECIPES = ("imagefolder", "imagenet", "imagenet_weak")  # every other recipe is the arrays'


def recipe_family(recipe: str) -> str:
    return "files" if recipe in FILE_RECIPES else "arrays"


def resolved(*overrides: str) -> dict:
    return OmegaConf.to_container(compose_train(*overrides), resolve=True)


def describe(transform) -> list[tuple]:
    """A training pipeline's augmentation steps, each with the parameters that make it (the normalisation and
    tensor conversion that end both stacks' pipelines left out)."""
    steps = []
    for step in transform.transforms:
        name = type(step).__name__
        if name in NORMALISE:
            continue
        if name == "PadIfNeeded":
            steps.append((name, step.min_height, step.min_width, step.fill))
        elif name == "RandomCrop":
            steps.append((name, step.height, step.width))
        elif name in ("HorizontalFlip", "RandomHorizontalFlip"):
            steps.append(("hflip", step.p))
        elif name == "RandAugment" and hasattr(step, "num_ops"):  # the arrays' port
            steps.append(("RandAugment", step.magnitude, step.num_ops, step.magnitude_std, tuple(step.fill)))
        elif name == "RandAugment":  # timm's
            op = step.ops[0]
            steps.append(
                ("RandAugment", op.magnitude, step.num_layers, op.magnitude_std, tuple(op.kwargs["fillcolor"]))
            )
        elif name == "CoarseDropout":
            steps.append((name, step.num_holes_range, step.hole_height_range, step.hole_width_range, step.p))
        elif name == "RandomResizedCropAndInterpolation":
            interpolation = "random" if isinstance(step.interpolation, tuple | list) else step.interpolation.value
            steps.append(("RandomResizedCrop", step.size, tuple(step.scale), tuple(step.ratio), interpolation))
        elif name == "RandomErasing":
            steps.append((name, step.probability, step.mode))
        else:
            steps.append((name,))  # a step this table does not know fails the comparison by its name
    return steps


def arrays_steps(size: int, mean, *, pad: int = 4, hflip: bool = True, randaugment: tuple | None = None) -> list:
    """The arrays' augmentation of a recipe: pad-and-crop, flip, RandAugment (magnitude, ops, std)."""
    steps: list[tuple] = [("PadIfNeeded", size + 2 * pad, size + 2 * pad, 0), ("RandomCrop", size, size)] if pad else []
    steps += [("hflip", 0.5)] if hflip else []
    steps += [("RandAugment", *randaugment, fill_from_mean(mean))] if randaugment else []
    return steps


TIMM_DEFAULT_CROP = ((0.08, 1.0), (3 / 4, 4 / 3))


def files_steps(size: int, mean, *, crop=TIMM_DEFAULT_CROP, interpolation="bilinear", randaugment=None, erasing=0.0):
    """The image files' augmentation of a recipe: random-resized crop, flip, RandAugment, random erasing."""
    steps: list[tuple] = [("RandomResizedCrop", (size, size), *crop, interpolation), ("hflip", 0.5)]
    steps += [("RandAugment", *randaugment, fill_from_mean(mean))] if randaugment else []
    steps += [("RandomErasing", erasing, "pixel")] if erasing else []
    return steps


RECIPE_CROP = ((0.08, 1.0), (0.75, 1.3333333))
# (recipe, data family) -> its augmentation, as the flat recipe.augment of before built it (OLD_FLAT); a recipe on
# the other family's data was refused then (crop_padding on image files, random_resized_crop on arrays) and now
# reads that family's base section (alternet/conf/recipe/_base.yaml)
EXPECTED = {
    **{(r, "arrays"): dict(randaugment=(9.0, 2, 1.0)) for r in ("paper", "cifar10", "cifar100")},
    **{(r, "arrays"): {} for r in ("weak", "fast", "speedrun", *FILE_RECIPES)},  # file recipes: the base's
    ("digits", "arrays"): dict(pad=2, hflip=False),
    ("imagefolder", "files"): dict(crop=RECIPE_CROP, interpolation="random", randaugment=(9.0, 2, 0.5)),
    ("imagenet", "files"): dict(crop=RECIPE_CROP, interpolation="random", randaugment=(9.0, 2, 0.5), erasing=0.25),
    ("imagenet_weak", "files"): dict(crop=RECIPE_CROP),
    **{(r, "files"): {} for r in RECIPES if r not in FILE_RECIPES},  # the arrays' recipes: the base's
}
REFUSED_BEFORE = {(r, f) for r in RECIPES for f in SECTIONS if f != recipe_family(r)}


@pytest.mark.parametrize("data", sorted(FAMILY))
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_augments_every_data_family_as_before(recipe, data):
    root = ["data.root=/nonexistent"] if FAMILY[data] == "files" else []  # nothing is read: the pipeline is built
    config = resolved(f"data={data}", f"recipe={recipe}", *root)
    validate_train_config(config)
    datamodule = build_datamodule(config["data"], config["recipe"], seed=0)
    size, mean = datamodule.image_size, datamodule.mean
    build = arrays_steps if FAMILY[data] == "arrays" else files_steps
    assert describe(datamodule.train_transform()) == build(size, mean, **EXPECTED[recipe, FAMILY[data]])
    if (recipe, FAMILY[data]) not in REFUSED_BEFORE:  # the same section, read from the recipe's flat keys of before
        assert datamodule.augment == upgrade(OLD_FLAT[recipe])[FAMILY[data]]


def test_the_recipes_pinned_values():
    """A few values spelled out: CIFAR's speedrun pads by 4 and flips (no cutout), the paper's RandAugment is
    rand-m9-n2-mstd1.0, ImageNet's erases with probability 0.25 after rand-m9-n2-mstd0.5."""
    speedrun = resolved("experiment=cifar100_speedrun", "data.root=/data")["recipe"]["augment"]["arrays"]
    assert speedrun == {"crop_padding": 4, "hflip": True, "randaugment": None, "cutout": None}
    assert resolved("data=cifar100")["recipe"]["augment"]["arrays"]["randaugment"] == "rand-m9-n2-mstd1.0"
    imagenet = resolved("data=imagenet", "data.root=/data")["recipe"]["augment"]["files"]
    assert (imagenet["random_erasing"], imagenet["randaugment"], imagenet["interpolation"]) == (
        0.25,
        "rand-m9-n2-mstd0.5",
        "random",
    )
    assert resolved("data=imagefolder", "data.root=/data")["recipe"]["name"] == "imagefolder"


def test_each_section_holds_its_stacks_keys_and_nothing_cancels_the_other():
    for recipe in RECIPES:
        augment = resolved(f"recipe={recipe}")["recipe"]["augment"]
        assert {name: tuple(section) for name, section in augment.items()} == SECTIONS
    for path in (CONF / "recipe").glob("*.yaml"):  # a recipe sets the section of its own data only
        own = (yaml.safe_load(path.read_text()).get("augment") or {}) if path.stem != "_base" else {}
        assert set(own) <= {recipe_family(path.stem)}, path.name


def test_a_cutout_in_the_arrays_section_reaches_the_pipeline():
    config = resolved(
        "recipe.augment.arrays.cutout={holes: 1, size: 8, p: 1.0}", "recipe.augment.arrays.crop_padding=0"
    )
    datamodule = build_datamodule(config["data"], config["recipe"], seed=0)
    assert describe(datamodule.train_transform())[-1] == ("CoarseDropout", (1, 1), (8, 8), (8, 8), 1.0)


def test_a_null_section_turns_its_familys_augmentation_off():
    config = resolved("recipe.augment.arrays=null")
    assert describe(build_datamodule(config["data"], config["recipe"], seed=0).train_transform()) == []


# the flat spellings of before and keys in the wrong section -----------------------------------------------------

MOVED = "recipe.augment.crop_padding moved to recipe.augment.arrays.crop_padding: each data family reads its own"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("recipe.augment.crop_padding=8", MOVED),
        ("+recipe.augment.crop_padding=8", MOVED),
        ("recipe.augment={crop_padding: 8}", MOVED),
        ("recipe.augment.crop_padding=4,8", MOVED),  # a sweep's values
        ("~recipe.augment.crop_padding", MOVED),
        (
            "recipe.augment.hflip=false",
            "recipe.augment.hflip moved to recipe.augment.arrays.hflip and recipe.augment.files.hflip:",
        ),
        (
            "recipe.augment.random_erasing=0.25",
            "recipe.augment.random_erasing moved to recipe.augment.files.random_erasing:",
        ),
        (
            "recipe.augment.arrays.random_erasing=0.25",
            "recipe.augment.arrays.random_erasing is not a key of recipe.augment.arrays (in-memory arrays: CIFAR, "
            "digits); its keys are ['crop_padding', 'hflip', 'randaugment', 'cutout']; random_erasing is a key of "
            "recipe.augment.files",
        ),
        ("recipe.augment.array.hflip=false", "recipe.augment.array is not a section of recipe.augment; its sections"),
    ],
)
def test_an_old_spelling_on_the_command_line_fails_before_hydra_in_one_line(override, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["train", "-m", override], ["train", override, "seed=1"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        line = str(exited.value.code)
        assert line.startswith(f"error: {message}") and "\n" not in line, line
    monkeypatch.setattr(sys, "argv", ["alternet-train", override])  # alternet-train, python train.py
    with pytest.raises(SystemExit) as exited:
        cli.train_main()
    assert str(exited.value.code).startswith(f"error: {message}")
    assert list(tmp_path.iterdir()) == []  # no outputs/: Hydra never started


def test_todays_keys_pass_the_command_line_check():
    for override in (
        "recipe.augment.arrays.crop_padding=8",
        "recipe.augment.files.random_erasing=0.5",
        "+recipe.augment.arrays.cutout={size: 8}",
        "recipe.augment.files=null",
        "recipe.augment=null",
        "recipe=imagenet",
        "recipe.augment.files.interpolation=bicubic,random",
    ):
        cli.check_overrides([override])


def test_a_flat_key_in_a_users_recipe_file_fails_before_any_work(tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(
        "defaults:\n  - fast\n  - _self_\nname: mine\naugment:\n  crop_padding: 8\n"
    )
    config = compose_train(f"hydra.searchpath=[file://{tmp_path}]", "recipe=mine", output_dir=tmp_path / "run")
    with pytest.raises(ConfigValueError) as error:
        train(config)
    assert str(error.value).startswith(MOVED) and "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()


def test_the_config_checks_name_a_key_in_the_wrong_section():
    with pytest.raises(
        ConfigValueError, match=r"recipe\.augment\.files\.cutout is not a key of recipe\.augment\.files"
    ):
        validate_train_config(resolved("+recipe.augment.files.cutout={size: 8}"))
    with pytest.raises(ConfigValueError, match=r"recipe\.augment\.files\.interpolation='nearest' is not one of"):
        check_augment({"files": {"interpolation": "nearest"}})


def test_a_data_module_reads_its_own_section_and_refuses_the_other_stacks_keys():
    recipe = {"batch_size": 8, "augment": {"arrays": {"crop_padding": 2}, "files": {"random_erasing": 0.5}}}
    assert build_datamodule({"name": "digits"}, recipe, seed=0).augment == {"crop_padding": 2}
    folder = build_datamodule({"name": "imagefolder", "root": "/nonexistent"}, recipe, seed=0)
    assert folder.augment == {"random_erasing": 0.5}
    with pytest.raises(ConfigValueError, match=r"recipe\.augment\.crop_padding moved to"):
        build_datamodule({"name": "digits"}, {"batch_size": 8, "augment": {"crop_padding": 2}}, seed=0)


# checkpoints and run directories of before the sections ----------------------------------------------------------


def test_an_old_recipe_reads_as_todays():
    """upgrade: the flat keys of before land in the section of each stack that read them, so each family's section
    is the one today's recipe composes."""
    for recipe, flat in OLD_FLAT.items():
        family = recipe_family(recipe)
        today = resolved(f"recipe={recipe}")["recipe"]["augment"][family]
        assert upgrade(flat)[family] == today, recipe
    assert upgrade(None) is None and upgrade({}) == {}
    today = {"arrays": {"crop_padding": 4}, "files": None}
    assert upgrade(today) == today
    record = upgrade_record({"model": {"name": "x"}, "recipe": {"name": "digits", "augment": OLD_FLAT["digits"]}})
    assert record["recipe"]["augment"]["arrays"] == {
        "crop_padding": 2,
        "hflip": False,
        "randaugment": None,
        "cutout": None,
    }
    assert record["model"] == {"name": "x"}


def test_resuming_an_old_checkpoint_sees_no_change_in_the_augmentation():
    """The digits recipe of before flipped nothing, in one flat list: read into today's sections its files section
    does not flip either, unlike today's base; the digits never read it, so only the arrays section is compared."""
    config = resolved()
    checkpoint = {
        "hyper_parameters": {"model": config["model"], "recipe": config["recipe"] | {"augment": OLD_FLAT["digits"]}}
    }
    assert resume_conflicts(config, checkpoint) == []
    changed = resolved("recipe.augment.arrays.crop_padding=4")
    assert resume_conflicts(changed, checkpoint) == ["recipe.augment.arrays.crop_padding: 2 -> 4"]


@pytest.fixture(scope="session")
def old_run(tmp_path_factory) -> Path:
    """A digits run whose checkpoints and config.yaml hold the flat recipe.augment of before the sections."""
    run_dir = tmp_path_factory.mktemp("old-run")
    train(compose_train(*FAST, output_dir=run_dir))
    for path in (run_dir / "checkpoints").glob("*.ckpt"):
        checkpoint = torch.load(path, weights_only=True)
        checkpoint["hyper_parameters"]["recipe"]["augment"] = dict(OLD_FLAT["digits"])
        torch.save(checkpoint, path)  # the digest covers the weights only: they are untouched
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    config["recipe"]["augment"] = dict(OLD_FLAT["digits"])
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


DIGITS_ARRAYS = {"crop_padding": 2, "hflip": False, "randaugment": None, "cutout": None}


def test_an_old_checkpoint_reads_with_todays_sections(old_run):
    assert (
        torch.load(old_run / "checkpoints" / "last.ckpt")["hyper_parameters"]["recipe"]["augment"] == OLD_FLAT["digits"]
    )
    weights = read_weights(old_run / "checkpoints" / "last.ckpt")
    assert weights.hyper_parameters["recipe"]["augment"]["arrays"] == DIGITS_ARRAYS
    assert run_config(old_run)["recipe"]["augment"]["arrays"] == DIGITS_ARRAYS


def test_an_old_checkpoint_evaluates_with_its_own_augmentation(old_run, tmp_path, monkeypatch):
    """evaluate builds the data module from the checkpoint's recipe (the landscape draws augmented training images)."""
    built = []
    monkeypatch.setattr(
        evaluate_app, "build_datamodule", lambda *a, **k: built.append(build_datamodule(*a, **k)) or built[-1]
    )
    budget = ["analysis.landscape.images=8", "analysis.landscape.points_1d=3", "analysis.landscape.points_2d=3"]
    overrides = [
        f"ckpt={copy_of(old_run, tmp_path)}",
        "analysis=[landscape]",
        *budget,
        f"paths.output_dir={tmp_path / 'eval'}",
    ]
    with initialize_config_dir(str(CONF), version_base="1.3"):
        reports = run_evaluate(compose("evaluate", overrides=overrides))
    assert reports and "landscape" in reports[0]["analysis"]
    assert built[0].augment == DIGITS_ARRAYS


def test_an_old_run_exports_with_todays_sections(old_run, tmp_path):
    out = export(copy_of(old_run, tmp_path), tmp_path / "export")
    config = yaml.safe_load((out / "config.json").read_text())
    assert config["alternet"]["recipe"]["augment"]["arrays"] == DIGITS_ARRAYS
    assert "- Augmentation: crop_padding\n" in (out / "README.md").read_text()  # the digits' section: no flips


def test_an_old_run_resumes(old_run, tmp_path):
    """Its flat keys compare with today's sections: the same augmentation resumes, a changed one is refused."""
    run_dir = copy_of(old_run, tmp_path)
    resume = [*FAST, "ckpt_path=last", "trainer.max_epochs=2"]
    with pytest.raises(ConfigValueError, match=r"recipe\.augment\.arrays\.hflip: False -> True"):
        train(compose_train(*resume, "recipe.augment.arrays.hflip=true", output_dir=run_dir))
    summary = train(compose_train(*resume, output_dir=run_dir))
    assert (summary["epochs"], summary["global_step"]) == (2, 6)
