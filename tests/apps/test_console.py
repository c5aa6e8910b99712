"""What runs print: the training summary's table, progress lines for log files, the loader worker count."""

import io
from dataclasses import replace
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from alternet.apps.checks import validate_train_config
from alternet.apps.console import _changed, _epochs, end_summary, evaluation_report, robustness_lines
from alternet.data import DigitsDataModule
from alternet.hardware import cpu_cores
from alternet.runs.directories import best_epoch
from alternet.runs.results import EvaluationReport, RobustnessResult
from alternet.runs.summary import RunSummary
from alternet.training.display import ProgressLines, RunningLoss, TerminalBar, Throughput, progress_bar

from helpers import resolved


def _summary(tmp_path, **extra):
    (tmp_path / "checkpoints").mkdir(parents=True)
    (tmp_path / "checkpoints" / "best-epoch004.ckpt").write_bytes(b"x")
    (tmp_path / "metrics.json").write_text("{}")
    return RunSummary.from_payload(
        {
            "model": "alternet_tiny",
            "data": "digits",
            "test": {"acc": 0.91, "top5": 0.99, "nll": 0.3, "ece": 0.02},
            "epochs": 6,
            "global_step": 60,
            "best_val_score": 0.25,
            "best_epoch": best_epoch(str(tmp_path / "checkpoints" / "best-epoch004.ckpt")),
            "monitor": "val/nll",
            "tested_checkpoint": str(tmp_path / "checkpoints" / "best-epoch004.ckpt"),
            "best_checkpoint": str(tmp_path / "checkpoints" / "best-epoch004.ckpt"),
            "run_dir": str(tmp_path),
            "wall_seconds": 3725.0,
            "train_images_per_sec": 1234.5,
            **extra,
        }
    )


def _block(acc: float) -> dict[str, float]:
    return {"acc": acc, "error": 1 - acc}


ROBUSTNESS = {  # metrics.json's robustness record: two families' worth of conditions, said to be 75
    "schema": 1,
    "source": "real",
    "table": [
        {"corruption": c, "severity": s, "acc": acc, "nll": 1.0, "ece": 0.1, "n": 100, "source": "real", "family": f}
        for c, f, s, acc in [
            *(("fog", "weather", s, 0.6 - s / 10) for s in range(1, 6)),
            ("gaussian_noise", "noise", 5, 0.05),
        ]
    ],
    "summary": {
        "source": "real",
        "complete": True,
        "n_conditions": 75,
        "robustness": 0.45,
        "mean_error": 0.55,
        "clean_acc": 0.9,
        "per_corruption": {
            "fog": {"family": "weather", **_block(0.3)},
            "gaussian_noise": {"family": "noise", **_block(0.05)},
        },
        "per_family": {"noise": _block(0.3), "weather": _block(0.5)},
        "per_severity": {"5": _block(0.1)},
        "baseline": "alexnet",
        "baseline_clean_acc": None,
        "mce": 88.8,
        "relative_mce": None,
        "ce": {"fog": 80.0, "gaussian_noise": 97.6},
        "relative_ce": None,
    },
    "layout": "cifar-c",
    "root": "/data/CIFAR-100-C",
    "benchmark": "cifar100-c",
    "preprocess": None,
    "synthetic_frost": False,
    "frost_source": None,
    "max_images": None,
    "images_per_condition": 10000,
    "precision": "32",
    "extra": None,
}
RESULT = RobustnessResult.from_payload(ROBUSTNESS)


def test_end_summary_reports_raw_and_ema_metrics_best_epoch_robustness_and_files(tmp_path):
    text = end_summary(
        _summary(tmp_path, test_ema={"acc": 0.93, "top5": 1.0, "nll": 0.25, "ece": 0.01}, robustness=ROBUSTNESS)
    )
    assert "in 1:02:05: 6 epochs, 60 steps, 1,234 training images/s" in text
    assert "Best val/nll 0.2500 after epoch 5 of 6 (best-epoch004.ckpt: its name counts from 0)" in text
    assert "  weights        0.9100   0.9900   0.3000   0.0200" in text
    assert "  EMA weights    0.9300   1.0000   0.2500   0.0100" in text
    assert "\n".join(robustness_lines(RESULT)) in text  # as an evaluation prints it
    assert "  robustness (real corruptions): mean acc 0.4500 over 75 conditions\n" in text
    assert "  mCE 88.8% vs alexnet  relative mCE n/a (no clean accuracy for the baseline)\n" in text
    assert "  checkpoints/best-epoch004.ckpt\n" in text and "  metrics.json\n" in text


def test_a_diverged_runs_numbers_keep_their_columns_apart(tmp_path):
    """An NLL of 2065.2119 filled its 9 characters and ran into the column before it ("0.50002065.2119")."""
    text = end_summary(_summary(tmp_path, test={"acc": 0.5, "top5": 0.6, "nll": 2065.2119, "ece": 0.4}))
    assert "  weights        0.5000   0.6000 2.07e+03   0.4000" in text


def test_a_relative_mce_left_undefined_or_an_incomplete_mce_says_why():
    summary = ROBUSTNESS["summary"] | {"baseline_clean_acc": 0.5, "relative_ce": {"fog": None, "gaussian_noise": 12.0}}
    lines = robustness_lines(RobustnessResult.from_payload(ROBUSTNESS | {"summary": summary}))
    assert lines[1] == (
        "  mCE 88.8% vs alexnet  relative mCE undefined (the baseline's error on fog is not above its clean error)"
    )
    partial = ROBUSTNESS["summary"] | {"complete": False, "n_conditions": 10}
    lines = robustness_lines(RobustnessResult.from_payload(ROBUSTNESS | {"summary": partial}))
    assert lines[2] == (
        "  note: mCE over 10 conditions, not the benchmark's 15 corruptions x 5 severities: not comparable with "
        "published mCE"
    )


def test_a_corruption_subset_says_its_images_per_condition():
    """robustness.max_images=500 printed "over 75 conditions" as the whole benchmark, its mCE against AlexNet's
    whole sets without a word."""
    subset = RobustnessResult.from_payload(ROBUSTNESS | {"max_images": 500, "images_per_condition": 500})
    lines = robustness_lines(subset)
    assert (
        lines[0] == "  robustness (real corruptions): mean acc 0.4500 over 75 conditions (the first 500 images of each)"
    )
    assert lines[2] == (
        "  note: mCE from the first 500 images of each condition: an estimate of the benchmark's, noisier than over "
        "its whole sets"
    )
    assert robustness_lines(RESULT)[0].endswith("over 75 conditions")  # the whole sets: nothing added


def test_one_printer_shows_robustness_for_training_and_evaluation(tmp_path):
    assert RESULT.to_json() == ROBUSTNESS  # the file's record, read and written back whole
    lines = robustness_lines(RESULT)
    assert lines[2] == "  per family: noise 0.3000  weather 0.5000"
    assert lines[3].startswith("  worst conditions: gaussian_noise/5 0.0500  fog/5 0.1000")
    assert len(lines[3].split(": ", 1)[1].split("  ")) == 5  # the five worst
    test = dict.fromkeys(("acc", "top5", "nll", "ece", "brier"), 0.5)
    report = EvaluationReport(
        model="m", data="d", test=test, checkpoint="c", robustness=RESULT, files=[str(tmp_path / "x")]
    )
    text = evaluation_report(report, tmp_path)
    assert "\n".join(lines) in text and text.endswith(f"  files in {tmp_path}:\n    x")


def test_end_summary_without_ema_has_one_row(tmp_path):
    text = end_summary(_summary(tmp_path, test_images={"scored": 360, "of": 360}))
    assert "EMA weights" not in text and "Robustness" not in text and "partial" not in text


def test_end_summary_says_when_the_test_scored_part_of_the_split_and_at_which_precision(tmp_path):
    text = end_summary(_summary(tmp_path, test_images={"scored": 64, "of": 10000}, precision="bf16-mixed"))
    assert "  a partial test: the first 64 of 10,000 test images (limit_test_batches)" in text
    assert "Test (best-epoch004.ckpt, bf16-mixed):" in text  # the after-training evaluation's numbers are fp32
    flipped = end_summary(replace(_summary(tmp_path / "flip", precision="32-true"), test_flip=True))
    assert (
        "Test (best-epoch004.ckpt, 32-true, each image's and its mirror's mean logits (recipe.test_flip)):" in flipped
    )


class _Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.cross_entropy(self.layer(batch[0]), batch[1])
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(callbacks, tmp_path):
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    trainer = L.Trainer(
        max_epochs=2,
        callbacks=callbacks,
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(_Tiny(), DataLoader(data, batch_size=8))


def test_progress_lines_write_periodic_and_per_epoch_lines_without_carriage_returns(tmp_path):
    stream = io.StringIO()
    throughput = Throughput()
    _fit([ProgressLines(interval=0.0, stream=stream), throughput], tmp_path)
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert next(line for line in lines if " done in " in line).startswith("epoch 1/2 done in")
    assert any(line.startswith("epoch 2/2  batch 3/5") and "batch/s" in line and "ETA" in line for line in lines)
    assert all("v_num" not in line for line in lines)
    assert throughput.images == 72 and throughput.images_per_sec > 0  # 10 batches of 8, the run's first left out


class _KnownLosses(_Tiny):
    """Losses of 2.0 in the first epoch and 1.0 in the second, kept as ClassificationModule keeps them (the lines'
    running loss for the whole run here: the epoch's line must not depend on when it was last read)."""

    running_loss = RunningLoss()

    def on_train_epoch_start(self):
        self.epoch_loss = RunningLoss(max_age=0.0)

    def on_train_epoch_end(self):
        self.epoch_loss.read()  # as ClassificationModule logs train/nll_epoch: after the callbacks' epoch end

    def training_step(self, batch, batch_idx):
        loss = (self.layer(batch[0]) * 0).sum() + (2.0 if self.current_epoch == 0 else 1.0)
        self.running_loss.add(loss)
        self.epoch_loss.add(loss)
        return loss


def test_an_epochs_line_gives_that_epochs_mean_loss(tmp_path):
    """The lines' loss is read at most once a second: an epoch shorter than that showed the previous epoch's loss,
    or a mean over both."""
    stream = io.StringIO()
    data = TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,)))
    trainer = L.Trainer(
        max_epochs=2,
        callbacks=[ProgressLines(interval=0.0, stream=stream)],
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    trainer.fit(_KnownLosses(), DataLoader(data, batch_size=8))
    done = [line for line in stream.getvalue().splitlines() if " done in " in line]
    assert [line.split("train/nll_epoch ")[1].split()[0] for line in done] == ["2", "1"]  # named as it is logged
    assert not any("train/loss" in line for line in done)  # a step's value in the logs


def test_throughput_of_a_run_resumed_mid_epoch_counts_only_its_own_seconds():
    """Lightning skips on_train_epoch_start for the epoch a run resumes in the middle of: the clock still starts at
    on_train_start (it once counted from the machine's boot, reporting 24 images/s for a 600 images/s run)."""
    throughput = Throughput()
    trainer, module = SimpleNamespace(world_size=1), SimpleNamespace(log=lambda *args, **kwargs: None)
    throughput.on_train_start(trainer, module)
    for index in range(2):  # the first is the resumed run's warm-up batch
        throughput.on_train_batch_end(trainer, module, None, (torch.zeros(8, 3), torch.zeros(8)), index)
    throughput.on_train_epoch_end(trainer, module)
    assert throughput.images == 8 and throughput.seconds < 5


def test_a_run_resumed_mid_epoch_reports_its_own_rate_and_eta(monkeypatch):
    """Resumed at batch 500 of 1000 (Lightning calls no on_train_epoch_start then), 10 batches in 1 s: the lines say
    10 batch/s and 50 s left, and the terminal bar counts from batch 500 (they once counted the 500 batches of the
    interrupted run as done in this process's seconds, or timed the epoch from the machine's boot)."""
    now = [1000.0]
    monkeypatch.setattr("alternet.training.display.time.monotonic", lambda: now[0])
    trainer = SimpleNamespace(num_training_batches=1000, current_epoch=0, max_epochs=3)
    module = SimpleNamespace()
    stream = io.StringIO()
    lines = ProgressLines(interval=0.0, stream=stream)
    lines._trainer = trainer
    monkeypatch.setattr(lines, "_metrics", lambda *args: "")
    lines.on_train_start(trainer, module)
    for index in range(500, 510):
        now[0] += 0.1
        lines.on_train_batch_end(trainer, module, None, None, index)
    last = stream.getvalue().splitlines()[-1]
    assert last.startswith("epoch 1/3  batch 510/1000  10.00 batch/s, epoch ETA 0:49"), last

    bar = TerminalBar()
    bar._trainer = trainer
    bar.on_train_start(trainer, module)
    monkeypatch.setattr(bar, "get_metrics", lambda *args: {})
    bar.on_train_batch_end(trainer, module, None, None, 500)
    assert bar.train_progress_bar.initial == 500 and bar.train_progress_bar.n == 501
    bar.train_progress_bar.close()


def test_throughput_leaves_out_the_first_batch_that_compiles_and_autotunes(monkeypatch):
    """A first batch of 60 s (torch.compile on a GPU) then 9 batches of 0.1 s: 80 images/s, not 1.2."""
    throughput = Throughput()
    clock = iter([0.0, 60.0, *(60.0 + 0.1 * step for step in range(1, 10))])
    monkeypatch.setattr("alternet.training.display.time.monotonic", lambda: next(clock))
    trainer, module = SimpleNamespace(world_size=1), SimpleNamespace(log=lambda *args, **kwargs: None)
    throughput.on_train_start(trainer, module)
    for index in range(10):
        throughput.on_train_batch_end(trainer, module, None, (torch.zeros(8, 3), torch.zeros(8)), index)
    throughput.on_train_epoch_end(trainer, module)
    assert throughput.images == 72 and throughput.images_per_sec == pytest.approx(80.0)


def test_a_terminal_gets_a_bar_and_a_file_gets_lines():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert isinstance(progress_bar(30, Terminal()), TerminalBar)
    assert isinstance(progress_bar(30, io.StringIO()), ProgressLines)


def test_loader_workers_auto_fits_the_machine(monkeypatch):
    auto = DigitsDataModule(num_workers="auto", batch_size=8)
    assert auto.num_workers == 1 and auto.auto_workers  # arrays in memory: the fewest, grown while the step waits
    capped = DigitsDataModule(num_workers=10_000, batch_size=8)
    assert capped.num_workers == cpu_cores() and not capped.auto_workers  # never more workers than CPUs
    monkeypatch.setattr("alternet.data.workers.cpu_cores", lambda: 16)
    assert DigitsDataModule(num_workers=32, batch_size=8).num_workers == 16


def test_an_analysis_whose_eigenvalues_did_not_converge_says_so(tmp_path):
    """The Hessian's Lanczos may stop before its eigenvalues converge: its CSV said so, the printout did not."""
    hessian = {"seconds": 1.0, "files": [], "max_eig_unconverged": 2, "top_eig_unconverged": 1}
    test = dict.fromkeys(("acc", "top5", "nll", "ece", "brier"), 0.5)
    report = EvaluationReport(model="m", data="digits", test=test, analysis={"hessian": hessian})
    assert "analysis hessian: 1.0 s, 0 files; 3 eigenvalue(s) not converged" in evaluation_report(report, tmp_path)
    hessian.update(max_eig_unconverged=0, top_eig_unconverged=0)
    assert "not converged" not in evaluation_report(report, tmp_path)


@pytest.mark.parametrize(
    ("overrides", "shown"),
    [
        (["model=byob", "model.self_attn_layer=halo", "model.block_size=2"], ", self_attn_layer=halo, block_size=2"),
        (["model=botnet_cifar"], ""),
        (["model=alternet_tiny", "model.heads=[2,4,8]"], ", heads=[2, 4, 8]"),
        (["model=alternet_tiny", "model.widths=[32,64,128]"], ""),  # the named model's own widths, as a list
        (["model=alternet_tiny", "model.layout=C|CM|CM"], ""),  # the banner shows the built layout apart
        (["model=timm", "model.name=resnet18", "+model.drop_rate=0.1"], ", drop_rate=0.1"),
    ],
)
def test_the_banner_names_what_the_config_changed_in_the_named_architecture(overrides, shown):
    """model=byob model.self_attn_layer=halo builds under botnet_cifar's name: the banner's model line says what
    differs from it."""
    assert _changed(validate_train_config(resolved(*overrides))) == shown


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        ([], "the recipe's, for its global batch of"),
        (["recipe.finetune.backbone_lr_scale=0.1"], "; the head's, the backbone's x0.1 (recipe.finetune)"),
        (["recipe.finetune.freeze_backbone=true"], "; the head's, the backbone frozen"),
        (["recipe.layer_decay=0.75"], "; the head's, each earlier block's x0.75 (recipe.layer_decay)"),
    ],
)
def test_the_learning_rate_line_says_where_parts_train_at_other_rates(overrides, said):
    """With a scaled backbone or layer decay it gave the head's rate alone, as if the whole model trained at it."""
    from omegaconf import OmegaConf

    from alternet.apps.config import train_config
    from alternet.apps.console import learning_rate_line

    from helpers import compose_train

    recipe = train_config(OmegaConf.to_container(compose_train("debug=fast", *overrides), resolve=True)).recipe
    line = learning_rate_line(recipe, recipe.lr_scale_batch)
    assert said in line and (overrides or "the head's" not in line)


def test_the_banner_says_where_the_epochs_trained_and_the_schedules_differ():
    """``trainer.max_epochs`` above ``recipe.epochs`` printed "digits: 100 epochs" beside the warning that the
    schedule ends at 15: the banner says both, either way."""
    assert _epochs(15, 15) == "15 epochs"
    assert _epochs(1, 15) == "1 epoch (of the schedule's 15: stopped early by trainer.max_epochs)"
    assert _epochs(100, 15) == "100 epochs (the schedule's 15, then its final learning rate: trainer.max_epochs)"
