"""``evaluate.py``: resolve checkpoints and data, score each model, write and log the reports."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..analysis import parse_configs, run_analyses
from ..data import build_datamodule
from ..errors import CheckpointError, ConfigValueError
from ..jsonio import write_json
from ..training.loggers import finish_wandb, wandb_offline_reason
from .inference import load_checkpoint_module
from .report import Evaluator
from .wandb_report import log_report

CONF = Path(__file__).resolve().parents[2] / "conf"


def checkpoint_paths(ckpt: str | list[str]) -> list[Path]:
    """Checkpoint files from paths to files or run directories (best checkpoint, else last)."""
    sources = [ckpt] if isinstance(ckpt, str) else list(ckpt)
    paths = []
    for source in map(Path, sources):
        if source.is_dir():
            source = _run_checkpoint(source)
        elif not source.exists():
            raise CheckpointError(f"checkpoint {source} does not exist")
        paths.append(source)
    return paths


def _run_checkpoint(run_dir: Path) -> Path:
    metrics = run_dir / "metrics.json"
    if metrics.is_file():
        best = json.loads(metrics.read_text()).get("best_checkpoint")
        if best and Path(best).is_file():
            return Path(best)
    last = run_dir / "checkpoints" / "last.ckpt"
    if last.is_file():
        return last
    raise CheckpointError(f"{run_dir} holds no checkpoint (looked for metrics.json's best_checkpoint and {last})")


def training_config(ckpt: Path) -> dict[str, Any] | None:
    """The resolved config of the run that wrote ``ckpt`` (``<run>/checkpoints/x.ckpt`` -> ``<run>/config.yaml``)."""
    path = ckpt.resolve().parent.parent / "config.yaml"
    return OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else None


def data_config(cfg: DictConfig, ckpt: Path, hparams: Mapping[str, Any]) -> dict[str, Any]:
    """The data to evaluate on: ``data=...`` if given, else the training run's, else the named default."""
    if cfg.get("data"):
        data = OmegaConf.to_container(cfg.data, resolve=True)
    elif (trained := training_config(ckpt)) is not None:
        data = trained["data"]
    else:
        defaults = OmegaConf.create({"paths": {"data_dir": cfg.paths.data_dir}})
        defaults.data = OmegaConf.load(CONF / "data" / f"{hparams['data']['name']}.yaml")
        data = OmegaConf.to_container(defaults, resolve=True)["data"]
    if cfg.get("data_root"):
        data["root"] = cfg.data_root
    trained_classes = hparams["data"]["num_classes"]
    if data["num_classes"] != trained_classes:
        raise CheckpointError(
            f"checkpoint {ckpt} was trained on {trained_classes} classes ({hparams['data']['name']}) but "
            f"data={data['name']} has {data['num_classes']}; evaluate it on a data set with the same classes"
        )
    return data


def _wandb_run(cfg: DictConfig, label: str, hparams: Mapping[str, Any]) -> Any:
    import wandb

    wandb_cfg = cfg.wandb
    offline = wandb_offline_reason(bool(wandb_cfg.offline)) is not None
    return wandb.init(
        project=wandb_cfg.project,
        entity=wandb_cfg.entity,
        name=f"eval-{label}",
        job_type="evaluation",
        tags=list(wandb_cfg.tags or []),
        config={"checkpoint": dict(hparams), "evaluation": OmegaConf.to_container(cfg, resolve=True)},
        mode="offline" if offline else "online",
        dir=str(cfg.out_dir),
        reinit="finish_previous",
    )


def evaluate_checkpoint(cfg: DictConfig, ckpt: Path, out_dir: Path) -> dict[str, Any]:
    module, hparams = load_checkpoint_module(ckpt, use_ema=bool(cfg.use_ema))
    data = data_config(cfg, ckpt, hparams)
    recipe = hparams["recipe"]  # its augmentation feeds the analyses that use training batches
    datamodule = build_datamodule(data, {"batch_size": cfg.batch_size, "augment": recipe.get("augment")}, seed=0)
    datamodule.setup()
    label = f"{hparams['model']['name']}-{ckpt.resolve().parent.parent.name}"
    settings = OmegaConf.to_container(cfg, resolve=True) | {"label": hparams["model"]["name"]}
    evaluator = Evaluator(module.model, datamodule, settings, out_dir)
    meta = {"checkpoint": str(ckpt), "model": hparams["model"]["name"], "data": datamodule.name, "ema": cfg.use_ema}
    report = evaluator.run(meta)
    if cfg.get("analysis"):
        report["analysis"] = run_analyses(
            list(cfg.analysis), module.model, datamodule, recipe, OmegaConf.to_container(cfg.analysis), out_dir
        )
        write_json(out_dir / "metrics.json", report)
    if cfg.wandb.enabled:
        run = _wandb_run(cfg, label, hparams)
        try:
            log_report(run, report)
        finally:
            finish_wandb()
    return report


def run_evaluate(cfg: DictConfig) -> list[dict[str, Any]]:
    if cfg.get("ckpt") in (None, "???"):
        raise ConfigValueError("ckpt is required: evaluate.py ckpt=PATH (a .ckpt file, a run directory, or a list)")
    if cfg.get("analysis"):  # check every analysis budget before any work starts
        parse_configs(list(cfg.analysis), OmegaConf.to_container(cfg.analysis))
    paths = checkpoint_paths(OmegaConf.to_container(cfg.ckpt) if OmegaConf.is_list(cfg.ckpt) else cfg.ckpt)
    out_dir = Path(cfg.out_dir)
    reports = []
    for index, ckpt in enumerate(paths):
        target = out_dir if len(paths) == 1 else out_dir / f"{index}-{ckpt.resolve().parent.parent.name}"
        reports.append(evaluate_checkpoint(cfg, ckpt, target))
        print_report(reports[-1], target)
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
        rows.append(row)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def print_report(report: Mapping[str, Any], out_dir: Path) -> None:
    test = report["test"]
    lines = [
        f"\n{report['model']} on {report['data']} ({report['checkpoint']})",
        "  test: " + "  ".join(f"{k} {test[k]:.4f}" for k in ("acc", "top5", "nll", "ece", "brier")),
    ]
    if "temperature_scaling" in report:
        scaled = report["temperature_scaling"]
        after = scaled["test"]
        lines.append(f"  temperature {scaled['temperature']:.3f}: nll {after['nll']:.4f}  ece {after['ece']:.4f}")
    if report.get("robustness"):
        robustness = report["robustness"]
        summary = robustness["summary"]
        lines.append(f"  robustness ({robustness['source']} corruptions): mean acc {summary['robustness']:.4f}")
        if summary.get("mce") is not None:
            lines.append(f"  mCE {summary['mce']:.1f}%  relative mCE {summary['relative_mce']:.1f}%")
    for name, result in (report.get("analysis") or {}).items():
        lines.append(f"  analysis {name}: {result['seconds']:.1f} s, {len(result.get('files', []))} files")
    lines.append(f"  outputs: {out_dir}")
    print("\n".join(lines), flush=True)
