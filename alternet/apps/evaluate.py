"""The evaluation application (``evaluate.py``): resolve checkpoints and data, score each model, run the
requested analyses, write and log the reports."""

from __future__ import annotations

import contextlib
import shutil
import warnings
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .. import tracking
from ..analysis import parse_configs, run_analyses
from ..data import ImageDataModule, build_datamodule
from ..errors import AlternetWarning, CheckpointError, ConfigValueError
from ..evaluation import Evaluator
from ..files import OUTPUT_MARKER, check_output_dir, is_output_of, mark_output, write_csv, write_json
from ..models.flip import FlipAveraged
from ..rundir import METRICS_FILE, RunDir
from ..runs import CheckpointWeights, find_checkpoint, load_model, run_config, run_dir_of
from .config import evaluate_config
from .console import evaluation_report


def packaged_config(group: str, option: str) -> DictConfig:
    """One option of a config group as packaged with alternet (``alternet/conf/<group>/<option>.yaml``), with its
    defaults list from the same group merged in order (e.g. ``data/cifar100`` on ``data/_base``), as Hydra would."""
    node = OmegaConf.load(files("alternet.conf").joinpath(group, f"{option}.yaml"))
    defaults = list(node.pop("defaults", None) or [])
    merged = OmegaConf.create()
    for entry in defaults if "_self_" in defaults else [*defaults, "_self_"]:
        merged = OmegaConf.merge(merged, node if entry == "_self_" else packaged_config(group, str(entry)))
    return merged


def checkpoint_paths(ckpt: str | list[str]) -> list[Path]:
    """Checkpoint files from paths to files or run directories (by :func:`alternet.runs.find_checkpoint`)."""
    sources = [ckpt] if isinstance(ckpt, str) else list(ckpt)
    if not sources:
        raise ConfigValueError("ckpt=[] names no checkpoint: alternet evaluate ckpt=PATH or ckpt=[PATH,PATH]")
    return [find_checkpoint(Path(source))[0] for source in sources]


def data_config(cfg: DictConfig, ckpt: Path, weights: CheckpointWeights) -> dict[str, Any]:
    """The data to evaluate on: ``data=...`` if given, else the training run's, else the data set's packaged
    defaults."""
    if cfg.get("data"):
        data = OmegaConf.to_container(cfg.data, resolve=True)
    elif (trained := run_config(run_dir_of(ckpt))) is not None:
        data = trained["data"]
    else:
        defaults = OmegaConf.create({"paths": {"data_dir": cfg.paths.data_dir}})
        defaults.data = packaged_config("data", weights.data["name"])
        data = OmegaConf.to_container(defaults, resolve=True)["data"]
    if cfg.data_root:
        data["root"] = cfg.data_root
    return data


def check_classes(datamodule: ImageDataModule, ckpt: Path, weights: CheckpointWeights) -> None:
    if datamodule.num_classes != weights.num_classes:
        raise CheckpointError(
            f"checkpoint {ckpt} was trained on {weights.num_classes} classes ({weights.data['name']}) but "
            f"data={datamodule.name} has {datamodule.num_classes}; evaluate it on a data set with the same classes"
        )
    trained = weights.data
    check_class_names(trained.get("class_names"), datamodule, ckpt)
    for key, now in (
        ("image_size", datamodule.image_size),
        ("mean", list(datamodule.mean)),
        ("std", list(datamodule.std)),
    ):
        before = trained.get(key)
        if before is not None and (list(before) if isinstance(before, (list, tuple)) else before) != now:
            warnings.warn(
                f"checkpoint {ckpt} was trained with data.{key}={before} but is evaluated with {now}: its numbers "
                "will differ from the trained model's",
                AlternetWarning,
                stacklevel=2,
            )


def check_class_names(saved: list[Any] | None, datamodule: ImageDataModule, ckpt: Path) -> None:
    """The data's classes are the checkpoint's, in its order: the same names in another order are refused (every
    label would be scored as another class); other names warn (a relabelled copy, or the wrong data set)."""
    if not saved or len(saved) != datamodule.num_classes:
        return
    trained, now = [str(name) for name in saved], [str(name) for name in datamodule.class_names]
    if trained == now:
        return
    label = next(i for i, (a, b) in enumerate(zip(trained, now)) if a != b)
    where = f"label {label} is {trained[label]!r} in the checkpoint {ckpt} but {now[label]!r} in data={datamodule.name}"
    if sorted(trained) == sorted(now):
        raise CheckpointError(
            f"the data's classes are the checkpoint's in another order ({where}): its predictions would be scored "
            "against other classes; give the class folders the order the model was trained on"
        )
    warnings.warn(
        f"the data's class names are not the checkpoint's ({where}): it is scored by label position",
        AlternetWarning,
        stacklevel=2,
    )


def evaluate_checkpoint(
    cfg: DictConfig, ckpt: Path, out_dir: Path, wandb: tracking.WandbSettings | None = None
) -> dict[str, Any]:
    """Score ``ckpt`` into ``out_dir`` (``wandb``: the W&B settings of :func:`wandb_settings`, None: no W&B)."""
    model, weights = load_model(ckpt, ema=bool(cfg.use_ema))
    hparams = weights.hyper_parameters
    recipe = hparams["recipe"]  # its augmentation feeds the analyses that use training batches
    datamodule = build_datamodule(
        data_config(cfg, ckpt, weights), {"batch_size": cfg.batch_size, "augment": recipe.get("augment")}, seed=0
    )
    check_classes(datamodule, ckpt, weights)
    datamodule.setup()
    print(f"Evaluating {ckpt}", flush=True)
    settings = OmegaConf.to_container(cfg, resolve=True) | {"label": weights.architecture}
    meta = {"checkpoint": str(ckpt), "model": weights.architecture, "data": datamodule.name, "ema": cfg.use_ema}
    predictor = model
    if recipe.get("test_flip"):  # predict as the run's own validation and test did
        predictor, meta["test_flip"] = FlipAveraged(model), True
    class_names = weights.data.get("class_names")  # absent in older checkpoints: only the count is checked
    with datamodule.dead_workers_named():
        report = Evaluator(predictor, datamodule, settings, out_dir, class_names=class_names).run(meta)
    if cfg.get("analysis"):
        report["analysis"] = run_analyses(
            list(cfg.analysis), model, datamodule, recipe, OmegaConf.to_container(cfg.analysis), out_dir
        )
        write_json(out_dir / METRICS_FILE, report)
    if wandb is not None:
        label = f"{weights.architecture}-{ckpt.resolve().parent.parent.name}"
        config = {"checkpoint": dict(hparams), "evaluation": OmegaConf.to_container(cfg, resolve=True)}
        training = tracking.training_run(run_dir_of(ckpt))  # its W&B id and group, when it logged to W&B
        run = tracking.start_evaluation_run(wandb, f"eval-{label}", config, out_dir, group=training.get("group"))
        try:
            tracking.use_checkpoint(run, ckpt, training.get("id"))
            tracking.log_report(run, report)
        finally:
            tracking.finish()
    return report


def wandb_settings(config: dict[str, Any]) -> tracking.WandbSettings | None:
    """The W&B settings of an evaluation config: ``logger=wandb`` (``logger.wandb.*``, train's shape); None: no
    W&B."""
    return tracking.wandb_settings((config.get("logger") or {}).get("wandb"))


EVALUATE_COMMAND = "evaluate"  # the job's name and its output marker (files.mark_output)


def _is_evaluation(out: Path) -> bool:
    """An evaluation's own folder: marked by an earlier evaluation, or this command's run directory."""
    return is_output_of(out, EVALUATE_COMMAND) or RunDir(out).holds_job(EVALUATE_COMMAND)


@contextlib.contextmanager
def _marked(out_dir: Path) -> Iterator[None]:
    """``out_dir`` marked as an evaluation's (unless it is this evaluation's run directory, whose records mark it);
    a folder this made is removed again when the evaluation fails before writing anything into it."""
    if out_dir.is_dir() and RunDir(out_dir).holds_job(EVALUATE_COMMAND):
        yield
        return
    made = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    mark_output(out_dir, EVALUATE_COMMAND)
    try:
        yield
    except BaseException:
        if made and [path.name for path in out_dir.iterdir()] == [OUTPUT_MARKER]:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def run_evaluate(cfg: DictConfig) -> list[dict[str, Any]]:
    if cfg.get("ckpt") in (None, "???"):
        raise ConfigValueError(
            "ckpt is required: alternet evaluate ckpt=PATH (a .ckpt file, a run directory, or a list)"
        )
    settings = OmegaConf.to_container(cfg, resolve=True)
    evaluate_config(settings)  # every setting before any work starts: the evaluation's, W&B's
    wandb = wandb_settings(settings)
    if cfg.get("analysis"):
        parse_configs(list(cfg.analysis), OmegaConf.to_container(cfg.analysis))
    own = "an evaluation of alternet's"
    out_dir = check_output_dir(cfg.out_dir, "evaluation output", _is_evaluation, own, "out_dir")
    paths = checkpoint_paths(OmegaConf.to_container(cfg.ckpt) if OmegaConf.is_list(cfg.ckpt) else cfg.ckpt)
    reports = []
    with _marked(out_dir):
        for index, ckpt in enumerate(paths):
            target = out_dir if len(paths) == 1 else out_dir / f"{index}-{ckpt.resolve().parent.parent.name}"
            reports.append(evaluate_checkpoint(cfg, ckpt, target, wandb))
            print(evaluation_report(reports[-1], target), flush=True)
    if len(reports) > 1:
        print(f"Comparison: {write_comparison(reports, out_dir / 'comparison.csv')}")
    return reports


def write_comparison(reports: list[dict[str, Any]], path: Path) -> Path:
    rows = []
    for report in reports:
        row = {"checkpoint": report["checkpoint"], "model": report["model"]} | report["test"]
        if report.get("robustness"):
            row["robustness"] = report["robustness"]["summary"]["robustness"]
            row["robustness_source"] = report["robustness"]["source"]
            row["mce"] = report["robustness"]["summary"]["mce"]
        rows.append(row)
    return write_csv(path, rows)
