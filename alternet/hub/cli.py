"""The hub's command lines, ``alternet export|push|import-hdvw`` (their arguments: :func:`parse_args`;
alternet/apps/cli.py dispatches to :func:`main`)."""

from __future__ import annotations

import argparse
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..dataset_facts import FACTS
from ..errors import AlternetError, exit_with_error
from ..files import read_json
from .references import (
    CONFIG_FILE,
    check_destination,
    check_export_request,
    check_hdvw_file,
    check_license,
    check_push_request,
)

OUT_HELP = "the export directory (created; an earlier export there is replaced, one beside other files refused)"


def parse_args(argv: Sequence[str] | None = None, prog: str = "alternet") -> argparse.Namespace:
    """The arguments of ``PROG export|push|import-hdvw ...``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Export trained checkpoints for timm and downstream work; publish them on the Hugging Face Hub.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    exporter = commands.add_parser(
        "export",
        help="export a run's tested checkpoint (its best, else last) or a checkpoint as a timm-loadable directory",
        description="Write model.safetensors, config.json and a README.md model card into --out.",
    )
    exporter.add_argument("source", help="a run directory or a Lightning checkpoint (.ckpt)")
    exporter.add_argument("--out", required=True, help=OUT_HELP)
    exporter.add_argument("--ema", action="store_true", help="export the EMA weights (runs with recipe.ema)")
    exporter.add_argument("--license", help="the weights' licence on the Hub, e.g. cc-by-4.0 (default: mit)")
    pusher = commands.add_parser(
        "push",
        help="upload an export (or a run or checkpoint, exported first) to a Hugging Face Hub model repository",
        description="Upload model.safetensors, config.json and the model card as one commit to REPO_ID (created "
        "when missing); timm then loads it with timm.create_model('hf-hub:REPO_ID', pretrained=True) after "
        "`import alternet.models`. Needs a token: `hf auth login` or HF_TOKEN.",
    )
    pusher.add_argument("source", help="an export directory, a run directory or a Lightning checkpoint (.ckpt)")
    pusher.add_argument("repo_id", help="the Hub model repository: USER/NAME, ORG/NAME or NAME (your namespace)")
    pusher.add_argument("--private", action="store_true", help="create the repository private (when it is new)")
    pusher.add_argument("--ema", action="store_true", help="push the EMA weights (runs with recipe.ema)")
    pusher.add_argument("--revision", help="the branch to commit to (created when missing; default: main)")
    pusher.add_argument("--commit-message", help="the commit message (default: Upload SOURCE with alternet VERSION)")
    importer = commands.add_parser(
        "import-hdvw",
        help="import a checkpoint of the paper's authors (HDVW, how-do-vits-work) as an export directory",
        description="Read FILE (torch.save({'name', 'state_dict'}) as HDVW saves it; read with weights_only=True), "
        "rename and reshape its tensors into alternet's model, and write model.safetensors, config.json and a "
        "README.md model card into --out, read back strictly as a check.",
    )
    importer.add_argument("source", help="the HDVW checkpoint (.pth.tar or .pth)")
    importer.add_argument(
        "--arch",
        help="HDVW's model (resnet_dnn_50, vit_ti, pit_ti, swin_ti, alternet_50 ...; a name it does not know lists "
        "them all) or the alternet model it converts to (resnet50_hdvw, alternet_r50_hdvw, vit_ti_cifar ...); "
        "default: the file's 'name' entry",
    )
    importer.add_argument("--out", required=True, help=OUT_HELP)
    importer.add_argument(
        "--data",
        choices=sorted(FACTS),
        help="the data set it was trained on (default: the public one with its class count; 100 classes: cifar100)",
    )
    importer.add_argument("--data-root", help="the data set's files, for its class names (default: class indices)")
    importer.add_argument("--license", help="the weights' licence on the Hub (default: apache-2.0, HDVW's)")
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, with its usage (argparse's parent would show its own)
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None, prog: str = "alternet") -> None:
    """Run ``PROG export|push|import-hdvw ARGS`` (``argv``: the command and its arguments; default: the process's)."""
    args = parse_args(argv, prog)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        {"export": _export, "push": _push, "import-hdvw": _import_hdvw}[args.command](args)
    except AlternetError as error:
        exit_with_error(error)


def _export(args: argparse.Namespace) -> None:
    with warnings.catch_warnings():  # a run's missing best checkpoint: export warns of it, once
        warnings.simplefilter("ignore")
        check_export_request(args.source, args.out, args.license)  # before torch is imported: a wrong path at once
    from .exporting import export  # deferred: --help answers at once

    out = export(args.source, args.out, ema=args.ema, license_id=args.license)
    print(f"Exported {args.source} to {out}: model.safetensors, config.json, README.md")
    recorded = read_json(out / CONFIG_FILE)["alternet"]
    first = "".join(f"import {module}; " for module in recorded.get("imports") or ())  # what registers the model
    print(
        f'Load: {first}alternet.hub.load("{out}")'
        + (f' or timm.create_model("local-dir:{out}", pretrained=True)' if recorded.get("timm_loads", True) else "")
    )


def _import_hdvw(args: argparse.Namespace) -> None:
    check_destination(Path(args.out).expanduser())  # the output first, then the file, before torch is imported
    check_license(args.license)
    if args.arch is None:  # else its name first, from HDVW's table (alternet.hub.hdvw), then the file
        check_hdvw_file(Path(args.source).expanduser())
    from .exporting import import_hdvw  # deferred: --help answers at once

    out = import_hdvw(
        args.source, args.out, arch=args.arch, data=args.data, data_root=args.data_root, license_id=args.license
    )
    print(f"Imported {args.source} to {out}: model.safetensors, config.json, README.md (read back strictly)")
    print(f'Load: alternet.hub.load("{out}"); fine-tune: alternet train model=... model.pretrained={out}')


def _push(args: argparse.Namespace) -> None:
    with warnings.catch_warnings():  # a run's missing best checkpoint: the export warns of it, once
        warnings.simplefilter("ignore")
        check_push_request(args.source, args.repo_id, args.revision)  # before torch is imported: the token at once
    from .push import push_to_hub  # deferred: --help answers at once

    pushed = push_to_hub(
        args.source,
        args.repo_id,
        private=args.private,
        ema=args.ema,
        revision=args.revision,
        commit_message=args.commit_message,
    )
    print(f"Pushed {args.source} to {pushed.url}" + (f" (commit {pushed.commit_url})" if pushed.commit_url else ""))
    if pushed.timm_loads:
        print(f'Load: import alternet.models, timm; timm.create_model("{pushed.timm_name}", pretrained=True)')
    else:  # a user's model function: alternet builds it again from the export's config
        print(f'Load: alternet.hub.load("{pushed.timm_name}") (with the module that registers its model imported)')
