"""``alternet report SWEEP_DIR [--baseline "model=preresnet_tiny"] [--out DIR] [--wandb|--no-wandb]
[--alpha 0.05] [--min-seeds 3] [--error-margin 0.005] [--nll-margin 0.02] [--power 0.8] [--unpaired] [--pooled]
[--bootstrap 1000]`` (alternet/apps/cli.py dispatches to :func:`main`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import AlternetError, exit_with_error
from .verdicts import Rule


def main(argv: Sequence[str] | None = None, prog: str = "alternet report") -> int:
    """Run ``PROG SWEEP_DIR [options]`` (``argv``: the arguments; default: the process's)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The paper's figures, a table and verdicts from a sweep directory (a multirun's sweep dir): each "
        "variant's difference from the baseline with its 95% interval and Holm-corrected p-value, read as helps "
        "optimisation / regularises / hurts / equivalent (each as the paper's claim, or at this budget) / "
        "inconclusive / insufficient seeds, with each comparison's minimum detectable effect.",
    )
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument(
        "--baseline", help="the variant the others are judged against, as its swept values, e.g. 'model=preresnet_tiny'"
    )
    parser.add_argument("--out", type=Path, help="output directory (default: SWEEP_DIR/report)")
    parser.add_argument(
        "--wandb",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="log the report to W&B (default: when the sweep's runs logged to W&B), with the runs' logger.wandb "
        "settings (the packaged ones, conf/logger/wandb.yaml, for runs that did not use W&B)",
    )
    rule = Rule()
    parser.add_argument("--alpha", type=float, default=rule.alpha, help="family-wise significance level (Holm)")
    parser.add_argument("--min-seeds", type=int, default=rule.min_seeds, help="fewest seeds per variant for a verdict")
    parser.add_argument(
        "--error-margin", type=float, default=rule.error_margin, help="equivalence margin, test error (0.005: 0.5 pp)"
    )
    parser.add_argument(
        "--nll-margin", type=float, default=rule.nll_margin, help="equivalence margin in clean training NLL (nats)"
    )
    parser.add_argument(
        "--power", type=float, default=rule.power, help="the power at which minimum detectable effects are stated"
    )
    parser.add_argument("--unpaired", action="store_true", help="Welch intervals even where seeds pair the runs")
    parser.add_argument(
        "--pooled", action="store_true", help="pool the seed variance over the sweep's variants (few seeds per arm)"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="draws over test images for the test set's own noise (0: off)"
    )
    args = parser.parse_args(argv)
    from .build import Statistics, build_report  # deferred: --help answers at once

    try:
        settings = Statistics(  # each setting range-checked before any run is read
            Rule(args.alpha, args.min_seeds, args.error_margin, args.nll_margin, args.power),
            paired=not args.unpaired,
            pooled=args.pooled,
            bootstrap=args.bootstrap,
        )
        report = build_report(args.sweep_dir, args.out, args.baseline, args.wandb, settings)
    except AlternetError as error:
        exit_with_error(error)
    print((report["out_dir"] / "summary.md").read_text())
    print(f"Report: {report['out_dir']} ({len(report['files'])} files)", file=sys.stderr)
    if report["wandb_run"]:
        print(f"W&B: {report['wandb_run']}", file=sys.stderr)
    return 0
