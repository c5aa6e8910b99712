"""The README.md model card of an export, written from its config.json alone: YAML front matter the Hugging Face
Hub reads (library, license, tags, data set, test results as a ``model-index``) over a readable summary."""

from __future__ import annotations

from typing import Any

from huggingface_hub import EvalResult, ModelCardData

from ..architectures.config import recorded_label
from ..data import DATAMODULES
from ..data.augment import SECTIONS
from ..metrics.table import SPLIT_METRICS
from ..runs.results import RobustnessSummary, TestImages

TASK = "image-classification"
# Hub data set ids of the public data sets alternet trains on (others are tagged by their alternet name)
HUB_DATASETS = {
    "cifar10": "uoft-cs/cifar10",
    "cifar100": "uoft-cs/cifar100",
    "imagenet": "ILSVRC/imagenet-1k",
    "in1k": "ILSVRC/imagenet-1k",  # an HDVW import's ImageNet (timm's tag)
}
# metrics.json key -> (model-index metric type, its name on the Hub)
HUB_METRICS = {metric.key: (metric.hub_type, metric.hub_name) for metric in SPLIT_METRICS}
PLACEHOLDER_REPO = "<user>/<repo>"
TEST_METRICS = tuple((metric.key, metric.label) for metric in SPLIT_METRICS)
ROBUSTNESS_METRICS = (
    ("robustness", "mean accuracy over all corruption conditions"),
    ("mean_error", "mean error"),
    ("mce", "mCE (%)"),
    ("relative_mce", "relative mCE (%)"),
)


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "n/a" if value is None else str(value)


def _join(values: Any) -> str:
    return ", ".join(str(v) for v in values) if isinstance(values, (list, tuple)) else str(values)


def _model_section(config: dict[str, Any]) -> list[str]:
    args, info = config["model_args"], config["alternet"]
    lines = [f"- Architecture: `{config['architecture']}` (a timm model once `import alternet.models` has run)"]
    if "layout" in args:
        lines.append(f"- Layout: `{args['layout']}` (stages separated by `|`; C = Conv block, M = MSA block)")
    keys = ("block", "widths", "heads", "head_dim", "attention")
    details = [f"{key} {_join(args[key])}" for key in keys if key in args]
    if details:
        lines.append(f"- {'; '.join(details)}")
    weights = "EMA of the weights" if info["ema"] else "weights"
    lines += [
        f"- Parameters: {info['num_params']:,}",
        f"- Exported {weights} of `{info['checkpoint']}`; model arguments in `config.json` (`model_args`)",
    ]
    return lines


def _data_section(config: dict[str, Any]) -> list[str]:
    data, cfg, info = config["alternet"]["data"], config["pretrained_cfg"], config["alternet"]
    names = config["label_names"]
    labels = info["label_names_note"] or f"from the data set ({_join(names[:10])}{', ...' if len(names) > 10 else ''})"
    part = f" (trained on a seeded {data['subset']:g} of its training split: data.subset)" if data.get("subset") else ""
    return [
        f"- Data set: {data['name']}, {config['num_classes']} classes{part}",
        f"- Input: {'x'.join(str(v) for v in cfg['input_size'])}, normalised with mean {_join(cfg['mean'])}, "
        f"std {_join(cfg['std'])}",
        f"- Label names: {labels}",
    ]


def _imported_section(imported: dict[str, Any]) -> list[str]:
    """Weights trained elsewhere: where they come from; their recipe was not saved with them."""
    return [
        f"- Trained by the paper's authors with {imported['from']} as `{imported.get('arch')}` "
        f"({imported.get('origin')}); imported from `{imported['file']}` (sha256 {imported['sha256'][:16]}...)",
        "- The checkpoint records no recipe; the paper's CIFAR-100 recipe is HDVW's `configs/cifar100_vit.yaml`",
    ]


def _recipe_section(config: dict[str, Any]) -> list[str]:
    recipe, info = config["alternet"]["recipe"], config["alternet"]
    if info.get("imported"):
        return _imported_section(info["imported"])
    optimizer, schedule = recipe.get("optimizer") or {}, recipe.get("schedule") or {}
    augmentations = _augmentations(recipe.get("augment") or {}, config["alternet"]["data"].get("name")) or ["none"]
    mixup = recipe.get("mixup") or {}
    return [
        f"- Recipe `{recipe.get('name', '?')}`: epochs trained {info['epochs'] or '?'} (of {recipe.get('epochs')}), "
        f"batch size {recipe.get('batch_size')}",
        f"- Optimizer {optimizer.get('name')}, {_learning_rate(recipe, info)}, weight decay "
        f"{optimizer.get('weight_decay')}; "
        f"{schedule.get('name', 'constant')} schedule, warm-up epochs {recipe.get('warmup_epochs', 0)}",
        f"- Label smoothing {recipe.get('label_smoothing', 0.0)}, drop path {recipe.get('drop_path_rate', 0.0)}, "
        f"mixup {mixup.get('mixup_alpha', 0) or 0} / cutmix {mixup.get('cutmix_alpha', 0) or 0}, "
        f"EMA {(recipe.get('ema') or {}).get('decay') or 'off'}",
        f"- Augmentation: {', '.join(augmentations)}",
        *_initialised_from(info),
    ]


def _initialised_from(info: dict[str, Any]) -> list[str]:
    """Where the weights started (``model.pretrained``), and how they were fine-tuned from there."""
    pretrained = (info.get("model") or {}).get("pretrained")
    if not pretrained:
        return []
    finetune = (info.get("recipe") or {}).get("finetune") or {}
    if finetune.get("freeze_backbone"):
        how = "a linear probe: the backbone frozen, its weights those of the source"
    elif (scale := finetune.get("backbone_lr_scale", 1)) != 1:
        how = f"fine-tuned, the backbone at {scale:g}x the head's rate"
    else:
        how = "fine-tuned"
    source = "timm's registered weights" if pretrained is True else f"`{pretrained}`"
    return [f"- Initialised from {source} ({how}); the source's licence and terms apply to what it contributes"]


def _learning_rate(recipe: dict[str, Any], info: dict[str, Any]) -> str:
    """The peak rate trained at, and how it came from ``recipe.optimizer.lr`` when scaled to the global batch (an
    export of before the run recorded it gives the recipe's rate)."""
    written = (recipe.get("optimizer") or {}).get("lr")
    if info.get("lr") is None or info["lr"] == written:
        return f"lr {written}"
    return (
        f"lr {info['lr']:.4g} (recipe.optimizer.lr {written} for a global batch of {recipe.get('lr_scale_batch')}, "
        f"scaled {recipe.get('lr_scale_rule')} to the {info.get('global_batch')} trained)"
    )


def _flip_averaged(info: dict[str, Any]) -> bool:
    """Whether the recorded test and robustness averaged each prediction with its mirror image's
    (``recipe.test_flip``), where the exported model's forward pass sees one view."""
    return bool((info.get("recipe") or {}).get("test_flip"))


def _partial_test(info: dict[str, Any]) -> str | None:
    """``N of M`` when the test scored fewer than the split's images (``trainer.limit_test_batches``); else None."""
    images = TestImages.from_payload(info["test_images"]) if info.get("test_images") else None
    return f"{images.scored:,} of {images.of:,}" if images and images.partial else None


def _augmentations(augment: dict[str, Any], data: Any) -> list[str]:
    """The augmentation keys set in the section of ``recipe.augment`` that the data set's family reads (every
    section's, prefixed, for a data set alternet does not know); an export of before the sections lists its flat
    keys, as its card did."""
    if not set(augment) & set(SECTIONS):
        return [key for key, value in augment.items() if value]
    family = getattr(DATAMODULES.get(data), "augment_section", None)
    names = [family] if family else [name for name in SECTIONS if name in augment]
    return [
        key if family else f"{name}.{key}"
        for name in names
        for key, value in (augment.get(name) or {}).items()
        if value
    ]


def reported_test(config: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """The test metrics of the exported weights (those of the EMA when the EMA was exported and tested) and
    whether they are the EMA's."""
    info = config["alternet"]
    ema = bool(info["ema"] and info.get("test_ema"))
    return (info.get("test_ema") if ema else info.get("test")) or None, ema


def _telling(key: str, config: dict[str, Any]) -> bool:
    """Whether a test metric says something of the model: top-5 accuracy is 1 by construction with 5 classes or
    fewer (it is counted at min(5, classes))."""
    return key != "top5" or int(config["num_classes"]) > 5


def _test_section(config: dict[str, Any]) -> list[str]:
    info = config["alternet"]
    test, ema = reported_test(config)
    if not test and info.get("imported"):
        return ["No test metrics came with the imported checkpoint."]
    if not test:
        return ["No test metrics were recorded (no metrics.json next to the checkpoint)."]
    lines = ["| metric | value |", "| --- | --- |"]
    lines += [f"| {label} | {_number(test.get(key))} |" for key, label in TEST_METRICS if _telling(key, config)]
    tested = info.get("tested_checkpoint")
    note = "" if tested == info["checkpoint"] else " (not the exported checkpoint)"
    weights = "EMA weights" if ema else "weights"
    partial = _partial_test(info)
    split = f"the first {partial} images of the test split" if partial else "the test split"
    precision = info.get("test_precision")
    at = f" at precision {precision}" if precision and not str(precision).startswith("32") else ""
    lines += ["", f"Measured on {split} with the {weights} of `{tested or 'the final weights'}`{note}{at}."]
    if partial:
        lines[-1] += " A partial test: not the model's test result, and not published as one in the metadata."
    if _flip_averaged(info):  # the exported model predicts from one view
        lines[-1] += (
            " Each prediction averaged the logits of the image and its mirror image (`recipe.test_flip`); the "
            "exported model's forward pass sees one view, which scores differently (`alternet evaluate "
            "test_flip=false` measures it)."
        )
    return lines


def _robustness_section(summary: RobustnessSummary, images: int | None) -> list[str]:
    each = f" of {images:,} images each" if images else ""
    lines = [
        f"Corruptions: {summary.source} ({summary.n_conditions} conditions{each}, "
        f"{'complete' if summary.complete else 'partial'} grid)"
        + (f", baseline {summary.baseline}" if summary.baseline else ""),
        "",
        "| metric | value |",
        "| --- | --- |",
    ]
    return lines + [f"| {label} | {_number(getattr(summary, key))} |" for key, label in ROBUSTNESS_METRICS]


def _usage_section(config: dict[str, Any], repo_id: str | None) -> list[str]:
    name, classes = config["architecture"], config["num_classes"]
    hub = repo_id or PLACEHOLDER_REPO
    pushed = [] if repo_id else ["# once pushed with `alternet push path/to/export USER/REPO`"]
    timm_lines = [
        "import timm",
        "import alternet.models  # registers alternet's architectures with timm: import it before create_model",
        *pushed,
        f'model = timm.create_model("hf-hub:{hub}", pretrained=True)',
        'model = timm.create_model("local-dir:path/to/export", pretrained=True)  # a downloaded copy',
        "",
    ]
    if not config["alternet"].get("timm_loads", True):  # a user's model function: timm would not load its weights
        timm_lines = [
            f'# {name} is your own model: timm.create_model("local-dir:...") builds it with your function, which',
            "# loads no weights unless it is built with timm's build_model_with_cfg; load it with alternet.hub:",
        ]
    return [
        "```python",
        *timm_lines,
        "import alternet.hub",
        'model = alternet.hub.load("path/to/export")               # or num_classes=N for a new head',
        'features = alternet.hub.load("path/to/export", features_only=True)  # per-stage feature maps',
        "",
        "import json",
        'config = json.load(open("path/to/export/config.json"))  # its preprocessing, labels and weights:',
        "model = timm.create_model(",
        f'    "{name}", pretrained=True, num_classes={classes}, **config["model_args"],',
        "    pretrained_cfg_overlay=dict(",
        '        config["pretrained_cfg"], label_names=config["label_names"], file="path/to/export/model.safetensors"',
        "    ),",
        ")",
        "```",
        "",
        f"Fine-tune: `alternet train model={name} data=... model.pretrained=path/to/export` "
        "(a new head when the class count differs; `recipe.finetune.freeze_backbone=true` for a linear probe).",
    ]


def card_data(config: dict[str, Any], repo_id: str | None = None) -> ModelCardData:
    """The Hub metadata: timm as the library (so the Hub offers its loading snippet), the data set, and the
    recorded test metrics as ``model-index`` evaluation results when they are the exported weights' own."""
    name = config["alternet"]["data"]["name"]
    dataset = HUB_DATASETS.get(name, name)
    test, ema = reported_test(config)
    info = config["alternet"]
    other = info.get("tested_checkpoint") != info.get("checkpoint") or bool(info.get("ema")) != ema
    if other or _partial_test(info) or _flip_averaged(info):
        test = None  # measured on other weights, on part of the split or two views (the text says): not this model's
    recorded = {
        key: (test or {}).get(key) for key in HUB_METRICS if (test or {}).get(key) is not None and _telling(key, config)
    }
    results = [
        EvalResult(
            task_type=TASK,
            task_name="Image Classification",
            dataset_type=dataset,
            dataset_name=name,
            dataset_split=info.get("test_split") or "test",  # ImageNet's val/, where it is the test
            metric_type=HUB_METRICS[key][0],
            metric_name=HUB_METRICS[key][1],
            metric_value=value,
        )
        for key, value in recorded.items()
    ]
    return ModelCardData(
        library_name="timm",
        pipeline_tag=TASK,
        license=config["pretrained_cfg"].get("license") or "mit",
        tags=[TASK, "timm", "alternet", name],
        datasets=[dataset],
        metrics=[HUB_METRICS[key][0] for key in recorded] or ["accuracy"],
        model_name=repo_id.partition("@")[0].split("/")[-1] if repo_id else f"{_label(config)}-{name}",
        eval_results=results or None,
    )


def _label(config: dict[str, Any]) -> str:
    """The model as its run is recorded: its name and the architecture keys its config changed."""
    return recorded_label(config["alternet"].get("model"), config["architecture"])


def model_card(config: dict[str, Any], repo_id: str | None = None) -> str:
    """Hub metadata, then architecture, layout, parameters, training data, recipe, test metrics (with
    calibration), robustness when recorded, and how to load the weights (from ``hf-hub:repo_id`` once pushed)."""
    info = config["alternet"]
    sections = [
        "---",
        card_data(config, repo_id).to_yaml().strip(),
        "---",
        f"# {_label(config)} on {info['data']['name']}",
        "",
        f"{config['pretrained_cfg'].get('description', '')}. Paper: {config['pretrained_cfg'].get('paper_name')} "
        f"({config['pretrained_cfg'].get('paper_ids')}).",
        "",
        "## Model",
        *_model_section(config),
        "",
        "## Training data",
        *_data_section(config),
        "",
        "## Training recipe",
        *_recipe_section(config),
        "",
        "## Test metrics",
        *_test_section(config),
    ]
    if info.get("robustness"):  # the run's robustness summary, as the export's config.json holds it
        robustness = RobustnessSummary.from_payload(info["robustness"])
        sections += ["", "## Robustness", *_robustness_section(robustness, info.get("robustness_images"))]
        notes = []  # the evaluation after training scored the tested checkpoint's trained weights, as the run tests
        if info.get("tested_checkpoint") != info["checkpoint"]:
            notes.append(f"with `{info.get('tested_checkpoint') or 'the final weights'}`, not the exported checkpoint")
        if info.get("ema"):
            notes.append("with the trained weights, not the exported EMA weights")
        if _flip_averaged(info):
            notes.append("each prediction averaged with its mirror image's (`recipe.test_flip`)")
        if notes:
            sections += ["", f"Measured {'; '.join(notes)}."]
    sections += ["", "## Usage", *_usage_section(config, repo_id)]
    return "\n".join(sections) + "\n"
