"""The report builder: a sweep directory as the paper's figures and verdicts (:func:`build_report`).

Reads every finished job of a Hydra multirun (its overrides, metrics.json and per-epoch logs), groups the jobs into
variants by their swept values (seeds are replicates), and writes into ``SWEEP_DIR/report/``: ``runs.csv`` (one row
per job), ``variants.csv`` (mean and sd over seeds; each metric's difference from the baseline variant with its 95%
interval and Holm-corrected p-value; the verdict read from them, :mod:`.verdicts`), ``summary.md`` (a
table to paste into a draft), ``error_vs_train_nll.png``, ``metrics_vs_<key>.png`` per swept key and
``train_nll_curves.png``; and logs the same to W&B when the sweep's runs used it.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any

from .. import tracking
from ..errors import AlternetWarning, ConfigValueError, check_option
from ..files import (
    OUTPUT_MARKER,
    check_output_dir,
    is_output_of,
    mark_output,
    removed_unless_written,
    whole_directory,
    write_csv,
    write_text,
    writing,
)
from ..runs.directories import RunDir, SweepDir, SweepJobs
from . import figures
from .runs import Run, launched, read_sweep, swept_keys, variant_of
from .statistics import Difference, Pooled, bootstrap_variance, difference, with_holm
from .verdicts import PAPER_EPOCHS, Rule, Summary, budget_reason, verdict


@dataclass(frozen=True)
class Variant:
    label: str
    runs: list[Run]

    def summary(self, value: Any) -> Summary | None:
        return Summary.of([value(run) for run in self.runs])

    def columns(self, name: str, value: Any) -> dict[str, float | None]:
        """``name`` and ``name_sd``: the mean and sd over seeds, None where no run has the value."""
        summary = self.summary(value)
        return {name: summary.mean if summary else None, f"{name}_sd": summary.sd if summary else None}


def group_variants(runs: Sequence[Run], keys: list[str]) -> list[Variant]:
    labels = list(dict.fromkeys(variant_of(run, keys) for run in runs))
    return [Variant(label, [run for run in runs if variant_of(run, keys) == label]) for label in labels]


def pick_baseline(variants: list[Variant], baseline: str | None) -> Variant:
    """The variant whose swept values include every ``key=value`` of ``baseline`` (default: the first variant)."""
    if baseline is None:
        return variants[0]
    wanted = _unquoted(baseline)
    matches = [v for v in variants if wanted <= _unquoted(v.label)]
    if len(matches) != 1:
        raise ConfigValueError(
            f"--baseline {baseline!r} matches {len(matches)} variants; choose one of: "
            + ", ".join(f"--baseline {shlex.quote(_plain_label(v.label))}" for v in variants)
        )
    return matches[0]


def _plain_label(label: str) -> str:
    """A variant's label without Hydra's quotes around its values, for the shell to quote as a whole."""
    if "=" not in label:  # "all runs": no value swept
        return label
    return " ".join(key + "=" + value.strip("'\"") for key, _, value in (pair.partition("=") for pair in label.split()))


def _unquoted(label: str) -> set[str]:
    """A variant's ``key=value`` pairs with Hydra's quotes around a value dropped (``model.layout='C|CM'`` is how a
    layout is swept; ``model.layout=C|CM`` names it too)."""
    return set(_plain_label(label).split())


_error = attrgetter("test_error")
_nll = attrgetter("train_nll")
_nll_epoch = attrgetter("train_nll_epoch")
_robustness = attrgetter("robustness")
_aurc = attrgetter("aurc")


def _test_nll(run: Run) -> float | None:
    return run.metrics.test.get("nll")


def _test_ece(run: Run) -> float | None:
    return run.metrics.test.get("ece")


@dataclass(frozen=True)
class Statistics:
    """How variants are compared: the verdict rule, pairing by seed, a variance pooled over the sweep, and the
    bootstrap draws over test images (0: leave the test set's own noise out)."""

    rule: Rule = field(default_factory=Rule)
    paired: bool = True
    pooled: bool = False
    bootstrap: int = 1000

    def __post_init__(self) -> None:
        ok = isinstance(self.bootstrap, int) and (self.bootstrap == 0 or self.bootstrap >= 100)
        check_option("--bootstrap", self.bootstrap, ok, "0 (off) or at least 100 draws")

    def describe(self) -> str:
        spread = (
            "variance pooled over the sweep's variants (assumes seeds scatter alike in each)"
            if self.pooled
            else "seed-paired differences where both variants ran the same seeds and differ in no model setting "
            "(a seed then fixes their data order, augmentation and initial weights), else Welch"
            if self.paired
            else "Welch (unpaired)"
        )
        return f"{spread}; {self.rule.describe()}"


def _by_seed(variant: Variant, value: Any) -> dict[str, float | None]:
    return {run.seed: value(run) for run in variant.runs}


def differences_from(
    variants: list[Variant],
    baseline: Variant,
    value: Any,
    settings: Statistics,
    test_noise: bool = False,
    correct: Any = Run.test_correct,
) -> list[Difference | None]:
    """Each variant's difference from the baseline in one metric, Holm-corrected over the variants compared."""
    pooled = Pooled.of([_values(v, value) for v in variants]) if settings.pooled else None
    return with_holm(
        [
            None
            if variant is baseline
            else difference(
                _by_seed(variant, value),
                _by_seed(baseline, value),
                paired=settings.paired and same_initialisation(variant, baseline),
                pooled=pooled,
                extra_variance=_test_set_variance(variant, baseline, settings, value, correct) if test_noise else 0.0,
            )
            for variant in variants
        ]
    )


def same_initialisation(variant: Variant, baseline: Variant) -> bool:
    """Whether a seed gives both variants the same initial weights, so that seed-pairing is valid: they differ in no
    ``model`` setting (the architecture, its attention, a pretrained start...). The rule is fixed here, before
    any run is read: arms of different architectures are compared unpaired (Welch), never paired because their
    seeds happen to match."""
    differing = _differing(variant, baseline)
    return not any(k == "model" or k.startswith(("model.", "+model.", "++model.")) for k in differing)


def _differing(variant: Variant, other: Variant) -> set[str]:
    """The override keys whose values differ between two variants (a key one of them lacks included), seed aside."""
    own, theirs = variant.runs[0].overrides, other.runs[0].overrides
    return {k for k in own.keys() | theirs.keys() if k != "seed" and own.get(k) != theirs.get(k)}


def _values(variant: Variant, value: Any) -> list[float]:
    return [v for v in (value(run) for run in variant.runs) if v is not None and math.isfinite(v)]


def _test_set_variance(
    variant: Variant, baseline: Variant, settings: Statistics, value: Any, correct: Any = Run.test_correct
) -> float:
    """The test set's own sampling noise in a difference of mean test errors (``correct``: each run's per-image
    correctness, :meth:`Run.test_correct`, or the share of corruption sets it was right in,
    :meth:`Run.robust_correct`), the seeds' flips left to the seed term (0 when a run kept no predictions); paired
    exactly where :func:`difference` pairs the seeds."""
    if not _test_noise_included(variant, baseline, settings, correct):
        return 0.0
    a, b = sorted(variant.runs, key=lambda r: r.seed), sorted(baseline.runs, key=lambda r: r.seed)
    seeds = [r.seed for r in a] == [r.seed for r in b] and len(a) > 1
    finite = all(value(r) is not None for r in (*a, *b))
    paired = settings.paired and not settings.pooled and same_initialisation(variant, baseline) and seeds and finite
    records = [correct(run) for run in a], [correct(run) for run in b]
    variance = bootstrap_variance(*records, settings.bootstrap, paired=paired)
    tested = [run.images_tested for run in (*a, *b)]
    if correct is Run.test_correct and None not in tested:  # the error is over the images the training's test
        variance *= len(records[0][0]) / min(tested)  # scored, the record may be fewer (evaluate.max_images)
    return variance


EPOCHS = "recipe.epochs"  # the budget a sweep may double to check a ranking


def _twice(variant: Variant, variants: Sequence[Variant]) -> Variant | None:
    """The variant that differs from ``variant`` only in training twice its epochs (both swept as recipe.epochs)."""
    epochs = _number(variant.runs[0].overrides.get(EPOCHS))
    if epochs is None:
        return None
    for other in variants:
        if _differing(variant, other) == {EPOCHS} and _number(other.runs[0].overrides.get(EPOCHS)) == 2 * epochs:
            return other
    return None


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _mean_delta(variant: Variant, baseline: Variant, value: Any) -> float | None:
    a, b = _values(variant, value), _values(baseline, value)
    return math.fsum(a) / len(a) - math.fsum(b) / len(b) if a and b else None


def _ranking_holds_at_twice(
    variant: Variant, baseline: Variant, variants: Sequence[Variant], nll: Any = None
) -> bool | None:
    """Whether the two variants rank the same (the signs of their mean differences in test error and the training
    NLL the verdict reads, ``nll``: the clean one by default) at twice the epochs; None when the sweep has not run
    both at twice the epochs."""
    doubled, doubled_baseline = _twice(variant, variants), _twice(baseline, variants)
    if doubled is None or doubled_baseline is None:
        return None
    for value in (_error, nll or _nll):
        now, then = _mean_delta(variant, baseline, value), _mean_delta(doubled, doubled_baseline, value)
        if now is not None and then is not None and (now > 0) != (then > 0):
            return False
    return True


def _budget(variant: Variant, baseline: Variant, variants: Sequence[Variant], nll: Any = None) -> str | None:
    completed = all(run.completed for run in (*variant.runs, *baseline.runs))
    paper = all((run.schedule_epochs or 0) >= PAPER_EPOCHS for run in (*variant.runs, *baseline.runs))
    return budget_reason(completed, _ranking_holds_at_twice(variant, baseline, variants, nll), paper)


def variant_rows(
    variants: list[Variant], baseline: Variant, settings: Statistics = Statistics()
) -> list[dict[str, Any]]:
    errors = differences_from(variants, baseline, _error, settings, test_noise=True)
    nlls = differences_from(variants, baseline, _nll, settings)
    epoch_nlls = differences_from(variants, baseline, _nll_epoch, settings)  # HDVW's: the paper's own reading
    # no verdict reads it (a description), but its interval holds the test set's noise as the error's does
    robusts = differences_from(variants, baseline, _robustness, settings, test_noise=True, correct=Run.robust_correct)
    rows = []
    for variant, error_diff, nll_diff, epoch_diff, robust_diff in zip(variants, errors, nlls, epoch_nlls, robusts):
        error = variant.summary(_error)
        if variant is baseline:
            judged = judged_epoch = "baseline"
        else:
            # the training NLLs are the last epoch's: a test of an earlier best checkpoint pairs two models
            paired = all(run.tested_its_last_epoch for run in (*variant.runs, *baseline.runs))
            judged = _verdict(error_diff, nll_diff, _budget(variant, baseline, variants), settings, "clean", paired)
            budget_epoch = _budget(variant, baseline, variants, _nll_epoch)  # its own ranking at twice the epochs
            judged_epoch = _verdict(error_diff, epoch_diff, budget_epoch, settings, "HDVW", paired)
        rows.append(
            {
                "variant": variant.label,
                "seeds": len(variant.runs),
                "test_error": error.mean,
                "test_error_sd": error.sd,
                **_difference_columns("error", error_diff),
                **variant.columns("train_clean_nll", _nll),
                **_difference_columns("nll", nll_diff),
                **variant.columns("train_nll_epoch", _nll_epoch),
                **_difference_columns("nll_epoch", epoch_diff),
                **variant.columns("test_nll", _test_nll),
                **variant.columns("test_ece", _test_ece),
                **variant.columns("test_aurc", _aurc),
                **variant.columns("robustness", _robustness),
                **_difference_columns("robustness", robust_diff),
                "test_set_noise": variant is not baseline and _test_noise_included(variant, baseline, settings),
                "error_mde": _detectable(error_diff, settings.rule),
                "nll_mde": _detectable(nll_diff, settings.rule),
                "schedule_completed": all(run.completed for run in variant.runs),
                "verdict": judged,
                "verdict_hdvw_nll": judged_epoch,
            }
        )
    return rows


def _verdict(
    error: Difference | None, nll: Difference | None, budget: str | None, settings: Statistics, kind: str, paired: bool
) -> str:
    """The verdict on the test error and a training NLL (``kind``: clean, or HDVW's epoch mean), which is not read
    where a run tested an earlier epoch's best (``paired`` false: the NLL is the last epoch's, another model's)."""
    of = "" if paired else " of the tested weights (an earlier epoch's best was tested)"
    return verdict(error, nll if paired else None, budget, settings.rule, f"{kind} training NLL{of}", nll_read=paired)


def _detectable(diff: Difference | None, rule: Rule) -> float | None:
    """The comparison's minimum detectable effect at the rule's power (its own alpha, before Holm's correction)."""
    return None if diff is None else diff.detectable(rule.alpha, rule.power)


def _test_noise_included(
    variant: Variant, baseline: Variant, settings: Statistics, correct: Any = Run.test_correct
) -> bool:
    """The bootstrap is on and every run kept the per-image record, over the same images (robustness: the same
    corruption sets)."""
    if settings.bootstrap <= 0:
        return False
    records = [correct(run) for run in (*variant.runs, *baseline.runs)]
    return all(r is not None for r in records) and len({r.shape for r in records}) == 1


def _difference_columns(name: str, diff: Difference | None) -> dict[str, Any]:
    parts = ("delta", "ci_low", "ci_high", "p", "p_holm", "method")
    values = (
        (None,) * len(parts) if diff is None else (diff.delta, diff.low, diff.high, diff.p, diff.p_holm, diff.method)
    )
    return {f"{name}_{part}": value for part, value in zip(parts, values)}


def run_rows(runs: Sequence[Run], keys: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "job": run.job.path.name,
            **{key: run.overrides.get(key) for key in keys},
            "seed": run.seed,
            "test_flip": run.metrics.test_flip,
            "test_acc": 1.0 - run.test_error,
            "test_nll": _test_nll(run),
            "test_ece": _test_ece(run),
            "test_aurc": run.aurc,
            "train_clean_nll": run.train_nll,
            "train_clean_acc": (run.metrics.train_clean or {}).get("acc"),
            "robustness": run.robustness,
            "train_images": run.metrics.train_images,
            "epochs": run.metrics.epochs,
        }
        for run in runs
    ]


def _escaped(text: str) -> str:
    """Text in a markdown table cell: a layout's stage separators would split the cell."""
    return text.replace("|", "\\|")


def _cell(row: dict[str, Any], name: str) -> str:
    """A summary column as ``mean ± sd`` (its ``name_sd`` column), or a dash where no run has the value."""
    value, sd = row[name], row[f"{name}_sd"]
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}" + (f" ± {sd:.4f}" if sd else "")
    return str(value)


def _delta_cell(row: dict[str, Any], name: str, scale: float, unit: str) -> str:
    """``Δ [low, high] p=…`` (Holm-corrected p), or a dash for the baseline and for runs without the metric;
    percentage points to 2 decimals, nats to 3 (the NLL differences at stake are a few hundredths)."""
    if row.get(f"{name}_delta") is None:
        return "–"
    delta, low, high = (scale * row[f"{name}_{part}"] for part in ("delta", "ci_low", "ci_high"))
    places = 2 if unit else 3
    return f"{delta:+.{places}f}{unit} [{low:+.{places}f}, {high:+.{places}f}] p={row[f'{name}_p_holm']:.3g}"


def _mde_cell(value: float | None, scale: float, unit: str) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{scale * value:.{2 if unit else 3}f}{unit}"


def _robustness_note(runs: Sequence[Run]) -> str:
    """What the robustness column averages (the corruption sets the runs scored after training), or nothing when no
    run scored any."""
    records = [run.metrics.robustness for run in runs if run.metrics.robustness is not None]
    scored = list(
        dict.fromkeys(
            f"{len(record.table)} {record.source} corruption sets"
            + (f" of {each:,} images each" if (each := record.images and record.images.images_per_condition) else "")
            for record in records
        )
    )
    if not scored:
        return ""
    what = scored[0] if len(scored) == 1 else f"the runs' corruption sets, which differ ({'; '.join(scored)})"
    return (
        f" Robustness: mean accuracy over {what}, scored after training (evaluate.after_training); Δ robustness in "
        "percentage points, its interval with the test set's own noise where the runs kept their corrupted "
        "predictions, a description that no verdict reads (an interval holding 0 is not decided, not a sign of no "
        "difference)."
    )


def markdown(
    sweep_dir: Path,
    keys: list[str],
    rows: list[dict[str, Any]],
    baseline: Variant,
    files: list[Path],
    jobs: SweepJobs,
    settings: Statistics,
    runs: Sequence[Run],
    unscored: Sequence[Run],
) -> str:
    compared = [row for row in rows if row["variant"] != baseline.label]
    noise = {bool(row["test_set_noise"]) for row in compared}
    lines = [
        f"## Sweep {sweep_dir.name}",
        "",
        f"Swept: {', '.join(keys) or ('nothing (seeds only)' if len(runs) > 1 else 'nothing (one run)')}. "
        f"Baseline: `{baseline.label}`. Test error on the test "
        "split (each run's own test pass, in its training precision: its `metrics.json`; the evaluation after "
        "training, in fp32, whose predictions give the test set's noise, may differ by a few images), clean "
        "training NLL on the fixed training subset in eval mode (`train_clean/nll`, last epoch), HDVW's "
        "training NLL (`train/nll_epoch`: the last epoch's mean loss on its augmented, mixed batches, as the paper "
        "reads it; the verdict is read with each), test NLL, calibration error (ECE) and the area under the "
        "risk-coverage curve (AURC, scored after training): mean ± "
        "sd over seeds. Δ = variant − baseline with its 95% confidence interval and Holm-corrected p-value "
        "(test error in percentage points, NLL in nats); MDE: the smallest true difference the comparison would "
        f"find with {settings.rule.power:.0%} power at alpha {settings.rule.alpha:g} (before Holm), from its own "
        "seeds (and test-set noise where included). "
        + (
            "The error intervals include an estimate of the test set's own sampling noise (a bootstrap over the "
            "test images, the same images in both arms, less the seeds' own flips, which the seed term holds; an "
            "estimate of 0, where the flips account for the whole bootstrap spread, leaves the seeds' interval). "
            if noise == {True}
            else "The error intervals of the variants marked in `variants.csv`'s test_set_noise include the test set's "
            "own sampling noise, the others do not. "
            if noise == {True, False}
            else "One variant: nothing is compared, so no difference has an interval. "
            if not compared
            else "The test set's own sampling noise is not included (--bootstrap 0, or no run kept its predictions: "
            "evaluate.after_training=true writes them). "
        )
        + "Clean training NLL intervals hold the seeds' term only: the fixed training subset's own sampling noise "
        "is not included. "
        + "Verdicts read the Holm-corrected p-values; the printed intervals are not corrected. "
        + f"Statistics: {settings.describe()}."
        + _robustness_note(runs),
        "",
        "| variant | n | test error | Δ error | MDE error | clean training NLL | Δ NLL | MDE NLL | test NLL | test ECE "
        "| test AURC | robustness | Δ robustness | verdict | HDVW's training NLL | Δ | verdict by it |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {_escaped(row['variant'])} | {row['seeds']} | {_cell(row, 'test_error')} | "
            f"{_delta_cell(row, 'error', 100, ' pp')} | {_mde_cell(row['error_mde'], 100, ' pp')} | "
            f"{_cell(row, 'train_clean_nll')} | {_delta_cell(row, 'nll', 1, '')} | {_mde_cell(row['nll_mde'], 1, '')} "
            f"| {_cell(row, 'test_nll')} | {_cell(row, 'test_ece')} | {_cell(row, 'test_aurc')} | "
            f"{_cell(row, 'robustness')} | {_delta_cell(row, 'robustness', 100, ' pp')} | {row['verdict']} | "
            f"{_cell(row, 'train_nll_epoch')} | {_delta_cell(row, 'nll_epoch', 1, '')} | {row['verdict_hdvw_nll']} |"
        )
    if unscored:
        lines += ["", f"{len(unscored)} finished job(s) left out, their test metrics not finite (diverged): "]
        lines[-1] += f"{_named(unscored)}. Their variants' intervals count only the other seeds."
    partial = [run for run in runs if run.metrics.test_images and run.metrics.test_images.partial]
    if partial:  # trainer.limit_test_batches: their test numbers are the first images' only
        named = "; ".join(f"{run.job.path.name} ({run.metrics.test_images.scored:,})" for run in partial)
        lines += ["", f"{len(partial)} job(s) tested on the first images of the test split only "]
        lines[-1] += f"(trainer.limit_test_batches; of {partial[0].metrics.test_images.of:,}): {named}."
    sweeper = runs[0].job.searched_by() if runs else None
    if sweeper:  # Hydra's grid sweeper relaunches; a search draws new values
        lines += ["", f"A search by {sweeper}: each job's values were drawn for it, so each variant is one run and "]
        lines[-1] += "no difference has an interval; summary.csv gives each job's optimized_metric."
    if not jobs.complete:
        lines += ["", f"A partial sweep, the unfinished jobs left out: {jobs.describe()}"]
        if not sweeper and (jobs.not_started or len(jobs.diverged) < len(jobs.unfinished)):
            what = "the others" if jobs.diverged else "it"
            lines[-1] += (
                f" Re-running the sweep's command with ckpt_path=last and the same hydra.sweep.dir completes {what}."
            )
    lines += ["", *(f"![{path.stem}]({path.name})" for path in files if path.suffix == ".png")]
    return "\n".join(lines) + "\n"


def sweep_wandb_settings(run: RunDir, enabled: bool | None = None) -> tracking.WandbSettings | None:
    """The W&B settings of a sweep's report: its run's recorded ``logger.wandb`` section (the keys of today's
    shape: a run recorded before a key was dropped keeps working), switched by ``enabled`` (``--wandb`` /
    ``--no-wandb``; None: as the runs did)."""
    recorded = ((run.recorded_config() or {}).get("logger") or {}).get("wandb")
    if recorded is not None:
        recorded = {key: value for key, value in recorded.items() if key in tracking.WANDB_KEYS}
    return tracking.usable(tracking.wandb_settings(recorded, enabled=enabled, key=f"{run.path}: logger.wandb"))


def _named(runs: Sequence[Run]) -> str:
    return "; ".join(f"{run.job.path.name} ({run.unscored})" for run in runs)


def warn_mixed_data(runs: Sequence[Run]) -> None:
    """A sweep whose jobs trained on different data sets compares numbers that are not comparable: warned, naming
    the jobs of the fewer data sets."""
    by_data: dict[str, list[str]] = {}
    for run in runs:
        by_data.setdefault(run.metrics.data, []).append(run.job.path.name)
    if len(by_data) > 1:
        main = max(by_data, key=lambda name: len(by_data[name]))
        others = "; ".join(f"{name}: jobs {', '.join(jobs)}" for name, jobs in by_data.items() if name != main)
        warnings.warn(
            f"the sweep's jobs trained on different data sets ({main} for most; {others}): their errors are compared "
            "as if on one test set",
            AlternetWarning,
            stacklevel=2,
        )
    flipped = [run.job.path.name for run in runs if run.metrics.test_flip]
    if flipped and len(flipped) < len(runs):
        warnings.warn(
            f"jobs {', '.join(flipped)} tested with recipe.test_flip (each image's and its mirror's mean logits) and "
            "the others on one view: their test numbers are compared as if measured alike",
            AlternetWarning,
            stacklevel=2,
        )


REPORT_COMMAND = "report"  # the output marker of alternet report (files.mark_output)


WANDB_DIR = "wandb"  # the local folder of the report's W&B runs, kept from report to report (not yet synced, maybe)
REPORT_FILES = ("runs.csv", "variants.csv", "summary.md", "error_vs_train_nll.png", "train_nll_curves.png")


def _written(name: str) -> bool:
    """Whether an entry of a report's folder is one a report writes (``wandb``: its W&B run's local folder)."""
    return name in (OUTPUT_MARKER, WANDB_DIR, *REPORT_FILES) or re.fullmatch(r"metrics_vs_.+\.png", name) is not None


def build_report(
    sweep_dir: Path,
    out_dir: Path | None = None,
    baseline: str | None = None,
    wandb: bool | None = None,
    settings: Statistics = Statistics(),
) -> dict[str, Any]:
    """Write the report of ``sweep_dir`` (into ``out_dir``, default ``SWEEP_DIR/report``); returns what it
    wrote. ``wandb=None`` logs to W&B when the sweep's runs did, with their settings (``logger.wandb``: train's
    shape); True logs with them, or the packaged ones (conf/logger/wandb.yaml) when the runs did not use W&B."""
    sweep_dir = Path(sweep_dir)
    if out_dir is None and not sweep_dir.is_dir():  # the report would go inside it: what is wrong with it first
        read_sweep(sweep_dir)
    out_dir = Path(out_dir) if out_dir else SweepDir(sweep_dir).report_dir
    other = SweepDir(out_dir.parent)
    elsewhere = other.path.is_dir() and other.path.resolve() != sweep_dir.resolve()
    if out_dir == other.report_dir and elsewhere and other.jobs().jobs:
        raise ConfigValueError(
            f"--out {out_dir} is the report folder of another sweep, {other.path}: its report would be replaced by "
            f"{sweep_dir}'s; choose another --out"
        )
    is_report = partial(is_output_of, command=REPORT_COMMAND)
    out_dir = check_output_dir(
        out_dir, "report directory", is_report, "a report of alternet report", "--out", whole=_written
    )
    runs, jobs = read_sweep(sweep_dir)
    unscored = [run for run in runs if run.unscored]
    runs = [run for run in runs if not run.unscored]
    if not runs:
        raise ConfigValueError(
            f"{sweep_dir}: every finished job has non-finite test metrics ({_named(unscored)}): nothing to compare"
        )
    warn_mixed_data(runs)
    wandb_settings = sweep_wandb_settings(runs[0].job, wandb)  # checked before any figure is drawn
    keys = swept_keys(launched(jobs))
    variants = group_variants(runs, keys)
    base = pick_baseline(variants, baseline)
    rows = variant_rows(variants, base, settings)
    made = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    # a second report into the same folder stops here; the folder is replaced whole, or left as it was
    with (
        removed_unless_written(out_dir, made),
        writing(out_dir, "report directory"),
        whole_directory(out_dir) as staged,
    ):
        mark_output(staged, REPORT_COMMAND)
        if (out_dir / WANDB_DIR).is_dir():  # earlier reports' W&B runs, an offline one perhaps the only copy
            shutil.copytree(out_dir / WANDB_DIR, staged / WANDB_DIR, symlinks=True)
        written = [
            write_csv(staged / "runs.csv", run_rows(runs, keys)),
            write_csv(staged / "variants.csv", rows),
            figures.error_vs_train_nll(runs, keys, staged / "error_vs_train_nll.png"),
            *(figures.metrics_vs(runs, key, keys, staged / f"metrics_vs_{key.replace('.', '_')}.png") for key in keys),
            figures.train_nll_curves(runs, keys, staged / "train_nll_curves.png"),
        ]
        files = [out_dir / f.name for f in written if f is not None]
        markdown_text = markdown(sweep_dir, keys, rows, base, files, jobs, settings, runs, unscored)
        write_text(staged / "summary.md", markdown_text)
        files.append(out_dir / "summary.md")
    logged = None
    if wandb_settings is not None:
        groups = {group for run in runs if (group := tracking.training_run(run.job).get("group"))}  # as the jobs ran
        group = groups.pop() if len(groups) == 1 else tracking.group_of_sweep(sweep_dir)
        logged = tracking.log_sweep_report(wandb_settings, sweep_dir.name, group, out_dir, files, rows)
    return {"out_dir": out_dir, "files": files, "variants": rows, "baseline": base.label, "wandb_run": logged}
