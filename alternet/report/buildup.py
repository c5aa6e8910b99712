"""The decisions of a build-up search (``alternet buildup``, :mod:`alternet.apps.buildup`): a round's candidate
layouts against the current one on a validation metric, with the report's own statistics (:mod:`.statistics`:
Welch intervals over seeds, Holm's correction across the round's candidates), read by the paper's rules (Park &
Kim, 2022, section 4): take the MSA added at the end of the current stage if it improves; else the one at the end of
the earlier stage if it improves; else move on to the stages before it. The table of rounds and Fig. 11's plot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from ..files import save_figure
from .build import Statistics, Variant, differences_from
from .runs import Run
from .statistics import Difference
from .verdicts import Summary

IMPROVES, WORSE, INCONCLUSIVE = "improves", "worse", "inconclusive"


def _val_error(run: Run) -> float | None:
    accuracy = run.last("val/acc")
    return None if accuracy is None else 1.0 - accuracy


# what a search may decide on: the last epoch's validation metric (lower is better), never the test split's
METRICS: dict[str, tuple[str, Callable[[Run], float | None]]] = {
    "error": ("validation error", _val_error),
    "nll": ("validation NLL", lambda run: run.last("val/nll")),
}


@dataclass(frozen=True)
class Arm:
    """One layout a round compares: the current one (``stage`` None) or a candidate adding an MSA to ``stage``
    (0-based), with its finished runs and, for a candidate, its difference from the current layout."""

    layout: str
    stage: int | None
    runs: tuple[Run, ...]
    difference: Difference | None = None
    reading: str = ""

    def summary(self, value: Callable[[Run], float | None]) -> Summary | None:
        return Summary.of([value(run) for run in self.runs])


@dataclass(frozen=True)
class Round:
    """A decided round: its arms (the current layout first), what it took (a candidate's layout, or None), the
    stage the search stands at next (None: no stage left), and the decision in words."""

    number: int
    arms: tuple[Arm, ...]
    chosen: str | None
    next_stage: int | None
    decision: str


def decide(
    number: int,
    current: Arm,
    candidates: Sequence[Arm],
    metric: str,
    settings: Statistics,
    stage_before: Callable[[int], int | None],
) -> Round:
    """The paper's rules over one round (``candidates``: the current stage's MSA first, then the earlier stage's;
    ``stage_before(stage)``: the nearest stage before it with room for an MSA, or None)."""
    name, value = METRICS[metric]
    variants = [Variant(arm.layout, list(arm.runs)) for arm in (current, *candidates)]
    diffs = differences_from(variants, variants[0], value, settings)[1:]
    arms = [
        Arm(arm.layout, arm.stage, arm.runs, diff, _reading(arm, diff, settings, metric))
        for arm, diff in zip(candidates, diffs)
    ]
    words = []
    for arm in arms:
        where = f"the MSA at the end of stage {arm.stage + 1} ({arm.layout})"
        if arm.reading == IMPROVES:
            words.append(f"{where} improves the {name}: taken")
            return Round(number, (current, *arms), arm.layout, arm.stage, "; ".join(words))
        words.append(f"{where} does not improve the {name} ({arm.reading})")
    last = arms[-1].stage if arms else None
    after = None if last is None else stage_before(last)
    words.append(
        f"rule 2: the next MSA goes to the end of stage {after + 1}" if after is not None else "no earlier stage left"
    )
    return Round(number, (current, *arms), None, after, "; ".join(words))


def _reading(arm: Arm, diff: Difference | None, settings: Statistics, metric: str) -> str:
    name, value = METRICS[metric]
    if diff is None and not any(value(run) is not None for run in arm.runs):
        return f"{WORSE}: no run finished with a finite {name}"
    if diff is None or min(diff.n) < settings.rule.min_seeds:
        seeds = min(diff.n) if diff else len(arm.runs)
        return f"{INCONCLUSIVE}: {seeds} seed(s), {settings.rule.min_seeds} needed"
    if diff.below_zero(settings.rule.alpha):  # a lower-is-better metric, after Holm's correction
        return IMPROVES
    return WORSE if diff.above_zero(settings.rule.alpha) else INCONCLUSIVE


def round_rows(
    rounds: Sequence[Round],
    metric: str,
    settings: Statistics,
    facts: Callable[[str], tuple[int | None, int | None]],
) -> list[dict[str, object]]:
    """One row per arm of every round (``facts(layout)``: its parameters and multiply-adds per image)."""
    name, value = METRICS[metric]
    rows = []
    for done in rounds:
        for arm in done.arms:
            summary, diff = arm.summary(value), arm.difference
            test = arm.summary(lambda run: run.test_error)
            params, macs = facts(arm.layout)
            rows.append(
                {
                    "round": done.number,
                    "arm": "current" if arm.stage is None else f"MSA at the end of stage {arm.stage + 1}",
                    "layout": arm.layout,
                    "msas": arm.layout.count("M"),
                    "params": params,
                    "macs": macs,
                    "seeds": len(arm.runs),
                    "metric": name,
                    "mean": summary.mean if summary else None,
                    "sd": summary.sd if summary else None,
                    "delta": diff.delta if diff else None,
                    "ci_low": diff.low if diff else None,
                    "ci_high": diff.high if diff else None,
                    "p_holm": diff.p_holm if diff else None,
                    "mde": diff.detectable(settings.rule.alpha, settings.rule.power) if diff else None,
                    "reading": arm.reading or "current",
                    "taken": arm.layout == done.chosen,
                    "test_error": test.mean if test else None,  # a description: no decision reads it
                }
            )
    return rows


def figure(rows: Sequence[dict[str, object]], path: Path) -> Path:
    """The paper's Fig. 11 in this search's terms: the decision metric against the number of MSAs, every arm trained
    (mean ± sd over its seeds), the path the search took drawn through the layouts it kept."""
    fig = Figure(figsize=(6.5, 4.5))
    fig.subplots_adjust(left=0.13, right=0.97, top=0.9, bottom=0.12)
    ax = fig.subplots()
    seen: dict[str, dict[str, object]] = {}
    for row in rows:
        if row["mean"] is not None:
            seen.setdefault(str(row["layout"]), row)
    for layout, row in seen.items():
        ax.errorbar(row["msas"], row["mean"], yerr=row["sd"] or 0, fmt="o", color="0.6", capsize=3)
        ax.annotate(layout, (row["msas"], row["mean"]), fontsize=7, xytext=(4, 3), textcoords="offset points")
    kept = [rows[0]] + [row for row in rows if row["taken"]] if rows else []
    ax.plot(
        [row["msas"] for row in kept],
        [row["mean"] for row in kept],
        "-o",
        color="C3",
        zorder=3,
        label="the search's path",
    )
    counts = [int(row["msas"]) for row in seen.values()] or [0]
    ax.set_xticks(range(min(counts), max(counts) + 1))
    ax.set_xlim(min(counts) - 0.4, max(counts) + 0.9)  # room for the layouts' labels
    ax.set_xlabel("MSA blocks")
    ax.set_ylabel(f"{rows[0]['metric']} (mean ± 1 sd over seeds)" if rows else "")
    ax.set_title("build-up search (Park & Kim, 2022, Fig. 11)", fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
