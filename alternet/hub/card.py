"""The README.md model card of an export, written from its config.json alone."""

from __future__ import annotations

from typing import Any

TEST_METRICS = (("acc", "accuracy"), ("top5", "top-5 accuracy"), ("nll", "NLL"), ("ece", "ECE (10 bins)"))
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
    lines = [f"- Architecture: `{config['architecture']}` (a timm model once `import alternet` has run)"]
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
    return [
        f"- Data set: {data['name']}, {config['num_classes']} classes",
        f"- Input: {'x'.join(str(v) for v in cfg['input_size'])}, normalised with mean {_join(cfg['mean'])}, "
        f"std {_join(cfg['std'])}",
        f"- Label names: {labels}",
    ]


def _recipe_section(config: dict[str, Any]) -> list[str]:
    recipe, info = config["alternet"]["recipe"], config["alternet"]
    optimizer, schedule = recipe.get("optimizer") or {}, recipe.get("schedule") or {}
    augment = recipe.get("augment") or {}
    augmentations = [k for k, v in augment.items() if v] or ["none"]
    mixup = recipe.get("mixup") or {}
    return [
        f"- Recipe `{recipe.get('name', '?')}`: epochs trained {info['epochs'] or '?'} (of {recipe.get('epochs')}), "
        f"batch size {recipe.get('batch_size')}",
        f"- Optimizer {optimizer.get('name')}, lr {optimizer.get('lr')}, weight decay {optimizer.get('weight_decay')}; "
        f"{schedule.get('name', 'constant')} schedule, warm-up epochs {recipe.get('warmup_epochs', 0)}",
        f"- Label smoothing {recipe.get('label_smoothing', 0.0)}, drop path {recipe.get('drop_path_rate', 0.0)}, "
        f"mixup {mixup.get('mixup_alpha', 0) or 0} / cutmix {mixup.get('cutmix_alpha', 0) or 0}, "
        f"EMA {(recipe.get('ema') or {}).get('decay', 'off')}",
        f"- Augmentation: {', '.join(augmentations)}",
    ]


def _test_section(config: dict[str, Any]) -> list[str]:
    info = config["alternet"]
    ema = bool(info["ema"] and info.get("test_ema"))
    test = info.get("test_ema") if ema else info.get("test")
    if not test:
        return ["No test metrics were recorded (no metrics.json next to the checkpoint)."]
    lines = ["| metric | value |", "| --- | --- |"]
    lines += [f"| {label} | {_number(test.get(key))} |" for key, label in TEST_METRICS]
    tested = info.get("tested_checkpoint")
    note = "" if tested == info["checkpoint"] else " (not the exported checkpoint)"
    weights = "EMA weights" if ema else "weights"
    lines += ["", f"Measured on the test split with the {weights} of `{tested or 'the final weights'}`{note}."]
    return lines


def _robustness_section(summary: dict[str, Any]) -> list[str]:
    lines = [
        f"Corruptions: {summary.get('source')} ({summary.get('n_conditions')} conditions, "
        f"{'complete' if summary.get('complete') else 'partial'} grid)"
        + (f", baseline {summary['baseline']}" if summary.get("baseline") else ""),
        "",
        "| metric | value |",
        "| --- | --- |",
    ]
    return lines + [f"| {label} | {_number(summary.get(key))} |" for key, label in ROBUSTNESS_METRICS]


def _usage_section(config: dict[str, Any]) -> list[str]:
    name, classes = config["architecture"], config["num_classes"]
    return [
        "```python",
        "import alternet.hub",
        'model = alternet.hub.load("path/to/export")               # or num_classes=N for a new head',
        'features = alternet.hub.load("path/to/export", features_only=True)  # per-stage feature maps',
        "",
        "import json, timm, alternet  # importing alternet registers its architectures with timm",
        'model = timm.create_model("local-dir:path/to/export", pretrained=True)',
        'args = json.load(open("path/to/export/config.json"))["model_args"]',
        "model = timm.create_model(",
        f'    "{name}", pretrained=True, num_classes={classes}, **args,',
        f'    pretrained_cfg_overlay=dict(file="path/to/export/model.safetensors", num_classes={classes}),',
        ")",
        "```",
        "",
        f"Fine-tune: `python train.py model={name} data=... model.pretrained=path/to/export` "
        "(a new head when the class count differs; `recipe.finetune.freeze_backbone=true` for a linear probe).",
    ]


def model_card(config: dict[str, Any]) -> str:
    """Architecture, layout, parameters, training data, recipe, test metrics (with calibration), robustness when
    recorded, and how to load the weights."""
    info = config["alternet"]
    sections = [
        f"# {config['architecture']} on {info['data']['name']}",
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
    if info.get("robustness"):
        sections += ["", "## Robustness", *_robustness_section(info["robustness"])]
    sections += ["", "## Usage", *_usage_section(config)]
    return "\n".join(sections) + "\n"
