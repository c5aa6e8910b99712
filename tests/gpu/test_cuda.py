"""What only a CUDA GPU can check: bf16 training steps, the fused attention kernels, the deferred non-finite guard's
CUDA path (pinned memory behind events), evaluation on ``cuda`` and compiled checkpoints. Run with ``pytest -m gpu``
on a machine with a GPU; without one every test here is skipped (CI has none)."""

import itertools
import math

import pytest
import torch

from alternet.apps.evaluate import run_evaluate
from alternet.apps.train import train
from alternet.models import WindowAttention
from alternet.runs.weights import load_model
from alternet.training.precision import choose_precision

from helpers import FAST, compose_train
from helpers.nonfinite import assert_same_state, fail_at, state_before_step

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (pytest -m gpu on a GPU machine)"),
]

ON_GPU = [*FAST, "trainer.accelerator=gpu", "trainer.devices=1", "performance.compile=false"]  # eager unless named


def test_precision_auto_is_bf16_on_a_bf16_gpu():
    expected = "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    assert choose_precision("auto", "gpu").precision == expected


def test_bf16_training_steps_on_cuda_learn_and_save_a_loadable_checkpoint(tmp_path):
    """Three bf16 steps on the GPU: finite metrics and weights, a checkpoint the CPU reads back."""
    summary = train(compose_train(*ON_GPU, "trainer.precision=bf16-mixed", output_dir=tmp_path))
    assert summary.global_step == 3 and math.isfinite(summary.test["nll"])
    model, _ = load_model(tmp_path / "checkpoints" / "last.ckpt")
    saved = torch.load(tmp_path / "checkpoints" / "last.ckpt", map_location="cpu")["state_dict"]
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert all(torch.isfinite(t).all() for t in saved.values() if t.is_floating_point())


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_fused_attention_kernels_equal_math_attention_in_bf16(memory_format):
    """Window attention with its relative position bias (a float mask) through the CUDA fused kernel SDPA picks,
    and through the memory-efficient kernel by name, against the explicit math path: outputs and gradients."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    attn = WindowAttention(64, 64, heads=4, head_dim=32, window=(4, 4), fused=True).cuda()
    with torch.no_grad():
        attn.rel_pos_bias.normal_(0, 1.0)  # a strong bias, so a mis-applied mask would show
    x = torch.randn(8, 64, 16, 16, device="cuda").contiguous(memory_format=memory_format)

    def run(fused: bool, backend=None):
        attn.fused = fused
        attn.zero_grad(set_to_none=True)
        inputs = x.clone().requires_grad_(True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if backend is None:
                out = attn(inputs)
            else:
                with sdpa_kernel(backend):
                    out = attn(inputs)
        out.float().square().mean().backward()
        return out.float(), inputs.grad.float(), attn.rel_pos_bias.grad.float()

    reference = run(fused=False)
    for result in (run(fused=True), run(fused=True, backend=SDPBackend.EFFICIENT_ATTENTION)):
        for got, want in zip(result, reference, strict=True):
            torch.testing.assert_close(got, want, rtol=3e-2, atol=3e-2)


def test_the_deferred_guard_skips_an_inf_batch_on_cuda_and_saves_the_state_before_it(tmp_path, monkeypatch):
    """The CUDA path of the deferred guard (flag copied to pinned memory behind an event, read one step later):
    step 2's inputs are inf, its update is skipped on the device, and the checkpoint holds the state before it."""
    steps = [*ON_GPU, "trainer.precision=bf16-mixed", "trainer.limit_train_batches=6"]
    before = state_before_step(monkeypatch, 2, steps, tmp_path / "clean")
    message = r"non-finite gradients \(training loss nan\) at global step 2, epoch 0, batch 2; its update was skipped"
    saved, _, _ = fail_at(monkeypatch, 2, steps, tmp_path / "failed", message)
    assert saved["global_step"] == 3
    assert_same_state(saved, before)


def test_evaluation_on_cuda_scores_as_on_the_cpu(digits_run, tmp_path):
    """The same checkpoint scored on ``cuda`` and on the CPU, fp32: the same accuracy and NLL."""
    from hydra import compose, initialize_config_dir

    from helpers import CONF

    reports = {}
    for device in ("cpu", "cuda"):
        with initialize_config_dir(str(CONF), version_base="1.3"):
            overrides = [f"ckpt={digits_run}", f"device={device}", f"paths.output_dir={tmp_path / device}"]
            cfg = compose("evaluate", overrides=overrides)
        reports[device] = run_evaluate(cfg)[0]
    cpu, cuda = reports["cpu"].test, reports["cuda"].test
    assert cuda["acc"] == pytest.approx(cpu["acc"], abs=1e-3)
    assert cuda["nll"] == pytest.approx(cpu["nll"], rel=1e-3)


def test_a_compiled_run_saves_plain_weights_that_load_resume_and_predict_alike(tmp_path):
    """torch.compile on the GPU: the checkpoint's keys are the model's own (no ``_orig_mod``), the bare model built
    from it predicts as the compiled one did, and a compiled run resumes from it."""
    run = tmp_path / "run"
    summary = train(compose_train(*ON_GPU, "performance.compile=true", output_dir=run))
    last = run / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu")["state_dict"]
    assert state and not any("_orig_mod" in key or "_compiled" in key for key in state)
    model, _ = load_model(last)
    images = torch.randn(4, 3, 16, 16)  # digits at data.image_size 16
    with torch.no_grad():
        eager = model(images)
        compiled = torch.compile(model.cuda(), dynamic=False)(images.cuda()).cpu()
    torch.testing.assert_close(compiled, eager, rtol=1e-2, atol=1e-2)  # fp32 (TF32 matmuls on the GPU)
    resumed = train(
        compose_train(*ON_GPU, "performance.compile=true", "trainer.max_epochs=2", f"ckpt_path={last}", output_dir=run)
    )
    assert resumed.global_step == 2 * summary.global_step and math.isfinite(resumed.test["nll"])


def test_a_checkpoint_moves_to_the_host_in_one_pass_without_a_sync_per_tensor():
    """Each copy queued without waiting (sync debug mode "error" raises on a blocking copy), one sync at the end."""
    from alternet.runs.checkpoints import to_host

    tree = {"state_dict": {f"w{i}": torch.randn(64, 64, device="cuda") for i in range(50)}, "step": 3}
    tree["optimizer_states"] = [{"state": {0: {"exp_avg": torch.ones(8, device="cuda")}}}]
    torch.cuda.set_sync_debug_mode("error")
    try:
        moved = to_host(tree)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert all(t.device.type == "cpu" for t in moved["state_dict"].values())
    torch.testing.assert_close(moved["state_dict"]["w7"], tree["state_dict"]["w7"].cpu())
    assert moved["optimizer_states"][0]["state"][0]["exp_avg"].device.type == "cpu" and moved["step"] == 3


@pytest.mark.parametrize("compiled", ["false", "auto"])
def test_a_gpu_training_step_that_logs_nothing_makes_no_sync(compiled, tmp_path):
    """torch's own report (sync debug mode "warn") over the windows between batch starts of steps that log nothing,
    with the paper recipe (mixup, clipping, EMA, the deferred guard), eager and as a GPU run trains by default
    (``performance.compile=auto``: CUDA graphs, which warm up and record over the first steps)."""
    import warnings

    from alternet.training.module import ClassificationModule

    counts, hook = [], ClassificationModule.on_train_batch_start

    def mark(module, batch, batch_idx):
        counts.append(sum("synchroniz" in str(w.message) for w in caught))
        return hook(module, batch, batch_idx)

    overrides = [
        *ON_GPU,
        "recipe=paper",
        "recipe.ema={decay: 0.99}",
        "trainer.limit_train_batches=10",
        "trainer.log_every_n_steps=1000",
        "data.val_size=0",
        f"performance.compile={compiled}",
    ]
    ClassificationModule.on_train_batch_start = mark
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            train(compose_train(*overrides, output_dir=tmp_path))
    finally:
        torch.cuda.set_sync_debug_mode(0)
        ClassificationModule.on_train_batch_start = hook
    settled = 1 if compiled == "false" else 4  # after the first step's setup (and the graphs' warm-up and recording)
    windows = [b - a for a, b in itertools.pairwise(counts[settled:])]
    assert windows and not any(windows), windows


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_the_whole_step_on_the_gpu_trains_the_eager_weights(mode, tmp_path):
    """The compiled whole step (inductor's GPU code; with CUDA graphs under reduce-overhead) against the eager step:
    three steps of the paper recipe with its EMA in fp32 give the same weights, EMA and optimizer state, to the
    rounding of TF32-free fp32 kernels in another order."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    recipe = [*ON_GPU, "recipe=paper", "recipe.batch_size=32", "recipe.ema={decay: 0.99}", "trainer.precision=32-true"]
    checkpoints = {}
    for name, compiled in (("eager", []), ("whole", ["performance.compile=true", f"performance.compile_mode={mode}"])):
        train(compose_train(*recipe, *compiled, output_dir=tmp_path / name))
        checkpoints[name] = torch.load(tmp_path / name / "checkpoints" / "last.ckpt", map_location="cpu")
    eager, whole = checkpoints["eager"], checkpoints["whole"]
    for key, value in eager["state_dict"].items():
        torch.testing.assert_close(whole["state_dict"][key], value, rtol=1e-3, atol=1e-5, msg=key)
    for index, entries in eager["optimizer_states"][0]["state"].items():
        for name, value in entries.items():
            torch.testing.assert_close(whole["optimizer_states"][0]["state"][index][name], value, rtol=1e-3, atol=1e-6)


def _dali_on_the_gpu(folder, augment: dict):
    """(the DALI loader of ``folder``'s training split on cuda:0, its data module); skipped without DALI."""
    pytest.importorskip("nvidia.dali", reason="NVIDIA DALI is not installed (pip install 'alternet[dali]')")
    from alternet.data import ImageFolderDataModule

    from helpers.imagefolders import dali_loader

    module = ImageFolderDataModule(root=str(folder), image_size=16, batch_size=8, loader="dali", augment=augment)
    module.setup("fit")
    return dali_loader(module, device="cuda:0", seed=0), module


def test_dali_decodes_on_the_gpu_the_torch_loaders_images_in_its_order(image_folder):
    """data.loader=dali with nvJPEG (DALI's mixed decoder), the whole image as the crop: batches on the GPU in the
    torch loader's order with its labels, within resampling error of the exact pipeline."""
    from alternet.data.base import EpochSampler

    whole = {"random_resized_crop": {"scale": [1.0, 1.0], "ratio": [1.0, 1.0]}, "interpolation": "bilinear"}
    loader, module = _dali_on_the_gpu(image_folder, whole)
    exact = module.splits["train"]
    keys = list(EpochSampler(len(exact), 0, shuffle=True))
    for number, (images, labels) in enumerate(loader):
        assert images.device.type == "cuda" and images.shape == (8, 3, 16, 16)
        expected = [exact[(index, 0)] for index, _ in keys[8 * number : 8 * number + 8]]
        assert labels.tolist() == [label for _, label in expected]
        difference = (images.cpu() - torch.stack([image for image, _ in expected])).abs()
        assert difference.max() < 0.3 and difference.mean() < 0.05, (difference.max(), difference.mean())


def test_dali_on_the_gpu_resumes_the_paper_augmentation_mid_epoch(image_folder):
    """RandAugment, random interpolation and erasing on the GPU: an epoch resumed from the loader's state after its
    first batch gives the uninterrupted epoch's batches."""
    paper = {"interpolation": "random", "hflip": True, "randaugment": "rand-m9-n2-mstd0.5", "random_erasing": 0.25}
    interrupted, _ = _dali_on_the_gpu(image_folder, paper)
    iterator = iter(interrupted)
    next(iterator)
    resumed, _ = _dali_on_the_gpu(image_folder, paper)
    resumed.load_state_dict(interrupted.state_dict())
    rest = [images for images, _ in resumed]
    assert all(torch.equal(a, b) for a, b in zip([images for images, _ in iterator], rest, strict=True))
