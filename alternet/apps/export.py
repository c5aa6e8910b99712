"""The export command line: ``python -m alternet.hub export RUN_DIR_OR_CKPT --out DIR [--ema]``."""

from __future__ import annotations

import argparse
import logging
import sys

from ..errors import AlternetError
from ..hub import export


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m alternet.hub", description="Export trained checkpoints for timm and downstream work."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    exporter = commands.add_parser(
        "export",
        help="export a run's best checkpoint (else last) or a checkpoint as a timm-loadable directory",
        description="Write model.safetensors, config.json and a README.md model card into --out.",
    )
    exporter.add_argument("source", help="a run directory or a Lightning checkpoint (.ckpt)")
    exporter.add_argument("--out", required=True, help="the export directory (created; an earlier export is replaced)")
    exporter.add_argument("--ema", action="store_true", help="export the EMA weights (runs with recipe.ema)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        out = export(args.source, args.out, ema=args.ema)
    except AlternetError as error:
        sys.exit(f"error: {error}")
    print(f"Exported {args.source} to {out}: model.safetensors, config.json, README.md")
    print(f'Load: alternet.hub.load("{out}") or timm.create_model("local-dir:{out}", pretrained=True)')


if __name__ == "__main__":
    main()
