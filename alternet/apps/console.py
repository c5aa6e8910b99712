"""What a command prints: a training run at its start and end (where it writes, what it trains on which hardware,
and at the end its numbers and the files it left) and an evaluation's report, so nobody has to dig through the run
directory to find them. One printer per report: both show a robustness result with :func:`robustness_lines`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import lightning as L
from torch import nn

from .. import tracking
from ..metrics.table import SPLIT_KEYS
from ..progress import duration
from ..runs.directories import RunDir
from ..runs.results import EvaluationReport, RobustnessResult, RobustnessSummary
from ..runs.summary import RunSummary
from ..training.builders import compile_mode, compile_refusal
from ..training.config import RecipeConfig
from ..training.optim import scaled_lr
from .checks import layout_and_heads
from .config import TrainConfig

WORST_SHOWN = 5  # the worst corruption conditions shown


def _rows(pairs: list[tuple[str, Any]]) -> str:
    width = max(len(label) for label, _ in pairs) + 2
    return "\n".join(f"{label + ':':<{width}}{value}" for label, value in pairs)


def start_banner(
    config: TrainConfig,
    run: RunDir,
    model: nn.Module,
    data_description: str,
    trainer: L.Trainer,
    precision_reason: str | None = None,
) -> str:
    """Run directory, model and its size, data and split sizes, device and precision (and why: ``auto`` asks the
    hardware), and the W&B run."""
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    size = f"{params:,} parameters" + (f", {trainable:,} trainable" if trainable != params else "")
    device = trainer.strategy.root_device
    hardware = f"{device.type} x{trainer.world_size}" + (
        f" ({trainer.num_nodes} nodes)" if trainer.num_nodes > 1 else ""
    )
    layout = layout_and_heads(config.model)[0]  # the block sequence, which overrides may have changed
    batch = config.recipe.batch_size
    global_batch = batch * trainer.world_size * trainer.accumulate_grad_batches
    batches = f"batch {batch}" if global_batch == batch else f"batch {batch} per device, {global_batch} global"
    device_line = f"{hardware}, precision {trainer.precision}" + (f" ({precision_reason})" * bool(precision_reason))
    mode = compile_mode(config.performance, config.trainer)
    if mode is not None:
        refusal = compile_refusal(config.performance, config.trainer)
        what = "the whole step" if refusal is None else f"the backbone alone: {refusal}"
        graphed = device.type == "cuda" and ("reduce-overhead" in mode or mode == "max-autotune")
        graphs = ", CUDA graphs" if graphed else ""
        device_line += f"; compiled for training ({what}{graphs}; {mode}: the first steps compile)"
    pairs = [
        ("Run directory", str(run.path)),
        ("Model", f"{config.model.name}{f' {layout}' if layout else ''}{_changed(config)} ({size})"),
        ("Data", data_description),
        ("Recipe", f"{config.recipe.name}: {_epochs(trainer.max_epochs, config.recipe.epochs)}, {batches}"),
        ("Learning rate", learning_rate_line(config.recipe, global_batch)),
        ("Device", device_line),
    ]
    run = tracking.active_run()
    if run is not None:
        pairs.append(("W&B", tracking.run_location(run)))
    return "\n" + _rows(pairs) + "\n"


def _changed(config: TrainConfig) -> str:
    """The architecture keys the config sets to other values than its named model's, after a comma; the layout is
    shown apart."""
    changed = [f"{k}={v}" for k, v in config.model.changed().items() if k != "layout"]
    return f", {', '.join(changed)}" if changed else ""


def learning_rate_line(recipe: RecipeConfig, global_batch: int) -> str:
    """The effective learning rate, and, when this run's global batch is not the one the recipe's rate was tuned
    for, what was done about it (one line)."""
    lr, reference, rule = recipe.optimizer.lr, recipe.lr_scale_batch, recipe.lr_scale_rule
    effective = scaled_lr(recipe, global_batch)
    if global_batch == reference:
        line = f"{effective:g} (the recipe's, for its global batch of {reference})"
    elif rule == "none":
        line = (
            f"{effective:g}, as written: recipe.optimizer.lr is for a global batch of {reference}, this run's is "
            f"{global_batch}, and recipe.lr_scale_rule=none keeps it"
        )
    else:
        line = (
            f"{effective:g}: recipe.optimizer.lr {lr:g} is for a global batch of {reference}, this run's is "
            f"{global_batch}, scaled by the {rule} rule (recipe.lr_scale_rule=none keeps {lr:g})"
        )
    return line + _groups_note(recipe)


def _groups_note(recipe: RecipeConfig) -> str:
    """Where parts of the model train at other rates than the head's (the line's rate)."""
    if recipe.layer_decay is not None:
        return f"; the head's, each earlier block's x{recipe.layer_decay:g} (recipe.layer_decay)"
    if recipe.finetune.freeze_backbone:
        return "; the head's, the backbone frozen"
    if recipe.finetune.backbone_lr_scale != 1:
        return f"; the head's, the backbone's x{recipe.finetune.backbone_lr_scale:g} (recipe.finetune)"
    return ""


def _cell(value: Any) -> str:
    """A table number in at most 8 characters, so a column never runs into the next (a diverged NLL of 2065)."""
    if not isinstance(value, float):
        return "n/a"
    text = f"{value:.4f}"
    return text if len(text) <= 8 else f"{value:.3g}"


def _metrics_table(summary: RunSummary) -> list[str]:
    sections = [("weights", summary.test or {})]
    if summary.test_ema:
        sections.append(("EMA weights", summary.test_ema))
    columns = [c for c in SPLIT_KEYS if any(c in values for _, values in sections)]
    lines = [f"  {'':<12}" + "".join(f"{c:>9}" for c in columns)]
    for label, values in sections:
        cells = "".join(f"{_cell(values.get(c)):>9}" for c in columns)
        lines.append(f"  {label:<12}{cells}")
    return lines


def _relative_mce(summary: RobustnessSummary) -> str:
    if summary.relative_mce is not None:
        return f"{summary.relative_mce:.1f}%"
    if summary.clean_acc is None or summary.baseline_clean_acc is None:
        return "n/a (no clean accuracy for the baseline)"
    undefined = [name for name, ce in (summary.relative_ce or {}).items() if ce is None or math.isnan(ce)]
    return f"undefined (the baseline's error on {', '.join(undefined)} is not above its clean error)"


def robustness_lines(robustness: RobustnessResult) -> list[str]:
    """A robustness result as the lines both an evaluation and the end of a training run print: the mean accuracy,
    mCE against the baseline, the families, the worst conditions, the generated-frost caveat and the extra
    corruptions."""
    summary, images = robustness.summary, robustness.images
    subset = f" (the first {images.images_per_condition} images of each)" if images and images.max_images else ""
    mean = f"mean acc {summary.robustness:.4f} over {summary.n_conditions} conditions{subset}"
    precision = f", {robustness.precision}" if robustness.precision not in (None, "32") else ""
    lines = [f"  robustness ({robustness.source} corruptions{precision}): {mean}"]
    if summary.mce is not None:
        lines.append(f"  mCE {summary.mce:.1f}% vs {summary.baseline}  relative mCE {_relative_mce(summary)}")
        if not summary.complete:
            lines.append(
                f"  note: mCE over {summary.n_conditions} conditions, not the benchmark's 15 corruptions x 5 "
                "severities: not comparable with published mCE"
            )
        elif subset:
            lines.append(
                f"  note: mCE from the first {images.images_per_condition} images of each condition: an estimate of "
                "the benchmark's, noisier than over its whole sets"
            )
    families = "  ".join(f"{name} {block['acc']:.4f}" for name, block in summary.per_family.items())
    lines.append(f"  per family: {families}")
    worst = sorted(robustness.table, key=lambda row: row.acc)[:WORST_SHOWN]
    lines.append("  worst conditions: " + "  ".join(f"{r.corruption}/{r.severity} {r.acc:.4f}" for r in worst))
    if robustness.images and robustness.images.synthetic_frost and robustness.source == "generated":
        lines.append(
            "  note: generated frost uses a procedural ice texture, not the reference's photographs: its numbers "
            "are not comparable with real CIFAR-C frost (robustness.root=DIR scores the real files)"
        )
    if robustness.extra:
        extra = robustness.extra.summary
        names = ", ".join(extra.per_corruption)
        lines.append(f"  extra corruptions ({names}; not in the mean or mCE): mean acc {extra.robustness:.4f}")
    return lines


def _epochs(trained: int | None, schedule: int) -> str:
    """The epochs a run trains, and the schedule's where they differ: a run stopped before its end (its lr never
    reaches it), or one that trains on past it at its final learning rate."""
    epochs = f"{trained} epoch{'s' * (trained != 1)}"
    if trained is not None and trained < schedule:
        return f"{epochs} (of the schedule's {schedule}: stopped early by trainer.max_epochs)"
    if trained is not None and trained > schedule:
        return f"{epochs} (the schedule's {schedule}, then its final learning rate: trainer.max_epochs)"
    return epochs


def end_summary(summary: RunSummary) -> str:
    """Test metrics (raw and EMA), the best validation score and its epoch, time and throughput, robustness when
    scored after training, and every file written."""
    tested = Path(summary.tested_checkpoint).name  # a file's name, or "final weights"
    if summary.best_checkpoint and summary.tested_checkpoint != summary.best_checkpoint:
        tested += ": its test images are its validation images, on which the best was chosen"
    images_per_sec = summary.train_images_per_sec
    rate = f", {images_per_sec:,.0f} training images/s" if images_per_sec else ""
    lines = [
        "",
        f"Finished {summary.model} on {summary.data} in {duration(summary.wall_seconds or 0.0)}: "
        f"{summary.epochs} epoch{'s' * (summary.epochs != 1)}, {summary.global_step} steps{rate}",
    ]
    if summary.best_val_score is not None:
        epoch = summary.best_epoch
        named = f" ({Path(summary.best_checkpoint).name}: its name counts from 0)" if summary.best_checkpoint else ""
        where = f" after epoch {epoch} of {summary.epochs}{named}" if epoch else ""
        lines.append(f"Best {summary.monitor} {summary.best_val_score:.4f}{where}")
    at = f", {summary.precision}" if summary.precision else ""  # the after-training evaluation's numbers are fp32
    at += ", each image's and its mirror's mean logits (recipe.test_flip)" * bool(summary.test_flip)
    lines += [f"Test ({tested}{at}):", *_metrics_table(summary)]
    images = summary.test_images
    if images and images.partial:
        lines.append(f"  a partial test: the first {images.scored:,} of {images.of:,} test images (limit_test_batches)")
    if summary.robustness:
        lines += robustness_lines(summary.robustness)
    run = RunDir(summary.run_dir or ".")
    lines += [f"Files in {run.path}:", *(f"  {path.relative_to(run.path)}" for path in run.products())]
    return "\n".join(lines) + "\n"


def describe_preprocessing(used: dict[str, Any]) -> str:
    """``used`` in one line: ``288 px, crop_pct 1.0 (center), bicubic; mean [...], std [...]``."""
    crop = (
        f", crop_pct {used['crop_pct']:g} ({used['crop_mode']}), {used['interpolation']}"
        if "crop_pct" in used
        else ", the whole image"
    )
    numbers = {key: ", ".join(f"{v:.4g}" for v in used[key]) for key in ("mean", "std")}
    return f"{used['image_size']} px{crop}; mean [{numbers['mean']}], std [{numbers['std']}]"


def evaluation_report(report: EvaluationReport, out_dir: Path) -> str:
    """What an evaluation prints for one checkpoint: the test metrics, temperature scaling, robustness
    (:func:`robustness_lines`), the analyses and the files written into ``out_dir``."""
    test = report.test
    lines = [f"\n{report.model} on {report.data} ({report.checkpoint}{', its EMA weights' if report.ema else ''})"]
    if report.preprocessing:
        lines.append(f"  preprocessing: {describe_preprocessing(report.preprocessing)}")
    if report.test_flip:
        lines.append(
            "  predictions: the mean of each image's and its mirror's logits (for one view, pass test_flip=false)"
        )
    images = report.test_images
    if images and images.partial:
        lines.append(f"  a quick look: the first {images.scored} of {images.of} test images (max_images)")
    how = [f"precision {report.precision}"] * bool(report.precision)
    how += [f"ece in {report.ece_bins} bins"] * bool(report.ece_bins)  # none in files of earlier versions
    scores = "  ".join(f"{k} {test[k]:.4f}" for k in ("acc", "top5", "nll", "ece", "brier"))
    lines.append(f"  test: {scores}" + f" ({', '.join(how)})" * bool(how))
    if "ece_adaptive" in test:
        lines.append(f"  calibration: ece equal-mass {test['ece_adaptive']:.4f}  classwise {test['ece_classwise']:.4f}")
    if report.selective:
        selective = report.selective
        lines.append(
            f"  selective: aurc {selective.aurc:.4f}  augrc {selective.augrc:.4f}  "
            f"acc at 90% coverage {selective.acc_cov90:.4f}  at 95% {selective.acc_cov95:.4f}"
        )
    if report.ood:
        ood = report.ood
        scores = "  ".join(
            f"{name}: auroc {ood.scores[name].auroc:.4f} fpr95 {ood.scores[name].fpr95:.4f}" for name in ood.scores
        )
        lines.append(f"  ood ({ood.n_out} images of {ood.root}): {scores}")
    if report.temperature_scaling:
        scaled = report.temperature_scaling
        after = scaled.test
        lines.append(f"  temperature {scaled.temperature:.3f}: nll {after['nll']:.4f}  ece {after['ece']:.4f}")
    if report.robustness:
        lines += robustness_lines(report.robustness)
    analyses = report.analysis or {}
    for name, result in analyses.items():
        unconverged = sum(int(v or 0) for k, v in result.items() if k.endswith("_unconverged"))  # the Hessian's
        said = f"; {unconverged} eigenvalue(s) not converged (see its CSV)" if unconverged else ""
        lines.append(f"  analysis {name}: {result['seconds']:.1f} s, {len(result.get('files', []))} files{said}")
    written = [*report.files, *(f for r in analyses.values() for f in r.get("files", []))]
    lines.append(f"  files in {out_dir}:")
    lines += [f"    {_relative(Path(path), out_dir)}" for path in written]
    return "\n".join(lines)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
