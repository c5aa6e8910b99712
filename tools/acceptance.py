"""docs/reproduction.md's acceptance numbers ("Acceptance numbers for a paper-scale run") checked against alternet's
evaluation of HDVW's released checkpoints: each quantity, HDVW's value and tolerance, what alternet measured, and
whether it is within. Exit status 0 when every row is, 1 when one is not, 2 when the evaluation cannot be read as
HDVW's protocol (one line says why).

    alternet evaluate ckpt=hdvw:resnet_50:resnet_50_cifar100_691cc9a9e4.pth.tar data_root=DATA_ROOT recipe=paper \\
      robustness.enabled=false analysis=[landscape] analysis.landscape.redraw=true analysis.landscape.images=50000 \\
      analysis.landscape.nll=log_of_softmax out_dir=DIR
    python -m tools.acceptance resnet_50 DIR/metrics.json      # vit_ti for hdvw:vit_ti:vit_ti_cifar100_9857b21357

These are properties of the released checkpoints: a model trained from scratch is compared with the paper by
interval, never by these numbers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from alternet.errors import AlternetError
from alternet.runs.results import EvaluationReport

WEIGHT_DECAY = 0.05  # the paper's recipe: l2_origin (weight decay x sum of squares) over it is HDVW's "Σ‖w‖" column
# model -> (quantity, HDVW's value, tolerance, how it is read from the landscape's record), resources/results/ of
# how-do-vits-work at 9571ff1 (the row at the origin of each *_losslandscape.csv)
ROWS = {
    "resnet_50": [
        ("Σ‖w‖ at the origin", 1534.20, 0.01, lambda landscape: landscape["l2_origin"] / WEIGHT_DECAY),
        ("NLL at the origin", 2.194, 0.02, lambda landscape: landscape["nll_origin"]),
    ],
    "vit_ti": [
        ("Σ‖w‖ at the origin", 769.50, 0.01, lambda landscape: landscape["l2_origin"] / WEIGHT_DECAY),
        ("NLL at the origin", 2.490, 0.02, lambda landscape: landscape["nll_origin"]),
    ],
}
PROTOCOL = {"regulariser": "hdvw", "redraw": True, "images": 50000, "nll": "log_of_softmax"}  # HDVW's landscape


def landscape_of(path: Path) -> dict:
    """The landscape analysis of an evaluation's metrics.json, checked to follow HDVW's protocol."""
    analyses = EvaluationReport.from_json(path).analysis or {}
    if "landscape" not in analyses:
        raise AlternetError(
            f"{path} holds no landscape analysis: evaluate with analysis=[landscape] (the command above)"
        )
    landscape = analyses["landscape"]
    differs = [
        f"{key}={landscape.get(key)!r} (HDVW: {value!r})"
        for key, value in PROTOCOL.items()
        if landscape.get(key) != value
    ]
    if differs:
        raise AlternetError(
            f"{path}'s landscape did not follow HDVW's protocol, so its origin values are not comparable: "
            f"{', '.join(differs)}; evaluate again with the command in docs/reproduction.md"
        )
    missing = [key for key in ("l2_origin", "nll_origin") if not isinstance(landscape.get(key), int | float)]
    if missing:
        raise AlternetError(f"{path}'s landscape has no finite {' or '.join(missing)}: the evaluation did not finish")
    return landscape


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", choices=sorted(ROWS), help="which released checkpoint was evaluated")
    parser.add_argument("metrics", type=Path, help="its evaluation's metrics.json")
    args = parser.parse_args(argv)
    try:
        landscape = landscape_of(args.metrics)
    except AlternetError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 2
    within = True
    for quantity, value, tolerance, read in ROWS[args.model]:
        measured = read(landscape)
        ok = abs(measured - value) <= tolerance
        within &= ok
        verdict = "within" if ok else "OUTSIDE"
        print(f"{args.model} {quantity}: HDVW {value} ± {tolerance}, alternet {measured:.4f}: {verdict}")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
