"""The report's verdicts are statistics: intervals that match scipy's own tests, Holm's step-down, TOST, the
test set's own noise, the minimum detectable effect, the budget gate (a schedule completed, a ranking that holds at
twice the epochs) and verdicts that keep their error rate on tables of known truth."""

from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from alternet.report.statistics import PAIRED, POOLED, WELCH, Pooled, bootstrap_variance, difference, holm, with_holm
from alternet.report.verdicts import (
    AT_THIS_BUDGET,
    EQUIVALENT,
    HELPS_OPTIMISATION,
    HURTS,
    INCONCLUSIVE,
    INSUFFICIENT,
    REGULARISES,
    Rule,
    budget_reason,
    verdict,
)

from helpers.results import robustness_result

SEEDS = ("0", "1", "2")


def by_seed(values, seeds=SEEDS):
    return dict(zip(seeds, values))


def test_a_seed_paired_difference_is_scipys_paired_t_test():
    a, b = [0.30, 0.32, 0.35], [0.33, 0.36, 0.37]
    d = difference(by_seed(a), by_seed(b))
    assert d.method == PAIRED and d.n == (3, 3) and d.df == 2
    assert d.delta == pytest.approx(np.mean(a) - np.mean(b))
    assert d.p == pytest.approx(stats.ttest_rel(a, b).pvalue)
    low, high = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (d.low, d.high) == (pytest.approx(low), pytest.approx(high))


def test_different_seeds_give_welchs_interval():
    a, b = [0.30, 0.32, 0.35, 0.31], [0.33, 0.36, 0.37]
    d = difference(by_seed(a, "0123"), by_seed(b, "456"))
    welch = stats.ttest_ind(a, b, equal_var=False)
    assert d.method == WELCH and d.p == pytest.approx(welch.pvalue)
    assert (d.low, d.high) == tuple(pytest.approx(x) for x in welch.confidence_interval(0.95))
    assert difference(by_seed(a[:3]), by_seed(b), paired=False).method == WELCH


def test_a_pooled_variance_uses_the_whole_sweeps_degrees_of_freedom():
    groups = [[0.30, 0.32, 0.35], [0.33, 0.36, 0.37], [0.40, 0.41, 0.45]]
    pooled = Pooled.of(groups)
    assert pooled.df == 6 and pooled.variance == pytest.approx(np.mean([np.var(g, ddof=1) for g in groups]))
    d = difference(by_seed(groups[0]), by_seed(groups[1]), pooled=pooled)
    t = (np.mean(groups[0]) - np.mean(groups[1])) / np.sqrt(pooled.variance * 2 / 3)
    assert d.method == POOLED and d.p == pytest.approx(2 * stats.t.sf(abs(t), 6))


def test_one_seed_has_no_interval_and_no_verdict():
    assert difference(by_seed([0.3], "0"), by_seed([0.4], "1")) is None
    assert verdict(None, None, budget=None).startswith(INSUFFICIENT)


def test_seeds_that_agree_leave_the_test_sets_term_with_its_normal_quantile():
    """Identical seed differences (no spread) with the test set's variance beside them: the standard error is that
    term alone, known, so the interval is normal; it kept the seeds' 2 degrees of freedom, 2.2x too wide."""
    found = difference({"0": 0.11, "1": 0.11, "2": 0.11}, {"0": 0.1, "1": 0.1, "2": 0.1}, extra_variance=1e-5)
    assert found.df == float("inf")
    assert found.high - found.low == pytest.approx(2 * stats.norm.ppf(0.975) * 1e-5**0.5)


def test_holm_steps_down():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5] and holm([0.4, 0.9]) == [0.8, 0.9]
    corrected = with_holm([None, difference(by_seed([1, 2, 3]), by_seed([2, 3, 5]))])
    assert corrected[0] is None and corrected[1].p_holm == corrected[1].p


def _arm(rng, mean, sd, n=3):
    return by_seed(rng.normal(mean, sd, n), [str(i) for i in range(n)])


def _sweep_verdicts(rng, error_shift, nll_shift, n=3, variants=4, budget=None, rule=None):
    """Verdicts of ``variants`` variants against one baseline, each variant shifted by the given amounts."""
    base_error, base_nll = _arm(rng, 0.35, 0.003, n), _arm(rng, 1.2, 0.01, n)
    errors = with_holm([difference(_arm(rng, 0.35 + error_shift, 0.003, n), base_error) for _ in range(variants)])
    nlls = with_holm([difference(_arm(rng, 1.2 + nll_shift, 0.01, n), base_nll) for _ in range(variants)])
    return [verdict(error, nll, budget, rule or Rule()) for error, nll in zip(errors, nlls)]


CLAIMS = (HELPS_OPTIMISATION, REGULARISES, HURTS)


def test_a_null_table_yields_claims_at_no_more_than_the_nominal_family_rate():
    """Four variants equal to the baseline, 3 seeds each: the chance of any claim in a sweep stays at or under
    alpha = 5% (Holm). The old rule (|delta| > sqrt(sd_a^2 + sd_b^2)) made one in ~75% of such sweeps."""
    rng = np.random.default_rng(0)
    draws = 2000
    sweeps_with_a_claim = sum(any(v.startswith(CLAIMS) for v in _sweep_verdicts(rng, 0.0, 0.0)) for _ in range(draws))
    assert sweeps_with_a_claim / draws < 0.065  # 5% nominal; 2000 draws have a standard error of 0.5%


def test_a_large_effect_is_found_at_three_seeds():
    rng = np.random.default_rng(1)
    found = [_sweep_verdicts(rng, -0.02, -0.1, variants=1)[0] for _ in range(200)]
    assert found.count(HELPS_OPTIMISATION) / len(found) > 0.9
    regularising = [_sweep_verdicts(rng, -0.02, +0.1, variants=1)[0] for _ in range(200)]
    assert regularising.count(REGULARISES) / len(regularising) > 0.9
    assert _sweep_verdicts(rng, +0.02, 0.0, variants=1) == [HURTS]


def test_a_schedule_not_completed_reads_at_this_budget():
    rng = np.random.default_rng(2)
    reason = budget_reason(completed=False, ranking_holds_at_twice=None)
    (judged,) = _sweep_verdicts(rng, -0.02, -0.1, variants=1, budget=reason)
    assert judged == f"{HELPS_OPTIMISATION} {AT_THIS_BUDGET} (a run did not complete its schedule)"
    assert budget_reason(True, False) == "the ranking changes at twice the epochs"
    assert budget_reason(True, True).startswith("shorter than the paper's 305 epochs")  # two short budgets: still short
    assert budget_reason(True, True, paper_schedule=True) is None and budget_reason(True, None, True) is None
    # no arm at twice the epochs: a ranking at one budget is never the paper's claim (the gate could not fire)
    assert budget_reason(True, None) == "no arm at twice the epochs tests the ranking"


def test_every_claim_without_an_arm_at_twice_the_epochs_reads_at_this_budget():
    """No preset sweeps the epochs, so a verdict must never print as the paper's claim: hurts and equivalent carry
    the budget as helps optimisation and regularises do; inconclusive and insufficient seeds claim nothing."""
    rng = np.random.default_rng(4)
    reason = budget_reason(True, None)
    suffix = f" {AT_THIS_BUDGET} (no arm at twice the epochs tests the ranking)"
    assert _sweep_verdicts(rng, +0.02, 0.0, variants=1, budget=reason) == [HURTS + suffix]
    assert _sweep_verdicts(rng, -0.02, -0.1, variants=1, budget=reason) == [HELPS_OPTIMISATION + suffix]
    assert _sweep_verdicts(rng, -0.02, +0.1, variants=1, budget=reason) == [REGULARISES + suffix]
    tight = difference(by_seed([0.350, 0.351, 0.349]), by_seed([0.351, 0.350, 0.350]))
    tight_nll = difference(by_seed([1.200, 1.201, 1.199]), by_seed([1.201, 1.200, 1.201]))
    assert verdict(tight, tight_nll, budget=reason) == EQUIVALENT + suffix
    loose = difference(by_seed([0.34, 0.36, 0.35]), by_seed([0.35, 0.35, 0.36]))
    assert verdict(loose, tight_nll, budget=reason) == INCONCLUSIVE
    assert verdict(None, None, budget=reason) == f"{INSUFFICIENT} (1; 3 needed)"


def test_a_training_nll_of_too_few_seeds_decides_nothing():
    """The NLL's seed count is checked as the error's is: runs without train_clean leave the NLL fewer seeds."""
    lower = difference(by_seed([0.30, 0.31, 0.30, 0.31]), by_seed([0.40, 0.41, 0.40, 0.41]))
    two = difference(by_seed([1.0, 1.01], seeds=[0, 1]), by_seed([1.3, 1.31], seeds=[0, 1]))
    assert verdict(lower, two) == f"{INCONCLUSIVE} (lower error; clean training NLL of 2 seeds, 3 needed)"


def test_equivalence_needs_a_tight_interval_inside_the_margins():
    tight = difference(by_seed([0.350, 0.351, 0.349]), by_seed([0.351, 0.350, 0.350]))
    tight_nll = difference(by_seed([1.200, 1.201, 1.199]), by_seed([1.201, 1.200, 1.201]))
    assert verdict(tight, tight_nll, budget=None) == EQUIVALENT
    loose = difference(by_seed([0.34, 0.36, 0.35]), by_seed([0.35, 0.35, 0.36]))
    assert verdict(loose, tight_nll, budget=None) == INCONCLUSIVE  # no difference shown, none excluded either
    assert verdict(tight, tight_nll, budget=None, rule=Rule(error_margin=0.0005)) == INCONCLUSIVE


def test_two_seeds_are_insufficient_whatever_the_difference():
    d = difference(by_seed([0.20, 0.21], "01"), by_seed([0.40, 0.41], "01"))
    assert verdict(d, d, budget=None) == f"{INSUFFICIENT} (2; 3 needed)"


def test_the_minimum_detectable_effect_is_the_closed_form_power_computation():
    """With a known spread (df infinite) the MDE at 80% power and alpha 0.05 is (z[0.975] + z[0.8]) se = 2.8016 se;
    with 2-6 degrees of freedom, a true difference of that size is found (noncentral t) with power ~0.8."""
    exact = difference(by_seed([0.30, 0.32, 0.35]), by_seed([0.33, 0.36, 0.37]))
    known = type(exact)(0.01, 0.004, float("inf"), 0.5, 0, 0, (3, 3), "paired")
    assert known.detectable(0.05, 0.8) == pytest.approx((stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.004)
    for df in (2, 4, 6):
        d = type(exact)(0.01, 0.004, df, 0.5, 0, 0, (3, 3), "paired")
        mde, critical = d.detectable(0.05, 0.8), stats.t.ppf(0.975, df)
        power = stats.nct.sf(critical, df, mde / d.se) + stats.nct.cdf(-critical, df, mde / d.se)
        assert 0.75 < power < 0.85, (df, power)
    assert exact.detectable(0.05, 0.9) > exact.detectable(0.05, 0.8) > exact.detectable(0.1, 0.8)


def test_the_test_sets_own_noise_is_a_paired_bootstrap():
    rng = np.random.default_rng(3)
    same = rng.random(5000) < 0.6
    assert bootstrap_variance([same], [same]) == 0.0  # the same predictions: the test set cannot move the difference
    a, b = rng.random(5000) < 0.6, rng.random(5000) < 0.6
    expected = (np.var(a.astype(float) - b.astype(float))) / 5000  # variance of a mean of per-image differences
    assert bootstrap_variance([a], [b], draws=2000) == pytest.approx(expected, rel=0.15)
    with pytest.raises(ValueError, match="different test sets"):
        bootstrap_variance([a], [b[:100]])


# the budget gate inside the report, on synthetic runs -------------------------------------------------------------


def _cosine_nll(epochs: int, end: float = 1.2) -> list[float]:
    """A clean training NLL under a cosine-to-zero schedule: a noise floor that shrinks with the learning rate and
    a slower fit, so it still falls fast in the last epochs, as real runs do (9-13% over their last quarter)."""
    lr = [(1 + np.cos(np.pi * e / epochs)) / 2 for e in range(1, epochs + 1)]
    return [end + 0.6 * rate + 0.8 * (1 - e / epochs) ** 2 for e, rate in zip(range(1, epochs + 1), lr)]


def _runs(model: str, error: float, nll: float, done: int, schedule: int, swept_epochs: bool = False):

    from alternet.report.runs import Run
    from alternet.runs.directories import RunDir
    from alternet.runs.summary import RunSummary

    runs = []
    jitters = (-0.001, 0.0, 0.001) if model == "twin" else (0.0005, -0.001, 0.0)  # seeds scatter, not alike
    for seed, jitter in zip(SEEDS, jitters):
        overrides = {"model": model, "seed": seed} | ({"recipe.epochs": str(schedule)} if swept_epochs else {})
        summary = RunSummary(
            model=model,
            data="cifar100",
            test={"acc": 1 - error - jitter, "nll": 1.5},
            train_clean={"nll": nll + jitter},
            epochs=done,
        )
        curve = [*_cosine_nll(done)[:-1], nll + jitter]
        runs.append(Run(RunDir(f"{model}-{schedule}-{seed}"), overrides, summary, {"train_clean/nll": curve}, schedule))
    return runs


def _verdicts(runs, baseline: str) -> dict[str, str]:
    from alternet.report.build import Statistics, group_variants, pick_baseline, variant_rows
    from alternet.report.runs import swept_keys

    variants = group_variants(runs, swept_keys([run.overrides for run in runs]))
    rows = variant_rows(variants, pick_baseline(variants, baseline), Statistics(bootstrap=0))
    return {row["variant"]: row["verdict"] for row in rows}


def test_a_completed_cosine_schedule_passes_the_gate_that_a_plateau_rule_refused():
    curve = _cosine_nll(10)
    assert (curve[-3] - curve[-1]) / curve[-1] > 0.05  # the old gate: "still falling", although the schedule ended
    completed = _runs("twin", 0.42, 1.40, 10, 10) + _runs("alternet", 0.40, 1.30, 10, 10)
    assert _verdicts(completed, "model=twin")["model=alternet"] == (
        f"{HELPS_OPTIMISATION} {AT_THIS_BUDGET} (no arm at twice the epochs tests the ranking)"
    )
    cut = _runs("twin", 0.42, 1.40, 7, 10) + _runs("alternet", 0.40, 1.30, 7, 10)  # trainer.max_epochs=7
    assert _verdicts(cut, "model=twin")["model=alternet"] == (
        f"{HELPS_OPTIMISATION} {AT_THIS_BUDGET} (a run did not complete its schedule)"
    )


def test_an_equivalence_that_could_not_read_the_training_nll_is_no_equivalence():
    """Where an earlier epoch's best was tested the training NLL is not read: an equivalent test error alone read
    as *equivalent*, which needs both."""
    error = difference({"0": 0.4, "1": 0.4001, "2": 0.3999}, {"0": 0.4, "1": 0.4, "2": 0.4})
    assert verdict(error, None) == EQUIVALENT
    assert verdict(error, None, nll_name="clean training NLL of the tested weights", nll_read=False) == (
        f"{INCONCLUSIVE} (equivalent test error; no clean training NLL of the tested weights)"
    )


def test_a_test_of_an_earlier_best_checkpoint_is_not_read_against_the_last_epochs_training_nll():
    """The verdict paired the test error of the monitor's best checkpoint (epoch 6 of 10) with the training NLL of
    the final weights: two models' numbers in one reading."""
    runs = _runs("twin", 0.42, 1.40, 10, 10) + _runs("alternet", 0.40, 1.30, 10, 10)

    def tested(epoch):
        best = {"best_checkpoint": f"best-epoch{epoch - 1:03d}.ckpt", "best_epoch": epoch}
        return [
            replace(run, metrics=replace(run.metrics, **best, tested_checkpoint=best["best_checkpoint"]))
            for run in runs
        ]

    earlier = tested(6)
    assert _verdicts(earlier, "model=twin")["model=alternet"] == (
        f"{INCONCLUSIVE} (lower error; no clean training NLL of the tested weights (an earlier epoch's best was "
        "tested) logged)"
    )
    assert _verdicts(tested(10), "model=twin")["model=alternet"].startswith(HELPS_OPTIMISATION)  # the last epoch's best


@pytest.mark.parametrize(("nll_at_twice", "expected"), [(1.25, ""), (1.45, " at this budget (the ranking changes")])
def test_where_the_sweep_doubles_the_epochs_the_ranking_must_hold_there(nll_at_twice, expected):
    runs = _runs("twin", 0.42, 1.40, 10, 10, True) + _runs("alternet", 0.40, 1.30, 10, 10, True)
    runs += _runs("twin", 0.38, 1.35, 20, 20, True) + _runs("alternet", 0.37, nll_at_twice, 20, 20, True)
    judged = _verdicts(runs, "model=twin recipe.epochs=10")["model=alternet recipe.epochs=10"]
    assert judged.startswith(HELPS_OPTIMISATION + expected), judged


def test_seeds_pair_variants_only_where_they_share_initialisation():
    """A seed fixes data order and augmentation for every variant, but initial weights only for one architecture:
    variants that differ in a model setting are compared by Welch, fixed before any run is read."""
    from alternet.report.build import Statistics, group_variants, pick_baseline, variant_rows
    from alternet.report.runs import swept_keys

    def methods(runs, baseline):
        variants = group_variants(runs, swept_keys([run.overrides for run in runs]))
        rows = variant_rows(variants, pick_baseline(variants, baseline), Statistics(bootstrap=0))
        return {row["variant"]: row["error_method"] for row in rows if row["error_method"]}

    subset = []
    for fraction, error in (("0.5", 0.40), ("0.1", 0.55)):
        for run in _runs("twin", error, 1.3, 10, 10):
            run.overrides["data.subset"] = fraction
            subset.append(run)
    assert methods(subset, "data.subset=0.5") == {"data.subset=0.1": "paired"}  # one architecture at two fractions
    models = _runs("twin", 0.42, 1.40, 10, 10) + _runs("alternet", 0.40, 1.30, 10, 10)
    assert methods(models, "model=twin") == {"model=alternet": "welch"}


def _simulated_intervals(rng, population, n_images, seeds):
    """One experiment on a fresh test set: ``seeds`` training seeds an arm, each image's correctness a coin with
    the arm's probability for it. The error difference's 95% interval from Welch's seed term plus the test set's
    term, twice: with the flips counted once, and as the bootstrap of the seed-averaged correctness gave it before
    (the flips the Welch term holds counted again)."""
    p_a, p_b = (column[rng.integers(0, len(population), n_images)] for column in population.T)
    a = rng.random((seeds, n_images)) < p_a  # correct, per seed and image
    b = rng.random((seeds, n_images)) < p_b
    errors = [dict(enumerate(1 - x.mean(axis=1))) for x in (a, b)]
    once = bootstrap_variance(list(a), list(b), draws=200, seed=int(rng.integers(1 << 31)))
    twice = once + float(np.mean(np.var(a, axis=0, ddof=1) + np.var(b, axis=0, ddof=1))) / seeds / n_images
    return [difference(*errors, paired=False, extra_variance=image) for image in (once, twice)]


def test_the_test_set_term_counts_each_source_of_noise_once_and_covers_at_its_nominal_rate():
    """A population of images whose two architectures differ image by image (a known mean difference), test sets
    of 1,000 drawn from it, 10 seeds an arm: the interval with the flips counted once covers the true difference
    about 95% of the time; the bootstrap of the seed-averaged correctness, which also counts the flips the Welch term
    holds, is wider and over-covers."""
    rng = np.random.default_rng(0)
    difficulty = rng.normal(size=200_000)
    effect = rng.normal(0.1, 0.6, size=difficulty.size)  # the architectures differ image by image
    p_b = 1 / (1 + np.exp(-(1.5 * difficulty + 0.3)))
    p_a = 1 / (1 + np.exp(-(1.5 * difficulty + 0.3 + effect)))
    truth = float(np.mean(p_b - p_a))  # error a - error b over the population and over training seeds
    population = np.stack([p_a, p_b], axis=1)
    trials, covered, widths = 400, np.zeros(2), np.zeros(2)
    for _ in range(trials):
        for k, found in enumerate(_simulated_intervals(rng, population, 1000, 10)):
            covered[k] += found.low <= truth <= found.high
            widths[k] += found.high - found.low
    once, twice = covered / trials
    assert 0.92 <= once <= 0.98, (once, twice)  # 95% nominal; the binomial sd at 400 trials is 1.1 pp
    assert twice >= once and widths[1] > 1.05 * widths[0], (once, twice, widths)  # counted twice: too wide


def _evaluated_arms(tmp_path, recorded):
    """Three seeds of two arms, twin right on 55% of 500 test images and alternet on 60%, each run with its
    evaluation's predictions and summary (``recorded(rng, labels, skill)``: the arrays of ``predictions.npz`` and the
    summary's other fields): the runs, the variants, the baseline (twin) and the other variant."""
    from alternet.report.build import group_variants, pick_baseline
    from alternet.report.runs import Run, swept_keys
    from alternet.runs.directories import RunDir
    from alternet.runs.summary import RunSummary

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 500)
    runs = []
    for model, skill in (("twin", 0.55), ("alternet", 0.6)):
        for seed in SEEDS:
            job = RunDir(tmp_path / f"{model}-{seed}")
            job.predictions.parent.mkdir(parents=True)
            arrays, fields = recorded(rng, labels, skill)
            np.savez(job.predictions, **arrays)
            summary = RunSummary(model=model, data="cifar100", evaluation_dir=str(job.eval_dir), **fields)
            job.write_summary(summary)  # after its evaluation: the predictions are the run's own
            runs.append(Run(job, {"model": model, "seed": seed}, summary, {}, 10))
    variants = group_variants(runs, swept_keys([run.overrides for run in runs]))
    baseline = pick_baseline(variants, "model=twin")
    return runs, variants, baseline, next(v for v in variants if v is not baseline)


def test_a_robustness_difference_holds_the_test_sets_own_noise(tmp_path):
    """Δ robustness (the mean accuracy over the benchmark corruption sets) gets the test set's term from each run's
    corrupted predictions, as the error does (it was left out); a set outside the benchmark is left out of it."""
    from operator import attrgetter

    from alternet.report.build import Statistics, _test_set_variance, variant_rows
    from alternet.report.runs import Run

    def recorded(rng, labels, skill):
        arrays = {"probs": np.eye(10)[labels], "labels": labels}
        for key in ("fog/1", "fog/2", "speckle_noise/1"):  # the last is no benchmark corruption
            right = rng.random(500) < skill
            arrays[f"corrupted/{key}/pred"] = np.where(right, labels, (labels + 1) % 10)
            arrays[f"corrupted/{key}/labels"] = labels
        robust = np.mean([arrays[f"corrupted/fog/{s}/pred"] == labels for s in (1, 2)])
        return arrays, {"test": {"acc": 0.6, "nll": 1.5}, "robustness": robustness_result(float(robust))}

    runs, variants, baseline, alternet = _evaluated_arms(tmp_path, recorded)
    assert runs[0].robust_correct().shape == (500,)  # per image, the share of the two fog sets it was right in
    unnamed = Run(runs[1].job, {}, replace(runs[1].metrics, evaluation_dir=None), {}, 10)
    assert unnamed.robust_correct() is None  # predictions its summary does not name are not the run's
    settings = Statistics(bootstrap=500)
    term = _test_set_variance(alternet, baseline, settings, attrgetter("robustness"), Run.robust_correct)
    expected = bootstrap_variance(
        [r.robust_correct() for r in alternet.runs], [r.robust_correct() for r in baseline.runs], 500
    )
    assert term == expected > 0
    assert _test_set_variance(alternet, baseline, settings, attrgetter("robustness")) == 0  # clean: all right alike
    rows = variant_rows(variants, baseline, settings)
    assert next(r for r in rows if r["variant"] == "model=alternet")["robustness_delta"] is not None


def test_the_test_sets_term_is_for_the_images_the_error_is_over(tmp_path):
    """The test error is the training's test over the whole split, the per-image record its evaluation's, fewer
    with evaluate.max_images: the record's bootstrap is var(mu)/500, the error's term var(mu)/2,000 (it was taken
    whole, 4x the variance, so a difference read as inconclusive)."""
    from operator import attrgetter

    from alternet.report.build import Statistics, _test_set_variance
    from alternet.runs.results import TestImages

    def recorded(rng, labels, skill):
        right = rng.random(500) < skill
        arrays = {"probs": np.eye(10)[np.where(right, labels, (labels + 1) % 10)], "labels": labels}
        return arrays, {"test": {"acc": skill, "nll": 1.5}, "test_images": TestImages(2000, 2000)}

    _, _, baseline, alternet = _evaluated_arms(tmp_path, recorded)
    settings = Statistics(bootstrap=500)
    record = bootstrap_variance(
        [r.test_correct() for r in alternet.runs], [r.test_correct() for r in baseline.runs], 500
    )
    term = _test_set_variance(alternet, baseline, settings, attrgetter("test_error"))
    assert term == pytest.approx(record * 500 / 2000) and term > 0


def test_each_training_nll_verdict_checks_its_own_ranking_at_twice_the_epochs():
    """The verdict read with HDVW's training NLL took its budget qualifier from the clean NLL's ranking: it said the
    ranking holds at twice the epochs where its own NLL's ranking flipped there."""
    from alternet.report.build import Statistics, group_variants, pick_baseline, variant_rows
    from alternet.report.runs import swept_keys

    runs = []
    arms = (("twin", 0.42, (1.40, 1.35), (1.10, 1.10)), ("alternet", 0.40, (1.30, 1.25), (1.00, 1.20)))
    for model, error, clean, epoch_nll in arms:
        for index, (done, schedule) in enumerate(((10, 10), (20, 20))):
            for run in _runs(model, error, clean[index], done, schedule, True):
                run.curves["train/nll_epoch"] = [epoch_nll[index] + run.metrics.train_clean["nll"] - clean[index]]
                runs.append(run)
    variants = group_variants(runs, swept_keys([run.overrides for run in runs]))
    rows = variant_rows(variants, pick_baseline(variants, "model=twin recipe.epochs=10"), Statistics(bootstrap=0))
    row = next(r for r in rows if r["variant"] == "model=alternet recipe.epochs=10")
    assert "the ranking changes at twice the epochs" not in row["verdict"]
    assert "the ranking changes at twice the epochs" in row["verdict_hdvw_nll"], row["verdict_hdvw_nll"]
