"""``python -m alternet.report SWEEP_DIR [--baseline "model=preresnet_tiny"] [--out DIR] [--wandb|--no-wandb]``"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from alternet.errors import AlternetError
from alternet.report import build_report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m alternet.report",
        description="The paper's figures, a table and verdicts (helps optimisation / regularises / hurts / no "
        "significant change) from a sweep directory (a multirun's sweep dir).",
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
        help="log the report to W&B (default: when the sweep's runs logged to W&B)",
    )
    args = parser.parse_args(argv)
    try:
        report = build_report(args.sweep_dir, args.out, args.baseline, args.wandb)
    except AlternetError as error:
        raise SystemExit(f"error: {error}") from None
    print((report["out_dir"] / "summary.md").read_text())
    print(f"Report: {report['out_dir']} ({len(report['files'])} files)", file=sys.stderr)
    if report["wandb_run"]:
        print(f"W&B: {report['wandb_run']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
