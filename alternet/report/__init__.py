"""A sweep directory as the paper's figures and verdicts: ``python -m alternet.report SWEEP_DIR``.

Reads every finished job of a Hydra multirun (its overrides, metrics.json and per-epoch logs), groups the jobs into
variants by their swept values (seeds are replicates), and writes into ``SWEEP_DIR/report/``: ``runs.csv`` (one row
per job), ``variants.csv`` (mean and sd over seeds, verdict against the baseline variant), ``summary.md`` (a
table to paste into a draft), ``error_vs_train_nll.png``, ``<metric>_vs_<key>.png`` per swept key and
``train_nll_curves.png``; and logs the same to W&B when the sweep's runs used it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import tracking
from ..errors import ConfigValueError
from ..files import write_csv, write_text
from ..runs import run_config
from . import figures
from .runs import Run, read_sweep, swept_keys, variant_of
from .verdicts import Summary, verdict


@dataclass(frozen=True)
class Variant:
    label: str
    runs: list[Run]

    def summary(self, value: Any) -> Summary | None:
        return Summary.of([value(run) for run in self.runs])


def group_variants(runs: Sequence[Run], keys: list[str]) -> list[Variant]:
    labels = list(dict.fromkeys(variant_of(run, keys) for run in runs))
    return [Variant(label, [run for run in runs if variant_of(run, keys) == label]) for label in labels]


def pick_baseline(variants: list[Variant], baseline: str | None) -> Variant:
    """The variant whose swept values include every ``key=value`` of ``baseline`` (default: the first variant)."""
    if baseline is None:
        return variants[0]
    wanted = set(baseline.split())
    matches = [v for v in variants if wanted <= set(v.label.split())]
    if len(matches) != 1:
        raise ConfigValueError(
            f"--baseline {baseline!r} matches {len(matches)} variants; choose one of: "
            + "; ".join(v.label for v in variants)
        )
    return matches[0]


def _error(run: Run) -> float:
    return run.test_error


def _nll(run: Run) -> float | None:
    return run.train_nll


def _robustness(run: Run) -> float | None:
    return run.robustness


def variant_rows(variants: list[Variant], baseline: Variant) -> list[dict[str, Any]]:
    base_error, base_nll = baseline.summary(_error), baseline.summary(_nll)
    rows = []
    for variant in variants:
        error, nll, robust = variant.summary(_error), variant.summary(_nll), variant.summary(_robustness)
        rows.append(
            {
                "variant": variant.label,
                "seeds": len(variant.runs),
                "test_error": error.mean,
                "test_error_sd": error.sd,
                "train_clean_nll": nll.mean if nll else None,
                "train_clean_nll_sd": nll.sd if nll else None,
                "robustness": robust.mean if robust else None,
                "robustness_sd": robust.sd if robust else None,
                "verdict": "baseline" if variant is baseline else verdict(error, base_error, nll, base_nll),
            }
        )
    return rows


def run_rows(runs: Sequence[Run], keys: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "job": run.directory.name,
            **{key: run.overrides.get(key) for key in keys},
            "seed": run.seed,
            "test_acc": 1.0 - run.test_error,
            "test_nll": run.metrics["test"].get("nll"),
            "train_clean_nll": run.train_nll,
            "train_clean_acc": (run.metrics.get("train_clean") or {}).get("acc"),
            "robustness": run.robustness,
            "train_images": run.metrics.get("train_images"),
            "epochs": run.metrics.get("epochs"),
        }
        for run in runs
    ]


def _cell(value: Any, sd: Any = None) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}" + (f" ± {sd:.4f}" if sd else "")
    return str(value)


def markdown(
    sweep_dir: Path,
    keys: list[str],
    rows: list[dict[str, Any]],
    baseline: Variant,
    files: list[Path],
    failed: list[Path],
) -> str:
    lines = [
        f"## Sweep {sweep_dir.name}",
        "",
        f"Swept: {', '.join(keys) or 'nothing (seeds only)'}. Baseline: `{baseline.label}`. Mean ± sd over seeds; "
        "test error on the test split; clean training NLL on the fixed training subset in eval mode "
        "(`train_clean/nll`, last epoch). A difference within the seed spread is *no significant change*.",
        "",
        "| variant | seeds | test error | clean training NLL | robustness | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {row['seeds']} | {_cell(row['test_error'], row['test_error_sd'])} | "
            f"{_cell(row['train_clean_nll'], row['train_clean_nll_sd'])} | "
            f"{_cell(row['robustness'], row['robustness_sd'])} | {row['verdict']} |"
        )
    if any(row["seeds"] == 1 for row in rows):
        lines += ["", "With 1 seed a variant has no spread: every difference counts; rerun with seeds to test it."]
    if failed:
        lines += ["", f"Not finished (left out): {', '.join(p.name for p in failed)}."]
    lines += ["", *(f"![{path.stem}]({path.name})" for path in files if path.suffix == ".png")]
    return "\n".join(lines) + "\n"


def build_report(
    sweep_dir: Path, out_dir: Path | None = None, baseline: str | None = None, wandb: bool | None = None
) -> dict[str, Any]:
    """Write the report of ``sweep_dir`` (into ``out_dir``, default ``SWEEP_DIR/report``); returns what it
    wrote. ``wandb=None`` logs to W&B when the sweep's runs did."""
    sweep_dir = Path(sweep_dir)
    runs, failed = read_sweep(sweep_dir)
    out_dir = Path(out_dir) if out_dir else sweep_dir / "report"
    keys = swept_keys(runs)
    variants = group_variants(runs, keys)
    base = pick_baseline(variants, baseline)
    rows = variant_rows(variants, base)
    files = [
        write_csv(out_dir / "runs.csv", run_rows(runs, keys)),
        write_csv(out_dir / "variants.csv", rows),
        figures.error_vs_train_nll(runs, keys, out_dir / "error_vs_train_nll.png"),
        *(figures.metrics_vs(runs, key, keys, out_dir / f"metrics_vs_{key.replace('.', '_')}.png") for key in keys),
        figures.train_nll_curves(runs, keys, out_dir / "train_nll_curves.png"),
    ]
    files = [f for f in files if f is not None]
    summary_md = write_text(out_dir / "summary.md", markdown(sweep_dir, keys, rows, base, files, failed))
    files.append(summary_md)
    settings = (run_config(runs[0].directory) or {}).get("logger", {}).get("wandb")
    logged = None
    if (settings and wandb is not False) or wandb:
        logged = tracking.log_sweep_report(settings or {}, sweep_dir.name, out_dir, files, rows)
    return {"out_dir": out_dir, "files": files, "variants": rows, "baseline": base.label, "wandb_run": logged}
