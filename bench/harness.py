"""The one timing harness of ``bench/``: every script prints the same header, times through the same interleaved loop
and appends its numbers to CSVs of one schema, so that a number is never read apart from the machine, commit and
command that produced it.

    from .harness import add_harness_arguments, begin, finish, interleave, summarise, timing_row

    add_harness_arguments(parser, rounds=6)         # --rounds --warmup --threads --no-record --results-dir
    facts = begin(args, "attention")                # applies --threads, prints the header, returns the facts
    seconds = interleave({"A": a, "B": b}, args.rounds, args.warmup)   # A, B, A, B, ...: drift hits both alike
    finish(args, "attention", [timing_row("A", "step median", seconds["A"])], facts)
    # -> rows appended to bench/results/attention-<machine class>.csv (nothing with --no-record)

The machine's facts come from ``alternet.hardware.machine_facts()``, the package's one home for them; this module
adds what a result also depends on: the code-path environment overrides, the date, the commit and the command.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"
# environment variables that change which kernels run: a result under one is not a result of the machine as it is
CODE_PATH_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
# one schema for every bench, long format: the run's facts, then one measured number per row
FACT_COLUMNS = ("date", "commit", "command", "cpu", "cores", "isa", "native_bf16", "gpu", "torch", "threads", "env")
ROW_KEYS = ("case", "metric", "value", "unit", "spread", "rounds", "notes")
COLUMNS = FACT_COLUMNS + ROW_KEYS
UNIT_SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6}
Case = TypeVar("Case")  # a case's name: usually a string, any hashable will do


# facts -------------------------------------------------------------------------------------------------------------


def git_commit() -> str:
    """The short commit of this checkout, ``+dirty`` when tracked files changed (appended results in
    ``bench/results`` do not count); ``unknown`` without git."""

    def git(*command: str) -> str:
        result = subprocess.run(["git", "-C", str(ROOT), *command], capture_output=True, text=True, timeout=30)
        if result.returncode:
            raise OSError(result.stderr.strip())
        return result.stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def code_path_env() -> str:
    """The set code-path overrides as ``NAME=value`` words (empty when none is set)."""
    return " ".join(f"{name}={os.environ[name]}" for name in CODE_PATH_ENV if os.environ.get(name))


def hardware_facts() -> dict[str, Any]:
    """The package's one home for what the machine is: ``alternet.hardware.machine_facts()``."""
    from alternet.hardware import machine_facts as facts

    return facts()


def command_line() -> str:
    """The command as typed: ``python -m bench.NAME ARGS`` for a bench (Python puts the module's path in argv[0])."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = ["-m", spec.name] if spec is not None else sys.argv[:1]
    return shlex.join(["python", *program, *sys.argv[1:]])


def machine_facts(device: str | None = None, data_root: str | Path | None = None) -> dict[str, Any]:
    """What a result holds for: the package's machine facts plus the env overrides, the date (UTC), the commit and
    the command line. ``device`` (``cpu``/``cuda``) is what the bench's numbers ran on, so a CPU bench on a GPU host
    is filed under its CPU; ``None``: the GPU when there is one."""
    return hardware_facts() | {
        "env": code_path_env(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": git_commit(),
        "command": command_line(),
        "device": device,
        "data_root": str(data_root) if data_root is not None else None,
    }


def slug(text: str) -> str:
    """Lower case, runs of anything but letters and digits as one ``-``: a file-name part."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


VENDORS = {"authenticamd": "amd", "genuineintel": "intel"}


def cpu_slug(cpu: str) -> str:
    """The CPU part of a machine class: ``amd-f25-m1`` from ``alternet.hardware.cpu_model()``'s ``(AuthenticAMD
    family 25 model 1)``, so a Zen 3 and a Zen 4 that both call themselves ``AMD EPYC`` file apart; the marketing
    name where the OS gives no family and model."""
    found = re.search(r"\((\w+) family (\d+) model (\d+)\)", cpu)
    if not found:
        return slug(cpu)
    vendor, family, model = found.groups()
    return f"{VENDORS.get(vendor.lower(), slug(vendor))}-f{family}-m{model}"


def machine_class(facts: Mapping[str, Any]) -> str:
    """The class of machine a result holds for, as a file-name part: the instruction set the numbers ran on
    (``cpu-avx2``, ``cpu-avx512``, ``cpu-avx512-bf16`` with native bf16, ``cpu-amx``), ``-held`` when code-path
    variables held the CPU below its own (``env``: an AVX-512 machine held to AVX2 is not an AVX2 machine), then the
    CPU (``cpu_slug``): ``cpu-avx2-amd-f25-m1``, ``cpu-avx2-held-amd-f25-m17``. A result that ran on a GPU is
    ``gpu-<its name>``."""
    on_gpu = facts.get("device") == "cuda" or (facts.get("device") is None and facts.get("gpu"))
    if on_gpu:
        return f"gpu-{slug(str(facts.get('gpu') or 'unknown'))}"
    isa = str(facts.get("isa") or "unknown").upper()
    if "AMX" in isa:
        kind = "cpu-amx"
    elif isa.startswith("AVX512"):
        kind = "cpu-avx512-bf16" if facts.get("native_bf16") else "cpu-avx512"
    else:
        kind = f"cpu-{slug(isa)}"
    held = "-held" if facts.get("env") else ""
    return f"{kind}{held}-{cpu_slug(str(facts.get('cpu') or 'unknown'))}"


def results_path(bench: str, facts: Mapping[str, Any], results_dir: str | Path = RESULTS_DIR) -> Path:
    """Where ``bench``'s rows for this machine class go: one CSV per bench per machine class."""
    return Path(results_dir) / f"{bench}-{machine_class(facts)}.csv"


def header_lines(bench: str, facts: Mapping[str, Any], results: str) -> list[str]:
    """The ``# key: value`` lines printed before a bench's numbers."""
    bf16 = "native bf16" if facts["native_bf16"] else "no native bf16 (emulated)"
    lines = [
        f"# bench: {bench}, results for {machine_class(facts)}",
        f"# date: {facts['date']}",
        f"# commit: {facts['commit']}",
        f"# command: {facts['command']}",
        f"# cpu: {facts['cpu']}, {facts['cores']} cores, {facts['isa']}, {bf16}",
        f"# gpu: {facts['gpu'] or 'none'}",
        f"# torch: {facts['torch']}, {facts['threads']} threads",
    ]
    if facts.get("env"):
        lines.append(f"# env: {facts['env']}")
    if facts.get("data_root"):
        lines.append(f"# data: {facts['data_root']}")
    lines.append(f"# results: {results}")
    return lines


def print_header(bench: str, facts: Mapping[str, Any], results: str = "not recorded") -> None:
    """Print the header: a bench's output starts by saying what machine, code and command its numbers came from."""
    print("\n".join(header_lines(bench, facts, results)), flush=True)


# timing ------------------------------------------------------------------------------------------------------------


def interleave(
    cases: Mapping[Case, Callable[[], object]],
    rounds: int,
    warmup: int = 1,
    sync: Callable[[], object] | None = None,
) -> dict[Case, list[float]]:
    """Seconds of each case over ``rounds`` rounds, each round running every case once in order (A, B, C, A, B,
    C, ...), so that drift of the machine (another job, the clock, the heat) hits all cases alike. ``warmup`` rounds
    run first, untimed. ``sync`` (``torch.cuda.synchronize`` for a GPU: see ``device_sync``) is called before each
    clock starts and before it stops, so queued device work is inside the timing it belongs to."""
    for _ in range(warmup):
        for run in cases.values():
            run()
    seconds: dict[Case, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            if sync is not None:
                sync()
            start = time.perf_counter()
            run()
            if sync is not None:
                sync()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def device_sync(device: Any) -> Callable[[], object] | None:
    """The ``sync`` for ``interleave`` on ``device``: ``torch.cuda.synchronize`` on a GPU, none on a CPU."""
    if str(device).startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return None


def switched(setter: Callable[[Any], object], value: Any, run: Callable[[], object]) -> Callable[[], None]:
    """``run`` with ``setter(value)`` first: two settings of one object (a kernel switch) as two cases that can be
    interleaved, each putting its setting back before it runs."""

    def case() -> None:
        setter(value)
        run()

    return case


@dataclass(frozen=True)
class Summary:
    """Median, extremes and spread of one case's measurements. ``spread`` is the relative range,
    (high - low) / median: 0.05 means the slowest and fastest round lie 5% of the median apart."""

    median: float
    low: float
    high: float
    spread: float
    count: int


def summarise(values: Sequence[float]) -> Summary:
    """The summary of one case's measurements (any unit; the spread has none)."""
    if not values:
        raise ValueError("nothing to summarise: no measurements (rounds 0?)")
    median = statistics.median(values)
    low, high = min(values), max(values)
    spread = (high - low) / median if median else 0.0
    return Summary(median, low, high, spread, len(values))


def ratio(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """The ratio of two cases' medians, measured side by side in one run."""
    return statistics.median(numerator) / statistics.median(denominator)


# rows and results ----------------------------------------------------------------------------------------------


def row(
    case: str,
    metric: str,
    value: float | int | str,
    unit: str,
    *,
    spread: float | None = None,
    rounds: int | None = None,
    notes: str = "",
) -> dict[str, Any]:
    """One measured number: ``case`` (what ran), ``metric`` (what of it was measured), ``value`` in ``unit``."""
    return {
        "case": case,
        "metric": metric,
        "value": value,
        "unit": unit,
        "spread": spread,
        "rounds": rounds,
        "notes": notes,
    }


def summary_row(
    case: str, metric: str, values: Sequence[float], unit: str, statistic: str = "median", notes: str = ""
) -> dict[str, Any]:
    """A row of a case's measurements in ``unit`` (rates, say): their ``statistic`` (``median``, ``low`` for a
    best-of, ``high``), with the spread and the number of rounds."""
    summary = summarise(values)
    return row(
        case, metric, getattr(summary, statistic), unit, spread=summary.spread, rounds=summary.count, notes=notes
    )


def timing_row(
    case: str, metric: str, seconds: Sequence[float], unit: str = "ms", statistic: str = "median", notes: str = ""
) -> dict[str, Any]:
    """A row of a case's timings in seconds, written in ``unit`` (s, ms, us): see ``summary_row``."""
    scale = UNIT_SCALE[unit]
    return summary_row(case, metric, [value * scale for value in seconds], unit, statistic, notes)


def plain(value: Any) -> str:
    """A CSV cell: floats to 6 significant digits without an exponent, booleans as yes/no, ``None`` empty."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if not math.isfinite(value):
            return str(value)
        decimals = max(0, 5 - math.floor(math.log10(abs(value))))
        text = f"{value:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value)


def record(
    bench: str, rows: Sequence[Mapping[str, Any]], facts: Mapping[str, Any], results_dir: str | Path = RESULTS_DIR
) -> Path:
    """Append ``rows`` (see ``row``) to ``<results_dir>/<bench>-<machine class>.csv``, each with the run's facts.
    A new file gets the header; an existing file whose header is not this schema is refused, not mixed into."""
    path = results_path(bench, facts, results_dir)
    lines = []
    for measured in rows:
        unknown = set(measured) - set(ROW_KEYS)
        if unknown:
            raise ValueError(f"{bench}: row keys {sorted(unknown)} are not in the results schema {ROW_KEYS}")
        lines.append([plain(facts.get(key)) for key in FACT_COLUMNS] + [plain(measured.get(key)) for key in ROW_KEYS])
    new = not path.is_file() or path.stat().st_size == 0
    if not new:
        with path.open(newline="") as existing:
            found = next(csv.reader(existing), [])
        if tuple(found) != COLUMNS:
            raise ValueError(
                f"{path}: its header {found} is not the results schema {list(COLUMNS)}; "
                "move the file aside (rows of two schemas are not mixed in one file)"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as out:
        writer = csv.writer(out)
        if new:
            writer.writerow(COLUMNS)
        writer.writerows(lines)
    return path


# command line ------------------------------------------------------------------------------------------------------


MEMORY_FORMATS = ("channels_last", "contiguous")


def add_formats_argument(parser: argparse.ArgumentParser, default: Sequence[str] = ("channels_last",)) -> None:
    """``--formats``: the memory formats of model and images a bench times (``memory_format`` turns each into
    torch's)."""
    parser.add_argument(
        "--formats", nargs="+", choices=MEMORY_FORMATS, default=list(default), help="memory formats of model and images"
    )


def memory_format(name: str) -> Any:
    """torch's memory format for a ``--formats`` name."""
    import torch

    return torch.channels_last if name == "channels_last" else torch.contiguous_format


def add_harness_arguments(
    parser: argparse.ArgumentParser,
    *,
    rounds: int = 5,
    warmup: int = 1,
    threads: int = 0,
    round_aliases: Sequence[str] = (),
    round_help: str = "timed rounds, every case once per round",
) -> None:
    """``--rounds`` (also under ``round_aliases``, a script's older name for it), ``--warmup``, ``--threads``
    (torch's intra-op threads; 0: torch's choice), ``--no-record`` (print only) and ``--results-dir``."""
    parser.add_argument(
        "--rounds", *round_aliases, dest="rounds", type=int, default=rounds, help=f"{round_help} (default {rounds})"
    )
    parser.add_argument("--warmup", type=int, default=warmup, help=f"untimed warm-up rounds first (default {warmup})")
    parser.add_argument(
        "--threads", type=int, default=threads, help=f"torch threads, 0: torch's choice (default {threads})"
    )
    parser.add_argument("--no-record", action="store_true", help="print only; append nothing to --results-dir")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the per-machine CSVs are")


def begin(
    args: argparse.Namespace,
    bench: str,
    device: str | None = "cpu",
    data_root: str | Path | None = None,
    no_gpu: str = "run it on a GPU machine, or leave --device out",
) -> dict[str, Any]:
    """Refuse ``device="cuda"`` where no CUDA GPU is visible (in one line, ending on ``no_gpu``: what to do), apply
    ``--threads``, gather the facts and print the header; the facts go to ``finish``."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"python -m bench.{bench} --device cuda: no CUDA GPU is visible ({no_gpu})")
    if args.threads:
        torch.set_num_threads(args.threads)
    facts = machine_facts(device, data_root)
    results = "not recorded (--no-record)" if args.no_record else str(results_path(bench, facts, args.results_dir))
    print_header(bench, facts, results)
    return facts


def finish(
    args: argparse.Namespace, bench: str, rows: Sequence[Mapping[str, Any]], facts: Mapping[str, Any]
) -> Path | None:
    """Record ``rows`` unless ``--no-record``; says where they went."""
    if args.no_record or not rows:
        return None
    path = record(bench, rows, facts, args.results_dir)
    print(f"# recorded {len(rows)} rows in {path}")
    return path
