"""trainer.precision=auto asks the hardware, and reduced precision a CPU would emulate is refused before any work:
bf16 on a CPU without AVX512-BF16/AMX is an order of magnitude slower than fp32, not a saving."""

import os
import subprocess
import sys

import pytest
import torch

from alternet.apps.train import train
from alternet.errors import ConfigValueError
from alternet.training import precision as precision_module
from alternet.training.precision import choose_precision

from helpers import FAST, ROOT, compose_train


def _hardware(monkeypatch, *, cpu_bf16: bool, cpu_fp16: bool = False, gpu: bool = False, gpu_bf16: bool = False):
    monkeypatch.setattr(precision_module, "cpu_native_bf16", lambda: cpu_bf16)
    monkeypatch.setattr(precision_module, "cpu_native_fp16", lambda: cpu_fp16)
    monkeypatch.setattr(precision_module, "cuda_bf16", lambda: gpu_bf16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)


@pytest.mark.parametrize(
    ("accelerator", "cpu_bf16", "gpu", "gpu_bf16", "expected"),
    [
        ("cpu", True, False, False, "bf16-mixed"),
        ("cpu", False, False, False, "32-true"),
        ("auto", True, False, False, "bf16-mixed"),
        ("auto", False, False, False, "32-true"),
        ("auto", False, True, True, "bf16-mixed"),  # a GPU is chosen when visible, whatever the CPU can do
        ("auto", True, True, False, "32-true"),  # a GPU without bf16 (before Ampere)
        ("gpu", False, True, True, "bf16-mixed"),
        ("cuda", False, True, False, "32-true"),
        ("cpu", True, True, True, "bf16-mixed"),  # the CPU asked for, though a GPU is there
    ],
)
def test_auto_follows_the_device_and_what_it_computes_natively(
    monkeypatch, accelerator, cpu_bf16, gpu, gpu_bf16, expected
):
    _hardware(monkeypatch, cpu_bf16=cpu_bf16, gpu=gpu, gpu_bf16=gpu_bf16)
    choice = choose_precision("auto", accelerator)
    assert choice.precision == expected
    assert choice.reason.startswith("auto: this " + ("GPU" if gpu and accelerator != "cpu" else "CPU"))
    assert ("natively" in choice.reason) == (expected == "bf16-mixed")


@pytest.mark.parametrize("requested", ["bf16-mixed", "bf16-true", "bf16"])
def test_bf16_that_this_cpu_would_emulate_is_refused_with_the_way_out(monkeypatch, requested):
    _hardware(monkeypatch, cpu_bf16=False, cpu_fp16=True)
    with pytest.raises(ConfigValueError) as refused:
        choose_precision(requested, "cpu")
    message = str(refused.value)
    assert message.startswith(f"trainer.precision={requested}: this CPU (") and "no native bf16" in message
    assert "trainer.precision=auto" in message and "32-true" in message
    assert "performance.allow_emulated_precision=true" in message and "\n" not in message


def test_fp16_is_judged_by_the_cpus_fp16_not_its_bf16(monkeypatch):
    _hardware(monkeypatch, cpu_bf16=True, cpu_fp16=False)
    with pytest.raises(ConfigValueError, match=r"trainer.precision=16-true: this CPU .* no native fp16"):
        choose_precision("16-true", "cpu")
    _hardware(monkeypatch, cpu_bf16=False, cpu_fp16=True)
    assert choose_precision("16-true", "cpu").precision == "16-true"


@pytest.mark.parametrize("fp16", [True, False])
def test_fp16_mixed_on_a_cpu_is_refused_as_lightning_would_run_bf16(monkeypatch, fp16):
    """Lightning's CPU autocast has no fp16: 16-mixed ran bf16-mixed (with a warning) while the run recorded
    16-mixed, and the emulation refusal's own advice (allow_emulated_precision) led there."""
    _hardware(monkeypatch, cpu_bf16=not fp16, cpu_fp16=fp16)
    for allow in (False, True):
        with pytest.raises(
            ConfigValueError, match=r"^trainer.precision=16-mixed: Lightning trains fp16 mixed precision on GPUs only"
        ):
            choose_precision("16-mixed", "cpu", allow_emulated=allow)


def test_the_refusal_can_be_overridden_and_says_so(monkeypatch):
    _hardware(monkeypatch, cpu_bf16=False)
    choice = choose_precision("bf16-mixed", "cpu", allow_emulated=True)
    assert choice.precision == "bf16-mixed" and "emulated" in choice.reason


def test_explicit_settings_that_cost_nothing_extra_are_kept(monkeypatch):
    _hardware(monkeypatch, cpu_bf16=False, gpu=True, gpu_bf16=True)
    assert choose_precision("32-true", "cpu").precision == "32-true"
    assert choose_precision("bf16-mixed", "gpu").precision == "bf16-mixed"  # the GPU's own business, not emulation
    _hardware(monkeypatch, cpu_bf16=True)
    assert choose_precision("bf16-mixed", "cpu").reason == "as set"


@pytest.mark.parametrize("native", [True, False])
def test_training_says_which_precision_auto_chose_and_why(native, monkeypatch, tmp_path, capsys):
    _hardware(monkeypatch, cpu_bf16=native)
    run_dir = tmp_path / "run"
    small = ["recipe.batch_size=8", "recipe.eval_batch_size=16"]  # bf16 may be emulated here (~15x slower)
    train(compose_train(*FAST, "trainer.precision=auto", *small, output_dir=run_dir))
    device_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Device:"))
    chosen = "bf16-mixed" if native else "32-true"
    assert f"precision {chosen} (auto: this CPU" in device_line
    assert ("natively" in device_line) == native
    assert f"precision: {chosen}" in (run_dir / "config.yaml").read_text()  # the run's record says what ran


def test_a_cpu_held_to_avx2_refuses_bf16_in_one_line_as_a_user_sees_it(tmp_path):
    """oneDNN's own answer, not a stub: ONEDNN_MAX_CPU_ISA=AVX2 makes any x86 CPU one without native bf16."""
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(ROOT / "train.py"), "trainer.precision=bf16-mixed", f"hydra.run.dir={tmp_path}/r"]
    if os.uname().machine != "x86_64":
        pytest.skip("ONEDNN_MAX_CPU_ISA=AVX2 holds an x86 CPU to AVX2; this is not one")
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr
    assert last.startswith("error: trainer.precision=bf16-mixed: this CPU (") and ", AVX2, no native bf16" in last
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_true_precisions_leave_the_metrics_sums_in_their_own_dtype(precision):
    """Lightning's ``*-true`` precisions convert the module with ``module.to(dtype)``, which torchmetrics let convert
    its states: 50,000 NLLs of 2.0 summed to inf in fp16 (test/nll inf, the run dropped as diverged), and ECE's bin
    counts and confidences drifted in bf16."""
    from lightning.pytorch.plugins.precision import HalfPrecision

    from alternet.dataset_facts import DataFacts
    from alternet.metrics import calibration_metrics
    from alternet.training.module import ClassificationModule

    from helpers import typed

    config = typed()
    module = ClassificationModule(config.model, config.recipe, DataFacts("digits", 10, 16, (0.5,) * 3, (0.5,) * 3))
    module = HalfPrecision(precision).convert_module(module)
    assert next(module.model.parameters()).dtype != torch.float32  # the weights are converted, as Lightning does
    generator = torch.Generator().manual_seed(0)
    probs = torch.softmax(3 * torch.randn(10_000, 10, generator=generator), dim=1)
    labels = torch.randint(0, 10, (10_000,), generator=generator)
    for batch in range(100):
        module.test_nll.update(torch.full((500,), 2.0 + 1e-3 * (batch % 3)))
        module.test_metrics.update(probs[batch * 100 : (batch + 1) * 100], labels[batch * 100 : (batch + 1) * 100])
    assert module.test_nll.compute().item() == pytest.approx(2.0 + 1e-3 * 99 / 100, rel=1e-6)
    expected = calibration_metrics(probs.double().numpy(), labels.numpy())["ece"]
    assert module.test_metrics.compute()["test/ece"].item() == pytest.approx(expected, rel=1e-6)
