"""Recipes: each one trains, mixup targets, schedule values, batch-scaled lr, weight-decay groups, EMA, bf16."""

import csv
import math
import re
from dataclasses import replace

import pytest
import torch
from omegaconf import OmegaConf

from alternet.apps.config import train_config
from alternet.apps.train import train
from alternet.errors import ConfigValueError
from alternet.models import create_model
from alternet.models.params import decay_groups
from alternet.training.module import ClassificationModule
from alternet.training.optim import lr_factor
from alternet.training.precision import choose_precision

from helpers import CONF, FAST, compose_train, datamodule_of, module_of, resolved, typed

RECIPES = sorted(p.stem for p in (CONF / "recipe").glob("*.yaml") if not p.stem.startswith("_"))
TWO_STEPS = [*FAST, "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]


FILE_RECIPES = ("imagefolder", "imagenet", "imagenet_weak")  # augment image files (random-resized crops...)


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_trains_two_steps(recipe, tmp_path, request):
    data = []
    if recipe in FILE_RECIPES:
        folder = request.getfixturevalue("image_folder")
        data = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", "data.num_workers=0"]
    summary = train(compose_train(*TWO_STEPS, *data, f"recipe={recipe}", "recipe.batch_size=16", output_dir=tmp_path))
    assert summary.global_step == 2
    assert math.isfinite(summary.test["nll"])


def paper_module() -> ClassificationModule:
    config = OmegaConf.to_container(compose_train("data=cifar100", "model=alternet_tiny"), resolve=True)
    sections = train_config(config)
    return ClassificationModule(model=sections.model, recipe=sections.recipe, data=datamodule_of(config).facts())


def test_mixup_produces_soft_targets_that_sum_to_one():
    module = paper_module()
    torch.manual_seed(0)
    images, labels = torch.randn(8, 3, 32, 32), torch.arange(8)
    mixed, targets = module.mixup(images.clone(), labels)
    assert targets.shape == (8, 100)
    torch.testing.assert_close(targets.sum(dim=1), torch.ones(8))
    assert (targets > 0).sum(dim=1).min() >= 2  # mixed and smoothed: no one-hot rows
    assert targets.max() < 1.0
    assert not torch.equal(mixed, images)


def test_warmup_then_cosine_schedule_values():
    kwargs = dict(total_steps=1000, warmup_steps=100, schedule="cosine")
    assert lr_factor(0, **kwargs) == pytest.approx(0.01)
    assert lr_factor(99, **kwargs) == pytest.approx(1.0)  # warm-up ends at the base rate
    assert lr_factor(550, **kwargs) == pytest.approx(0.5)  # half-way through the cosine
    assert lr_factor(999, **kwargs) == pytest.approx(0.5 * (1 + math.cos(math.pi * 899 / 900)))
    assert lr_factor(1000, **kwargs) == pytest.approx(0.0, abs=1e-12)


def test_a_resume_with_a_new_learning_rate_follows_one_rule_from_its_first_step():
    """A resumed run with a new recipe.optimizer.lr rebuilds its schedule from the new base (the floor min_lr kept)
    and restores the saved one: its first step ran at the saved rate times new/saved (0.5 x a cosine that already
    includes the floor), the next ones by the rebuilt rule, so the rate jumped up once (1.13x the uninterrupted)."""
    from alternet.training.config import ScheduleConfig
    from alternet.training.optim import build_scheduler, rescale_learning_rates

    def schedule(lr: float) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        config = ScheduleConfig(name="cosine", min_lr=1e-4)
        return optimizer, build_scheduler(optimizer, config, steps_per_epoch=5, epochs=4, warmup_epochs=1, base_lr=lr)

    saved_optimizer, saved = schedule(2e-3)
    for _ in range(10):
        saved_optimizer.step()
        saved.step()
    optimizer, resumed = schedule(1e-3)  # configure_optimizers at the new rate, then Lightning's restore
    optimizer.load_state_dict(saved_optimizer.state_dict())
    resumed.load_state_dict(saved.state_dict())
    rescale_learning_rates(optimizer, resumed, 0.5)
    rates = []
    for _ in range(6):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        resumed.step()
    expected = [
        1e-3 * lr_factor(s, total_steps=20, warmup_steps=5, schedule="cosine", min_lr_ratio=0.1) for s in range(10, 16)
    ]
    assert rates == pytest.approx(expected, rel=1e-9)


def test_step_schedule_values():
    kwargs = dict(total_steps=1000, warmup_steps=10, schedule="step", milestones=[110, 210], gamma=0.2)
    assert lr_factor(9, **kwargs) == 1.0
    assert lr_factor(109, **kwargs) == 1.0
    assert lr_factor(110, **kwargs) == pytest.approx(0.2)
    assert lr_factor(999, **kwargs) == pytest.approx(0.04)


def test_the_trainer_follows_the_schedule(tmp_path):
    summary = train(compose_train(*FAST, "trainer.limit_train_batches=null", output_dir=tmp_path))
    with open(tmp_path / "logs" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("train/lr")]
    lrs = [float(r["train/lr"]) for r in rows]
    steps = summary.global_step  # one epoch, all of it warm-up in the digits recipe
    peak = 2e-3 * 16 / 64  # the recipe's lr is for a batch of 64 (lr_scale_batch), FAST's batches hold 16
    assert lrs[0] == pytest.approx(peak / steps)
    assert lrs[-1] == pytest.approx(peak * len(lrs) / steps)


def test_learning_rate_scales_with_global_batch(tmp_path):
    config = compose_train(*TWO_STEPS, "recipe.lr_scale_batch=32", "recipe.batch_size=64", output_dir=tmp_path)
    config = OmegaConf.to_container(config, resolve=True)
    import lightning as L

    datamodule = datamodule_of(config)
    module = module_of(config, datamodule.facts())
    config["trainer"]["precision"] = choose_precision(config["trainer"]["precision"], "cpu").precision  # as train()
    trainer = L.Trainer(**config["trainer"], logger=False, enable_checkpointing=False, default_root_dir=tmp_path)
    trainer.fit(module, datamodule=datamodule)
    assert trainer.optimizers[0].param_groups[0]["initial_lr"] == pytest.approx(2 * 2e-3)


def test_norm_bias_and_position_bias_can_be_excluded_from_weight_decay():
    model = create_model("alternet_tiny", num_classes=10, img_size=16)
    groups = decay_groups(model, 0.05, exclude_norm_bias=True)
    decayed, undecayed = groups
    assert decayed["weight_decay"] == 0.05 and undecayed["weight_decay"] == 0.0
    undecayed_ids = {id(p) for p in undecayed["params"]}
    names = {n for n, p in model.named_parameters() if id(p) in undecayed_ids}
    assert "stages.1.1.attn.rel_pos_bias" in names  # 2-D, excluded by name
    assert "norm.bn.weight" in names and "head.fc.bias" in names
    assert "head.fc.weight" not in names and "stem.conv.weight" not in names
    assert len(decay_groups(model, 0.05)) == 1


def test_weight_ema_is_evaluated_alongside(tmp_path):
    summary = train(compose_train(*FAST, "recipe.ema.decay=0.9", output_dir=tmp_path))
    assert {"acc", "nll", "ece", "top5"} <= set(summary.test_ema)
    state = torch.load(summary.last_checkpoint)["state_dict"]
    ema_keys = [k for k in state if k.startswith("ema.")]
    assert ema_keys
    key = "stem.conv.weight"
    assert not torch.equal(state[f"ema.{key}"], state[f"model.{key}"])


def test_cpu_bf16_mixed_precision_trains_with_a_fused_optimizer_and_clipped_gradients(tmp_path, monkeypatch):
    """Lightning refuses to clip for a fused optimizer under mixed precision; bf16 has no GradScaler, so alternet
    clips the gradients itself, to recipe.grad_clip."""
    norms = []
    clip = torch.nn.utils.clip_grad_norm_

    def recording_clip(parameters, max_norm, *args, **kwargs):
        norms.append((clip(parameters, max_norm, *args, **kwargs).item(), max_norm))
        return torch.tensor(norms[-1][0])

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording_clip)
    summary = train(
        compose_train(
            *FAST,
            "trainer.precision=bf16-mixed",
            "performance.allow_emulated_precision=true",  # the clipping path is the point, on any CPU
            "recipe.grad_clip=0.01",
            "recipe.batch_size=8",  # bf16 may be emulated on this CPU (~15x slower): small batches still clip
            "recipe.eval_batch_size=16",
            output_dir=tmp_path / "run",
        )
    )
    assert math.isfinite(summary.test["nll"])
    assert len(norms) == 3 and all(max_norm == 0.01 and norm > 0.01 for norm, max_norm in norms)  # debug=fast: 3
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt")["optimizer_states"][0]["param_groups"][0]["fused"]


def test_channels_last_trains(tmp_path):
    summary = train(compose_train(*FAST, "performance.channels_last=true", output_dir=tmp_path))
    assert math.isfinite(summary.test["nll"])


@pytest.mark.slow
def test_compiled_training_compiles_one_graph_whatever_the_batch_shapes(tmp_path, monkeypatch):
    """A whole digits epoch (19 batches of 64; the short 20th dropped), then validation and test, whose last batches
    are short: the whole step's three graphs (forward, backward, update) and the evaluation's (its short batches
    padded), no graph break, no recompilation. Inductor's code, for real."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # graphs an earlier test of this worker compiled (other shapes) would count as recompiles
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    counters.clear()
    overrides = ["performance.compile=true", "trainer.limit_train_batches=null", "trainer.limit_val_batches=null"]
    summary = train(compose_train(*FAST, *overrides, output_dir=tmp_path))
    assert summary.global_step == 19 and math.isfinite(summary.test["nll"])
    assert counters["stats"]["unique_graphs"] == 4 and not counters["graph_break"], dict(counters["stats"])


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune-no-cudagraphs"])
def test_compile_mode_reaches_torch_compile(mode, monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: seen.append(kwargs) or model)
    config = resolved("performance.compile=true", f"performance.compile_mode={mode}")
    module_of(config, datamodule_of(config).facts())
    assert seen == [{"backend": "inductor", "dynamic": False, "mode": mode}] * 4  # forward, update, evaluation x2
    seen.clear()
    config = resolved(
        "performance.compile=true", f"performance.compile_mode={mode}", "trainer.accumulate_grad_batches=2"
    )
    module_of(config, datamodule_of(config).facts())
    assert seen == [{"dynamic": False, "mode": mode}]  # the backbone alone


@pytest.mark.parametrize(
    ("compile_", "mode", "trainer", "cuda", "expected"),
    [
        ("auto", "auto", {"accelerator": "gpu"}, True, "reduce-overhead"),  # one GPU: CUDA graphs
        ("auto", "auto", {"accelerator": "auto"}, True, "reduce-overhead"),
        ("auto", "auto", {"accelerator": "gpu", "devices": [3]}, True, "reduce-overhead"),
        ("auto", "max-autotune", {"accelerator": "gpu"}, True, "max-autotune"),
        ("auto", "auto", {"accelerator": "auto"}, False, None),  # a CPU stays eager
        ("auto", "auto", {"accelerator": "gpu", "devices": 2}, True, None),  # DDP: not yet measured compiled
        ("auto", "auto", {"accelerator": "gpu", "devices": "auto"}, True, None),
        ("auto", "auto", {"accelerator": "gpu", "num_nodes": 2}, True, None),
        (True, "auto", {"accelerator": "cpu"}, True, "default"),
        (True, "auto", {"accelerator": "gpu", "devices": 2}, True, "reduce-overhead"),
        (False, "reduce-overhead", {"accelerator": "gpu"}, True, None),
    ],
)
def test_compile_auto_compiles_a_run_on_one_gpu_with_cuda_graphs(compile_, mode, trainer, cuda, expected, monkeypatch):
    from alternet.training import builders
    from alternet.training.builders import compile_mode

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(builders, "inductor_compiles_for_this_gpu", lambda: True)
    config = typed()
    performance = replace(config.performance, compile=compile_, compile_mode=mode)
    assert compile_mode(performance, replace(config.trainer, **{"devices": 1, "num_nodes": 1, **trainer})) == expected


def test_compile_auto_trains_eagerly_on_a_gpu_that_inductor_cannot_compile_for(monkeypatch):
    """A Pascal card or a torch without Triton: ``auto`` stays eager instead of failing at the first step."""
    from alternet.training import builders

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(builders, "inductor_compiles_for_this_gpu", lambda: False)
    config = typed("trainer.accelerator=gpu")
    performance = replace(config.performance, compile="auto", compile_mode="auto")
    assert builders.compile_mode(performance, config.trainer) is None
    assert builders.compile_mode(replace(performance, compile=True), config.trainer) == "reduce-overhead"


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ([], "compiled for training (the whole step; default: the first steps compile)"),
        (
            ["trainer.accumulate_grad_batches=2"],
            "compiled for training (the backbone alone: gradient accumulation is Lightning's, in automatic "
            "optimisation; default: the first steps compile)",
        ),
        (
            ["performance.compile=backbone"],
            "compiled for training (the backbone alone: performance.compile=backbone; default: the first steps "
            "compile)",
        ),
        (  # CUDA graphs are a GPU's: on a CPU the mode compiles as inductor's default
            ["performance.compile_mode=reduce-overhead"],
            "compiled for training (the whole step; reduce-overhead: the first steps compile)",
        ),
    ],
)
def test_the_banner_says_what_is_compiled(overrides, says, tmp_path, capsys, monkeypatch):
    """The whole step goes through torch.compile where the run allows it, else the backbone alone, and the banner
    says which and why. torch.compile is stood in for (the functions run as they are): inductor's first compile takes
    45-68 s on 2 cores, more than a sixth of the default suite; tests/training/test_step.py traces the whole step with
    dynamo, and the slow tests below compile for real."""
    from alternet.training import module

    monkeypatch.setattr(module.torch, "compile", lambda function, **kwargs: function)
    compiled = [*FAST, "performance.compile=true", "trainer.max_steps=1", *overrides]
    train(compose_train(*compiled, output_dir=tmp_path))
    out = capsys.readouterr().out
    assert says in out
    assert "digits: 1 epoch (of the schedule's 15: stopped early by trainer.max_epochs)" in out  # debug=fast's cut


@pytest.mark.slow
def test_a_compiled_step_trains_finite(tmp_path):
    summary = train(compose_train(*FAST, "performance.compile=true", "trainer.max_steps=1", output_dir=tmp_path))
    assert summary.global_step == 1 and math.isfinite(summary.test["nll"])


def test_an_unknown_compile_mode_is_refused_before_any_work(tmp_path):
    with pytest.raises(ConfigValueError, match=r"performance\.compile_mode"):
        train(compose_train(*FAST, "performance.compile_mode=fastest", output_dir=tmp_path))
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    ("setting", "accelerator", "cuda", "expected"),
    [
        ("auto", "gpu", False, True),
        ("auto", "auto", True, True),
        ("auto", "auto", False, False),
        ("auto", "cpu", True, False),
        (True, "cpu", False, True),
        (False, "gpu", True, False),
    ],
)
def test_channels_last_auto_is_on_for_a_gpu_run_only(setting, accelerator, cuda, expected, monkeypatch):
    from alternet.training.builders import on_a_gpu_when_auto

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert on_a_gpu_when_auto(setting, accelerator) is expected


@pytest.mark.slow
def test_torch_compile_trains_through_a_progressive_resize(tmp_path):
    """A compiled backbone meets a second input size (progressive resizing, evaluation): each size compiles its own
    graph, since inductor failed on window attention over symbolic sizes ('cannot determine truth value of
    Relational') when torch.compile's default turned the second size dynamic."""
    overrides = ["trainer.max_epochs=2", "recipe.progressive_resize={sizes: [8], epochs: [1]}", "model.window=2"]
    summary = train(compose_train(*FAST, *overrides, "performance.compile=true", output_dir=tmp_path))
    assert summary.global_step == 6 and math.isfinite(summary.test["nll"])


def test_ema_updates_once_per_optimizer_step_with_gradient_accumulation(tmp_path, monkeypatch):
    """With accumulate_grad_batches=2, 6 batches are 3 optimizer steps and 3 EMA updates (not 6), each with the
    warmed-up decay min(0.9, (1 + t) / (10 + t)); the saved EMA equals the EMA recomputed from those steps."""
    from alternet.training.module import ClassificationModule

    seen = []
    update = ClassificationModule._update_ema

    def spy(self, step, *skipped):
        if not seen:
            seen.append(("initial", {k: v.clone() for k, v in self.ema.state_dict().items()}))
        seen.append((self.ema_decay(step), {k: v.clone() for k, v in self.model.state_dict().items()}))
        update(self, step, *skipped)

    monkeypatch.setattr(ClassificationModule, "_update_ema", spy)
    overrides = [*FAST, "trainer.limit_train_batches=6", "trainer.accumulate_grad_batches=2"]
    summary = train(compose_train(*overrides, "recipe.ema={decay:0.9,warmup:true}", output_dir=tmp_path))
    assert summary.global_step == 3 and len(seen) == 1 + 3
    assert [d for d, _ in seen[1:]] == [min(0.9, (1 + t) / (10 + t)) for t in (1, 2, 3)]
    expected = seen[0][1]
    for decay, weights in seen[1:]:
        expected = {
            k: v * decay + weights[k] * (1 - decay) if v.dtype.is_floating_point else weights[k]
            for k, v in expected.items()
        }
    state = torch.load(summary.last_checkpoint)["state_dict"]
    for key, value in expected.items():
        torch.testing.assert_close(state[f"ema.{key}"], value, rtol=1e-6, atol=1e-7)


def test_progressive_resizing_trains_small_first_then_at_full_size(tmp_path, monkeypatch):
    """recipe.progressive_resize={sizes, epochs}: each stage's batches reach the model downsampled to its size,
    the epochs after the last stage at the data's size (digits: 16 px), and evaluation always sees full-size
    images; the MSA's window (4) is clipped to the 2x2 map of the smallest size."""
    seen: list[tuple[bool, int]] = []
    forward = ClassificationModule.forward

    def recording_forward(self, x):
        seen.append((self.training, x.shape[-1]))
        return forward(self, x)

    monkeypatch.setattr(ClassificationModule, "forward", recording_forward)
    overrides = ["trainer.max_epochs=3", "recipe.progressive_resize={sizes: [4, 8], epochs: [1, 1]}"]
    summary = train(compose_train(*FAST, *overrides, output_dir=tmp_path))
    assert summary.global_step == 9
    assert [size for training, size in seen if training] == [4] * 3 + [8] * 3 + [16] * 3
    assert {size for training, size in seen if not training} == {16}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("{sizes: [12], epochs: [1]}", "progressive_resize.sizes: the model cannot run at 12x12 px (WindowAttention"),
        ("{sizes: [8, 16], epochs: [1, 1]}", "progressive_resize.sizes=[8, 16] is invalid: sizes below the training"),
        ("{sizes: [8], epochs: [0]}", "recipe.progressive_resize.epochs=[0] is invalid: a list of integers >= 1"),
        ("{sizes: [12, 8], epochs: [1, 1]}", "progressive_resize.sizes=[12, 8] is invalid: a list of integers >= 1, e"),
        ("{sizes: [8, 12], epochs: [1]}", "progressive_resize.epochs=[1] is invalid: one number of epochs per size in"),
    ],
)
def test_a_progressive_size_the_model_cannot_run_is_refused_before_training(setting, message, tmp_path):
    with pytest.raises(ConfigValueError, match=re.escape(message)):
        train(compose_train(*FAST, f"recipe.progressive_resize={setting}", output_dir=tmp_path / "run"))
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_module_fit_on_plain_loaders_spans_the_recipes_epochs_whatever_max_steps_stops():
    """Without alternet's data module the steps per epoch came from Lightning's estimate divided by max_epochs: with
    max_steps capping the run, 3 // 10 steps an epoch, so the cosine ended after 10 steps instead of 80."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from alternet.dataset_facts import DataFacts

    config = typed("recipe.epochs=10", "recipe.warmup_epochs=0")
    module = ClassificationModule(config.model, config.recipe, DataFacts("digits", 10, 16, (0.5,) * 3, (0.5,) * 3))
    loader = DataLoader(TensorDataset(torch.randn(64, 3, 16, 16), torch.randint(0, 10, (64,))), batch_size=8)
    quiet = {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
    trainer = L.Trainer(max_steps=3, max_epochs=10, accelerator="cpu", **quiet)
    trainer.fit(module, train_dataloaders=loader)
    factor = trainer.lr_scheduler_configs[0].scheduler.lr_lambdas[0]
    assert factor(79) > 0 and factor(80) == 0.0  # 8 batches an epoch, 10 epochs
