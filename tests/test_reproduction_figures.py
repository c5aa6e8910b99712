"""The scripts under docs/figures that recompute docs/reproduction.md's numbers from committed data: they run, and
they print what the page says (a change to the report's statistics or verdicts that moves a published number
fails here, so the page is regenerated with it)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

FIGURES = Path(__file__).resolve().parents[1] / "docs" / "figures"
HURTS = "| hurts at this budget (no arm at twice the epochs tests the ranking)"  # no preset sweeps the epochs


def run(script: str, capsys, monkeypatch, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", [script, *args])
    runpy.run_path(str(FIGURES / script), run_name="__main__")
    return capsys.readouterr().out


def test_the_welch_recomputation_prints_the_pages_intervals_and_verdicts(capsys, monkeypatch):
    out = run("welch_from_tables.py", capsys, monkeypatch)
    sections = {block.split(":")[0]: block for block in out.split("\n## ")[1:]}
    rows = {
        (preset, line.split()[0]): line
        for preset, block in sections.items()
        for line in block.splitlines()
        if "Δ error" in line
    }
    assert "-0.78 pp [-1.76, +0.21]" in rows["inductive_bias", "alternet_laptop"]
    assert "| inconclusive (holds" in rows["inductive_bias", "alternet_laptop"]
    for model in ("vit_mini_cifar", "pit_mini_cifar"):
        assert f"{HURTS} (holds for a test-set sd past 5 pp)" in rows["inductive_bias", model]
    assert "-0.94 pp [-1.87, -0.00]" in rows["hybrids", "alternet_laptop"]
    assert "| inconclusive (lower error; training NLL unresolved)" in rows["hybrids", "alternet_laptop"]
    assert "+2.38 pp [+1.51, +3.25]" in rows["hybrids", "botnet_laptop"]
    assert f"{HURTS} (holds for a test-set sd up to 0.97 pp)" in rows["hybrids", "botnet_laptop"]
    assert f"{HURTS} (holds for a test-set sd up to 0.83 pp)" in rows["hybrids", "coatnet_laptop"]
    assert "+0.25 pp [-0.75, +1.24]" in rows["specificity", "model.attention=position_only"]
    assert "-7.92 pp [-10.17, -5.67]" in sections["hybrids"]


def test_the_sensitivity_reading_reproduces_the_published_and_the_corrected_rows(capsys, monkeypatch):
    out = run("vs_twin_sensitivity.py", capsys, monkeypatch)
    published, corrected = (line for line in out.splitlines() if "test-set sd" in line)
    assert "test-set sd 0.147 pp" in published and "95% [-1.11, +0.06]" in published and "not decided" in published
    assert "test-set sd 0.054 pp" in corrected and "95% [-1.03, -0.03]" in corrected
    assert "the AlterNet has the lower error" in corrected


def test_the_seven_seed_robustness_reading_prints_the_pages_numbers(capsys, monkeypatch):
    out = run("vs_twin_robustness.py", capsys, monkeypatch)
    assert "alternet_laptop    corrupted 42.29%" in out and "share kept 0.716 (7 seeds)" in out
    assert "with the test images' term (sd 0.038 pp): +0.00 pp [-0.48, +0.48]" in out
    assert "Δ share kept, with the test images' term (sd 0.0011): -0.0091 [-0.0216, +0.0034] (df 12.8, p 0.1400)" in out
    vit = out[out.index("vit_mini_cifar - preresnet_laptop") :]
    assert "vit_mini_cifar     corrupted 25.02%" in out and "share kept 0.776 (3 seeds)" in out
    assert "with the test images' term (sd 0.582 pp): -17.26 pp [-18.97, -15.56]" in vit
    assert "Δ share kept, with the test images' term (sd 0.0066): +0.0512 [+0.0342, +0.0682]" in vit


def test_the_decode_check_prints_the_pages_numbers(capsys, monkeypatch):
    out = run("decode_check.py", capsys, monkeypatch, "read")
    assert (
        "data.decode=exact: test top-1 30.19% (sd 0.23" in out and "data.decode=fast: test top-1 29.97% (sd 0.40" in out
    )
    assert "fast - exact, test top-1: -0.22 pp [-0.62, +0.19] (seed-paired, df 2.3, p 0.160" in out


def test_the_hybrids_test_term_reads_the_published_table_with_each_measured_term(capsys, monkeypatch):
    out = run("hybrids_test_term.py", capsys, monkeypatch)
    assert "seed 0: 55.45% and 33.34% (published: 55.17%, 34.82%)" in out
    assert "botnet_laptop      test error sd 0.244 pp, CIFAR-100-C sd 0.344 pp" in out and "(3 seeds)" in out
    assert "coatnet_laptop     test error sd 0.257 pp, CIFAR-100-C sd 0.375 pp (3 seeds)" in out
    assert "alternet_laptop    test error sd 0.054 pp" in out
    rows = {line.split()[0]: line for line in out.splitlines() if "Δ error" in line}
    assert "+2.38 pp [+1.64, +3.12]" in rows["botnet_laptop"] and rows["botnet_laptop"].endswith(HURTS)
    assert "+1.98 pp [+1.15, +2.81]" in rows["coatnet_laptop"] and rows["coatnet_laptop"].endswith(HURTS)
    assert "-0.94 pp [-1.87, -0.01] (df 4.1, p 0.0489" in rows["alternet_laptop"]
    assert "inconclusive (lower error" in rows["alternet_laptop"]
    assert "coatnet_laptop     Δ robustness -10.84 pp [-11.99, -9.70]" in out


def test_each_presets_minimum_detectable_effect_is_printed_from_its_own_design(capsys, monkeypatch):
    out = run("design_mde.py", capsys, monkeypatch)
    mdes = {tuple(line.split()[:2]): line.rsplit("MDE ", 1)[1] for line in out.splitlines() if "MDE" in line}
    assert (
        mdes["inductive_bias", "alternet_laptop"] == "1.28 pp" and mdes["inductive_bias", "vit_mini_cifar"] == "3.98 pp"
    )
    assert mdes["specificity", "model.attention=position_only"] == "1.26 pp"
    assert mdes["alternet_vs_twin", "alternet_laptop"] == "0.69 pp"
    assert mdes["data_regime", "vit_mini_cifar,"] == "1.62 pp"  # its 10% arm against its 50%
    assert mdes["locality", "window"] == "1.14 pp" and mdes["buildup", "a"] == "1.29 pp"
    assert mdes["locality_vit", "3x3"] == "3.18 pp"  # the ViT's seeds scatter more than the CNNs'


def test_the_robustness_table_takes_a_model_that_gets_no_clean_image_right(capsys):
    """instruments.py divided by the clean accuracy: a near-chance model of a short run ended in ZeroDivisionError;
    its share kept is undefined (nan), the other rows as before."""
    robustness_table = runpy.run_path(str(FIGURES / "instruments.py"))["robustness_table"]
    row = lambda corrupted, clean: {"robustness": {"robustness": corrupted, "clean_acc": clean}}  # noqa: E731
    found = {
        "preresnet_laptop": {0: row(0.30, 0.60), 1: row(0.32, 0.62), 2: row(0.31, 0.61)},
        "vit_mini_cifar": {0: row(0.0, 0.0), 1: row(0.01, 0.02), 2: row(0.0, 0.01)},
    }
    robustness_table(found, "preresnet_laptop")
    out = capsys.readouterr().out
    assert "vit_mini_cifar     corrupted 0.33% clean 1.00% retained nan" in out, out
    assert "preresnet_laptop   corrupted 31.00% clean 61.00% retained 0.508" in out, out
