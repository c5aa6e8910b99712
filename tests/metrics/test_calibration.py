"""Calibration metrics against hand-computed values, torch and torchmetrics; temperature scaling; the diagram."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassCalibrationError

from alternet.evaluation.plots import reliability_diagram
from alternet.metrics import BinnedCalibrationError, TopKAccuracy
from alternet.metrics.calibration import (
    PROB_FLOOR,
    apply_temperature,
    bin_index,
    brier_score,
    calibration_metrics,
    fit_temperature,
    nll,
    nll_from_logits,
    reliability_bins,
    softmax,
    top_k_accuracy,
)
from alternet.metrics.uncertainty import adaptive_ece, classwise_ece

# Five samples, three classes. Confidence, prediction and bin (10 bins, (lo, hi], first includes 0):
#   s0 [0.50, 0.30, 0.20] y=0  conf 0.50  correct  bin 4 (0.4, 0.5]
#   s1 [1.00, 0.00, 0.00] y=0  conf 1.00  correct  bin 9 (0.9, 1.0]   <- exactly 1.0 goes in the last bin
#   s2 [0.10, 0.60, 0.30] y=2  conf 0.60  wrong    bin 5 (0.5, 0.6]
#   s3 [0.05, 0.05, 0.90] y=2  conf 0.90  correct  bin 8 (0.8, 0.9]   <- on an edge: the lower bin, not "> 0.9"
#   s4 [0.01, 0.96, 0.03] y=0  conf 0.96  wrong    bin 9
# Bins 0-3, 6 and 7 are empty.
PROBS = np.array(
    [
        [0.50, 0.30, 0.20],
        [1.00, 0.00, 0.00],
        [0.10, 0.60, 0.30],
        [0.05, 0.05, 0.90],
        [0.01, 0.96, 0.03],
    ]
)
LABELS = np.array([0, 0, 2, 2, 0])

# acc   = 3/5 = 0.6; top-3 (K = 3 < 5) = 1.0
# nll   = -(log .5 + log 1 + log .3 + log .9 + log .01) / 5 = (0.693147 + 0 + 1.203973 + 0.105361 + 4.605170) / 5
# brier = (0.38 + 0 + 0.86 + 0.015 + 1.9026) / 5 = 0.63152
#         e.g. s0: (0.5 - 1)^2 + 0.3^2 + 0.2^2 = 0.38; s4: (0.01 - 1)^2 + 0.96^2 + 0.03^2 = 1.9026
# ece   = (1 * |1 - .5| + 1 * |0 - .6| + 1 * |1 - .9| + 2 * |.5 - .98|) / 5 = (.5 + .6 + .1 + .96) / 5 = 0.432
# acc90 = correct among {s1, s4} (conf > 0.9) = 1/2; unc90 = errors {s2, s4} with conf <= 0.9 = {s2} -> 1/2
# freq90 = 2/5
EXPECTED = {
    "acc": 0.6,
    "top5": 1.0,
    "nll": (math.log(2) - math.log(0.3) - math.log(0.9) - math.log(0.01)) / 5,
    "ece": 0.432,
    "brier": 0.63152,
    "acc90": 0.5,
    "unc90": 0.5,
    "freq90": 0.4,
}


def random_predictions(n: int = 2000, k: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    probs = softmax(2.0 * rng.normal(size=(n, k)))  # confidences spread over (0.2, 1); no probability near the floor
    labels = np.where(rng.random(n) < 0.6, probs.argmax(axis=1), rng.integers(0, k, n))
    return probs, labels


def calibrated_logits(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Logits whose softmax is the true label distribution (temperature 1 is optimal)."""
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.normal(size=(n, k))
    cumulative = softmax(logits).cumsum(axis=1)
    labels = np.minimum((cumulative < rng.random((n, 1))).sum(axis=1), k - 1)
    return logits, labels


def test_metrics_match_the_hand_computed_example():
    metrics = calibration_metrics(PROBS, LABELS)
    assert metrics.keys() == EXPECTED.keys()
    for key, value in EXPECTED.items():
        assert metrics[key] == pytest.approx(value, abs=1e-12), key


def test_reliability_bins_of_the_hand_example():
    bins = reliability_bins(PROBS, LABELS, n_bins=10)
    np.testing.assert_array_equal(bins.edges, np.arange(11) / 10)
    np.testing.assert_array_equal(bins.counts, [0, 0, 0, 0, 1, 1, 0, 0, 1, 2])
    filled = bins.counts > 0
    np.testing.assert_allclose(bins.accuracy[filled], [1.0, 0.0, 1.0, 0.5])
    np.testing.assert_allclose(bins.confidence[filled], [0.5, 0.6, 0.9, 0.98])
    assert np.isnan(bins.accuracy[~filled]).all() and np.isnan(bins.confidence[~filled]).all()
    assert bins.ece == pytest.approx(0.432)
    assert bins.ece == calibration_metrics(PROBS, LABELS)["ece"]
    assert bins.overall_accuracy == pytest.approx(0.6)
    assert bins.n == 5 and bins.share.sum() == pytest.approx(1.0)


def test_bin_edges_are_lower_open_except_the_first():
    edges = np.arange(11) / 10
    confidence = np.array([0.0, 0.1, np.nextafter(0.1, 1), 0.5, 0.9, np.nextafter(0.9, 1), 1.0])
    np.testing.assert_array_equal(bin_index(confidence, edges), [0, 0, 1, 4, 8, 9, 9])


def test_ece_of_a_perfectly_confident_correct_model_is_zero():
    probs = np.eye(4)[[0, 1, 2, 3, 1]]
    bins = reliability_bins(probs, np.array([0, 1, 2, 3, 1]))
    assert bins.counts[-1] == 5 and bins.ece == 0.0


def test_cutoff_metrics_are_nan_when_undefined():
    # No prediction above 0.9 -> acc90 undefined; no error -> unc90 undefined.
    probs = np.array([[0.6, 0.4], [0.3, 0.7]])
    metrics = calibration_metrics(probs, np.array([0, 1]))
    assert math.isnan(metrics["acc90"]) and math.isnan(metrics["unc90"])
    assert metrics["freq90"] == 0.0 and metrics["acc"] == 1.0


def test_nll_clips_zero_probability_to_the_floor():
    probs = np.array([[1.0, 0.0], [0.5, 0.5]])
    # -(log PROB_FLOOR + log 0.5) / 2
    assert nll(probs, np.array([1, 0])) == pytest.approx((-math.log(PROB_FLOOR) + math.log(2)) / 2)


def test_nll_equals_torch_cross_entropy_on_log_probabilities():
    probs, labels = random_predictions()
    expected = F.cross_entropy(torch.from_numpy(np.log(probs)), torch.from_numpy(labels))
    assert nll(probs, labels) == pytest.approx(expected.item(), rel=1e-10)


def test_brier_is_the_per_sample_squared_distance_to_the_one_hot_label():
    probs, labels = random_predictions()
    expected = np.mean(np.sum((probs - np.eye(probs.shape[1])[labels]) ** 2, axis=1))
    assert brier_score(probs, labels) == pytest.approx(expected, rel=1e-12)


def test_top_k_counts_a_tied_label_at_its_expectation_and_caps_k_at_the_class_count():
    probs = np.array([[0.4, 0.4, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]])
    labels = np.array([1, 0, 3])
    # s0: label tied with one class for first: top-1 half the time, top-2 always; s1: three classes above;
    # s2: one class above and the label tied with two: top-2 a third of the time, top-4 always.
    assert top_k_accuracy(probs, labels, 1) == pytest.approx((1 / 2 + 0 + 0) / 3)
    assert top_k_accuracy(probs, labels, 2) == pytest.approx((1 + 0 + 1 / 3) / 3)
    assert top_k_accuracy(probs, labels, 5) == 1.0  # k capped at K = 4


def test_training_counts_top_k_ties_as_the_evaluation_does_batch_by_batch():
    """Training's test/top5 ranked with torch's topk, which breaks a tie by position: bf16 logits tie often, and a
    run's test/top5 differed from its evaluation's by an image (0.5139 against 0.5167 of 360)."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randint(0, 4, (300, 10), generator=generator).float()  # coarse scores: ties everywhere
    labels = torch.randint(0, 10, (300,), generator=generator)
    probs = logits.softmax(dim=1)
    for k in (1, 5, 12):
        metric = TopKAccuracy(k)
        for start in range(0, 300, 64):
            metric.update(probs[start : start + 64], labels[start : start + 64])
        expected = top_k_accuracy(probs.double().numpy(), labels.numpy(), k)
        assert metric.compute().item() == pytest.approx(expected, abs=1e-6), k
    diverged = TopKAccuracy(5)  # a NaN score ties with nothing: it counted as a hit, top-5 1.0
    diverged.update(torch.full((2, 10), float("nan")), torch.tensor([0, 1]))
    assert math.isnan(diverged.compute().item())
    hand = TopKAccuracy(2)
    hand.update(
        torch.tensor([[0.4, 0.4, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]]), torch.tensor([1, 0, 3])
    )
    assert hand.compute().item() == pytest.approx((1 + 0 + 1 / 3) / 3)


def test_top_k_of_a_model_that_scores_every_class_alike_is_chance_not_one():
    """An untrained timm ViT's zero-initialised head scores every class alike: its top-5 is 5/K, as a random pick of
    5 classes would give (counting ties in the label's favour gave 1.0 beside a top-1 of 1/K)."""
    labels = np.arange(100) % 100
    assert top_k_accuracy(np.full((100, 100), 0.01), labels, 5) == pytest.approx(0.05)
    metrics = calibration_metrics(np.full((100, 100), 0.01), labels, logits=np.zeros((100, 100)))
    assert metrics["top5"] == pytest.approx(0.05) and metrics["acc"] == pytest.approx(0.01)


def test_top_k_ranks_by_the_logits_where_softmax_underflows_into_ties():
    logits = np.array([[0.0, -800.0, -900.0]])  # probabilities [1, 0, 0]: classes 1 and 2 tie at 0
    probs, label = softmax(logits), np.array([2])
    assert top_k_accuracy(probs, label, 2) == pytest.approx(0.5)  # the tie, at its expectation
    assert top_k_accuracy(probs, label, 2, logits) == 0.0  # the label is third


def test_training_ranks_top_5_by_the_logits_as_the_evaluation_does():
    """Training fed its top-5 float32 probabilities: the classes softmax underflowed to 0 tied, and a label in second
    place 200 logits below the first counted 4/9 where evaluate.py counted 1."""
    from alternet.training.module import evaluation_metrics, update_metrics

    logits, labels = torch.tensor([[200.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0, -8.0]]), torch.tensor([1])
    metrics = evaluation_metrics(10)
    update_metrics(metrics, logits, labels)
    expected = calibration_metrics(softmax(logits.double().numpy()), labels.numpy(), logits=logits.double().numpy())
    computed = {name: value.item() for name, value in metrics.compute().items()}
    assert computed == pytest.approx({key: expected[key] for key in computed}) and computed["top5"] == 1.0


def test_the_streaming_top_k_refuses_labels_outside_the_classes_in_one_line():
    metric = TopKAccuracy(5)
    metric.update(torch.zeros(3, 10), torch.tensor([0, 10, -1]))  # counted on the device, no bare gather error
    with pytest.raises(ValueError, match=r"2 labels were outside the classes \[0, K-1\]"):
        metric.compute()


def test_the_streaming_metrics_refuse_a_batch_of_the_wrong_shape_float_labels_and_bad_counts_in_one_line():
    """Float labels were truncated to a class (3.7 counted as 3), a mismatched batch failed inside torch, and
    BinnedCalibrationError(2.5) in torch.zeros."""
    probs = torch.full((4, 5), 0.2)
    for metric in (TopKAccuracy(1), BinnedCalibrationError()):
        with pytest.raises(ValueError, match=r"must have shape \(N, K\) and labels \(N,\), got \(4, 5\) and \(3,\)"):
            metric.update(probs, torch.tensor([0, 1, 2]))
        with pytest.raises(ValueError, match=r"got \(5,\) and \(4,\)"):
            metric.update(probs[0], torch.tensor([0, 1, 2, 3]))
        with pytest.raises(ValueError, match=r"^labels must be integer class indices, got dtype torch.float32"):
            metric.update(probs, torch.tensor([0.7, 1.0, 2.0, 3.7]))
    for make, bad in ((BinnedCalibrationError, 2.5), (TopKAccuracy, 0), (TopKAccuracy, 2.5)):
        with pytest.raises(ValueError, match=r"must be an integer >= 1, got"):
            make(bad)


def test_ece_agrees_with_torchmetrics_on_probabilities():
    probs, labels = random_predictions(n=3000, k=10, seed=1)
    metric = MulticlassCalibrationError(num_classes=10, n_bins=10, norm="l1")
    expected = metric(torch.from_numpy(probs), torch.from_numpy(labels)).item()
    assert calibration_metrics(probs, labels)["ece"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("probs", "labels", "message"),
    [
        (np.full((3, 2), 0.5), np.array([0, 1]), "shape"),
        (np.full((2, 2), 0.5), np.array([0, 2]), r"\[0, 1\]"),
        (np.full((2, 2), 0.5), np.array([0.0, 1.0]), "integer"),
        (np.array([[2.0, -1.0], [0.3, 0.1]]), np.array([0, 1]), "softmax"),
        (np.array([[0.5, np.nan], [0.5, 0.5]]), np.array([0, 1]), "NaN"),
        (np.full(4, 0.25), np.array([0]), "shape"),
    ],
)
def test_bad_inputs_are_rejected_with_a_clear_message(probs, labels, message):
    with pytest.raises(ValueError, match=message):
        calibration_metrics(probs, labels)


@pytest.mark.parametrize("temperature", [0.5, 2.5])
def test_temperature_scaling_recovers_a_known_temperature(temperature):
    logits, labels = calibrated_logits(n=20000, k=10, seed=2)
    fitted = fit_temperature(logits * temperature, labels)
    assert fitted == pytest.approx(temperature, rel=0.05)
    assert fit_temperature(logits * temperature, labels) == fitted  # deterministic


@pytest.mark.parametrize("seed", range(4))
def test_temperature_scaling_never_increases_validation_nll(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=rng.uniform(0.5, 5), size=(500, 7))
    labels = rng.integers(0, 7, 500)  # labels unrelated to the logits: the best fit is a very high temperature
    temperature = fit_temperature(logits, labels)
    assert nll(apply_temperature(logits, temperature), labels) <= nll(softmax(logits), labels) + 1e-12


def test_temperature_stays_within_its_bounds():
    logits = np.array([[5.0, 0.0], [0.0, 5.0]])
    assert fit_temperature(logits, np.array([0, 1]), bounds=(0.1, 10.0)) == pytest.approx(0.1)
    assert fit_temperature(logits, np.array([1, 0]), bounds=(0.1, 10.0)) == pytest.approx(10.0)


def test_apply_temperature_and_softmax():
    logits = np.array([[1000.0, 0.0, -1000.0], [1.0, 2.0, 3.0]])
    np.testing.assert_allclose(softmax(logits), torch.softmax(torch.from_numpy(logits), dim=1).numpy())
    np.testing.assert_allclose(apply_temperature(logits, 2.0), softmax(logits / 2))
    with pytest.raises(ValueError, match="positive"):
        apply_temperature(logits, 0.0)


def test_reliability_diagram_writes_a_png(tmp_path):
    path = reliability_diagram(reliability_bins(PROBS, LABELS), tmp_path / "nested" / "reliability.png", title="t")
    assert path == tmp_path / "nested" / "reliability.png"
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 10_000


def test_nll_from_logits_is_exact_where_probabilities_would_floor_it():
    """A confidently wrong prediction costs its full log-loss: 40 nats here, not the 27.6 a floor of 1e-12 allows."""
    logits = np.array([[0.0, 40.0], [3.0, 0.0]])
    labels = np.array([0, 0])
    exact = (np.logaddexp(0.0, 40.0) + np.logaddexp(3.0, 0.0) - 3.0) / 2
    probs = softmax(logits)
    assert calibration_metrics(probs, labels, logits=logits)["nll"] == pytest.approx(exact, rel=1e-12)
    assert calibration_metrics(probs, labels)["nll"] < exact - 6  # the floored estimate under-reports
    torch_nll = F.cross_entropy(torch.tensor(logits), torch.tensor(labels)).item()
    assert nll_from_logits(logits, labels) == pytest.approx(torch_nll, rel=1e-12)  # as the training loss


def test_labels_of_the_logit_nll_are_checked():
    logits = np.array([[3.0, 1.0, 0.0]])
    for labels, message in (([-1], r"\[0, 2\]"), ([5], r"\[0, 2\]"), ([1.7], "integer")):
        with pytest.raises(ValueError, match=message):
            nll_from_logits(logits, np.array(labels))


def test_logits_beside_probabilities_must_be_theirs():
    """Temperature-scaled probabilities beside the raw logits paired their ECE with the raw model's NLL (5.00 where
    theirs is 3.16), and top-k ranked by logits of another class count, in silence."""
    probs, labels = np.array([[0.2, 0.8]]), np.array([1])
    for logits in (np.array([[0.0, 5.0], [1.0, 2.0]]), np.array([[0.0, 5.0, 9.0]])):
        with pytest.raises(ValueError, match="logits must have the shape of probs"):
            calibration_metrics(probs, labels, logits=logits)
        with pytest.raises(ValueError, match="logits must have the shape of probs"):
            top_k_accuracy(probs, labels, 1, logits)
    logits = 4 * np.random.default_rng(0).standard_normal((500, 10))
    labels = np.arange(500) % 10
    scaled = apply_temperature(logits, 2.0)
    with pytest.raises(ValueError, match=r"softmax\(logits\) differs from probs by up to 0\.\d+ \(more than 0\.001\)"):
        calibration_metrics(scaled, labels, logits=logits)
    assert calibration_metrics(scaled, labels, logits=logits / 2.0)["nll"] == pytest.approx(
        calibration_metrics(scaled, labels)["nll"], rel=1e-9
    )
    saved = softmax(logits).astype(np.float32)  # as predictions.npz keeps them: recomputed beside their logits
    assert calibration_metrics(saved, labels, logits=logits)["nll"] == nll_from_logits(logits, labels)
    bf16 = torch.softmax(torch.tensor(logits), dim=1).to(torch.bfloat16)  # within the precision of its dtype
    assert calibration_metrics(bf16, labels, logits=logits)["nll"] == nll_from_logits(logits, labels)


def test_probabilities_given_where_logits_are_expected_are_refused_in_one_line():
    """Their softmax is valid arithmetic: nll_from_logits(probs) gave 2.33 where the NLL is 5.00, ood_scores an MSP of
    0.165 where it is 0.619, in silence."""
    from alternet.metrics.uncertainty import ood_scores

    logits = 4 * np.random.default_rng(0).standard_normal((50, 10))
    labels = np.arange(50) % 10
    probs = softmax(logits)
    for call in (lambda: nll_from_logits(probs, labels), lambda: ood_scores(probs), lambda: softmax(probs)):
        with pytest.raises(
            ValueError, match=r"^logits look like probabilities \(every row in \[0, 1\], summing to 1\)"
        ):
            call()
    assert nll_from_logits(np.log(probs), labels) == pytest.approx(nll_from_logits(logits, labels), rel=1e-12)


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "5"])
def test_a_top_k_that_is_no_positive_integer_is_refused(k):
    """k=0 and k=-1 gave 0.0 and k=2.5 a share between top-2 and top-3, in silence."""
    with pytest.raises(ValueError, match=rf"k must be an integer >= 1, got {re.escape(repr(k))}"):
        top_k_accuracy(np.array([[0.2, 0.8]]), np.array([1]), k)


def test_tensors_of_any_dtype_with_or_without_their_graph_are_read():
    logits = torch.randn(64, 5, generator=torch.Generator().manual_seed(0), requires_grad=True)
    labels = torch.randint(0, 5, (64,), generator=torch.Generator().manual_seed(1))
    expected = calibration_metrics(softmax(logits.detach().numpy()), labels.numpy())
    found = calibration_metrics(logits.softmax(dim=1), labels)  # a tensor that requires grad
    assert found == pytest.approx(expected, rel=1e-5, nan_ok=True)  # float32 probabilities against float64 ones
    half = calibration_metrics(logits.bfloat16().softmax(dim=1), labels)  # rows sum to 1 within bf16's precision
    assert half["acc"] == pytest.approx(expected["acc"], abs=2 / 64)  # bf16 rounding may flip a near tie
    assert half["ece"] == pytest.approx(expected["ece"], abs=0.03)
    assert fit_temperature(logits.bfloat16(), labels) == pytest.approx(
        fit_temperature(logits.detach(), labels), rel=0.05
    )
    with pytest.raises(ValueError, match="softmax"):  # logits are still no probabilities, in any dtype
        calibration_metrics(logits.bfloat16(), labels)


@pytest.mark.parametrize("n_bins", [0, 2.5, True])
def test_a_bin_count_that_is_no_positive_integer_is_refused(n_bins):
    probs, labels = random_predictions(n=20, k=3, seed=0)
    for metric in (reliability_bins, adaptive_ece, classwise_ece):
        with pytest.raises(ValueError, match="n_bins must be an integer >= 1"):
            metric(probs, labels, n_bins)


def test_the_streaming_ece_refuses_logits_and_foreign_labels_and_is_nan_for_a_diverged_model():
    probs, labels = random_predictions(n=200, k=5, seed=2)
    probs, labels = torch.from_numpy(probs), torch.from_numpy(labels)
    metric = BinnedCalibrationError()
    metric.update(probs, labels)
    assert metric.compute().item() == pytest.approx(reliability_bins(probs.numpy(), labels.numpy()).ece)
    for bad in ((probs.log(), labels), (probs, labels + 1)):
        metric = BinnedCalibrationError()
        metric.update(*bad)
        with pytest.raises(ValueError, match="no probabilities"):
            metric.compute()
    metric = BinnedCalibrationError()
    metric.update(probs.bfloat16(), labels)  # a bf16 softmax: within its precision, renormalised as offline
    assert metric.compute().item() == pytest.approx(
        reliability_bins(probs.bfloat16(), labels.numpy()).ece, abs=1e-6
    )  # float32
    diverged = probs.clone()
    diverged[3] = float("nan")
    metric = BinnedCalibrationError()
    metric.update(diverged, labels)
    assert math.isnan(metric.compute().item())
