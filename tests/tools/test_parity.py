"""tools/parity.py end to end on a small stand-in of an HDVW checkout (helpers/hdvw_checkout.py): each phase that
reads the checkout runs, lifts its cells and prints its rows, and the rows against the stand-in's restated
definitions agree (the landscape phase once stopped with a traceback outside a Hydra app, and nothing caught it).
The self-checks (noise, hessian: ~40 s), which read only its config, run with ``-m slow``; the 224 px timm phase
(fourier_timm) needs minutes and runs against a real checkout only."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tools import parity

from helpers.hdvw_checkout import write_checkout

READING = ["fourier", "variance", "landscape", "variance_vit"]  # the phases that read the checkout's code
SELF_CHECKS = ["noise", "hessian"]


def run_parity(checkout: Path, instruments: list[str], monkeypatch, capsys) -> str:
    """The tool's ``main`` in this process (a fresh interpreter would spend most of the test importing); what it
    sets for the process (torch's threads, the global generators, the stand-in's ``models`` and ``ops`` packages)
    is put back afterwards, for the tests that share this worker."""
    argv = ["parity", "--reference", str(checkout), "--no-record", "--images", "2", "--instruments", *instruments]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before, threads = set(sys.modules), torch.get_num_threads()
    generators = torch.random.get_rng_state(), np.random.get_state()
    try:
        parity.main()
    finally:
        for name in set(sys.modules) - before:
            if name.split(".")[0] in ("models", "ops"):
                del sys.modules[name]
        torch.set_num_threads(threads)
        torch.random.set_rng_state(generators[0])
        np.random.set_state(generators[1])
    return capsys.readouterr().out


def rows(report: str, instruments: list[str]) -> list[str]:
    """The table rows: each begins with its instrument (Fig. 9's ViT rows are variance rows)."""
    return [line for line in report.splitlines() if line.split(" ", 1)[0] in instruments]


def check_verdicts(lines: list[str]) -> None:
    """Every row agrees, but those comparing an alternative declared different, which must differ."""
    assert lines
    for line in lines:
        declared = any(word in line for word in ("nyquist", "population", "normalisation=filter", "decay_squared"))
        assert ("differs as declared" in line) if declared else ("agrees (rel" in line), line


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return write_checkout(tmp_path_factory.mktemp("how-do-vits-work"))


def test_each_phase_that_reads_the_checkout_runs_and_agrees_with_the_restated_definitions(
    checkout, monkeypatch, capsys
):
    report = run_parity(checkout, READING, monkeypatch, capsys)
    assert "Against HDVW's code (its notebooks' cells and ops/, run here):" in report
    found = rows(report, READING)
    assert {line.split(" ", 1)[0] for line in found} == {"fourier", "variance", "landscape"}
    assert any("CIFAR ViT-Ti" in line for line in found)  # variance_vit
    for origin in ("fourier_analysis.ipynb cell", "featuremap_variance.ipynb cell", "losslandscape.ipynb cell"):
        assert origin in report, origin
    check_verdicts(found)


@pytest.mark.slow
def test_the_self_checks_run_on_the_checkouts_config(checkout, monkeypatch, capsys):
    report = run_parity(checkout, SELF_CHECKS, monkeypatch, capsys)
    assert "Self-checks (HDVW publishes no code for these" in report
    assert {line.split(" ", 1)[0] for line in rows(report, SELF_CHECKS)} == set(SELF_CHECKS)
    check_verdicts(rows(report, SELF_CHECKS))
