"""Robustness aggregation: summary, mCE / relative mCE by hand, source checks, metrics.json, CSV, heatmap."""

from __future__ import annotations

import csv
import json
import math

import pytest

from alternet.errors import AlternetError
from alternet.evaluation.plots import corruption_heatmap
from alternet.evaluation.robustness import (
    CORRUPTIONS,
    FAMILIES,
    SEVERITIES,
    RobustnessBaseline,
    RobustnessError,
    RobustnessRow,
    accuracy_grid,
    load_baseline,
    robustness_record,
    robustness_summary,
    update_metrics_json,
    write_accuracy_csv,
    write_table_csv,
)


def row(corruption: str, severity: int, acc: float, source: str = "real") -> RobustnessRow:
    return RobustnessRow(corruption, severity, acc, nll=1.0, ece=0.05, n=10000, source=source)


def table(accs: dict[str, list[float]], source: str = "real") -> list[RobustnessRow]:
    return [row(c, s, acc, source) for c, values in accs.items() for s, acc in enumerate(values, start=1)]


# Model errors:    gaussian_noise 0.2, 0.4 (sum 0.6); fog 0.1, 0.3 (sum 0.4); clean error 0.05
# Baseline errors: gaussian_noise 0.3, 0.5 (sum 0.8); fog 0.2, 0.4 (sum 0.6); clean error 0.10
# CE:     noise 100 * 0.6 / 0.8 = 75;  fog 100 * 0.4 / 0.6 = 66.67;  mCE = 70.83
# rel CE: noise 100 * (0.15 + 0.35) / (0.2 + 0.4) = 83.33;  fog 100 * (0.05 + 0.25) / (0.1 + 0.3) = 75;  rel mCE = 79.17
MODEL = table({"gaussian_noise": [0.8, 0.6], "fog": [0.9, 0.7]})
BASELINE = RobustnessBaseline("resnet50", tuple(table({"gaussian_noise": [0.7, 0.5], "fog": [0.8, 0.6]})), 0.9)


def full_table(source: str = "real") -> list[RobustnessRow]:
    return [row(c, s, 0.9 - 0.1 * s + 0.001 * i, source) for i, c in enumerate(CORRUPTIONS) for s in SEVERITIES]


def test_summary_means_of_the_hand_example():
    summary = robustness_summary(MODEL, clean_acc=0.95)
    assert summary.source == "real" and summary.n_conditions == 4 and summary.complete is False
    assert summary.robustness == pytest.approx(0.75)  # mean of 0.8, 0.6, 0.9, 0.7
    assert summary.mean_error == pytest.approx(0.25)
    assert summary.per_corruption["gaussian_noise"] == {"family": "noise", "acc": 0.7, "error": pytest.approx(0.3)}
    assert summary.per_family["weather"]["acc"] == pytest.approx(0.8)
    assert summary.per_severity["1"]["acc"] == pytest.approx(0.85)
    assert summary.per_severity["2"]["acc"] == pytest.approx(0.65)
    assert summary.mce is None and summary.baseline is None


def test_mce_and_relative_mce_of_the_hand_example():
    summary = robustness_summary(MODEL, BASELINE, clean_acc=0.95)
    assert summary.baseline == "resnet50"
    assert summary.ce == {"gaussian_noise": pytest.approx(75.0), "fog": pytest.approx(200 / 3)}
    assert summary.mce == pytest.approx((75 + 200 / 3) / 2)
    assert summary.relative_ce == {"gaussian_noise": pytest.approx(250 / 3), "fog": pytest.approx(75.0)}
    assert summary.relative_mce == pytest.approx((250 / 3 + 75) / 2)


def test_relative_mce_needs_both_clean_accuracies_and_a_positive_denominator():
    assert robustness_summary(MODEL, BASELINE).relative_mce is None
    no_drop = RobustnessBaseline("flat", BASELINE.rows, clean_acc=0.5)  # baseline clean error above its fog errors
    summary = robustness_summary(MODEL, no_drop, clean_acc=0.95)
    assert math.isnan(summary.relative_ce["fog"]) and summary.relative_mce is None  # undefined, not NaN


def test_the_full_protocol_is_flagged_complete_and_averaged_per_family():
    rows = full_table()
    summary = robustness_summary(rows)
    assert summary.complete is True and summary.n_conditions == 75
    assert summary.robustness == pytest.approx(sum(r.acc for r in rows) / 75)
    assert list(summary.per_family) == list(FAMILIES)
    noise = [r.acc for r in rows if r.corruption in FAMILIES["noise"]]
    assert summary.per_family["noise"]["acc"] == pytest.approx(sum(noise) / len(noise))
    assert robustness_summary(rows, RobustnessBaseline("self", tuple(rows), 0.9)).mce == pytest.approx(100.0)


def test_mixed_sources_are_rejected():
    mixed = [*table({"fog": [0.9]}), *table({"snow": [0.8]}, source="generated")]
    with pytest.raises(RobustnessError, match="mixes sources"):
        robustness_summary(mixed)


def test_a_baseline_from_another_source_or_missing_a_corruption_is_rejected():
    generated = RobustnessBaseline(
        "gen", tuple(table({"gaussian_noise": [0.7, 0.5], "fog": [0.8, 0.6]}, "generated")), 0.9
    )
    with pytest.raises(RobustnessError, match="same source"):
        robustness_summary(MODEL, generated)
    partial = RobustnessBaseline("partial", tuple(table({"gaussian_noise": [0.7, 0.5]})), 0.9)
    with pytest.raises(RobustnessError, match=r"lacks .*fog"):
        robustness_summary(MODEL, partial)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "empty"),
        ([row("fog", 1, 0.9), row("fog", 1, 0.8)], "duplicate"),
        ([row("fog", 1, 0.9), row("fog", 2, 0.8), row("snow", 1, 0.8)], "same severities"),
    ],
)
def test_malformed_tables_are_rejected(rows, message):
    with pytest.raises(RobustnessError, match=message):
        robustness_summary(rows)


def test_rows_validate_their_fields():
    with pytest.raises(RobustnessError, match="family"):
        row("speckle_noise", 1, 0.5)
    assert RobustnessRow("speckle_noise", 1, 0.5, 1.0, 0.1, 10, "real", family="noise").family == "noise"
    with pytest.raises(RobustnessError, match="source"):
        row("fog", 1, 0.5, source="cifar")
    with pytest.raises(RobustnessError, match="fraction"):
        row("fog", 1, 50.0)
    metrics = {"acc": 0.5, "nll": 2.0, "ece": 0.1, "brier": 0.6}
    assert RobustnessRow.from_metrics("fog", 3, metrics, 100, "generated").family == "weather"


def test_metrics_json_round_trip_and_baseline_loading(tmp_path):
    path = tmp_path / "run" / "metrics.json"
    update_metrics_json(path, {"model": "resnet50", "test": {"test/acc": 0.9, "test/nll": float("nan")}})
    rows = list(BASELINE.rows)
    summary = robustness_summary(rows)
    update_metrics_json(path, {"robustness": robustness_record(rows, summary).to_json()})
    payload = json.loads(path.read_text())  # strict JSON: NaN was written as null
    assert payload["model"] == "resnet50" and payload["test"]["test/nll"] is None
    assert payload["robustness"]["source"] == "real" and payload["robustness"]["schema"] == 1
    assert payload["robustness"]["table"][0] == {
        "corruption": "gaussian_noise", "severity": 1, "acc": 0.7, "nll": 1.0, "ece": 0.05, "n": 10000,
        "source": "real", "family": "noise",
    }  # fmt: skip
    loaded = load_baseline(path)
    assert loaded.name == "resnet50" and loaded.clean_acc == 0.9 and set(loaded.rows) == set(rows)
    assert robustness_summary(MODEL, loaded, clean_acc=0.95).mce == pytest.approx((75 + 200 / 3) / 2)
    update_metrics_json(path, {"ema": True})  # an evaluation of EMA weights (use_ema): mCE is "vs" them, by name
    assert load_baseline(path).name == "resnet50 (EMA weights)"
    # the clean accuracy on the images its corrupted sets hold (robustness.max_images) over the whole split's:
    # relative mCE subtracted a 10,000-image clean error from 500-image corrupted ones
    subset = robustness_summary(rows, clean_acc=0.8)
    update_metrics_json(path, {"robustness": robustness_record(rows, subset).to_json()})
    assert load_baseline(path).clean_acc == 0.8


def test_a_baseline_scored_on_another_benchmark_is_refused(tmp_path):
    """A CIFAR-10-C evaluation as the baseline of a CIFAR-100-C one: both real, 10,000 images a condition, so mCE
    and relative mCE were reported against the other data set's errors."""
    from dataclasses import replace

    from alternet.runs.results import CorruptedImages

    path = tmp_path / "c10" / "metrics.json"
    rows = list(BASELINE.rows)
    images = CorruptedImages(layout="cifar-c", benchmark="cifar10-c", images_per_condition=10000)
    record = replace(robustness_record(rows, robustness_summary(rows)), images=images)
    update_metrics_json(path, {"model": "resnet", "data": "cifar10", "robustness": record.to_json()})
    baseline = load_baseline(path)
    baseline.check_same_benchmark("cifar10", images)  # the same: no word
    with pytest.raises(RobustnessError, match=r"scored with data cifar10, this evaluation with data cifar100: mCE"):
        baseline.check_same_benchmark("cifar100", replace(images, benchmark="cifar100-c"))
    with pytest.raises(RobustnessError, match=r"scored with preprocess center_crop, this evaluation with preprocess"):
        replace(baseline, images=replace(images, preprocess="center_crop")).check_same_benchmark(
            "cifar10", replace(images, preprocess="resize_center_crop")
        )


def test_load_baseline_explains_what_is_missing(tmp_path):
    with pytest.raises(RobustnessError, match="not found"):
        load_baseline(tmp_path / "absent.json")
    path = update_metrics_json(tmp_path / "metrics.json", {"test": {"acc": 0.9}})
    with pytest.raises(RobustnessError, match="no 'robustness' section"):
        load_baseline(path)
    path.write_text("[1, 2]")
    with pytest.raises(AlternetError, match=r"metrics.json should hold a JSON object, found list"):
        update_metrics_json(path, {"test": {"acc": 0.9}})


def test_csv_writers(tmp_path):
    long_path = write_table_csv(list(reversed(MODEL)), tmp_path / "csv" / "robustness.csv")
    with long_path.open() as handle:
        lines = list(csv.DictReader(handle))
    assert [(line["corruption"], line["severity"]) for line in lines] == [
        ("gaussian_noise", "1"), ("gaussian_noise", "2"), ("fog", "1"), ("fog", "2"),
    ]  # fmt: skip
    assert lines[0]["family"] == "noise" and float(lines[0]["error"]) == pytest.approx(0.2)
    assert set(lines[0]) == {"corruption", "severity", "family", "source", "n", "acc", "error", "nll", "ece"}
    with write_accuracy_csv(MODEL, tmp_path / "acc.csv").open() as handle:
        wide = list(csv.reader(handle))
    assert wide[0] == ["corruption", "family", "severity_1", "severity_2", "mean"]
    assert [float(v) for v in wide[1][2:]] == pytest.approx([0.8, 0.6, 0.7])
    assert wide[-1][0] == "mean" and [float(v) for v in wide[-1][2:]] == pytest.approx([0.85, 0.65, 0.75])


def test_accuracy_grid_orders_corruptions_by_family():
    corruptions, severities, grid = accuracy_grid(list(reversed(full_table())))
    assert corruptions == list(CORRUPTIONS) and severities == list(SEVERITIES) and grid.shape == (15, 5)


@pytest.mark.parametrize("clean_acc", [None, 0.95])
def test_corruption_heatmap_writes_a_png(tmp_path, clean_acc):
    path = corruption_heatmap(full_table("generated"), tmp_path / "plots" / "heatmap.png", clean_acc=clean_acc)
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 10_000


def test_clean_accuracy_must_be_a_fraction():
    with pytest.raises(RobustnessError, match="percentage"):
        robustness_summary(MODEL, clean_acc=95.0)
