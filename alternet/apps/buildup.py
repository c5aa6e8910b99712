"""``alternet buildup SEARCH_DIR [options] [OVERRIDES ...]``: the paper's build-up rules (Park & Kim, 2022, section 4)
run as a greedy search over layouts, each round one ``alternet train -m`` sweep (so Hydra's launcher runs it:
locally, on several GPUs, or on SLURM), each decision the report's statistics on a validation metric
(:mod:`alternet.report.buildup`). docs/experiments.md states the procedure against the paper's text."""

from __future__ import annotations

import argparse
import functools
import json
import math
import subprocess
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..architectures.layout import next_candidates, parse_layout, with_one_more_msa
from ..errors import AlternetError, ConfigValueError, check_option, exit_with_error
from ..report.verdicts import Rule

SETTINGS_FILE = "search.json"
OWN_KEYS = ("seed", "hydra.sweep.dir", "ckpt_path")  # the search sets them for each round
LAYOUT = "model.layout"


@dataclass(frozen=True)
class Settings:
    """What a search is (a relaunch with other settings is refused; the budgets may change between launches)."""

    overrides: tuple[str, ...]
    base: str
    seeds: int
    metric: str
    alpha: float
    min_seeds: int


@dataclass(frozen=True)
class Budget:
    rounds: int | None = None
    hours: float | None = None  # the jobs' summed wall time (GPU-hours on one GPU a job)
    epochs: int | None = None  # the jobs' summed epochs


def main(argv: Sequence[str] | None = None, prog: str = "alternet buildup") -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Build an AlterNet for your data and budget by the paper's build-up rules: from a base layout "
        "(a CNN, e.g. model=alternet_laptop model.layout='C|CC|CC'), each round trains the next MSA at the end of the "
        "current stage and at the end of the earlier stage (N seeds each, one alternet train -m sweep), takes the "
        "first that improves the validation metric (Welch interval, Holm across the round), else moves to earlier "
        "stages. Relaunching the same command resumes it. OVERRIDES are alternet train's (data, recipe, launcher).",
    )
    parser.add_argument("search_dir", type=Path, help="the search's directory: each round's sweep and the results")
    parser.add_argument("overrides", nargs="*", help="alternet train overrides, e.g. data=cifar100 data.val_size=5000")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per layout (seed=0..N-1; default %(default)s)")
    parser.add_argument(
        "--metric",
        choices=("error", "nll"),
        default="error",
        help="the validation metric decided on (default %(default)s)",
    )
    parser.add_argument("--max-rounds", type=int, help="stop after this many rounds (default: no limit)")
    parser.add_argument(
        "--max-hours", type=float, help="stop once the jobs' summed wall time reaches this (hours; default: no limit)"
    )
    parser.add_argument(
        "--max-epochs", type=int, help="do not start a round that would exceed this summed epochs (default: no limit)"
    )
    rule = Rule()
    parser.add_argument(
        "--alpha", type=float, default=rule.alpha, help="significance level (Holm over a round; default %(default)s)"
    )
    parser.add_argument(
        "--min-seeds", type=int, default=rule.min_seeds, help="fewest seeds for a decision (default %(default)s)"
    )
    args = parser.parse_intermixed_args(argv)
    try:
        settings, budget = _checked(args)
        Search(args.search_dir, settings, budget).run()
    except AlternetError as error:
        exit_with_error(error)
    return 0


def _checked(args: argparse.Namespace) -> tuple[Settings, Budget]:
    """Every option in its range and no override the search sets itself, before anything is composed."""
    check_option("--seeds", args.seeds, args.seeds >= 2, "an integer >= 2 (a layout's interval needs seeds)")
    check_option(
        "--seeds",
        args.seeds,
        args.seeds >= args.min_seeds,
        f">= --min-seeds ({args.min_seeds}): with fewer no candidate can ever be decided",
    )
    Rule(alpha=args.alpha, min_seeds=args.min_seeds)  # the report's own range checks
    for name in ("max_rounds", "max_hours", "max_epochs"):
        value = getattr(args, name)
        option = "--" + name.replace("_", "-")
        check_option(option, value, value is None or (value > 0 and math.isfinite(value)), "a number > 0")
    for override in args.overrides:
        key = _key(override)
        if override in ("-m", "--multirun") or key in OWN_KEYS:
            raise ConfigValueError(
                f"{override!r}: alternet buildup sets {key} itself for each round (seeds: --seeds; the sweeps go "
                "under SEARCH_DIR/round_NN); leave it out"
            )
    overrides = tuple(args.overrides)
    base = next((o.split("=", 1)[1] for o in overrides if _key(o) == LAYOUT), "")
    settings = Settings(overrides, base.strip("'\""), args.seeds, args.metric, args.alpha, args.min_seeds)
    return settings, Budget(args.max_rounds, args.max_hours, args.max_epochs)


def _searchpath(option: Path, overrides: list[str]) -> str:
    """``hydra.searchpath=[...]`` with the search's folder of model options first and the search's own entries
    after (two ``hydra.searchpath=`` overrides do not merge: the last replaced the first)."""
    own = [o.split("=", 1)[1].strip().strip("[]") for o in overrides if _key(o) == "hydra.searchpath"]
    return "hydra.searchpath=[" + ",".join([f"file://{option.parent.parent.resolve()}", *filter(None, own)]) + "]"


def _key(override: str) -> str:
    """An override's key (``+key=value``, ``~key``: ``key``)."""
    return override.split("=", 1)[0].lstrip("+~")


def recorded_settings(search_dir: Path, settings: Settings) -> None:
    """Record a new search's settings, or check a relaunch's against those recorded."""
    if check_search_dir(search_dir, settings):
        return
    from ..files import write_json  # deferred: the kernel's writer, needed only once a search starts

    search_dir.mkdir(parents=True, exist_ok=True)
    write_json(search_dir / SETTINGS_FILE, asdict(settings) | {"overrides": list(settings.overrides)})


def check_search_dir(search_dir: Path, settings: Settings) -> bool:
    """Refuse a folder that holds something else than a search, or a search with other settings, in one line;
    returns whether it holds this search's settings as they are (nothing to record)."""
    path = search_dir / SETTINGS_FILE
    ours = asdict(settings) | {"overrides": list(settings.overrides)}
    from ..files import OUTPUT_LOCK  # deferred: as every kernel import here

    if not path.is_file() and search_dir.is_dir() and any(p.name != OUTPUT_LOCK for p in search_dir.iterdir()):
        raise ConfigValueError(
            f"{search_dir} is not empty and holds no search ({SETTINGS_FILE}): give a new or empty SEARCH_DIR"
        )
    if path.is_file():
        try:
            recorded: Any = json.loads(path.read_text())
        except (OSError, ValueError):
            recorded = None
        if not isinstance(recorded, dict) or _trained(recorded, _canonical) != _trained(ours, _canonical):
            theirs, now = (_trained(recorded) if isinstance(recorded, dict) else {}), _trained(ours)
            differing = [_difference(k, theirs.get(k), now[k]) for k in now if theirs.get(k) != now[k]]
            raise ConfigValueError(
                f"{search_dir} holds a search with other settings ({'; '.join(differing) or SETTINGS_FILE}; recorded "
                f"in {path}): relaunch it with its own command to resume it, or give a new SEARCH_DIR"
            )
        return recorded == ours
    return False


def _trained(settings: dict[str, Any], spelled: Callable[[Any], Any] = str) -> dict[str, Any]:
    """The settings that decide what the search trains: its overrides in any order (each as ``spelled`` gives it),
    the launcher's left out (a relaunch may move the search from this machine to SLURM, or give its jobs more
    time)."""
    overrides = settings.get("overrides")
    kept = sorted(spelled(o) for o in overrides if not _launching(o)) if isinstance(overrides, list) else overrides
    return settings | {"overrides": kept}


def _canonical(override: Any) -> Any:
    """An override as Hydra reads it, whatever its quoting (``model.layout='C|CC|CC'`` and ``model.layout=C|CC|CC``
    are one value)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser  # deferred
    from hydra.errors import HydraException  # deferred

    try:
        parsed = OverridesParser.create().parse_override(str(override))
    except HydraException:
        return override
    prefix = {"ADD": "+", "FORCE_ADD": "++", "DEL": "~"}.get(parsed.type.name, "")
    return f"{prefix}{parsed.key_or_group}={parsed.value()!r}" if not parsed.is_delete() else f"~{parsed.key_or_group}"


def _launching(override: str) -> bool:
    key = _key(override)
    return key == "hydra/launcher" or key.startswith("hydra.launcher.")


def _difference(key: str, recorded: Any, now: Any) -> str:
    """``key`` as it differs: the overrides added and dropped, or the recorded and new values."""
    if key == "overrides" and isinstance(recorded, list) and isinstance(now, list):
        added, dropped = [o for o in now if o not in recorded], [o for o in recorded if o not in now]
        if not added and not dropped:  # the same overrides, one repeated
            return f"overrides: {' '.join(recorded)} -> {' '.join(now)}"
        return "overrides: " + ", ".join([*(f"+{o}" for o in added), *(f"-{o}" for o in dropped)])
    return f"{key}: {recorded!r} -> {now!r}"


def launch_round(round_dir: Path, overrides: Sequence[str], layouts: Sequence[str], seeds: int) -> None:
    """One round as one ``alternet train -m`` sweep in a process of its own (Hydra's launcher, as the overrides
    choose it); ``ckpt_path=last``: a relaunch keeps the finished jobs and resumes the interrupted ones."""
    own = [o for o in overrides if _key(o) != LAYOUT]
    command = [
        sys.executable,
        "-m",
        "alternet",
        "train",
        "-m",
        *own,
        "model.layout=" + ",".join(f"'{layout}'" for layout in layouts),
        "seed=" + ",".join(map(str, range(seeds))),
        f"hydra.sweep.dir={round_dir}",
        "ckpt_path=last",
    ]
    print(f"{round_dir.name}: {len(layouts)} layout(s) x {seeds} seeds: {', '.join(layouts)}", flush=True)
    status = subprocess.run(command, check=False).returncode
    if status != 0:
        raise AlternetError(
            f"{round_dir}: the round's sweep ended with exit status {status} (its error is above); its finished jobs "
            "are kept: run the same alternet buildup command again to resume"
        )


class Search:
    """A build-up search in ``search_dir``: :meth:`run` replays the rounds already on disk (their sweeps finished,
    nothing retrained), launches the ones missing, and writes the results after every round."""

    def __init__(self, search_dir: Path, settings: Settings, budget: Budget) -> None:
        self.dir, self.settings, self.budget = search_dir, settings, budget
        self._facts: dict[str, tuple[int | None, int | None]] = {}

    def run(self) -> None:
        from ..files import writing  # deferred: the kernel's locks
        from .train import build_data  # deferred: torch

        config = self._config(self.settings.base or None)
        base = self._base_layout(config)
        for stage in range(len(parse_layout(base))):  # every stage one the rules can extend, before any training
            with_one_more_msa(base, stage)
        if not next_candidates(base, len(parse_layout(base)) - 1):  # it ended at once with "Chosen layout: BASE"
            raise ConfigValueError(
                f"model.layout={base!r} has no stage with room for one more MSA (a stage keeps a Conv block first "
                "and takes one per MSA), so there is nothing to search: start from a layout of longer stages, e.g. "
                "model.layout='C|CC|CC'"
            )
        check_search_dir(self.dir, self.settings)  # a folder of the user's: refused before its data are read, untouched
        build_data(config).check_before_fit()  # the data every candidate trains on, as alternet train checks it
        self.dir.mkdir(parents=True, exist_ok=True)
        with writing(self.dir, "build-up search"):  # a second search into it stops here, in one line
            recorded_settings(self.dir, self.settings)
            self._rounds(config, base)

    def _rounds(self, config: Any, base: str) -> None:
        from ..report.build import Statistics  # deferred: numpy, scipy
        from ..report.buildup import Arm, decide  # deferred: matplotlib

        statistics = Statistics(Rule(self.settings.alpha, self.settings.min_seeds), paired=False)
        epochs = min(config.recipe.epochs, config.trainer.max_epochs)  # fewer where trainer.max_epochs cuts it

        layout, stage, current, rounds, number = base, len(parse_layout(base)) - 1, None, [], 1
        while True:
            candidates = next_candidates(layout, stage) if stage is not None else []
            if not candidates:
                tried = rounds and rounds[-1].chosen is None
                reason = "no candidate improved and no earlier stage is left" if tried else "no stage has room left"
                break
            to_train = ([layout] if current is None else []) + [c for _, c in candidates]
            round_dir = self.dir / f"round_{number:02d}"
            finished = self._finished(round_dir, len(to_train))
            if not finished and (reason := self._over_budget(number, len(to_train) * self.settings.seeds * epochs)):
                break
            if not finished:
                launch_round(round_dir, self.settings.overrides, to_train, self.settings.seeds)
            results = self._results(round_dir, to_train)
            if current is None:
                current = self._compared_against(round_dir, results[layout])
            arms = [Arm(c, s, results[c]) for s, c in candidates]
            before = functools.partial(_earlier_stage_with_room, layout)
            done = decide(number, Arm(layout, None, current), arms, self.settings.metric, statistics, before)
            rounds.append(done)
            print(f"round {number}: {done.decision}", flush=True)
            if done.chosen is not None:
                layout, current = done.chosen, results[done.chosen]
            stage = done.next_stage
            self._write(rounds, statistics, layout, None)
            number += 1
        self._write(rounds, statistics, layout, reason)

    # the config, composed as alternet train composes it ---------------------------------------------------------

    def _config(self, layout: str | None) -> Any:
        from hydra.errors import CompactHydraException  # deferred
        from omegaconf import OmegaConf  # deferred: as every import below, so that --help answers at once

        from .checks import validate_train_config  # deferred
        from .config import compose  # deferred
        from .hydra.composition import composition_error  # deferred

        overrides = [o for o in self.settings.overrides if _key(o) != LAYOUT]
        if layout:
            overrides.append(f"model.layout='{layout}'")
        with warnings.catch_warnings():  # the build-up rules' warnings: the candidates' own jobs print them
            warnings.simplefilter("ignore")
            try:
                composed = compose("train", [*overrides, f"paths.output_dir={self.dir}"])
            except CompactHydraException as error:  # in one line, as alternet train says it
                raise ConfigValueError(composition_error(error, "train")) from None
            return validate_train_config(OmegaConf.to_container(composed, resolve=True))

    def _base_layout(self, config: Any) -> str:
        from .checks import layout_and_heads  # deferred

        layout, _ = layout_and_heads(config.model)
        if not layout:
            raise ConfigValueError(
                f"model={config.model.name} has no layout: alternet buildup searches the layouts of AlterNet's family "
                "(e.g. model=alternet_laptop model.layout='C|CC|CC', model=preresnet50) and the layout hybrids "
                "(model=byob, model=maxxvit)"
            )
        if not getattr(config.data, "val_size", 1) and not _has_val_folder(config.data):
            raise ConfigValueError(
                f"data={config.data.name} holds no validation split (data.val_size=0): the search decides on a "
                "validation split, never on the test set; hold one out, e.g. data.val_size=5000 (CIFAR) or 0.1"
            )
        return layout

    def _facts_of(self, layout: str, classes: int | None) -> tuple[int | None, int | None]:
        """A layout's parameters and multiply-adds per image, built on the meta device (no memory, no weights) with
        the data's ``classes`` (its head's size; None: unknown, and so are the counts)."""
        if classes is None:
            return None, None
        if layout not in self._facts:
            import timm  # deferred
            import torch  # deferred
            from torch.utils.flop_counter import FlopCounterMode  # deferred

            from ..models.factory import model_args  # deferred

            config = self._config(layout)
            size = config.data.image_size
            args = model_args(config.model, num_classes=classes, img_size=size, drop_path_rate=0)
            with torch.device("meta"):
                model = timm.create_model(config.model.name, **args).eval()
                params = sum(p.numel() for p in model.parameters())
                with FlopCounterMode(display=False) as counter, torch.no_grad():
                    model(torch.empty(1, 3, size, size))
            self._facts[layout] = params, counter.get_total_flops() // 2
        return self._facts[layout]

    # rounds on disk --------------------------------------------------------------------------------------------

    def _finished(self, round_dir: Path, layouts: int) -> bool:
        from ..runs.directories import SweepDir  # deferred

        if not round_dir.is_dir():
            return False
        jobs = SweepDir(round_dir).jobs()
        return jobs.complete and len(jobs.finished) == layouts * self.settings.seeds

    def _results(self, round_dir: Path, layouts: Sequence[str]) -> dict[str, tuple]:
        """Each layout's finished runs in the round's sweep (a run whose test metrics diverged left out)."""
        from ..report.runs import read_sweep  # deferred

        runs, jobs = read_sweep(round_dir)
        if not jobs.complete:
            raise AlternetError(
                f"{round_dir}: the round's sweep is not complete ({jobs.describe()}): run the same command again"
            )
        by_layout: dict[str, list] = {layout: [] for layout in layouts}
        for run in runs:
            layout = str(((run.job.recorded_config() or {}).get("model") or {}).get("layout", "")).strip("'\"")
            if layout in by_layout and not run.unscored:
                by_layout[layout].append(run)
        return {layout: tuple(found) for layout, found in by_layout.items()}

    def _compared_against(self, round_dir: Path, runs: tuple) -> tuple:
        """The base layout's runs, which every candidate of the first round is compared with: at least one has the
        metric (a candidate without it reads as worse; a base without it leaves nothing to compare)."""
        from ..report.buildup import METRICS  # deferred

        name, value = METRICS[self.settings.metric]
        if not any(value(run) is not None for run in runs):
            raise AlternetError(
                f"{round_dir}: no run of the base layout has a {name} (diverged, or no validation split was logged): "
                "the search cannot compare against it; look at its jobs' logs"
            )
        return runs

    def _spent(self) -> tuple[float, int]:
        """Hours (the finished jobs' summed wall time) and epochs spent so far in every round."""
        from ..runs.directories import SweepDir  # deferred

        hours, epochs = 0.0, 0
        for round_dir in sorted(self.dir.glob("round_*")):
            for job in SweepDir(round_dir).jobs().finished:
                summary = job.summary()
                hours += (summary.wall_seconds or 0.0) / 3600
                epochs += summary.epochs
        return hours, epochs

    def _over_budget(self, number: int, planned_epochs: int) -> str | None:
        budget = self.budget
        if budget.rounds is not None and number > budget.rounds:
            return f"the budget of {budget.rounds} round(s) is spent"
        if budget.hours is None and budget.epochs is None:
            return None
        hours, epochs = self._spent()
        if budget.hours is not None and hours >= budget.hours:
            return f"the budget of {budget.hours:g} job-hours is spent ({hours:.2f} h)"
        if budget.epochs is not None and epochs + planned_epochs > budget.epochs:
            return (
                f"round {number} would train {planned_epochs} epochs, beyond the budget of {budget.epochs} "
                f"({epochs} spent)"
            )
        return None

    # results ---------------------------------------------------------------------------------------------------

    def _write(self, rounds: list, statistics: Any, chosen: str, reason: str | None) -> None:
        from ..files import write_csv, write_text  # deferred
        from ..report.buildup import figure, round_rows  # deferred

        classes = _class_count(rounds)
        rows = round_rows(rounds, self.settings.metric, statistics, lambda layout: self._facts_of(layout, classes))
        if rows:
            write_csv(self.dir / "rounds.csv", rows)
            figure(rows, self.dir / "buildup.png")
        # the search's other overrides, a model's own (e.g. model.heads) among them; its option and layout are given
        kept = [o for o in self.settings.overrides if _key(o) not in ("model", LAYOUT) and not _launching(o)]
        in_option = [o for o in kept if _key(o).startswith("model.") and not o.startswith("~")]  # the option's keys
        option = self._option_file(chosen, in_option)
        lines = _summary(self.settings, rounds, rows, chosen, reason, statistics)
        from ..runs.records import shell_word  # deferred: as the kernel's other imports here

        train = " ".join(shell_word(o) for o in kept)  # as typed, each one shell word (model.heads=[2, 2, 2])
        beside = " ".join(shell_word(o) for o in kept if _key(o) != "hydra.searchpath" and o not in in_option)
        lines += [
            "",
            f"Chosen layout: `{chosen}`"
            + (" (the base: no MSA it tried improved on it)" if rounds and chosen == rounds[0].arms[0].layout else "")
            + ". Train it with",
            "",
            f"    alternet train model={self._model_option()} model.layout='{chosen}' {train}".rstrip(),
            "",
            f"or as a model option: `alternet train {shell_word(_searchpath(option, self.settings.overrides))} "
            f"model=buildup {beside}`".rstrip(" ")
            + ".",
        ]
        text = "\n".join(lines) + "\n"
        write_text(self.dir / "summary.md", text)
        if reason is not None:
            print(text, flush=True)

    def _option_file(self, chosen: str, overrides: Sequence[str]) -> Path:
        """``SEARCH_DIR/conf/model/buildup.yaml``: the base model option with the chosen layout and the search's
        other model keys (``overrides``: ``model.heads=[8,4,2]``), so that ``model=buildup`` is the searched model."""
        from hydra.core.override_parser.overrides_parser import OverridesParser  # deferred
        from omegaconf import OmegaConf  # deferred

        from ..files import write_text  # deferred

        option = self._model_option()
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        keys = {o.key_or_group.removeprefix("model."): o.value() for o in parsed}
        path = self.dir / "conf" / "model" / "buildup.yaml"
        return write_text(
            path,
            f"# chosen by alternet buildup in {self.dir.resolve()}: {option} with the layout the search kept\n"
            f"defaults: [{option}, _self_]\n" + OmegaConf.to_yaml({"layout": chosen, **keys}),
        )

    def _model_option(self) -> str:
        """The ``model=`` option the search started from (the command's, else train.yaml's default)."""
        given = [o.split("=", 1)[1] for o in self.settings.overrides if _key(o) == "model"]
        if given:
            return given[-1]
        import hydra  # deferred

        with hydra.initialize_config_module("alternet.conf", version_base="1.3"):
            composed = hydra.compose("train", return_hydra_config=True)
        return str(composed.hydra.runtime.choices.model)


def _earlier_stage_with_room(layout: str, stage: int) -> int | None:
    """The nearest stage before ``stage`` that has room for one more MSA in ``layout``, or None."""
    return next((s for s, _ in next_candidates(layout, stage - 1)), None) if stage > 0 else None


def _has_val_folder(data: Any) -> bool:
    root = getattr(data, "root", None)
    return bool(root) and (Path(str(root)) / "val").is_dir() and (Path(str(root)) / "test").is_dir()


def _summary(
    settings: Settings, rounds: Sequence[Any], rows: Sequence[dict], chosen: str, reason: str | None, statistics: Any
) -> list[str]:
    """The search as markdown: its settings, each round's arms and decision, and why it stopped."""
    from ..report.buildup import METRICS  # deferred: as the rows'

    metric = rows[0]["metric"] if rows else METRICS[settings.metric][0]
    scale, unit = (100, "pp") if settings.metric == "error" else (1, "nats")
    rule = statistics.rule
    lines = [
        "## Build-up search",
        "",
        f"Overrides: `{' '.join(settings.overrides) or '(none)'}`. {settings.seeds} seeds per layout. Decided on the "
        f"{metric} (the last epoch's; lower is better): a candidate improves when its difference from the current "
        f"layout is below 0 at alpha {rule.alpha:g} after Holm's correction across the round's candidates (Welch's "
        f"interval over seeds, at least {rule.min_seeds} seeds; the validation split's own sampling noise is not "
        "included). The test error is a description: no decision reads it.",
    ]
    for done in rounds:
        lines += [
            "",
            f"### Round {done.number}",
            "",
            f"| arm | layout | MSAs | params | MACs | {metric}{' %' * (scale != 1)} | Δ {unit} [95% CI] | p (Holm) | "
            f"MDE {unit} | reading | test error{' %' * (scale != 1)} |",
            "|---" * 11 + "|",
        ]
        places = 2 if scale != 1 else 3  # percentage points to 2 decimals, nats to 3
        for row in (r for r in rows if r["round"] == done.number):
            delta = (
                "–"
                if row["delta"] is None
                else f"{scale * row['delta']:+.{places}f} [{scale * row['ci_low']:+.{places}f}, "
                f"{scale * row['ci_high']:+.{places}f}]"
            )
            lines.append(
                f"| {row['arm']} | {_cell(row['layout'])} | {row['msas']} | {_number(row['params'])} | "
                f"{_number(row['macs'])} | {_pm(row['mean'], row['sd'], scale, places)} | {delta} | "
                f"{'–' if row['p_holm'] is None else format(row['p_holm'], '.3g')} | "
                f"{'–' if row['mde'] is None else format(scale * row['mde'], f'.{places}f')} | {row['reading']} | "
                f"{'–' if row['test_error'] is None else format(scale * row['test_error'], f'.{places}f')} |"
            )
        lines += ["", f"Decision: {done.decision}."]
    if reason is not None:
        lines += ["", f"Stopped: {reason}."]
    return lines


def _cell(layout: str) -> str:
    """A layout in a markdown table cell (its stage separators escaped)."""
    return "`" + layout.replace("|", "\\|") + "`"


def _number(value: int | None) -> str:
    return "–" if value is None else f"{value / 1e6:.2f}M"


def _pm(mean: float | None, sd: float | None, scale: float, places: int) -> str:
    """A mean ± sd over seeds in the table's unit (an error in percent, as its differences are in points)."""
    return "–" if mean is None else f"{scale * mean:.{places}f} ± {scale * (sd or 0):.{places}f}"


def _class_count(rounds: list) -> int | None:
    """The class count the rounds' models were built with (their data's, found when the data were read): a
    finished job's checkpoint says it; None when none can be read."""
    from ..errors import AlternetError  # deferred
    from ..runs.checkpoint_files import select_checkpoint  # deferred
    from ..runs.checkpoints import checkpoint_header  # deferred

    for run in (run for done in rounds for arm in done.arms for run in arm.runs):
        try:
            return int(checkpoint_header(select_checkpoint(run.job))["hyper_parameters"]["data"]["num_classes"])
        except (AlternetError, OSError, RuntimeError, KeyError, TypeError, ValueError):
            continue
    return None
