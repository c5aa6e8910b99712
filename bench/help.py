"""How long the command line takes to answer ``--help`` (issue 54 item 4: under 2 s), each in a fresh interpreter, as
a ratio to a fresh interpreter that does nothing (``python -c pass``), side by side in one run.

    python -m bench.help [--rounds 5]

Cases, interleaved round by round: ``python -c pass``, ``python -m alternet --help`` (the list of commands), and
``alternet COMMAND --help`` for every command (Hydra's help for train and evaluate: composed against the schema;
argparse's for the rest). For scale, ``import torch`` alone: what the help no longer pays. Ends on the line
``slowest help: COMMAND X s, Y x python -c pass``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from .harness import add_harness_arguments, begin, finish, interleave, ratio, row, summarise, timing_row

COMMANDS = ("train", "evaluate", "export", "push", "import-hdvw", "report", "shards", "cifar-c")


def fresh(*args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` in a fresh interpreter, output discarded; a failure is an error, not a time."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise SystemExit(f"python {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_harness_arguments(parser, rounds=5)
    args = parser.parse_args()
    facts = begin(args, "help")
    cases = {
        "python -c pass": lambda: fresh("-c", "pass"),
        "import torch": lambda: fresh("-c", "import torch"),
        "alternet --help": lambda: fresh("-m", "alternet", "--help"),
        **{f"alternet {name} --help": (lambda name=name: fresh("-m", "alternet", name, "--help")) for name in COMMANDS},
    }
    seconds = interleave(cases, args.rounds, args.warmup)
    baseline = seconds["python -c pass"]
    rows = []
    print(f"{'case':32s} {'median s':>9s} {'spread':>7s} {'x python -c pass':>17s}")
    for case, values in seconds.items():
        summary = summarise(values)
        times = ratio(values, baseline)
        print(f"{case:32s} {summary.median:9.3f} {summary.spread:7.2f} {times:17.1f}")
        rows.append(timing_row(case, "fresh interpreter", values, unit="s"))
        rows.append(row(case, "ratio to python -c pass", times, "x", rounds=summary.count))
    finish(args, "help", rows, facts)
    helps = {case: values for case, values in seconds.items() if case.startswith("alternet")}
    slowest = max(helps, key=lambda case: summarise(helps[case]).median)
    print(
        f"slowest help: {slowest} {summarise(helps[slowest]).median:.2f} s, "
        f"{ratio(helps[slowest], baseline):.1f} x python -c pass"
    )


if __name__ == "__main__":
    main()
