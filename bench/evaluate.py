"""Evaluation speed on CIFAR-100: generating the 75 CIFAR-100-C sets, then scoring a checkpoint on them, at full
precision and at the robustness pass's default (``robustness.precision=auto``), side by side.

    python -m bench.evaluate --root ../shared/data [--ckpt RUN_OR_CKPT] [--cache DIR] [--workers N] [--sets N]
                             [--no-record]

Without --ckpt, a randomly initialised alternet_tiny is scored (inference cost is what is measured). The generation
is timed (a cache that already holds the files is reused). Each set is then scored twice in turn — fp32 contiguous
(the pass before issue 16) and the auto precision (bf16 + channels_last where the hardware has native bf16) — so the
ratio is measured under the same machine load, and the two runs' accuracy, NLL and ECE are compared set by set.
The scoring goes through ``bench/harness.py``'s ``interleave`` per set (``--rounds``, 1 by default, median; no
warm-up by default); the generation is one call timed by its own clock (a repeat would be a cache hit).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .harness import add_harness_arguments, begin, device_sync, finish, interleave, row, summarise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--ckpt", default=None, help="checkpoint or run directory (default: random alternet_tiny)")
    parser.add_argument("--cache", default=None, help="generation directory (default: a temporary one, removed)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--sets", type=int, default=75, help="score the first N of the 75 sets (default: all)")
    add_harness_arguments(parser, rounds=1, warmup=0, round_help="scoring rounds per set, the settings in turn")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    facts = begin(args, "evaluate", device=device.type, data_root=args.root)

    from alternet.data import CIFAR100DataModule
    from alternet.data.corrupted.cifar_c import generate_cifar_c, load_cifar_c
    from alternet.evaluation.inference import AUTOCAST, fast_precision, predict_sets
    from alternet.metrics import calibration_metrics, softmax
    from alternet.models import create_model
    from alternet.runs.checkpoint_files import find_checkpoint
    from alternet.runs.weights import load_model

    if not (Path(args.root) / "cifar-100-python" / "test").is_file():
        raise SystemExit(
            f"CIFAR-100 not found under {args.root}; pass --root DIR (the directory holding cifar-100-python/)"
        )
    data = CIFAR100DataModule(root=args.root, batch_size=args.batch_size)
    data.setup()
    test = data.splits["test"]
    cache = Path(args.cache or tempfile.mkdtemp(prefix="cifar100c-"))

    start = time.perf_counter()
    generate_cifar_c(test.images, test.labels, cache, workers=args.workers)
    generation = time.perf_counter() - start
    print(f"generate 75 CIFAR-100-C sets (10,000 images each): {generation:7.1f} s  -> {cache}")

    if args.ckpt:
        model = load_model(find_checkpoint(Path(args.ckpt))[0])[0]
    else:
        model = create_model("alternet_tiny", num_classes=100, img_size=32)
    fast = fast_precision(device)
    settings = {"32": (None, False), fast: (AUTOCAST[fast], fast == "bf16")}
    sets = load_cifar_c(cache, num_classes=100)

    def scoring(dataset, label: str, autocast, channels_last: bool, predicted: dict, name: str):
        """One scoring pass of ``dataset`` at one setting; its (logits, targets) go to ``predicted[name]``."""

        def run() -> None:
            (predicted[name],) = predict_sets(  # a generator: the scoring happens as it is consumed
                model,
                [dataset],
                device=device,
                batch_size=args.batch_size,
                autocast=autocast,
                channels_last=channels_last,
                labels=[label],
                final_lines=False,
            )

        return run

    seconds = dict.fromkeys(settings, 0.0)
    deltas, images_scored = [], 0
    for corruption, severity in list(sets.sets())[: args.sets]:
        images, labels = sets.get(corruption, severity)
        dataset = type(test)(np.asarray(images), np.asarray(labels), test.transform)
        predicted: dict[str, tuple] = {}
        cases = {
            name: scoring(dataset, f"{corruption}/{severity} {name}", *setting, predicted, name)
            for name, setting in settings.items()
        }
        for name, timed in interleave(cases, args.rounds, args.warmup, device_sync(device)).items():
            seconds[name] += summarise(timed).median
        scored = {}
        for name, (logits, targets) in predicted.items():
            scored[name] = calibration_metrics(softmax(logits), targets, logits=logits) | {"pred": logits.argmax(1)}
        images_scored += len(dataset)
        a, b = scored["32"], scored[fast]
        deltas.append(
            {key: abs(a[key] - b[key]) for key in ("acc", "nll", "ece")} | {"agree": (a["pred"] == b["pred"]).mean()}
        )
    model_name = args.ckpt or "alternet_tiny (random init)"
    reused = "a given --cache: files already there are reused" if args.cache else "a fresh directory"
    rows = [row("cifar100-c generate 75 sets of 10,000 images", "wall", generation, "s", rounds=1, notes=reused)]
    for name in settings:
        label = "fp32 contiguous" if name == "32" else f"{name} (auto{', channels_last' if name == 'bf16' else ''})"
        print(
            f"score {images_scored:,} images, {label:<28}: {seconds[name]:7.1f} s, "
            f"{images_scored / seconds[name]:,.0f} img/s on {device.type}"
        )
        case = f"{model_name} score {len(deltas)} cifar100-c sets {label} batch {args.batch_size}"
        notes = f"{images_scored} images; per set the median of {args.rounds} round(s)"
        rows += [
            row(case, "wall", seconds[name], "s", rounds=args.rounds, notes=notes),
            row(case, "throughput", images_scored / seconds[name], "img/s", notes=notes),
        ]
    print(f"auto vs fp32: {seconds['32'] / seconds[fast]:.2f}x the images/s")
    worst = {key: max(d[key] for d in deltas) for key in ("acc", "nll", "ece")}
    agree = min(d["agree"] for d in deltas)
    print(
        f"largest per-set difference over {len(deltas)} sets: acc {worst['acc']:.4f}, nll {worst['nll']:.4f}, "
        f"ece {worst['ece']:.4f}; predictions agree on {agree:.2%} of images or more"
    )
    case = f"{model_name} score {len(deltas)} cifar100-c sets, {fast} auto vs fp32"
    rows += [row(case, "throughput ratio", seconds["32"] / seconds[fast], "x")]
    rows += [row(case, f"largest per-set |{key} difference|", worst[key], "1") for key in worst]
    rows.append(row(case, "predictions agreeing, worst set", 100 * agree, "%"))
    finish(args, "evaluate", rows, facts)
    if not args.cache:
        shutil.rmtree(cache)


if __name__ == "__main__":
    main()
