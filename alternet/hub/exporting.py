"""Export a trained checkpoint as a self-contained model directory that timm and :func:`alternet.hub.load` read:
``model.safetensors`` (timm key names), ``config.json`` (timm's hub format plus an ``alternet`` section) and a
``README.md`` model card. :func:`import_hdvw` writes the same directory from a checkpoint of the paper's authors."""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import save_file
from timm.data import resolve_data_config
from torch import nn

from .. import __version__
from ..architectures.config import recorded_label
from ..data import DATAMODULES
from ..dataset_facts import DataFacts
from ..errors import AlternetError, AlternetWarning, CheckpointError, DataError
from ..files import (
    atomic_write,
    file_digest,
    os_error_reason,
    removed_unless_written,
    whole_directory,
    write_text,
    writing,
)
from ..models import create_model
from ..runs.checkpoints import DIGEST_KEY, weights_digest
from ..runs.records import import_recorded
from ..runs.summary import RunSummary
from ..runs.weights import saved_recipe
from .card import model_card
from .hdvw import resolve_arch
from .loading import apply_weights
from .references import (
    CARD_FILE,
    CONFIG_FILE,
    WEIGHTS_FILE,
    check_destination,
    check_export_request,
    check_license,
)
from .sources import (
    EXPORT_FORMAT,
    Source,
    read_export,
    read_hdvw_source,
    read_lightning,
)

PAPER = dict(paper_name="How Do Vision Transformers Work?", paper_ids="arXiv:2202.06709")
HDVW_LICENSE = "apache-2.0"  # how-do-vits-work's, its released checkpoints' included (NOTICE)
# pretrained_cfg keys timm's save_config_for_hf drops: where weights were loaded from, not what they are
SOURCE_KEYS = ("url", "file", "hf_hub_id", "hf_hub_filename", "source", "state_dict", "label_offset")
KEEP_NULL = ("pool_size", "first_conv", "classifier")  # timm writes these even when None


def export(source: str | Path, out: str | Path, *, ema: bool = False, license_id: str | None = None) -> Path:
    """Export a run directory (its tested checkpoint, else ``last``) or a Lightning checkpoint into ``out``;
    ``license_id``: the weights' licence on the Hub (its identifier, e.g. ``cc-by-4.0``; default: ``mit``, the
    package's)."""
    path = Path(source).expanduser()
    out, checkpoint, run = check_export_request(source, out, license_id)  # the output first, then the source
    import_recorded(path)  # the modules the run was trained with, before its model is built: it may be the user's
    opened = read_lightning(checkpoint, ema=ema, run=run)
    model = create_model(opened.require_architecture(), num_classes=opened.num_classes, **opened.model_args)
    apply_weights(model, opened, strict=True)  # the weights must rebuild their architecture exactly
    trained = _run_config(opened)
    saved = DataFacts.from_dict(opened.hyper_parameters["data"]).class_names
    labels, label_note = label_names(trained["data"], opened.num_classes, saved)
    summary = run.summary() if run is not None else None
    if run is not None and summary is None:
        warnings.warn(
            f"{run.path} has not finished (no {run.metrics.name}): {checkpoint.name} is exported, and its card has no "
            "test results",
            AlternetWarning,
            stacklevel=2,
        )
    config = export_config(opened, model, trained, labels, label_note, summary, license_id=license_id)
    return write_export(out, model, config)


def write_export(
    out: Path, model: nn.Module, config: dict[str, Any], check: Callable[[Path], None] | None = None
) -> Path:
    """The three files of an export: the model's weights (with their digest), ``config.json`` (which records the
    same digest: :func:`~alternet.hub.sources.read_export` refuses a folder whose two files disagree) and the card.
    Written whole or not at all (:func:`~alternet.files.whole_directory`), by one command at a time; ``check``
    reads the written folder before it replaces an earlier one."""
    out = check_destination(out)
    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CheckpointError(f"export destination {out} cannot be made: {os_error_reason(error)}") from None
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    digest = weights_digest(weights)
    config = {**config, "alternet": {**config["alternet"], DIGEST_KEY: digest}}
    with removed_unless_written(out, made), writing(out, "export destination"), whole_directory(out) as staged:
        metadata = {"format": "pt", DIGEST_KEY: digest}
        atomic_write(staged / WEIGHTS_FILE, lambda tmp: save_weights(weights, tmp, metadata))
        write_text(staged / CONFIG_FILE, json.dumps(config, indent=2, allow_nan=False) + "\n")
        write_text(staged / CARD_FILE, model_card(config))
        if check is not None:
            check(staged)
    return out


def save_weights(weights: dict[str, Any], path: Path, metadata: dict[str, str]) -> None:
    """safetensors' ``save_file``, its failure to write (a full disk) raised as the ``OSError`` it is (safetensors
    raises its own error type, which was a traceback)."""
    try:
        save_file(weights, str(path), metadata=metadata)
    except SafetensorError as error:
        code = re.search(r"(?:os error|code:) (\d+)", str(error))
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from None


def import_hdvw(
    source: str | Path,
    out: str | Path,
    *,
    arch: str | None = None,
    data: str | None = None,
    data_root: str | Path | None = None,
    license_id: str | None = None,
) -> Path:
    """Export a checkpoint saved by the paper's code (HDVW) into ``out``, as :func:`export` does for ours.

    ``arch`` is HDVW's model name (``resnet_dnn_50``, ``vit_ti``, ``pit_ti``, ``swin_ti``, ``alternet_50``...),
    else the checkpoint's own ``name``; ``data`` the data set (default: the public one with the head's class
    count); ``data_root`` where its files are, for the class names (else class indices). The export is read back
    strictly before this returns. Its licence on the Hub is ``license_id``, by default the one the authors released
    their code and weights under (Apache-2.0)."""
    license_id = license_id or HDVW_LICENSE
    path, out = Path(source).expanduser(), Path(out).expanduser()
    out = check_destination(out)
    check_license(license_id)
    if arch is not None:
        resolve_arch(arch, None, str(path))  # a name that is no model, before the file is read
    opened = read_hdvw_source(path, arch, data)
    data = {**opened.hyper_parameters["data"], "root": str(data_root) if data_root else "/nonexistent"}
    labels, label_note = label_names(data, opened.num_classes)
    if data_root and label_note:  # asked for the names, and they cannot be read: not an export of indices
        raise DataError(
            f"--data-root {data_root}: {label_note.removeprefix('class indices: ')}; fix the path, or "
            "leave --data-root out to label the classes by index"
        )
    if not data_root:
        label_note = "class indices: pass --data-root with the data set's files for its class names"
    model = create_model(opened.require_architecture(), num_classes=opened.num_classes, **opened.model_args)
    apply_weights(model, opened, strict=True)
    facts = DataFacts.from_dict(opened.hyper_parameters["data"])
    description = f"{opened.architecture} trained on {facts.name} by the paper's authors (HDVW), imported"
    config = export_config(
        opened,
        model,
        {"data": {}, "recipe": {}},
        labels,
        label_note,
        None,
        description=description,
        license_id=license_id,
    )
    config["alternet"]["imported"] = {
        "from": "HDVW (github.com/xxxnell/how-do-vits-work)",
        "file": path.name,
        "sha256": file_digest(path, "sha256"),
        **opened.hyper_parameters["hdvw"],
    }
    return write_export(out, model, config, check=lambda staged: _check_reads_back(out, staged, model))


def _check_reads_back(out: Path, staged: Path, model: nn.Module) -> None:
    """The export (written in ``staged``, for ``out``) rebuilds the model with every tensor in place (a strict
    load), and the weights are the ones imported."""
    written = read_export(staged, location=str(out))  # said as where it lands, not the staging folder
    rebuilt = create_model(written.require_architecture(), num_classes=written.num_classes, **written.model_args)
    apply_weights(rebuilt, written, strict=True, new_head_ok=False)
    if weights_digest(rebuilt.state_dict()) != weights_digest(model.state_dict()):
        raise CheckpointError(
            f"the export for {out} does not read back as the imported weights; it is not usable, and {out} is unchanged"
        )


def _run_config(opened: Source) -> dict[str, Any]:
    """The run's resolved data and recipe: its config.yaml when present, else the checkpoint's hyperparameters."""
    resolved = (opened.run.recorded_config() if opened.run else None) or {}
    if isinstance(resolved.get("data"), dict) and isinstance(resolved.get("recipe"), dict):
        _check_of_the_run(opened, resolved)
        return resolved | {"recipe": saved_recipe(resolved["recipe"])}
    return {"data": opened.hyper_parameters["data"], "recipe": opened.hyper_parameters.get("recipe") or {}}


def _check_of_the_run(opened: Source, resolved: dict[str, Any]) -> None:
    """The checkpoint trained the model on the data its run directory's config records: one copied in from another
    run would be exported with that run's recipe and test results."""
    for section in ("model", "data"):
        saved, recorded = opened.hyper_parameters[section].get("name"), (resolved.get(section) or {}).get("name")
        if recorded and saved != recorded:
            raise CheckpointError(
                f"{opened.location} trained {section} {saved!r}, but its run directory {opened.run.path} records "
                f"{section}={recorded}: it is another run's checkpoint; export that run, or the checkpoint alone "
                "from a folder of its own"
            )


def label_names(
    data: dict[str, Any], num_classes: int, saved: Sequence[str] | None = None
) -> tuple[list[str], str | None]:
    """The class names the checkpoint saved (its data facts), else the data set's, else class indices with a note
    saying why."""
    if saved and len(saved) == num_classes:
        return [str(name) for name in saved], None
    try:
        root = {"root": data["root"]} if data.get("root") else {}  # the class names depend on nothing else
        names = [str(name) for name in DATAMODULES[data["name"]](**root, batch_size=1).class_names]
    except (AlternetError, OSError, KeyError, TypeError) as error:
        return _indices(num_classes), f"class indices: the data set's class names are unavailable ({error})"
    if len(names) != num_classes:
        return _indices(num_classes), f"class indices: the data set names {len(names)} classes, not {num_classes}"
    return names, None


def _indices(num_classes: int) -> list[str]:
    return [str(i) for i in range(num_classes)]


def export_config(
    opened: Source,
    model: nn.Module,
    run_config: dict[str, Any],
    labels: list[str],
    label_note: str | None,
    summary: RunSummary | None,
    *,
    description: str | None = None,
    license_id: str | None = None,
) -> dict[str, Any]:
    """``config.json``: what timm's ``save_config_for_hf`` writes for this model (``architecture``,
    ``num_classes``, ``num_features``, ``global_pool``, ``label_names``, ``model_args``, ``pretrained_cfg``), so
    ``local-dir:`` and ``hf-hub:`` loads read it as one of timm's own, plus an ``alternet`` section describing
    training and results (from the run's ``summary``, when it finished)."""
    recorded = ("val_size", "split_seed", "subset")  # what chose its training images
    data = opened.hyper_parameters["data"] | {key: run_config["data"].get(key) for key in recorded}
    label = recorded_label(opened.hyper_parameters.get("model"), opened.architecture)
    description = description or f"{label} trained on {data['name']} with alternet"
    pool = global_pool(model)
    return {
        "architecture": opened.architecture,
        "num_classes": opened.num_classes,
        "num_features": int(getattr(model, "num_features", 0)) or None,
        **({"global_pool": pool} if pool else {}),
        "label_names": labels,
        "model_args": hub_model_args(model, opened.model_args),
        "pretrained_cfg": hub_pretrained_cfg(
            model,
            {**opened.pretrained_cfg, "description": description, **PAPER}
            | ({"license": license_id} if license_id else {}),
        ),
        "alternet": {
            "format": EXPORT_FORMAT,
            "version": __version__,
            "weights": WEIGHTS_FILE,
            "checkpoint": opened.checkpoint.name if opened.checkpoint else None,
            "ema": opened.ema,
            "num_params": sum(p.numel() for p in model.parameters()),
            # timm's local-dir and hf-hub loading builds the model with its registered function, which loads the
            # weights where it is built with timm's build_model_with_cfg, as alternet's and timm's own are
            "timm_loads": type(model).__module__.split(".")[0] in ("alternet", "timm"),
            "imports": list(run_config.get("imports") or []),  # the modules that register a user's model
            "label_names_note": label_note,
            "model": opened.hyper_parameters["model"],
            "data": {k: data.get(k) for k in ("name", "num_classes", "image_size", "mean", "std", "val_size")}
            | {
                k: data[k]
                for k in (
                    "split_seed",
                    "subset",
                    "train_listing",
                    "crop_pct",
                    "crop_mode",
                    "interpolation",
                )
                if data.get(k) is not None
            },
            "recipe": run_config["recipe"],
            "epochs": summary.epochs if summary else None,
            "tested_checkpoint": Path(summary.tested_checkpoint).name if summary else None,
            "test": summary.test if summary else None,
            "test_ema": summary.test_ema if summary else None,
            "test_images": summary.test_images.to_json() if summary and summary.test_images else None,
            "test_split": summary.test_split if summary else None,
            "test_precision": summary.precision if summary else None,
            "global_batch": summary.global_batch if summary else None,
            "lr": summary.lr if summary else None,
            "robustness": summary.robustness.summary.to_json() if summary and summary.robustness else None,
            "robustness_images": _images_per_condition(summary),
        },
    }


def _images_per_condition(summary: RunSummary | None) -> int | None:
    """How many images each corrupted condition of the run's robustness result held (None: not recorded)."""
    images = summary.robustness.images if summary and summary.robustness else None
    return images.images_per_condition if images else None


def global_pool(model: nn.Module) -> str | None:
    """The pooling the model applies now, read where timm reads it: the head's pool, else the model's."""
    head = getattr(model, "head", None)
    holders = ((head, "global_pool"), (head, "pool_type"), (model, "global_pool"))
    for pool in (getattr(holder, name, None) for holder, name in holders):
        pool = getattr(pool, "pool_type", pool)
        if isinstance(pool, str):
            return pool
    return None


def hub_model_args(model: nn.Module, recorded: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's architecture arguments plus the reconstruction arguments timm records from the model
    (``in_chans``, ``global_pool``, ``img_size``). ``num_classes`` stays out: it is at the top level, and every
    loader passes it as a keyword beside ``**model_args``."""
    args = dict(recorded)
    traits = getattr(model, "_traits", None) or {}
    if isinstance(getattr(model, "in_chans", None), int):
        args["in_chans"] = model.in_chans
    pool = global_pool(model)
    if pool is not None:
        args["global_pool"] = pool
    if traits.get("img_size") is not None:
        args.setdefault("img_size", list(traits["img_size"]))
    return args


def hub_pretrained_cfg(model: nn.Module, cfg: dict[str, Any]) -> dict[str, Any]:
    """``pretrained_cfg`` as timm exports it: no weight-source keys, the preprocessing resolved, the current
    input constraints and class count, and ``custom_load`` off (the weights are a plain timm state dict)."""
    out = {k: v for k, v in cfg.items() if k not in SOURCE_KEYS and (v is not None or k in KEEP_NULL)}
    out.update({key: out.get(key) for key in KEEP_NULL})
    resolved = resolve_data_config(pretrained_cfg=out)
    out.update({k: list(v) if isinstance(v, tuple) else v for k, v in resolved.items()})
    traits = getattr(model, "_traits", None) or {}
    registered = getattr(model, "pretrained_cfg", None) or {}
    out["fixed_input_size"] = bool(traits.get("fixed_input_size", out.get("fixed_input_size", False)))
    out["first_conv"] = traits.get("first_conv", out.get("first_conv"))
    out["custom_load"] = False
    if registered.get("input_size") and list(out["input_size"][1:]) != list(registered["input_size"][1:]):
        out["pool_size"] = None  # the registry's pool size is for another input size
    for key in ("test_input_size", "min_input_size"):
        if out.get(key):
            out[key] = [out["input_size"][0], *out[key][1:]]
    if out["fixed_input_size"]:
        out.pop("test_input_size", None)
    if getattr(model, "num_classes", None) is not None:
        if model.num_classes != out.get("num_classes"):
            for key in ("label_names", "label_descriptions"):
                out.pop(key, None)
        out["num_classes"] = model.num_classes
    return out
