"""The evaluation application (``evaluate.py``): resolve checkpoints and data, score each model, run the
requested analyses, write and log the reports."""

from __future__ import annotations

import contextlib
import re
import shutil
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from .. import tracking
from ..analysis import check_applicable, check_data, parse_configs, run_analyses
from ..analysis.config import ObjectiveConfig
from ..data import DATAMODULES, ImageDataModule, build_datamodule, data_config
from ..errors import AlternetWarning, CheckpointError, ConfigValueError
from ..evaluation import Evaluator
from ..evaluation.evaluator import PRODUCTS
from ..evaluation.inference import choose_device
from ..files import (
    OUTPUT_MARKER,
    check_output_dir,
    is_output_of,
    mark_output,
    stale_temporaries,
    whole_products,
    write_csv,
    write_json,
)
from ..hub.loading import build_model
from ..hub.sources import Source, check_reference, open_source, preprocessing
from ..models.flip import FlipAveraged
from ..runs.directories import METRICS_FILE, RunDir
from ..runs.ownership import RunDirLock, training_now
from ..runs.records import import_modules, import_recorded
from ..runs.results import EvaluationReport
from ..training.config import RecipeConfig
from ..typed import build
from .config import EvaluateConfig, compose, evaluate_config, missing_keys, model_sources, resolved
from .console import evaluation_report


def command_line_keys() -> set[str]:
    """The keys this command's line set (Hydra's overrides: ``data.image_size=256`` -> ``data.image_size``)."""
    if not HydraConfig.initialized():
        return set()
    overrides = OverridesParser.create().parse_overrides(list(HydraConfig.get().overrides.task))
    return {override.key_or_group for override in overrides}


def packaged_data(name: str, data_dir: str) -> dict[str, Any]:
    """``data=NAME`` as Hydra composes it for this command (its defaults list merged), with ``paths.data_dir``."""
    cfg = compose("evaluate", [f"data={name}", f"paths.data_dir={data_dir}"])
    return OmegaConf.to_container(cfg.data, resolve=True)


HOLD_OUT = ("val_size", "split_seed")  # the data keys that choose a run's validation images out of its training set


def evaluation_data(config: EvaluateConfig, source: Source, set_keys: set[str]) -> dict[str, Any]:
    """The data to evaluate on: ``data=...`` if given, else the training run's, else the packaged data set the
    model records. The model's own preprocessing (:func:`alternet.hub.sources.preprocessing`) replaces the data
    set's, except for a key the command line set; so does the validation hold-out the run (an export, a checkpoint)
    records, on its own data set."""
    model_input = preprocessing(source)
    trained = source.run.recorded_config() if source.run else None
    recorded = trained["data"] if trained is not None else source.hyper_parameters.get("data") or {}
    if config.data:
        data = dict(config.data)
    elif trained is not None:
        data = {k: v for k, v in trained["data"].items() if k != "loader"}  # the training split's: DALI not needed
        if data.get("train_shards"):  # nor its streamed shards: an evaluation reads the folders' val/ and test/
            data["train_shards"] = None
    else:
        name = recorded.get("name")  # the checkpoint's own record (no run directory's config here)
        if name not in DATAMODULES and name:  # a user's data set, its module not imported
            raise ConfigValueError(
                f"{source.location} was trained on {name!r}, which no imported module registers: give the module "
                f"that registers it and its config option, e.g. imports=[my_pkg.data] "
                f"hydra.searchpath=[pkg://my_pkg.conf] data={name}"
            )
        if name not in DATAMODULES:
            raise ConfigValueError(
                f"{source.location} does not say which data set it was trained on: give data=NAME "
                f"({', '.join(sorted(DATAMODULES))}), e.g. data=imagenet data.root=DIR"
            )
        data = packaged_data(name, config.paths.data_dir)
    if trained is None or config.data:
        data |= {key: value for key, value in model_input.items() if key in data and f"data.{key}" not in set_keys}
    if (config.data or trained is None) and data.get("name") == recorded.get("name"):
        split = {key: recorded[key] for key in HOLD_OUT if key in recorded}  # the run's (or export's) validation
        data |= {key: value for key, value in split.items() if f"data.{key}" not in set_keys}  # images, not others
        changed = [
            f"data.{key}={data[key]} (trained with {value})" for key, value in split.items() if data[key] != value
        ]
        unrecorded = [key for key in HOLD_OUT if key not in split and f"data.{key}" not in set_keys]
        if unrecorded and data.get("val_size"):  # a checkpoint without its run records neither
            values = ", ".join(f"data.{key}={data[key]}" for key in unrecorded)
            changed.append(f"{values} ({source.location} does not record its split)")
        if changed and config.calibration.temperature_scaling:
            warnings.warn(
                f"{', '.join(changed)}: the temperature is fitted on a validation split that may not be the run's "
                "and may hold images it trained on (its run directory, or its export, records the split)",
                AlternetWarning,
                stacklevel=2,
            )
    if config.data_root:  # a data set that reads no files (digits) says it is not used
        data["root"] = config.data_root
    if missing := missing_keys(data, "data."):  # a packaged data set's root, say
        if not config.data:  # the checkpoint's data: its root is data_root (data.X sets a chosen data=NAME's keys)
            missing = ["data_root" if key == "data.root" else key for key in missing]
        example = " ".join(f"{key}=..." for key in missing)
        raise ConfigValueError(f"{', '.join(missing)} must be set: e.g. alternet evaluate {example}")
    return data


def class_names(source: Source) -> list[Any] | None:
    """The names of the model's classes, in its label order, where it records them."""
    return (source.hyper_parameters.get("data") or {}).get("class_names") or source.pretrained_cfg.get("label_names")


def check_classes(datamodule: ImageDataModule, source: Source) -> None:
    trained_on = (source.hyper_parameters.get("data") or {}).get("name")
    if source.num_classes is not None and datamodule.num_classes != source.num_classes:
        raise CheckpointError(
            f"{source.location} predicts {source.num_classes} classes"
            f"{f' ({trained_on})' if trained_on else ''} but data={datamodule.name} has {datamodule.num_classes}; "
            "evaluate it on a data set with the same classes"
        )
    check_class_names(class_names(source), datamodule, source.location)
    for key, before in preprocessing(source).items():
        now = getattr(datamodule, key, None)
        if now is not None and (list(now) if isinstance(now, (list, tuple)) else now) != before:
            warnings.warn(
                f"{source.location} expects data.{key}={before} but is evaluated with {now}: its numbers will "
                "differ from the model's own",
                AlternetWarning,
                stacklevel=2,
            )


def check_holdout(datamodule: ImageDataModule, source: Source, temperature_scaling: bool) -> None:
    """Where the evaluation reads a hold-out of train/ (as its test split, without a test/ folder, or to fit a
    temperature on): drawn again only from the listing the run drew it from (a grown or thinned folder would put
    training images among the ones it reads)."""
    if not datamodule.holds_out_of_train:
        return
    if not (datamodule.test_is_validation or temperature_scaling):
        return  # its test/ folder alone is scored
    recorded = source.hyper_parameters.get("data") or {}
    listing = recorded.get("train_listing")
    if listing and recorded.get("name") == datamodule.name and datamodule.facts().train_listing != listing:
        raise ConfigValueError(
            f"{datamodule.directory / 'train'} lists other images than when {source.location} was trained: its "
            "validation hold-out cannot be drawn again, and one drawn now would hold images it trained on. Evaluate "
            "on the folder as it was, or on a test/ folder of images it never saw"
        )


def check_class_names(saved: list[Any] | None, datamodule: ImageDataModule, location: str) -> None:
    """The data's classes are the model's, in its order: the same names in another order, or a name both have at
    another label, are refused (its images would be scored as another class); other names at the same labels warn
    (a relabelled copy, or the wrong data set)."""
    if not saved or len(saved) != datamodule.num_classes:
        return
    trained, now = [str(name) for name in saved], [str(name) for name in datamodule.class_names]
    if trained == now:
        return
    label = next(i for i, (a, b) in enumerate(zip(trained, now)) if a != b)
    where = f"label {label} is {trained[label]!r} in {location} but {now[label]!r} in data={datamodule.name}"
    composed = [[unicodedata.normalize("NFC", name) for name in names] for names in (trained, now)]
    if sorted(composed[0]) == sorted(composed[1]) and sorted(trained) != sorted(now):
        raise CheckpointError(
            f"the data's class names are the model's written in another Unicode normalisation ({where}, alike on "
            "screen; macOS writes names decomposed, NFD), which sorts the folders in another order: rename the "
            "class folders to composed names (NFC, e.g. convmv -r -f utf8 -t utf8 --nfc --notest DIR)"
        )
    if sorted(trained) == sorted(now):
        raise CheckpointError(
            f"the data's classes are the model's in another order ({where}): its predictions would be scored "
            "against other classes; give the class folders the order the model was trained on"
        )
    moved = next((name for name in trained if name in now and trained.index(name) != now.index(name)), None)
    if moved is not None:
        raise CheckpointError(
            f"the data's classes are not at the model's labels ({where}; {moved!r} is label {trained.index(moved)} "
            f"for the model, {now.index(moved)} in the data): its images would be scored as another class; give the "
            "class folders the model's names"
        )
    warnings.warn(
        f"the data's class names are not the model's ({where}): it is scored by label position",
        AlternetWarning,
        stacklevel=2,
    )


def training_recipe(config: EvaluateConfig, source: Source, configs: dict[str, Any]) -> RecipeConfig | None:
    """The recipe the model was trained with: ``recipe=NAME`` if given, else the one it records. The analyses of
    the training objective (loss, weight decay, batch size, augmentation) need one: refused before any work when
    there is none."""
    if config.recipe:
        return build(RecipeConfig, config.recipe, "recipe.")
    recipe = source.hyper_parameters.get("recipe") or {}
    needing = [name for name, config in configs.items() if isinstance(config, ObjectiveConfig)]
    if needing and not recipe:
        raise ConfigValueError(
            f"analysis={needing[0]} measures the training objective (loss, weight decay, batch size, augmentation) "
            f"and {source.location} records no training recipe: give the one it was trained with, e.g. "
            "recipe=imagenet (conf/recipe/)"
        )
    return build(RecipeConfig, recipe, "recipe.") if recipe else None


def evaluate_model(
    config: EvaluateConfig,
    reference: str,
    out_dir: Path,
    set_keys: frozenset[str] = frozenset(),
    staged: Path | None = None,
) -> tuple[EvaluationReport, Source]:
    """Score the model ``reference`` names (any source :func:`alternet.hub.load` reads) for ``out_dir`` with the
    evaluation settings of ``config`` (``set_keys``: the command line's): its files are written into ``staged``
    (default: ``out_dir``), which the caller puts in ``out_dir``'s place, and named there. Returns the report and
    the source it read."""
    staged = out_dir if staged is None else staged
    import_recorded(reference)  # the modules a run was trained with, first: its model or data set may be the user's
    source = open_source(reference, ema=config.use_ema)
    if source.run is not None and (owner := training_now(source.run)) is not None:
        warnings.warn(
            f"{source.run.path} is still training ({owner}): {source.checkpoint} is its checkpoint so far, which the "
            "run may replace; evaluate it again once the run has finished",
            AlternetWarning,
            stacklevel=2,
        )
    analyses = parse_configs(list(config.analysis), config.analysis) if config.analysis else {}  # typed once
    recipe = training_recipe(config, source, analyses)  # its augmentation and loss feed the objective's analyses
    model = build_model(source, strict=True)
    if config.analysis:
        check_applicable(list(config.analysis), model)
    data = data_config(evaluation_data(config, source, set(set_keys)))
    datamodule = build_datamodule(data, batch_size=config.batch_size, augment=recipe and recipe.augment, seed=0)
    check_classes(datamodule, source)
    check_holdout(datamodule, source, config.calibration.temperature_scaling)
    datamodule.setup()
    if config.analysis:
        check_data(analyses, datamodule, recipe)
    print(f"Evaluating {source.location}{' (its EMA weights)' if source.ema else ''}", flush=True)
    label = source.label()  # its architecture (a source of weights alone is refused here)
    checkpoint = str(source.checkpoint.absolute()) if source.checkpoint is not None else source.location
    meta = {"checkpoint": checkpoint, "source": reference, "model": label, "data": datamodule.name}
    meta["ema"] = source.ema  # the weights': an export of EMA weights holds them without use_ema
    predictor = model
    flip = config.test_flip if config.test_flip is not None else bool(recipe and recipe.test_flip)  # as the run did
    if flip:
        predictor, meta["test_flip"] = FlipAveraged(model), True
    with datamodule.dead_workers_named():
        evaluator = Evaluator(predictor, datamodule, config, staged, label, class_names=class_names(source))
        report = evaluator.run(meta)
    if config.analysis:
        analyses = run_analyses(list(config.analysis), model, datamodule, recipe, config.analysis, staged)
        report = replace(report, analysis=analyses)
    if config.analysis or staged != out_dir:
        report = report.moved(staged, out_dir)
        write_json(staged / METRICS_FILE, report.to_json())
    return report, source


def log_evaluation(
    config: EvaluateConfig, reference: str, source: Source, report: EvaluationReport, out_dir: Path
) -> None:
    """An evaluation in place logged to W&B as its own run (``logger=wandb``; its local files in ``out_dir``, the
    command's folder: a model's own folder holds its scores alone), in the group of the training run it scored,
    its checkpoint as the artifact it used."""
    recorded = {"checkpoint": dict(source.hyper_parameters), "source": reference, "evaluation": config.to_dict()}
    training = tracking.training_run(source.run)  # its W&B id and group, when it logged to W&B
    name = f"eval-{report.model}-{short_name(reference)}" + ("-ema" if report.ema else "")  # apart from the raw's
    run = tracking.start_evaluation_run(config.logger.wandb, name, recorded, out_dir, group=training.get("group"))
    try:
        if source.checkpoint is not None and source.checkpoint.suffix == ".ckpt":
            tracking.use_checkpoint(run, source.checkpoint, training.get("id"))
        tracking.log_report(run, report)
    finally:
        tracking.finish()


EVALUATE_COMMAND = "evaluate"  # the job's name and its output marker (files.mark_output)


COMPARISON_FILE = "comparison.csv"  # the models of one evaluation side by side


def _check_model_folders(out_dir: Path) -> None:
    """An earlier evaluation's folder of one of several models is replaced whole: one holding other files (the user's,
    an older version's W&B files) is refused before any work, nothing changed."""
    folders = [f for f in sorted(out_dir.glob("*")) if re.fullmatch(MODEL_FOLDER, f.name) and f.is_dir()]
    for folder in folders:
        if foreign := sorted(entry.name for entry in folder.iterdir() if entry.name not in PRODUCTS):
            raise ConfigValueError(
                f"{folder} holds files that are not an evaluation's ({', '.join(foreign[:4])}), which scoring into "
                f"{out_dir} again would replace with the folder; move them out, or choose another out_dir"
            )


MODEL_FOLDER = r"\d+-.+"  # one model's folder of several: {index}-{short name}


def _is_product(path: Path) -> bool:
    """An earlier evaluation's file or folder among its folder's entries (not its records, log, lock or W&B files):
    one model's files, the comparison of several, or one of several models' folders."""
    if path.name in PRODUCTS or path.name == COMPARISON_FILE:
        return True
    folder = re.fullmatch(MODEL_FOLDER, path.name) and path.is_dir() and not path.is_symlink()
    return bool(folder) and all(entry.name in PRODUCTS for entry in path.iterdir())


def _is_evaluation(out: Path) -> bool:
    """An evaluation's own folder: marked by an earlier evaluation, or this command's run directory."""
    return is_output_of(out, EVALUATE_COMMAND) or RunDir(out).holds_job(EVALUATE_COMMAND)


@contextlib.contextmanager
def _marked(out_dir: Path) -> Iterator[None]:
    """``out_dir`` locked for this evaluation (its run directory's lock, where it is one: ``out_dir=DIR``; else taken
    here: ``paths.output_dir=DIR``, a multirun's jobs) and marked as an evaluation's (unless it is this evaluation's
    run directory, whose records mark it); a folder this made is removed again when the evaluation fails before
    writing anything into it."""
    made, out = not out_dir.exists(), RunDir(out_dir)
    own_run = not made and out.holds_job(EVALUATE_COMMAND)
    try:  # a second writer stops here, in one line
        lock = None if RunDirLock.held(out) else RunDirLock(out).acquire()
    except ConfigValueError:
        raise ConfigValueError(
            f"evaluation output {out_dir} is being written by another evaluation; wait for it, or choose another "
            "out_dir"
        ) from None
    for stale in stale_temporaries(out_dir):  # what an evaluation killed mid-write left (its files are intact)
        stale.unlink(missing_ok=True)
    try:
        if not own_run:
            mark_output(out_dir, EVALUATE_COMMAND)
        yield
    except BaseException:
        if made and {path.name for path in out_dir.iterdir()} <= {OUTPUT_MARKER, out.lock.name}:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            lock.release()


def run_evaluate(cfg: DictConfig) -> list[EvaluationReport]:
    settings = resolved(cfg, "evaluate")
    import_modules(settings.get("imports"))  # first: the models and data modules they register
    config = evaluate_config(settings)  # every setting before any work starts: the evaluation's, W&B's
    config.logger.wandb = tracking.usable(config.logger.wandb)
    choose_device(config.device, "device")  # a GPU this machine lacks, refused before any model is read
    if config.analysis:
        parse_configs(list(config.analysis), config.analysis)
    own = "an evaluation of alternet's"
    out_dir = check_output_dir(config.out_dir, "evaluation output", _is_evaluation, own, "out_dir").absolute()
    sources = model_sources(config.ckpt)
    for source in sources:  # what needs the registries and the files' bytes; the config checked the rest
        check_reference(source)
    set_keys = frozenset(command_line_keys())
    scored = []
    _check_model_folders(out_dir)
    with _marked(out_dir):
        with whole_products(out_dir, _is_product) as staging:  # the earlier evaluation intact until this one is done
            for index, reference in enumerate(sources):
                name = "" if len(sources) == 1 else f"{index}-{short_name(reference)}"
                report, source = evaluate_model(config, reference, out_dir / name, set_keys, staging / name)
                scored.append((reference, source, report, out_dir / name))
            if len(scored) > 1:
                reports, folders = [report for *_, report, _ in scored], [target.name for *_, target in scored]
                write_comparison(reports, folders, staging / COMPARISON_FILE)
        for reference, source, report, target in scored:
            print(evaluation_report(report, target), flush=True)
            if config.logger.wandb is not None:
                log_evaluation(config, reference, source, report, out_dir)
        if len(scored) > 1:
            print(f"Comparison: {out_dir / COMPARISON_FILE}")
    return [report for *_, report, _ in scored]


def short_name(source: str) -> str:
    """A name for a scored model (its folder among several, its W&B run): a checkpoint's run directory (a loose
    checkpoint's own name), another folder's own name, else the source spelled as a file name."""
    path = Path(source).expanduser()
    if path.suffix == ".ckpt":
        return path.resolve().parent.parent.name if RunDir.of_checkpoint(path) is not None else path.stem
    if path.is_dir():
        return path.resolve().name
    return re.sub(r"[^\w.-]+", "-", source).strip("-")[-80:]


def write_comparison(reports: list[EvaluationReport], folders: list[str], path: Path) -> Path:
    """One row per model: where its files are (``folder``), what was scored (the weights, EMA or not, one view or
    two; the test images, of how many; the corrupted conditions, their images each, and whether they are the whole
    benchmark) beside its numbers."""
    rows = []
    for folder, report in zip(folders, reports):
        row = {"folder": folder, "checkpoint": report.checkpoint, "model": report.model, "data": report.data}
        row |= {"ema": bool(report.ema), "test_flip": bool(report.test_flip)}  # each model's own where not set
        row |= {"precision": report.precision, "ece_bins": report.ece_bins}
        if report.test_images:
            row |= {"test_images": report.test_images.scored, "test_images_of": report.test_images.of}
        row |= report.test
        if report.selective:
            row |= {"aurc": report.selective.aurc, "augrc": report.selective.augrc}
        if report.robustness:
            summary, images = report.robustness.summary, report.robustness.images
            row |= {
                "robustness": summary.robustness,
                "robustness_source": report.robustness.source,
                "robustness_conditions": summary.n_conditions,
                "robustness_images": images.images_per_condition if images else None,  # a subset: max_images
                "robustness_complete": summary.complete and not (images and images.max_images),
                "mce": summary.mce,
            }
        rows.append(row)
    return write_csv(path, rows)
