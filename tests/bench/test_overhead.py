"""``python -m bench.overhead`` runs end to end on a CPU and ends on its summary line (the numbers are the bench's
to judge)."""

import re

import pytest

from helpers.processes import run_module


@pytest.mark.slow  # 15 s: the default suite's budget goes to the package; the bench's counting is tests/training's
def test_overhead_bench_ends_on_the_ms_and_syncs_line():
    result = run_module("bench.overhead", "--rounds", "1", "--warmup", "0", "--steps", "12", "--no-record")
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    says = r"whole step over plain Lightning: -?[0-9.]+ ms/step, [0-9.]+ operators and 0 syncs per non-logging step"
    assert re.fullmatch(says, last), last
    for arm in ("bare", "lightning", "alternet", "backbone", "whole"):
        assert re.search(rf"^  {arm} +[0-9.]+ ms/step", result.stdout, re.MULTILINE), result.stdout
