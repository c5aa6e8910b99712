"""``recipe.augment`` in one section per data family (issue 37, item 1): every shipped recipe augments every data
family as it did before the sections, a flat key of before (retired, issue 52) fails before any work, and a
checkpoint saved with the flat keys is refused in one line by every reader of a saved recipe."""

from __future__ import annotations

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir

from alternet.apps import cli
from alternet.apps.checks import validate_train_config
from alternet.apps.evaluate import run_evaluate
from alternet.apps.train import train
from alternet.data import build_datamodule, data_config
from alternet.data.augment import SECTIONS, ArraysAugment, AugmentConfig, FilesAugment, fill_from_mean
from alternet.errors import CheckpointError, ConfigValueError
from alternet.hub import export
from alternet.runs.weights import read_weights
from alternet.training.resume import differences
from alternet.typed import build

from helpers import CONF, compose_train, datamodule_of, resolved, typed

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
    "imagenet_weak": BASE_FLAT | {"crop_padding": 0, "random_resized_crop": CROP, "interpolation": "random"},
}
FILE_RECIPES = ("imagefolder", "imagenet", "imagenet_weak")  # every other recipe is the arrays'


def sectioned(flat: dict) -> dict:
    """A flat recipe.augment of before in sections: each stack read its own keys of the one list."""
    return {name: {key: flat[key] for key in keys if key in flat} for name, keys in SECTIONS.items()}


def recipe_family(recipe: str) -> str:
    return "files" if recipe in FILE_RECIPES else "arrays"


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
    steps += [("RandomErasing", erasing, "const")] if erasing else []  # the paper's code's mode
    return steps


RECIPE_CROP = ((0.08, 1.0), (0.75, 1.3333333))
# (recipe, data family) -> its augmentation, as the flat recipe.augment of before built it (OLD_FLAT); a recipe on
# the other family's data was refused then (crop_padding on image files, random_resized_crop on arrays) and now
# reads that family's base section (conf/recipe/_base.yaml)
EXPECTED = {
    **{(r, "arrays"): dict(randaugment=(9.0, 2, 1.0)) for r in ("paper", "cifar10", "cifar100")},
    **{(r, "arrays"): {} for r in ("weak", "fast", "speedrun", *FILE_RECIPES)},  # file recipes: the base's
    ("digits", "arrays"): dict(pad=2, hflip=False),
    ("imagefolder", "files"): dict(crop=RECIPE_CROP, interpolation="random", randaugment=(9.0, 2, 0.5)),
    ("imagenet", "files"): dict(crop=RECIPE_CROP, interpolation="random", randaugment=(9.0, 2, 0.5), erasing=0.25),
    ("imagenet_weak", "files"): dict(crop=RECIPE_CROP, interpolation="random"),  # HDVW get_imagenet's default
    **{(r, "files"): {} for r in RECIPES if r not in FILE_RECIPES},  # the arrays' recipes: the base's
}
REFUSED_BEFORE = {(r, f) for r in RECIPES for f in SECTIONS if f != recipe_family(r)}


@pytest.mark.parametrize("data", sorted(FAMILY))
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_augments_every_data_family_as_before(recipe, data):
    root = ["data.root=/nonexistent"] if FAMILY[data] == "files" else []  # nothing is read: the pipeline is built
    config = resolved(f"data={data}", f"recipe={recipe}", *root)
    validate_train_config(config)
    datamodule = datamodule_of(config)
    size, mean = datamodule.image_size, datamodule.mean
    build = arrays_steps if FAMILY[data] == "arrays" else files_steps
    assert describe(datamodule.train_transform()) == build(size, mean, **EXPECTED[recipe, FAMILY[data]])
    if (recipe, FAMILY[data]) not in REFUSED_BEFORE:  # the same section, read from the recipe's flat keys of before
        assert datamodule.augment.to_dict() == sectioned(OLD_FLAT[recipe])[FAMILY[data]]


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
    datamodule = datamodule_of(config)
    assert describe(datamodule.train_transform())[-1] == ("CoarseDropout", (1, 1), (8, 8), (8, 8), 1.0)
    holes = next(op for op in datamodule.train_transform().transforms if type(op).__name__ == "CoarseDropout")
    assert holes.fill == fill_from_mean(datamodule.mean)  # the mean colour: a hole is 0 once normalised, not black


def test_a_null_section_turns_its_familys_augmentation_off():
    config = resolved("recipe.augment.arrays=null")
    assert describe(datamodule_of(config).train_transform()) == []


# the flat spellings of before and keys in the wrong section -----------------------------------------------------

NOT_A_SECTION = (
    "recipe.augment.crop_padding is not a key of recipe.augment: its sections are ['arrays', 'files']; crop_padding "
    "is a key of recipe.augment.arrays (in-memory arrays: CIFAR, digits)"
)


@pytest.mark.parametrize(
    "override, said",
    [
        ("recipe.augment.crop_padding=8", NOT_A_SECTION),
        ("+recipe.augment.crop_padding=8", "crop_padding is a key of recipe.augment.arrays"),
        (
            "recipe.augment.arrays.random_erasing=0.2",
            "recipe.augment.arrays.random_erasing is not a key of recipe.augment.arrays; random_erasing is a key of "
            "recipe.augment.files",
        ),
    ],
)
def test_a_key_in_the_wrong_section_on_the_command_line_names_its_section(
    override, said, tmp_path, monkeypatch, capsys
):
    """The command line's refusal named no section (only the recipe file's did, through the typed sections)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        # Hydra's logging off: a job's handlers on this test's captured streams would outlive it (closed streams)
        cli.main(["train", "debug=fast", override, "hydra/job_logging=none", "hydra/hydra_logging=none"])
    assert exited.value.code not in (None, 0)
    assert said in f"{exited.value.code}{capsys.readouterr().err}"
    assert not (tmp_path / "outputs").exists()  # no run directory: refused before any work


def test_a_flat_key_in_a_users_recipe_file_fails_before_any_work(tmp_path):
    (tmp_path / "recipe").mkdir()
    (tmp_path / "recipe" / "mine.yaml").write_text(
        "defaults:\n  - fast\n  - _self_\nname: mine\naugment:\n  crop_padding: 8\n"
    )
    config = compose_train(f"hydra.searchpath=[file://{tmp_path}]", "recipe=mine", output_dir=tmp_path / "run")
    with pytest.raises(ConfigValueError) as error:
        train(config)
    assert str(error.value).startswith(NOT_A_SECTION) and "\n" not in str(error.value)
    assert not (tmp_path / "run").exists()


def test_the_config_checks_name_a_key_in_the_wrong_section():
    with pytest.raises(
        ConfigValueError, match=r"recipe\.augment\.files\.cutout is not a key of recipe\.augment\.files"
    ):
        validate_train_config(resolved("+recipe.augment.files.cutout={size: 8}"))
    with pytest.raises(
        ConfigValueError,
        match=r"^recipe\.augment\.arrays\.random_erasing is not a key of recipe\.augment\.arrays; random_erasing is "
        r"a key of recipe\.augment\.files \(image files: folders, ImageNet, shards\)$",
    ):
        build(AugmentConfig, {"arrays": {"random_erasing": 0.25}}, "recipe.augment.")
    with pytest.raises(ConfigValueError, match=r"recipe\.augment\.files\.interpolation='nearest' is not one of"):
        build(AugmentConfig, {"files": {"interpolation": "nearest"}}, "recipe.augment.")
    with pytest.raises(
        ConfigValueError, match=r"recipe\.augment\.array is not a key of recipe\.augment: its sections .*\(did you"
    ):
        build(AugmentConfig, {"array": {"hflip": False}}, "recipe.augment.")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"arrays": {"crop_padding": -1}},
            r"recipe\.augment\.arrays\.crop_padding=-1 is invalid: must be an integer >= 0",
        ),
        ({"arrays": {"hflip": "yes"}}, r"recipe\.augment\.arrays\.hflip='yes' is invalid: must be true or false"),
        ({"arrays": {"cutout": {"p": 2}}}, r"recipe\.augment\.arrays\.cutout\.p=2 is invalid: must be in \[0, 1\]"),
        ({"arrays": {"cutout": {"sizes": 8}}}, r"recipe\.augment\.arrays\.cutout\.sizes is not a key .*did you mean"),
        ({"files": {"random_erasing": 1.5}}, r"recipe\.augment\.files\.random_erasing=1\.5 is invalid: must be in"),
        (
            {"files": {"random_resized_crop": {"scale": [0.9, 0.1]}}},
            r"random_resized_crop\.scale=\[0\.9, 0\.1\] is invalid",
        ),
        (
            {"files": {"random_resized_crop": {"scale": [0.5, 3.0]}}},
            r"random_resized_crop\.scale=\[0\.5, 3\.0\] is invalid: must be a share of the image's area: high <= 1",
        ),
        ({"files": 3}, r"recipe\.augment\.files=3 is invalid: a section of keys \['random_resized_crop', "),
    ],
)
def test_each_augment_key_is_typed_and_ranged(values, message):
    with pytest.raises(ConfigValueError, match=message):
        build(AugmentConfig, values, "recipe.augment.")


def test_a_section_left_partial_in_python_is_off_where_unset():
    assert ArraysAugment(hflip=True).to_dict() == {
        "crop_padding": 0,
        "hflip": True,
        "randaugment": None,
        "cutout": None,
    }
    assert FilesAugment().interpolation == "bilinear" and FilesAugment().random_erasing == 0.0


def test_a_data_module_reads_its_own_section_and_refuses_the_other_stacks_keys():
    augment = {"arrays": {"crop_padding": 2}, "files": {"random_erasing": 0.5}}
    digits = data_config(resolved("data=digits")["data"])
    assert build_datamodule(digits, batch_size=8, augment=augment, seed=0).augment == ArraysAugment(crop_padding=2)
    folder = data_config(resolved("data=imagefolder", "data.root=/nonexistent")["data"])
    assert build_datamodule(folder, batch_size=8, augment=augment, seed=0).augment == FilesAugment(random_erasing=0.5)
    with pytest.raises(ConfigValueError, match=r"recipe\.augment\.crop_padding is not a key of recipe\.augment:"):
        build_datamodule(digits, batch_size=8, augment={"crop_padding": 2}, seed=0)


# checkpoints of before the sections ------------------------------------------------------------------------------

SAVED_BEFORE = "was saved before recipe.augment had its sections (arrays, files): it holds recipe.augment.crop_padding"


def test_resuming_a_checkpoint_of_before_the_sections_is_refused_in_one_line():
    config, sections = resolved(), typed()
    checkpoint = {
        "hyper_parameters": {"model": config["model"], "recipe": config["recipe"] | {"augment": OLD_FLAT["digits"]}}
    }
    with pytest.raises(CheckpointError) as error:
        differences(sections.model, sections.recipe, sections.data, checkpoint)
    assert SAVED_BEFORE in str(error.value) and "\n" not in str(error.value)
    today = {"hyper_parameters": {"model": config["model"], "recipe": config["recipe"]}}
    assert differences(sections.model, sections.recipe, sections.data, today) == {}


def test_a_checkpoint_of_before_the_sections_is_refused_by_every_command_that_reads_it(digits_run, tmp_path):
    """The one reader of a saved recipe (runs.saved_hyperparameters) refuses it: evaluate, export and resume each
    end in its line, before any output."""
    old = tmp_path / "old.ckpt"
    checkpoint = torch.load(digits_run / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["hyper_parameters"]["recipe"]["augment"] = dict(OLD_FLAT["digits"])
    torch.save(checkpoint, old)  # the digest covers the weights only: they are untouched
    with pytest.raises(CheckpointError) as error:
        read_weights(old)
    assert str(error.value).startswith(f"checkpoint {old} {SAVED_BEFORE}")
    refused = r"saved before recipe\.augment had its sections"
    with pytest.raises(CheckpointError, match=refused):
        export(old, tmp_path / "export")
    assert not (tmp_path / "export").exists()
    overrides = [f"ckpt={old}", f"paths.output_dir={tmp_path / 'eval'}"]
    with pytest.raises(CheckpointError, match=refused), initialize_config_dir(str(CONF), version_base="1.3"):
        run_evaluate(compose("evaluate", overrides=overrides))


def test_a_checkpoint_whose_data_facts_are_not_whole_is_refused_in_one_line(digits_run, tmp_path):
    broken = tmp_path / "broken.ckpt"
    checkpoint = torch.load(digits_run / "checkpoints" / "last.ckpt", weights_only=True)
    del checkpoint["hyper_parameters"]["data"]["image_size"]
    torch.save(checkpoint, broken)
    with pytest.raises(CheckpointError) as error:
        read_weights(broken)
    message = str(error.value)
    assert message.startswith(f"checkpoint {broken}: its data hyperparameters are not whole (the data facts lack")
    assert "image_size" in message and "\n" not in message
