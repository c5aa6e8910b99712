"""Every option of every config group composes, and what it describes can be built."""

import math
import re
import shlex

import lightning as L
import pytest
import torch
from hydra.errors import CompactHydraException
from omegaconf import OmegaConf
from PIL import Image

from alternet.apps.checks import validate_train_config
from alternet.apps.config import TrainConfig, check_sources, train_config
from alternet.apps.hydra.composition import composition_error
from alternet.architectures.named import spec_kwargs
from alternet.data import DATAMODULES
from alternet.dataset_facts import DataFacts
from alternet.errors import AlternetError, ConfigValueError
from alternet.training.config import RecipeConfig
from alternet.training.module import ClassificationModule
from alternet.training.precision import choose_precision

from helpers import CONF, compose_train, datamodule_of, resolved


def options(group: str) -> list[str]:
    """A group's selectable options (``_*.yaml`` are base files the options extend)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_"))


def test_default_config_is_digits_alternet_tiny():
    config = resolved()
    assert (config["data"]["name"], config["model"]["name"], config["recipe"]["name"]) == (
        "digits",
        "alternet_tiny",
        "digits",
    )


def test_cifar_defaults_to_the_paper_recipe():
    config = resolved("model=alternet_r50", "data=cifar100")
    assert config["recipe"]["name"] == "paper"
    assert config["recipe"]["optimizer"] == {  # SGD's keys declared by the schema, unset
        "name": "adamw",
        "lr": 1.25e-4,
        "weight_decay": 0.05,
        "betas": [0.9, 0.999],
        "momentum": None,
        "nesterov": None,
    }
    assert config["trainer"]["max_epochs"] == 305
    assert resolved("data=cifar100", "recipe=weak")["recipe"]["optimizer"]["name"] == "sgd"


@pytest.mark.parametrize("model", options("model"))
def test_every_model_option_builds(model):
    # the generic options: a hybrid family from a layout starts from one of its zoo entries; timm needs a name
    names = {"byob": "botnet_cifar", "maxxvit": "coatnet_cifar", "timm": "resnet18"}
    config = resolved(f"model={model}", "data=cifar100", *(["model.name=resnet18"] if model == "timm" else []))
    assert config["model"]["name"] == names.get(model, model)
    sections = train_config(config)
    assert isinstance(sections, TrainConfig)  # typed: every key of the schema, every value its type
    data = datamodule_of(config).facts()
    with torch.device("meta"):  # shapes, no weights: every named model runs for real in tests/models/test_models.py
        module = ClassificationModule(model=sections.model, recipe=sections.recipe, data=data)
        assert module.model.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 100)


def test_model_config_names_the_zoo_architecture_without_restating_it():
    config = resolved("model=alternet_r50")["model"]
    assert config["name"] == "alternet_r50"
    assert config["layout"] is None and config["heads"] is None  # null: the zoo's value
    assert resolved("model=alternet_r50", "model.window=4")["model"]["window"] == 4


@pytest.mark.parametrize("data", options("data"))
def test_every_data_option_builds(data, tmp_path):
    classes = {"digits": 10, "cifar10": 10, "cifar100": 100, "imagefolder": 3, "imagenet": 1000}[data]
    overrides = []
    if data in ("imagefolder", "imagenet"):  # folders find their classes: one folder with one image per class
        for i in range(classes):
            (tmp_path / "train" / f"n{i:08d}").mkdir(parents=True)
            Image.new("RGB", (4, 4)).save(tmp_path / "train" / f"n{i:08d}" / "0.png")
        overrides.append(f"data.root={tmp_path}")
    config = resolved(f"data={data}", *overrides)
    assert isinstance(train_config(config), TrainConfig)
    datamodule = datamodule_of(config)
    assert isinstance(datamodule, DATAMODULES[data])
    assert datamodule.num_classes == classes
    assert "num_classes" not in config["data"]  # the DataModule is the one home of its class count


@pytest.mark.parametrize("recipe", options("recipe"))
def test_every_recipe_option_composes_and_validates(recipe):
    config = resolved(f"recipe={recipe}")
    assert isinstance(validate_train_config(config).recipe, RecipeConfig)
    assert config["trainer"]["max_epochs"] == config["recipe"]["epochs"]


@pytest.mark.parametrize("trainer", options("trainer"))
def test_every_trainer_option_instantiates(trainer, tmp_path):
    values = resolved(f"trainer={trainer}")
    assert isinstance(train_config(values), TrainConfig)
    config = values["trainer"]
    if config["accelerator"] == "gpu" and not torch.cuda.is_available():
        pytest.skip("trainer=gpu needs a GPU")
    config["precision"] = choose_precision(config["precision"], config["accelerator"]).precision  # as train() does
    assert isinstance(L.Trainer(**config, default_root_dir=tmp_path, logger=False), L.Trainer)


@pytest.mark.parametrize("group", ["logger", "callbacks", "experiment", "debug"])
def test_every_other_option_composes_against_its_schema_into_checked_objects(group):
    """With the tests of each model, data, recipe and trainer option above: every config in conf/ composes against
    its schema (no key outside its section's dataclass, every value of its type) and is checked section by section
    (the paper presets' every job: tests/training/test_regimes.py)."""
    for option in options(group):
        values = resolved(f"{group}={option}")
        if "???" in str(values):
            continue  # a value the user must give (data.root of the ImageNet experiments): refused by the checks
        assert isinstance(train_config(values), TrainConfig), option


# Every rule of the config's sections and checks (before any work): one bad value each and the one line it must fail
# with. The data and model sections, typed by the data set and family their names choose (alternet.data.config,
# alternet.architectures.config), each with an unknown key, a wrong type, a missing value and an out-of-range value.
CHECKED = [
    (["recipe.optimizer.lr=inf"], "recipe.optimizer.lr=inf is invalid: must be a finite number"),  # NaN weights
    (["recipe.label_smoothing=nan"], "recipe.label_smoothing=nan is invalid: must be a finite number"),
    (["recipe.epochs=-1"], "recipe.epochs=-1 is invalid: must be an integer >= 1"),
    (["trainer.max_epochs=0"], "trainer.max_epochs=0 is invalid: must be an integer >= 1"),
    (["trainer.max_steps=0"], "trainer.max_steps=0 is invalid: must be an integer >= 1, or -1 (no limit)"),
    (["trainer.deterministic=maybe"], "trainer.deterministic='maybe' is not one of [True, False, None, 'warn']"),
    (  # torch's ValueError once the optimizer was built, after the run started
        ["recipe=speedrun", "recipe.optimizer.momentum=0"],
        "recipe.optimizer.nesterov=true needs momentum > 0 (e.g. momentum=0.9), or set nesterov=false",
    ),
    (["recipe.schedule.min_lr=1.0"], "recipe.schedule.min_lr=1 is above the learning rate the cosine decays from"),
    (["recipe.batch_size=0"], "recipe.batch_size=0 is invalid: must be an integer >= 1"),
    (["recipe.eval_batch_size=0"], "recipe.eval_batch_size=0 is invalid: must be an integer >= 1"),
    (["recipe=paper", "recipe.batch_size=3"], "recipe.batch_size=3 is invalid: mixup/cutmix needs an even batch size"),
    (["recipe.optimizer.lr=0"], "recipe.optimizer.lr=0 is invalid: must be > 0"),
    (["recipe.optimizer.weight_decay=-1"], "recipe.optimizer.weight_decay=-1 is invalid: must be >= 0"),
    (["recipe.label_smoothing=1.5"], "recipe.label_smoothing=1.5 is invalid: must be in [0, 1)"),
    (["recipe.drop_path_rate=1"], "recipe.drop_path_rate=1 is invalid: must be in [0, 1)"),
    (["recipe.grad_clip=0"], "recipe.grad_clip=0 is invalid: must be > 0 (or null to disable clipping)"),
    (["recipe.warmup_epochs=-1"], "recipe.warmup_epochs=-1 is invalid: must be >= 0"),
    (["recipe.layer_decay=2"], "recipe.layer_decay=2 is invalid: must be in (0, 1] (or null: no layer-wise decay)"),
    (["recipe.optimizer.name=adam"], "recipe.optimizer.name='adam' is not one of ['adamw', 'sgd'] (did you mean"),
    (["recipe.optimizer.name=sgd"], "recipe.optimizer.momentum must be set with name=sgd (e.g. 0.9)"),
    (["recipe.optimizer.betas=[0.9]"], "recipe.optimizer.betas=[0.9] is invalid: must be two numbers in [0, 1)"),
    (["recipe.schedule.name=step"], "recipe.schedule.milestones must be set with name=step (e.g. [60, 120, 160])"),
    (["recipe=weak", "recipe.schedule.milestones=[-5]"], "recipe.schedule.milestones=[-5] is invalid: must be epochs"),
    (
        ["recipe.layer_decay=0.7", "recipe.finetune.freeze_backbone=true"],
        "recipe.layer_decay sets every block's learning rate itself: drop recipe.finetune.freeze_backbone",
    ),
    (["recipe.schedule.name=cosin"], "recipe.schedule.name='cosin' is not one of ['cosine', 'step', 'constant']"),
    (["recipe.lr_scale_rule=log"], "recipe.lr_scale_rule='log' is not one of ['linear', 'sqrt', 'none']"),
    (["recipe.lr_scale_batch=0"], "recipe.lr_scale_batch=0 is invalid: must be an integer >= 1: the global batch"),
    (["performance.ddp_compression=fp8"], "performance.ddp_compression='fp8' is not one of ['bf16']"),
    (["performance.ddp_compression=bf16", "trainer.devices=2"], "and trainer.strategy is auto: add trainer=ddp"),
    *(  # timm's families have no patch2 stem: they built the ImageNet one
        ([f"model={name}", "model.stem=patch2"], "model.stem='patch2' is not one of ['auto', 'cifar', 'imagenet']")
        for name in ("resnet50_hdvw", "botnet_cifar", "coatnet_cifar")
    ),
    (["performance.compile_mode=fast"], "performance.compile_mode='fast' is not one of ['auto', 'default', 'reduce-"),
    (["performance.compile=maybe"], "performance.compile='maybe' is invalid: must be auto, true, false or backbone"),
    (["performance.channels_last=maybe"], "performance.channels_last='maybe' is invalid: must be auto, true or false"),
    (["recipe.augment.files.interpolation=nearest"], "recipe.augment.files.interpolation='nearest' is not one of"),
    (["++recipe.augment.crop_padding=8"], "recipe.augment.crop_padding is not a key of recipe.augment: its sections"),
    (["recipe.augment.arrays.crop_padding=-2"], "recipe.augment.arrays.crop_padding=-2 is invalid: must be an integer"),
    (["recipe.augment.arrays.hflip=often"], "recipe.augment.arrays.hflip='often' is invalid: must be true or false"),
    (["+recipe.augment.arrays.flip=true"], "recipe.augment.arrays.flip is not a key of recipe.augment.arrays"),
    (["recipe.augment.arrays.cutout={p: 3}"], "recipe.augment.arrays.cutout.p=3 is invalid: must be in [0, 1]"),
    (["recipe.augment.files.random_erasing=2"], "recipe.augment.files.random_erasing=2 is invalid: must be in [0, 1]"),
    (["recipe.augment.files.hflip=???"], "recipe.augment.files.hflip must be set"),
    (["data=imagefolder"], "data.root must be set"),
    (["data.name=cifar"], "data.name='cifar' is not one of ['digits', 'cifar10', 'cifar100', 'imagefolder'"),
    (["data=imagefolder", "data.root=x", "data.interpolation=near"], "data.interpolation='near' is not one of ['bil"),
    (["data=imagefolder", "data.root=x", "data.crop_pct=0"], "data.crop_pct=0 is invalid: must be in (0, 1]"),
    (["data=imagefolder", "data.root=x", "data.crop_mode=centre"], "data.crop_mode='centre' is not one of ['cent"),
    (["data=imagefolder", "data.root=x", "data.decode=turbo"], "data.decode='turbo' is not one of ['exact', 'fast']"),
    (["++data.colour=red"], "data.colour is not a key of data"),
    (["data.image_size=big"], "data.image_size='big' is invalid: must be an integer"),
    (["data.image_size=null"], "data.image_size=null is invalid: must be an integer"),  # was the default, silently
    (["data.num_workers=null"], "data.num_workers=null is invalid: must be an integer or a string"),
    (["trainer.devices=null"], "trainer.devices=null is invalid: must be an integer or a string or a list"),
    (["seed=-1"], "seed=-1 is invalid: must be an integer in [0, 2**32 - 1]"),  # was NumPy's traceback
    (["seed=4294967296"], "seed=4294967296 is invalid: must be an integer in [0, 2**32 - 1]"),
    (["trainer.accumulate_grad_batches=0"], "trainer.accumulate_grad_batches=0 is invalid: must be an integer >= 1"),
    (["data.mean=grey"], "data.mean='grey' is invalid: must be a list of numbers"),
    (["~data.val_size"], "data.val_size must be set"),
    (["data.subset=2"], "data.subset=2 is invalid: a fraction of the training split in (0, 1]"),
    (["++model.colour=red"], "model.colour is not a key of model"),
    (["model.widths=wide"], "model.widths='wide' is invalid: must be a list of integers"),
    (["~model.buildup_rules"], "model.buildup_rules must be set"),
    (["model.head_dim=0"], "model.head_dim=0 is invalid: must be an integer >= 1"),
    (["model.attention=position_only"], "model.attention=position_only needs model.bias_per_head=true"),
    (["model=vit_ti_cifar", "model.local_kernel=0"], "model.local_kernel=0 is invalid: must be a window side >= 2"),
    (["model=vit_ti_cifar", "model.local_kernel=1"], "model.local_kernel=1 is invalid: must be a window side >= 2"),
    (["model=vit_ti_cifar", "model.depth=[1]"], "model.depth=[1] is invalid: must be an integer"),
    (["model=pit_ti_cifar", "model.mlp_ratio=x"], "model.mlp_ratio='x' is invalid: must be a finite number"),
    (["model=timm", "model.name=resnet18", "model.pretrained=[1]"], "model.pretrained=[1] is invalid: must be true"),
    (["model=byob", "model.self_attn_layer=halos"], "model.self_attn_layer='halos' is not one of"),
    (["data.val_size=-1"], "data.val_size=-1 is invalid: must be a count >= 0 or a fraction in (0, 1)"),
    (["data.val_size=1.5"], "data.val_size=1.5 is invalid: must be a count >= 0 or a fraction in (0, 1)"),
    (["data.num_workers=-1"], "data.num_workers=-1 is invalid: must be auto or an integer >= 0"),
    (["data.image_size=0"], "data.image_size=0 is invalid: must be an integer >= 1"),
    (["model.name=alternet_r9000"], "unknown model 'alternet_r9000'"),
    (["model.attention=windows"], "model.attention='windows' is not one of ['window', 'global', 'focused_linear'"),
    (["model.block=basik"], "model.block='basik' is not one of ['basic', 'bottleneck'] (did you mean 'basic'?)"),
    (["model.stem=cifr"], "model.stem='cifr' is not one of ['auto', 'cifar', 'patch2', 'imagenet']"),
    (["model.buildup_rules=maybe"], "model.buildup_rules='maybe' is not one of ['warn', 'off']"),
    (["model=maxxvit", "data.image_size=32", "model.conv_block=X"], "model.conv_block='X' is not one of"),
    (["trainer.precision=17"], "trainer.precision=17 is not one of ['auto', 'transformer-engine'"),
    (["++trainer.max_epoch=1"], "trainer.max_epoch is not an argument of lightning.Trainer (did you mean"),
    (["trainer.devices=0"], "trainer.devices=0 is invalid: must be auto, -1 (all), a count >= 1"),
    (["optimized_metric=val/foo"], "optimized_metric=val/foo is not a metric this run reports"),
    (["callbacks.checkpoint.monitor=val/foo"], "callbacks.checkpoint.monitor=val/foo is not a metric the run logs"),
    (
        ["callbacks.early_stopping={monitor: val/accc, mode: max}"],
        "callbacks.early_stopping.monitor=val/accc is not a metric the run logs at epoch end",
    ),
    (["callbacks.early_stopping={monitor: val/acc}"], "callbacks.early_stopping={'monitor': 'val/acc'} is invalid"),
    (["callbacks.early_stopping={monitor: val/acc, mode: maximum}"], "Lightning's EarlyStopping arguments with its"),
    (
        ["callbacks.early_stopping={monitor: val/acc, mode: max, patience: abc}"],
        "callbacks.early_stopping.patience='abc' is invalid: must be an integer >= 0",
    ),
    (["trainer.limit_train_batches=0"], "trainer.limit_train_batches=0 is invalid: must be a count >= 1 or a fraction"),
    (
        ["trainer.limit_val_batches=0"],
        "callbacks.checkpoint.monitor=val/nll watches validation, and trainer.limit_val_batches=0 runs none",
    ),
    (["data.mean=[0.5]"], "data.mean=[0.5] is invalid: must be 3 values in [0, 1], one per RGB channel"),
    (["data.std=[0,0,0]"], "data.std=[0, 0, 0] is invalid: must be 3 values in (0, 1], one per RGB channel"),
    (["data.std=[58.4,57.1,57.4]"], "(statistics in 0-255 units: divide them by 255) (or null: the data set's own)"),
    (["callbacks.early_stopping={monitor: val/acc, mode: max, patiense: 3}"], "Lightning's EarlyStopping arguments"),
    (
        ["data.val_size=0", "callbacks.early_stopping={monitor: val/acc, mode: max}"],
        "callbacks.early_stopping watches a validation metric and this run holds no validation split",
    ),
    (["callbacks.checkpoint.every_n_train_steps=-1"], "callbacks.checkpoint.every_n_train_steps=-1 is invalid"),
    (["callbacks.checkpoint.save_top_k=-2"], "callbacks.checkpoint.save_top_k=-2 is invalid: must be an integer >= -1"),
    (["callbacks.checkpoint.train_time_interval=banana"], "callbacks.checkpoint.train_time_interval='banana' is"),
    (["callbacks.preemption.signals=[SIGFOO]"], "callbacks.preemption.signals has unknown signal names ['SIGFOO']"),
    (["callbacks.preemption.sync_every_n_steps=0"], "callbacks.preemption.sync_every_n_steps must be a positive"),
    (["export.after_training=true", "export.ema=true"], "export.ema=true needs EMA weights"),
    (["evaluate.device=tpu9"], "evaluate.device='tpu9' is invalid: use auto, cpu, cuda or cuda:N"),
    (["evaluate.precision=8"], "evaluate.precision='8' is not one of ['32', 'bf16', '16']"),
    (["evaluate.batch_size=0"], "evaluate.batch_size=0 is invalid: must be an integer >= 1"),
    (["evaluate.num_workers=-1"], "evaluate.num_workers=-1 is invalid: must be auto or an integer >= 0"),
    (["evaluate.calibration.n_bins=0"], "evaluate.calibration.n_bins=0 is invalid: must be an integer in [1, 100,000]"),
    (["evaluate.robustness.precision=fp8"], "evaluate.robustness.precision='fp8' is not one of ['32', 'bf16', '16'"),
    (["evaluate.robustness.corruptions=[snow2]"], "evaluate.robustness.corruptions: unknown ['snow2']"),
    (["evaluate.robustness.severities=[9]"], "evaluate.robustness.severities=[9] must be a non-empty subset of 1..5"),
    (["evaluate.robustness.corruptions=[]"], "evaluate.robustness.corruptions=[] names none: leave it null for the"),
    (["evaluate.robustness.enabled=off"], "evaluate.robustness.enabled='off' is invalid: must be auto, true or false"),
    (["evaluate.robustness.max_images=0"], "evaluate.robustness.max_images=0 is invalid: null (every image) or"),
    (["evaluate.robustness.preprocess=resize"], "evaluate.robustness.preprocess='resize' is not one of"),
    (["logger=wandb", "logger.wandb.init_timeout=0"], "logger.wandb.init_timeout=0 is invalid: must be seconds > 0"),
    (["logger=wandb", "logger.wandb.offline=maybe"], "logger.wandb.offline='maybe' is invalid: must be true or false"),
    (["recipe.ema.decay=1.5"], "recipe.ema.decay=1.5 is invalid: must be in (0, 1)"),
    (["+recipe.ema.decy=0.9"], "recipe.ema.decy is not a key of recipe.ema (did you mean 'decay'?)"),
    (["recipe=paper", "recipe.mixup.prob=2"], "recipe.mixup.prob=2 is invalid: must be in [0, 1]"),
    (["recipe.optimizer.momentum=1"], "recipe.optimizer.momentum=1 is invalid: must be in [0, 1)"),
    (["recipe.schedule.gamma=0"], "recipe.schedule.gamma=0 is invalid: must be in (0, 1]"),
    (["recipe.progressive_resize={sizes: [0], epochs: [1]}"], "recipe.progressive_resize.sizes=[0] is invalid: a"),
    (
        ["callbacks.checkpoint.mode=up"],
        "callbacks.checkpoint.mode='up' is invalid: must be min, max or null (the monitored metric's own)",
    ),
    (["callbacks.progress.interval=-1"], "callbacks.progress.interval=-1 is invalid: must be seconds >= 0"),
    (["performance.matmul_precision=low"], "performance.matmul_precision='low' is not one of ['highest', 'high'"),
    (["logger=wandb", "+logger.wandb.mode=offline"], "logger.wandb.mode is not a key of logger.wandb"),
    (["logger=wandb", "logger.wandb.project=???"], "logger.wandb.project must be set"),
    (["logger=wandb", "logger.wandb.tags=abc"], "logger.wandb.tags='abc' is invalid: must be a list"),
]


@pytest.mark.parametrize(("overrides", "message"), CHECKED, ids=[" ".join(case[0]) for case in CHECKED])
def test_bad_values_are_rejected_with_the_key(overrides, message):
    with pytest.raises(AlternetError) as error:  # ConfigValueError, LayoutError, ...: one line each
        validate_train_config(resolved(*overrides))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_the_cosine_floor_is_checked_against_the_rate_scaled_to_the_global_batch():
    """min_lr was compared with recipe.optimizer.lr as written, while the cosine decays from the rate scaled to the
    global batch: at batch 16 of the digits recipe's 64 (2e-3 -> 5e-4) a floor of 1e-3 made the 'decay' climb, and
    at batch 128 (4e-3) a floor of 3e-3 was refused though the cosine decays to it."""
    floor = ["recipe.optimizer.lr=2e-3", "recipe.lr_scale_rule=linear"]
    with pytest.raises(AlternetError) as error:
        validate_train_config(resolved(*floor, "recipe.batch_size=16", "recipe.schedule.min_lr=1e-3"))
    assert str(error.value) == (
        "recipe.schedule.min_lr=0.001 is above the learning rate the cosine decays from, 0.0005 "
        "(recipe.optimizer.lr=0.002 scaled linear from recipe.lr_scale_batch=64 to the global batch 16): set min_lr "
        "below it (0.0: to zero)"
    )
    validate_train_config(resolved(*floor, "recipe.batch_size=128", "recipe.schedule.min_lr=3e-3"))


def tour_commands() -> list[list[str]]:
    """The single-run ``alternet train`` lines of the pages a newcomer reads first (sweeps, experiments on a GPU and
    a user's own package left out)."""
    root, found = CONF.parent, []
    for page in ("README.md", "docs/index.md", "docs/training.md"):
        for line in (root / page).read_text().splitlines():
            skipped = ("experiment=", "--cfg", " -m ", "my_pkg", "imports=")
            if line.startswith("alternet train") and not any(text in line for text in skipped):
                found.append(shlex.split(line.split("  #")[0])[2:])
    return found


@pytest.mark.parametrize("arguments", tour_commands(), ids=" ".join)
def test_the_tour_commands_validate(arguments):
    """A documented command a newcomer copies passes every check before work (the layout hybrid's failed its own)."""
    validate_train_config(resolved(*arguments))


def test_a_job_that_runs_on_another_machine_is_not_held_to_this_ones_gpus_and_memory(monkeypatch):
    """A SLURM sweep of the paper's GPU recipe, started on a login node without a GPU, was refused: "this machine
    has no usable CUDA GPU". Its jobs are checked where they are submitted without this machine's devices and
    memory (``here=False``), and where they run with them."""
    import alternet.apps.checks as checks

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(checks, "machine_memory", lambda: 2**29)  # a quarter fits no 224-px batch of 256 (147 MiB)
    gpu = resolved("trainer.accelerator=gpu", "evaluate.device=cuda", "data.image_size=224", "recipe.batch_size=256")
    validate_train_config(gpu, here=False)
    with pytest.raises(ConfigValueError, match=r"trainer\.accelerator=gpu but this machine has no usable CUDA GPU"):
        validate_train_config(gpu)
    with pytest.raises(ConfigValueError, match=r"needs 0\.1 GiB for one batch of input images alone, more than a"):
        validate_train_config(resolved("data.image_size=224", "recipe.batch_size=256"))


def test_the_trainer_arguments_read_without_lightning_are_its_signatures():
    """``+trainer.KEY`` is checked as the config is typed, before torch is imported, against the argument names
    read from Lightning's source (``training.config.trainer_arguments``): they are the imported class's."""
    import inspect

    import lightning as L

    from alternet.training.config import trainer_arguments

    assert trainer_arguments() == frozenset(inspect.signature(L.Trainer.__init__).parameters) - {"self"}


def test_settings_that_do_nothing_they_seem_to_are_warned():
    """A growth longer than the run never trains at the data's size; a finetune setting without pretrained weights
    trains from random ones (a control, so a warning, not a refusal)."""
    grown = ["recipe.progressive_resize.sizes=[8]", "recipe.progressive_resize.epochs=[5]", "trainer.max_epochs=3"]
    with pytest.warns(UserWarning, match=r"grows over 5 epochs and trainer.max_epochs=3: the model never trains at"):
        validate_train_config(resolved(*grown))
    with pytest.warns(UserWarning, match=r"recipe.finetune treats the backbone apart and model.pretrained is not set"):
        validate_train_config(resolved("recipe.finetune.freeze_backbone=true"))
    with pytest.warns(UserWarning, match=r"recipe.schedule.milestones \[60, 120, 160\] come at or after the run's"):
        validate_train_config(resolved("recipe=weak", "trainer.max_epochs=10"))


def test_a_time_interval_reads_as_lightnings_max_time_does():
    from alternet.training.config import parse_interval

    assert parse_interval("01:30:00") == 5400 and parse_interval("1:00:00:00") == 86400 and parse_interval(90) == 90
    assert math.isnan(parse_interval("1:2:3:4:5")) and math.isnan(parse_interval("-30"))
    config = validate_train_config(resolved("callbacks.checkpoint.train_time_interval='00:00:30:00'"))
    assert parse_interval(config.callbacks.checkpoint.train_time_interval) == 1800


def test_a_validation_metric_of_an_image_folders_val_split_can_be_optimized(tmp_path):
    """data=imagenet's val_size is 0: its validation split is the folder's val/, which the run reports."""
    (tmp_path / "val").mkdir()
    monitored = ["callbacks.checkpoint.monitor=val/acc", "callbacks.checkpoint.mode=max", "optimized_metric=val/acc"]
    folder = ["data=imagefolder", f"data.root={tmp_path}", "data.val_size=0", "data.image_size=16", *monitored]
    validate_train_config(resolved(*folder))
    (tmp_path / "val").rmdir()
    with pytest.raises(ConfigValueError, match="optimized_metric=val/acc is not a metric this run reports"):
        validate_train_config(resolved(*folder))


# Refused by the schema while Hydra composes (alternet.apps.config), in the one line the command prints
COMPOSED = [
    (["seed=abc"], "seed=abc is invalid: must be an integer"),
    (["recipe.test_flip=maybe"], "recipe.test_flip=maybe is invalid: must be true or false"),
    (["performance.allow_emulated_precision=maybe"], "performance.allow_emulated_precision=maybe is invalid: must be"),
    (["recipe.optimizer.lr=abc"], "recipe.optimizer.lr=abc is invalid: must be a number"),
    (["recipe.epochs=1.5"], "recipe.epochs=1.5 is invalid: must be an integer"),
    (["recipe.optimizer=3"], "recipe.optimizer=3 is invalid: it is a section of keys"),
    (["recipe.optimizer.lrx=1"], "recipe.optimizer.lrx is not a key of recipe.optimizer (did you mean 'lr'?)"),
    (["callbacks.checkpoint.save_top_k=x"], "callbacks.checkpoint.save_top_k=x is invalid: must be an integer"),
    (["evaluate.calibration.n_bin=3"], "evaluate.calibration.n_bin is not a key of evaluate.calibration"),
    (["export.after_training=sure"], "export.after_training=sure is invalid: must be true or false"),
    (["paths.log_dirs=x"], "paths.log_dirs is not a key of paths (did you mean 'log_dir'?)"),
    (
        ["recipe.ema=null"],
        "recipe.ema=null is invalid: a section of keys is never null: recipe.ema.decay=null switches",
    ),
    (
        ["recipe.progressive_resize=null"],
        "recipe.progressive_resize=null is invalid: a section of keys is never null: ",
    ),
    (
        ["recipe.augment.arrays.cutout.holes=2"],
        "recipe.augment.arrays.cutout.holes cannot be set while recipe.augment.arrays.cutout is null: set the section "
        "whole, e.g. recipe.augment.arrays.cutout={holes: VALUE}",
    ),
    (["logger.wandb.project=x"], "logger.wandb.project cannot be set while logger.wandb is null: choose logger=wandb"),
]


@pytest.mark.parametrize(("overrides", "message"), COMPOSED, ids=[" ".join(case[0]) for case in COMPOSED])
def test_the_schema_refuses_a_wrong_type_or_an_unknown_key_while_composing(overrides, message):
    with pytest.raises(CompactHydraException) as error:
        compose_train(*overrides)
    line = composition_error(error.value, "train")
    assert line.startswith(message) and "\n" not in line


def test_the_checkpoint_monitors_mode_follows_its_metric_and_a_mode_seeking_its_worst_is_said(tmp_path):
    """callbacks.checkpoint.monitor=val/acc kept the worst epoch under the default mode=min, and a sweeper optimised
    it: the mode is now the metric's own unless set; one set against the metric is obeyed and said."""
    from alternet.errors import AlternetWarning
    from alternet.runs.directories import RunDir
    from alternet.training.builders import build_callbacks

    def checkpoint_mode(*overrides):
        config = validate_train_config(resolved(*overrides))
        callbacks = build_callbacks(config.callbacks, 0, RunDir(tmp_path), has_val=True, progress_bar_on=False)
        return callbacks[0].mode

    assert checkpoint_mode("callbacks.checkpoint.monitor=val/acc") == "max"
    assert checkpoint_mode() == "min"  # val/nll
    with pytest.warns(AlternetWarning, match=r"^callbacks.early_stopping.monitor=val/nll with callbacks.early_sto"):
        validate_train_config(resolved("callbacks.early_stopping={monitor: val/nll, mode: max}"))
    with pytest.warns(AlternetWarning, match=r"keeps the epoch of the lowest val/top5, its worst \(null, the def"):
        assert checkpoint_mode("callbacks.checkpoint.monitor=val/top5", "callbacks.checkpoint.mode=min") == "min"


def test_a_composition_error_names_the_first_error_of_its_chain():
    """A sweeper plugin installed without its library: Hydra's line ended on "Error loading 'optuna.samplers.X':",
    the ImportError that says why two causes down."""
    from hydra.errors import HydraException, InstantiationException

    missing = ModuleNotFoundError("No module named 'optuna'")
    loading = InstantiationException("Error loading 'optuna.samplers.TPESampler':\nModuleNotFoundError(...)")
    loading.__cause__ = missing
    error = HydraException("Error locating target 'optuna.samplers.TPESampler'")
    error.__cause__ = loading
    line = composition_error(error, "train")
    assert line.endswith("Error loading 'optuna.samplers.TPESampler':; No module named 'optuna'") and "\n" not in line


def test_the_speedrun_preset_is_an_alternet_that_follows_the_buildup_rules(recwarn):
    config = resolved("experiment=cifar100_speedrun", "data.root=/data")
    validate_train_config(config)  # the build-up rules warn when broken
    assert not [w for w in recwarn if "buildup_rules" in str(w.message)]
    layout = config["model"]["layout"] or spec_kwargs(config["model"]["name"])["layout"]  # null: the zoo's
    assert "M" in layout and config["data"]["name"] == "cifar100"
    # fp32 on every CPU: in bf16, where native, it left no margin above 60% (docs/benchmarks.md)
    assert (config["trainer"]["precision"], config["performance"]["channels_last"]) == ("32-true", True)
    assert config["recipe"]["test_flip"] is True


def test_the_speedrun_grows_from_sizes_its_model_runs_at():
    """4 epochs at 16 px, 6 at 24, the rest at 32: the MSA's 4x4 window is clipped to the last stage's 2x2 and 3x3
    maps, and the module's own check at construction passes."""
    config = resolved("experiment=cifar100_speedrun", "data.root=/data")
    assert config["recipe"]["progressive_resize"] == {"sizes": [16, 24], "epochs": [4, 6]}
    assert config["recipe"]["epochs"] == 15
    data = DataFacts("cifar100", num_classes=100, image_size=32, mean=(0.5,) * 3, std=(0.25,) * 3)
    sections = train_config(config)
    module = ClassificationModule(model=sections.model, recipe=sections.recipe, data=data)
    assert module.progressive == [(16, 4), (24, 10)]
    with torch.no_grad():
        for size in (16, 24, 32):
            assert module.model(torch.zeros(2, 3, size, size)).shape == (2, 100)


def test_warmup_longer_than_the_run_is_a_warning():
    with pytest.warns(UserWarning, match="recipe.warmup_epochs=5 exceeds trainer.max_epochs=1"):
        validate_train_config(resolved("recipe=paper", "trainer.max_epochs=1"))


def test_slurm_launcher_runs_one_task_per_device(tmp_path):
    from hydra import compose, initialize_config_dir
    from submitit.slurm.slurm import _make_sbatch_string

    overrides = ["hydra/launcher=slurm", "trainer=ddp", "trainer.devices=4", "trainer.num_nodes=2"]
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert (launcher["nodes"], launcher["tasks_per_node"], launcher["gpus_per_node"]) == (2, 4, 4)
    # the job script submitit writes: srun ends every task once one fails (no rank left waiting for a refused rank 0)
    script = _make_sbatch_string(command="python train.py", folder=tmp_path, setup=launcher["setup"], nodes=2)
    lines = script.splitlines()
    export = lines.index("export SLURM_KILL_BAD_EXIT=1")
    assert export < next(i for i, line in enumerate(lines) if line.startswith("srun "))


def test_model_config_cannot_contradict_the_data():
    from alternet.architectures.config import model_config
    from alternet.models.factory import model_args

    timm_model = {"name": "resnet18", "pretrained": None}
    with pytest.raises(ConfigValueError, match=r"model\.num_classes=5 contradicts data\.num_classes=10"):
        model_args(model_config(timm_model | {"num_classes": 5}), num_classes=10, img_size=16, drop_path_rate=0.0)
    kwargs = model_args(model_config(timm_model | {"drop_rate": 0.3}), num_classes=10, img_size=16, drop_path_rate=0.1)
    assert kwargs == {"drop_path_rate": 0.1, "drop_rate": 0.3, "num_classes": 10}  # resnet18 takes no img_size
    zoo = model_config(resolved("model=alternet_tiny")["model"] | {"pretrained": "dir"})
    kwargs = model_args(zoo, num_classes=10, img_size=16, drop_path_rate=0)
    assert kwargs == {"drop_path_rate": 0, "num_classes": 10, "img_size": 16}  # null keys: the zoo's values


def test_debug_fast_is_a_few_batches_per_loop():
    trainer = resolved("debug=fast")["trainer"]
    assert (trainer["max_epochs"], trainer["limit_train_batches"], trainer["limit_val_batches"]) == (1, 3, 2)
    assert trainer["limit_test_batches"] == 2 and trainer["enable_progress_bar"] is False


def test_exporting_ema_weights_needs_ema():
    with pytest.raises(ConfigValueError, match=r"export\.ema=true needs EMA weights"):
        validate_train_config(resolved("export.after_training=true", "export.ema=true"))


def test_a_key_of_another_optimizer_or_schedule_is_said_to_be_unread():
    """momentum on AdamW, gamma on a cosine schedule: accepted and unread without a word; no packaged recipe has one."""
    import warnings

    from alternet.errors import AlternetWarning

    with pytest.warns(AlternetWarning, match=r"^recipe.optimizer.momentum is not read by recipe.optimizer.name=adamw"):
        validate_train_config(resolved("recipe.optimizer.momentum=0.5"))
    with pytest.warns(AlternetWarning, match=r"^recipe.schedule.gamma is not read by recipe.schedule.name=cosine"):
        validate_train_config(resolved("recipe.schedule.gamma=0.1"))
    recipes = [p.stem for p in (CONF / "recipe").glob("*.yaml") if not p.stem.startswith("_")]
    for recipe in recipes:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            validate_train_config(resolved(f"recipe={recipe}"))
        unread = [w for w in caught if re.match(r"recipe\.(optimizer|schedule)\.\w+ is not read", str(w.message))]
        assert not unread, recipe


def test_a_recipe_written_for_the_other_data_family_warns_that_its_randaugment_is_not_read():
    """data=digits recipe=imagenet trained without RandAugment, without a word: the recipe's policy is on the stack
    of image files, and digits reads the stack of arrays."""
    import warnings

    from alternet.errors import AlternetWarning

    unread = r"^recipe.augment.files.randaugment=rand-m9-n2-mstd0.5 is not read by data=digits, which reads recipe"
    with pytest.warns(AlternetWarning, match=unread + r".augment.arrays \(randaugment null there\): it trains with"):
        validate_train_config(resolved("recipe=imagenet"))
    for overrides in (["recipe=paper"], ["recipe=imagenet", "recipe.augment.arrays.randaugment=rand-m9-n2"]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            validate_train_config(resolved(*overrides))
        assert not [w for w in caught if "randaugment" in str(w.message)], overrides


def test_weights_to_start_from_that_do_not_exist_are_refused_before_work_unless_the_run_resumes(tmp_path):
    """``model.pretrained=PATH`` is checked before torch is imported (``check_sources``, from the run's pre-flight,
    after its output); a run that resumes reads its own checkpoint's weights, so a starting point moved since does
    not stop it."""
    missing = tmp_path / "moved-export"
    with pytest.raises(AlternetError, match=f"^{re.escape(str(missing))} does not exist: expected a run directory"):
        check_sources(train_config(resolved(f"model.pretrained={missing}")))
    check_sources(train_config(resolved(f"model.pretrained={missing}", "ckpt_path=last")))
    with pytest.raises(AlternetError, match=r"is neither a run directory \(no checkpoints/ folder\) nor a folder"):
        check_sources(train_config(resolved(f"model.pretrained={tmp_path}")))
    (tmp_path / "config.json").write_text("{}")  # an export, as far as the file system tells
    check_sources(train_config(resolved(f"model.pretrained={tmp_path}")))


def test_a_resume_from_a_path_that_holds_no_checkpoint_is_refused_before_work_with_what_lies_beside_it(tmp_path):
    """A training run's ``ckpt_path`` is checked in the first pass as far as the file system tells: a word, a folder,
    a missing file, a file that is no checkpoint. Where other checkpoints lie beside a bad file, the run itself
    refuses it naming those that read whole (it reads their weights), so the first pass leaves it to the run."""
    text = tmp_path / "notes" / "notes.ckpt"
    text.parent.mkdir()
    text.write_text("not a checkpoint")
    beside = f"; no other checkpoint in {text.parent} reads whole"
    cases = {
        "best": "ckpt_path=best names no file: give a checkpoint's path (a run's checkpoints/NAME.ckpt), or ckpt_pa",
        str(tmp_path): f"checkpoint {tmp_path} is a directory, not a checkpoint: pass a .ckpt file",
        str(tmp_path / "gone.ckpt"): f"checkpoint {tmp_path / 'gone.ckpt'} does not exist; no other checkpoint in",
        str(text): f"checkpoint {text} is not a torch checkpoint: it does not begin as torch.save's zip archive",
    }
    for path, message in cases.items():
        with pytest.raises(AlternetError, match=f"^{re.escape(message)}") as refused:
            check_sources(train_config(resolved(f"ckpt_path={path}")))
        assert path != str(text) or str(refused.value).endswith(beside)
    check_sources(train_config(resolved("ckpt_path=last")))  # the run directory's, if there is one
    for path in (tmp_path / "gone.ckpt", text):  # beside another checkpoint: the run names those that read whole
        (path.parent / "last.ckpt").write_bytes(b"PK\x03\x04")
        check_sources(train_config(resolved(f"ckpt_path={path}")))
