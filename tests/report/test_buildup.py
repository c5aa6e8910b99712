"""A build-up round's decision (alternet buildup): the current stage's MSA taken when it improves the validation
metric by Welch's interval after Holm's correction, else the earlier stage's, else the search moves on to the stages
before them; the test split is never read."""

from dataclasses import replace

import pytest
from scipy import stats

from alternet.report.build import Statistics
from alternet.report.buildup import IMPROVES, INCONCLUSIVE, WORSE, Arm, decide, round_rows
from alternet.report.runs import Run
from alternet.report.verdicts import Rule
from alternet.runs.directories import RunDir
from alternet.runs.summary import RunSummary

CURRENT = "C|CC|CC"
LAST, EARLIER = "C|CC|CM", "C|CM|CC"
SETTINGS = Statistics(Rule(), paired=False)


def arm(layout, stage, val_errors, test_error=0.5):
    """A layout's runs, one per seed, their last epoch's validation accuracy 1 - error (the test split's numbers
    differ on purpose: a decision that read them would change)."""
    runs = tuple(
        Run(
            RunDir(f"/nonexistent/{layout}/{seed}"),
            {"seed": str(seed), "model.layout": layout},
            RunSummary("alternet_tiny", "digits", {"acc": 1 - test_error, "nll": 1.0}, epochs=1, global_step=1),
            {"val/acc": [0.1, 1 - error], "val/nll": [2.0, 1.0 + error]},
        )
        for seed, error in enumerate(val_errors)
    )
    return Arm(layout, stage, runs)


def nowhere_before(stage):
    return None


def test_the_current_stages_msa_is_taken_when_it_improves():
    done = decide(
        1,
        arm(CURRENT, None, [0.30, 0.31, 0.32]),
        [arm(LAST, 2, [0.20, 0.21, 0.22], test_error=0.9), arm(EARLIER, 1, [0.10, 0.11, 0.12])],
        "error",
        SETTINGS,
        nowhere_before,
    )
    assert done.chosen == LAST and done.next_stage == 2  # the first that improves, not the best: rule 1 first
    assert [a.reading for a in done.arms[1:]] == [IMPROVES, IMPROVES]
    assert "end of stage 3 (C|CC|CM) improves the validation error: taken" in done.decision


def test_rule_2_takes_the_earlier_stage_when_the_current_one_does_not_improve():
    done = decide(
        1,
        arm(CURRENT, None, [0.30, 0.31, 0.32]),
        [arm(LAST, 2, [0.33, 0.34, 0.35]), arm(EARLIER, 1, [0.20, 0.21, 0.22])],
        "error",
        SETTINGS,
        nowhere_before,
    )
    assert done.chosen == EARLIER and done.next_stage == 1
    assert [a.reading for a in done.arms[1:]] == [WORSE, IMPROVES]


def test_an_inconclusive_round_moves_on_to_the_stage_before_and_says_so():
    done = decide(
        2,
        arm("CC|CC|CC", None, [0.30, 0.31, 0.32]),
        [arm("CC|CC|CM", 2, [0.29, 0.33, 0.31]), arm("CC|CM|CC", 1, [0.30, 0.32, 0.31])],
        "error",
        SETTINGS,
        lambda stage: stage - 1,
    )
    assert done.chosen is None and done.next_stage == 0
    assert [a.reading for a in done.arms[1:]] == [INCONCLUSIVE, INCONCLUSIVE]
    assert done.decision.endswith("rule 2: the next MSA goes to the end of stage 1")


def test_the_interval_is_welchs_and_holm_corrects_over_the_round():
    current, last, earlier = [0.30, 0.32, 0.35], [0.25, 0.27, 0.26], [0.28, 0.33, 0.31]
    done = decide(
        1,
        arm(CURRENT, None, current),
        [arm(LAST, 2, last), arm(EARLIER, 1, earlier)],
        "error",
        SETTINGS,
        nowhere_before,
    )
    p = [stats.ttest_ind(x, current, equal_var=False).pvalue for x in (last, earlier)]
    first, second = done.arms[1].difference, done.arms[2].difference
    assert first.p == pytest.approx(p[0]) and second.p == pytest.approx(p[1])
    assert first.p_holm == pytest.approx(min(1, 2 * min(p))) and second.p_holm == pytest.approx(min(1, max(p)))


def test_too_few_seeds_never_decide():
    done = decide(1, arm(CURRENT, None, [0.3, 0.31]), [arm(LAST, 2, [0.1, 0.11])], "error", SETTINGS, nowhere_before)
    assert done.chosen is None and done.arms[1].reading == "inconclusive: 2 seed(s), 3 needed"


def test_nll_decides_on_the_validation_nll():
    done = decide(
        1,
        arm(CURRENT, None, [0.30, 0.31, 0.32]),
        [arm(LAST, 2, [0.20, 0.21, 0.22])],
        "nll",
        SETTINGS,
        nowhere_before,
    )
    assert done.chosen == LAST and done.arms[1].difference.delta == pytest.approx(-0.10)


def test_the_table_of_rounds_has_every_arm_and_describes_the_test_error():
    done = decide(
        1,
        arm(CURRENT, None, [0.30, 0.31, 0.32], test_error=0.4),
        [arm(LAST, 2, [0.20, 0.21, 0.22], test_error=0.35)],
        "error",
        SETTINGS,
        nowhere_before,
    )
    rows = round_rows([done], "error", SETTINGS, lambda layout: (1000 + layout.count("M"), 10))
    assert [(r["arm"], r["layout"], r["msas"], r["params"], r["taken"]) for r in rows] == [
        ("current", CURRENT, 0, 1000, False),
        ("MSA at the end of stage 3", LAST, 1, 1001, True),
    ]
    assert rows[1]["test_error"] == pytest.approx(0.35) and rows[1]["mde"] > 0


def test_a_candidate_whose_runs_all_diverged_reads_as_worse():
    diverged = arm(LAST, 2, [0.2, 0.2, 0.2])
    diverged = Arm(LAST, 2, tuple(replace(run, curves={"val/acc": [float("nan")]}) for run in diverged.runs))
    done = decide(1, arm(CURRENT, None, [0.30, 0.31, 0.32]), [diverged], "error", SETTINGS, nowhere_before)
    assert done.chosen is None and done.arms[1].reading == "worse: no run finished with a finite validation error"
