"""bench/harness.py: the interleaved timing loop, its summary, the machine class and the per-machine results CSVs
that every bench script relies on."""

from __future__ import annotations

import argparse
import ast
import csv
import importlib.machinery
import re
import sys
import types

import pytest
import torch

from bench import harness

from helpers import ROOT

HEADER = (
    "date,commit,command,cpu,cores,isa,native_bf16,gpu,torch,threads,env,case,metric,value,unit,spread,rounds,notes"
)


def stub_facts(**changes) -> dict:
    """Machine facts as ``harness.machine_facts`` returns them, for an AVX-512 CPU with native bf16 and no GPU."""
    facts = {
        "cpu": "Test CPU",
        "cores": 4,
        "isa": "AVX512",
        "native_bf16": True,
        "gpu": None,
        "torch": "2.0.0",
        "threads": 4,
        "env": "",
        "date": "2026-01-01T00:00:00Z",
        "commit": "abc1234",
        "command": "python -m bench.models --steps 2",
        "device": None,
        "data_root": None,
    }
    return facts | changes


class FakeClock:
    """``time.perf_counter`` that moves only when a case or a sync says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interleave_warms_up_first_then_runs_the_cases_in_turn_with_sync_around_each_clock(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", clock)
    calls = []

    def case(name: str, cost: float):
        def run() -> None:
            calls.append(name)
            clock.now += cost

        return run

    def sync() -> None:
        calls.append("sync")
        clock.now += 0.5  # queued device work draining: inside the timing when it precedes the stop

    seconds = harness.interleave({"A": case("A", 1.0), "B": case("B", 3.0)}, rounds=2, warmup=1, sync=sync)

    timed_round = ["sync", "A", "sync", "sync", "B", "sync"]
    assert calls == ["A", "B", *timed_round, *timed_round]
    assert seconds == {"A": [1.5, 1.5], "B": [3.5, 3.5]}


def test_interleave_without_sync_times_each_case_alone(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", clock)
    costs = iter([2.0, 7.0, 4.0, 5.0, 6.0, 3.0])

    def run() -> None:
        clock.now += next(costs)

    seconds = harness.interleave({"A": run, "B": run, "C": run}, rounds=2, warmup=0)

    assert seconds == {"A": [2.0, 5.0], "B": [7.0, 6.0], "C": [4.0, 3.0]}


def test_summarise_gives_median_extremes_and_relative_range():
    summary = harness.summarise([3.0, 1.0, 10.0, 2.0, 4.0])

    assert summary == harness.Summary(median=3.0, low=1.0, high=10.0, spread=3.0, count=5)
    assert harness.summarise([1.0, 2.0, 3.0, 4.0]).median == 2.5
    assert harness.ratio([2.0, 4.0, 6.0], [1.0, 2.0, 30.0]) == 2.0
    with pytest.raises(ValueError, match="nothing to summarise"):
        harness.summarise([])


def test_timing_row_converts_units_and_keeps_spread_and_rounds():
    best = harness.timing_row("case", "fwd+bwd best", [0.004, 0.002, 0.003], statistic="low")
    median = harness.timing_row("case", "step median", [0.5, 0.25, 1.0], unit="s")

    assert (best["value"], best["unit"], best["rounds"]) == (pytest.approx(2.0), "ms", 3)
    assert best["spread"] == pytest.approx((0.004 - 0.002) / 0.003)
    assert (median["value"], median["unit"]) == (0.5, "s")


ZEN3, ZEN4 = "AMD EPYC (AuthenticAMD family 25 model 1)", "AMD EPYC (AuthenticAMD family 25 model 17)"
XEON = "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
HOLD = "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"isa": "AVX2", "native_bf16": False}, "cpu-avx2-test-cpu"),
        ({"isa": "AVX512", "native_bf16": False}, "cpu-avx512-test-cpu"),
        ({"isa": "AVX512", "native_bf16": True}, "cpu-avx512-bf16-test-cpu"),
        ({"isa": "AMX", "native_bf16": True}, "cpu-amx-test-cpu"),
        # two CPUs a hypervisor names alike file apart, and a held one apart from a native one
        ({"isa": "AVX2", "native_bf16": False, "cpu": ZEN3}, "cpu-avx2-amd-f25-m1"),
        ({"isa": "AVX2", "native_bf16": False, "cpu": ZEN4, "env": HOLD}, "cpu-avx2-held-amd-f25-m17"),
        ({"cpu": f"{XEON} (GenuineIntel family 6 model 143)"}, "cpu-avx512-bf16-intel-f6-m143"),
        ({"gpu": "NVIDIA H100 80GB HBM3"}, "gpu-nvidia-h100-80gb-hbm3"),
        ({"gpu": "NVIDIA H100 80GB HBM3", "device": "cuda"}, "gpu-nvidia-h100-80gb-hbm3"),
        # a CPU bench on a GPU host
        ({"gpu": "NVIDIA H100 80GB HBM3", "device": "cpu", "isa": "AMX"}, "cpu-amx-test-cpu"),
    ],
)
def test_machine_class(changes, expected):
    assert harness.machine_class(stub_facts(**changes)) == expected


def test_code_path_env_names_only_the_overrides_that_are_set(monkeypatch):
    for name in harness.CODE_PATH_ENV:
        monkeypatch.delenv(name, raising=False)
    assert harness.code_path_env() == ""
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert harness.code_path_env() == "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2"


def test_git_commit_is_short_hash_here_and_unknown_outside_a_repository(monkeypatch, tmp_path):
    assert re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", harness.git_commit())
    monkeypatch.setattr(harness, "ROOT", tmp_path)
    assert harness.git_commit() == "unknown"


def test_header_lines_say_machine_code_and_command_before_any_number():
    lines = harness.header_lines("models", stub_facts(), "bench/results/models-cpu-avx512-bf16.csv")
    text = "\n".join(lines)

    assert all(line.startswith("# ") for line in lines)
    facts = ("cpu-avx512-bf16-test-cpu", "Test CPU", "4 cores", "AVX512", "native bf16", "abc1234", "--steps 2")
    for fact in (*facts, "2.0.0"):
        assert fact in text
    assert "# env:" not in text and "# data:" not in text
    changed = harness.header_lines("models", stub_facts(env="ATEN_CPU_CAPABILITY=avx2", data_root="/d"), "-")
    assert "# env: ATEN_CPU_CAPABILITY=avx2" in changed and "# data: /d" in changed


def read(path) -> list[list[str]]:
    with path.open(newline="") as file:
        return list(csv.reader(file))


def test_record_appends_to_one_csv_per_bench_and_machine_class(tmp_path):
    facts = stub_facts(env="ATEN_CPU_CAPABILITY=avx2")
    rows = [
        harness.row("alternet_r50 bf16", "step median", 123.456789, "ms", spread=0.0512345, rounds=10),
        harness.row("alternet_r50 / preresnet50", "ratio", 1.0, "x", notes="target <= 1.1x, as stated"),
    ]

    path = harness.record("models", rows, facts, tmp_path)
    again = harness.record("models", rows[:1], facts, tmp_path)

    assert path == again == tmp_path / "models-cpu-avx512-bf16-held-test-cpu.csv"
    assert path.read_text().splitlines()[0] == HEADER
    table = read(path)
    assert [line[:1] for line in table].count(["date"]) == 1
    assert len(table) == 4
    first = dict(zip(table[0], table[1]))
    assert first == {
        "date": "2026-01-01T00:00:00Z",
        "commit": "abc1234",
        "command": "python -m bench.models --steps 2",
        "cpu": "Test CPU",
        "cores": "4",
        "isa": "AVX512",
        "native_bf16": "yes",
        "gpu": "",
        "torch": "2.0.0",
        "threads": "4",
        "env": "ATEN_CPU_CAPABILITY=avx2",
        "case": "alternet_r50 bf16",
        "metric": "step median",
        "value": "123.457",
        "unit": "ms",
        "spread": "0.0512345",
        "rounds": "10",
        "notes": "",
    }
    assert dict(zip(table[0], table[2]))["notes"] == "target <= 1.1x, as stated"
    assert harness.record("models", rows, stub_facts(isa="AVX2", native_bf16=False), tmp_path).name == (
        "models-cpu-avx2-test-cpu.csv"
    )


def test_plain_values_have_no_exponent_and_sensible_precision():
    assert harness.plain(1234567.89) == "1234568"
    assert harness.plain(0.000123456789) == "0.000123457"
    assert harness.plain(2.5) == "2.5"
    assert harness.plain(0.0) == "0"
    assert harness.plain(7) == "7"
    assert (harness.plain(True), harness.plain(False), harness.plain(None)) == ("yes", "no", "")


def test_record_refuses_a_file_of_another_schema_and_leaves_it_alone(tmp_path):
    path = tmp_path / "models-cpu-avx512-bf16-test-cpu.csv"
    path.write_text("date,case,value\n2025-01-01,old,1\n")

    with pytest.raises(ValueError, match=re.escape(str(path))):
        harness.record("models", [harness.row("c", "m", 1.0, "ms")], stub_facts(), tmp_path)

    assert path.read_text() == "date,case,value\n2025-01-01,old,1\n"


def test_record_refuses_a_row_key_outside_the_schema(tmp_path):
    with pytest.raises(ValueError, match="speed"):
        harness.record(
            "models", [{"case": "c", "metric": "m", "value": 1, "unit": "x", "speed": 2}], stub_facts(), tmp_path
        )
    assert list(tmp_path.iterdir()) == []


def parse(*argv: str, **defaults) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    harness.add_harness_arguments(parser, **defaults)
    return parser.parse_args(argv)


def test_harness_arguments_and_a_script_older_name_for_rounds(tmp_path):
    args = parse()
    assert (args.rounds, args.warmup, args.threads, args.no_record) == (5, 1, 0, False)
    assert args.results_dir == ROOT / "bench" / "results"
    older = parse("--repeats", "4", "--warmup", "0", "--threads", "1", rounds=6, round_aliases=["--repeats"])
    assert (older.rounds, older.warmup, older.threads) == (4, 0, 1)


def test_no_record_writes_nothing_and_without_it_finish_records(tmp_path):
    rows = [harness.row("c", "m", 1.0, "ms")]

    assert harness.finish(parse("--no-record", "--results-dir", str(tmp_path)), "guard", rows, stub_facts()) is None
    assert list(tmp_path.iterdir()) == []

    path = harness.finish(parse("--results-dir", str(tmp_path)), "guard", rows, stub_facts())
    assert path == tmp_path / "guard-cpu-avx512-bf16-test-cpu.csv" and len(read(path)) == 2


def test_machine_facts_add_env_date_command_and_data_root_to_the_package_facts(monkeypatch):
    package = {key: stub_facts()[key] for key in ("cpu", "cores", "isa", "native_bf16", "gpu", "torch", "threads")}
    monkeypatch.setattr(harness, "hardware_facts", lambda: dict(package))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    as_run(monkeypatch, "bench.guard", str(ROOT / "bench" / "guard.py"), "--steps", "2")

    facts = harness.machine_facts("cpu", ROOT.parent / "shared" / "data")

    assert set(harness.FACT_COLUMNS) <= set(facts)
    assert {key: facts[key] for key in package} == package
    assert facts["command"] == "python -m bench.guard --steps 2"
    assert "ONEDNN_MAX_CPU_ISA=AVX2" in facts["env"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", facts["date"])
    assert (facts["device"], facts["data_root"]) == ("cpu", str(ROOT.parent / "shared" / "data"))


def as_run(monkeypatch, module: str | None, *argv: str) -> None:
    """This process as ``python -m MODULE`` (Python's argv[0] is then the module's path), or as ``python ARGV``."""
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec(module, None) if module else None
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", list(argv))


def test_the_command_is_recorded_as_typed_module_or_script(monkeypatch):
    as_run(monkeypatch, "bench.models", str(ROOT / "bench" / "models.py"), "--batch", "8 16")
    assert harness.command_line() == "python -m bench.models --batch '8 16'"

    as_run(monkeypatch, None, "my_bench.py", "--steps", "2")
    assert harness.command_line() == "python my_bench.py --steps 2"


def test_the_package_facts_are_the_csv_fact_columns():
    """alternet.hardware.machine_facts() returns a dict literal; its keys are what record() writes (read from the
    source: importing torch would cost this file its speed)."""
    tree = ast.parse((ROOT / "alternet" / "hardware.py").read_text())
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "machine_facts")
    returned = next(node.value for node in ast.walk(function) if isinstance(node, ast.Return))
    keys = {key.value for key in returned.keys}

    assert keys | {"env", "date", "commit", "command"} == set(harness.FACT_COLUMNS)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is visible: nothing to refuse")
@pytest.mark.parametrize(
    ("bench", "no_gpu"),
    [("hybrids", {}), ("gpu", {"no_gpu": "the CPU benchmarks are python -m bench.models"})],
)
def test_begin_refuses_cuda_where_no_gpu_is_visible_in_one_line_before_any_header(bench, no_gpu, capsys):
    args = argparse.Namespace(threads=None, no_record=True, results_dir=None)
    with pytest.raises(SystemExit) as refused:
        harness.begin(args, bench, device="cuda", **no_gpu)
    message = str(refused.value.code)
    assert (
        message.startswith(f"python -m bench.{bench} --device cuda: no CUDA GPU is visible (") and "\n" not in message
    )
    assert message.endswith(f"({no_gpu.get('no_gpu', 'run it on a GPU machine, or leave --device out')})")
    assert capsys.readouterr().out == ""  # refused before the header
