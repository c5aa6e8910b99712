"""``alternet buildup``: the paper's build-up rules run as a search of ``alternet train -m`` rounds. Its refusals
come before any work, in one line; a search on digits runs two rounds, is cut short and resumes without training a
finished job again, and the layout it keeps trains through ``alternet train``."""

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from alternet.apps.buildup import SETTINGS_FILE, Budget, Search, Settings

from helpers.processes import run_command

DIGITS = ["model=alternet_tiny", "model.layout='CC|CC|CC'", "data=digits", "debug=fast"]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            ["--seeds", "2"],
            "--seeds 2 is invalid: it must be >= --min-seeds (3): with fewer no candidate can ever be decided",
        ),
        (["--seeds", "1", "--min-seeds", "2"], "--seeds 1 is invalid: it must be an integer >= 2"),
        (["seed=4"], "'seed=4': alternet buildup sets seed itself for each round"),
        (["--max-rounds", "0"], "--max-rounds 0 is invalid: it must be a number > 0"),
        (["--alpha", "0.9"], "--alpha 0.9 is invalid"),
        (["model=vit_mini_cifar", "data=digits"], "model=vit_mini_cifar has no layout: alternet buildup searches"),
        (["data=digits", "data.val_size=0"], "holds no validation split (data.val_size=0): the search decides on a "),
        (["model.layout='C|CMCC|CC'", "data=digits"], "stage 2 (CMCC) is not Conv blocks ending in an alternating"),
        (["model.layout='C|C|C'", "data=digits"], "model.layout='C|C|C' has no stage with room for one more MSA"),
        (["model=alternet_r9000"], "model=alternet_r9000 is not an option of model (did you mean 'alternet_r50'?)"),
        (["banana"], "cannot read the override 'banana': missing EQUAL"),  # Hydra's tracebacks before
        (
            ["data=digits", "model.layout='C|CC|CC'", "recipe.batch_size=100000"],
            "recipe.batch_size=100000 is larger than the 1257 training",
        ),
        (["recipe.optimizer.lrx=1"], "recipe.optimizer.lrx is not a key of recipe.optimizer (did you mean 'lr'?)"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_work(tmp_path, monkeypatch, capsys, arguments, message):
    search = tmp_path / "search"
    code, _ = run_command(["buildup", str(search), *arguments], monkeypatch, capsys)
    assert message in code and "\n" not in code.strip()
    assert not search.exists()  # nothing composed into it, nothing trained


def test_a_relaunch_with_other_settings_is_refused(tmp_path, monkeypatch, capsys):
    search = tmp_path / "search"
    search.mkdir()
    recorded = {"overrides": DIGITS, "base": "CC|CC|CC", "seeds": 2, "metric": "error", "alpha": 0.05, "min_seeds": 2}
    (search / SETTINGS_FILE).write_text(json.dumps(recorded))
    code, _ = run_command(["buildup", str(search), "--seeds", "3", "--min-seeds", "2", *DIGITS], monkeypatch, capsys)
    assert f"{search} holds a search with other settings (seeds: 2 -> 3; recorded in" in code
    assert json.loads((search / SETTINGS_FILE).read_text()) == recorded
    assert sorted(p.name for p in search.iterdir()) == [SETTINGS_FILE]  # no lock of the refused search left there


def test_a_folder_of_the_users_is_refused_as_it_was_before_its_data_are_read(tmp_path, monkeypatch, capsys):
    """Refused in one line, but the search had read its data and left its writing lock in the user's folder."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    code, _ = run_command(["buildup", str(mine), "--seeds", "2", "--min-seeds", "2", *DIGITS], monkeypatch, capsys)
    assert f"{mine} is not empty and holds no search ({SETTINGS_FILE}): give a new or empty SEARCH_DIR" in code
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_a_relaunch_may_change_the_launcher_and_the_order_of_its_overrides_but_not_what_it_trains(tmp_path):
    """Moving a search to SLURM (or giving its jobs more time), or typing its overrides in another order, was
    refused as 'other settings (overrides)', naming none."""
    from alternet.apps.buildup import Settings, recorded_settings
    from alternet.errors import ConfigValueError

    search = tmp_path / "search"
    recorded_settings(search, Settings(tuple(DIGITS), "", 2, "error", 0.05, 2))
    moved = ("hydra/launcher=submitit_local", "hydra.launcher.timeout_min=60", *reversed(DIGITS))
    recorded_settings(search, Settings(moved, "", 2, "error", 0.05, 2))  # accepted, and recorded as relaunched
    assert json.loads((search / SETTINGS_FILE).read_text())["overrides"] == list(moved)
    with pytest.raises(ConfigValueError, match=r"other settings \(overrides: \+data.subset=0.5; recorded in"):
        recorded_settings(search, Settings((*moved, "data.subset=0.5"), "", 2, "error", 0.05, 2))
    with pytest.raises(
        ConfigValueError,
        match=r"other settings \(overrides: .* debug=fast model.* -> .* debug=fast debug=fast model.*; ",
    ):
        recorded_settings(search, Settings((*moved, "debug=fast"), "", 2, "error", 0.05, 2))  # one repeated: named
    unquoted = tuple(o.replace("'", "") for o in moved)  # model.layout=CC|CC|CC: the same value, as Hydra reads it
    assert unquoted != moved
    recorded_settings(search, Settings(unquoted, "", 2, "error", 0.05, 2))


def test_a_new_search_records_its_settings_under_its_own_lock(tmp_path):
    """The search holds its directory's lock when it records its settings: the lock file is no earlier content."""
    from alternet.apps.buildup import Settings, recorded_settings
    from alternet.files import OUTPUT_LOCK, writing

    search = tmp_path / "search"
    search.mkdir()
    settings = Settings(tuple(DIGITS), "", 2, "error", 0.05, 2)
    with writing(search, "build-up search"):
        recorded_settings(search, settings)
    assert json.loads((search / SETTINGS_FILE).read_text())["seeds"] == 2
    assert sorted(p.name for p in search.iterdir()) == sorted([OUTPUT_LOCK, SETTINGS_FILE])


def test_a_second_search_into_a_search_directory_in_use_stops_in_one_line(tmp_path, monkeypatch, capsys):
    from alternet.files import OUTPUT_LOCK, lock_file

    search = tmp_path / "search"
    search.mkdir()
    held = lock_file(search / OUTPUT_LOCK)  # the first search, running
    try:
        arguments = ["buildup", str(search), "--seeds", "2", "--min-seeds", "2", *DIGITS]
        code, _ = run_command(arguments, monkeypatch, capsys)
    finally:
        held.close()
    assert f"build-up search {search} is being written by another command" in code and "\n" not in code.strip()
    assert sorted(p.name for p in search.iterdir()) == [OUTPUT_LOCK]  # its settings not recorded, nothing launched


@pytest.mark.slow
def test_a_search_on_digits_resumes_without_retraining_and_its_layout_trains(tmp_path, monkeypatch, capsys):
    """Two rounds on digits (every outcome of round 1 leaves a round 2 from CC|CC|CC: the stage-1 MSA at least); the
    search is cut after round 1 by its budget, a job of round 1 is lost, and the relaunch trains that job and
    round 2, nothing else."""
    search = tmp_path / "search"
    command = ["buildup", str(search), "--seeds", "2", "--min-seeds", "2", *DIGITS, "model.heads=[1,2,4]"]
    code, _ = run_command([*command, "--max-rounds", "1"], monkeypatch, capsys)
    assert code == "0"
    assert "Stopped: the budget of 1 round(s) is spent." in (search / "summary.md").read_text()
    jobs = sorted((search / "round_01").glob("[0-9]*/metrics.json"))
    assert len(jobs) == 6  # the base and its two candidates, two seeds each
    lost = jobs.pop().parent
    kept = {path: path.stat().st_mtime_ns for path in jobs}
    for path in sorted(lost.rglob("*"), reverse=True):
        path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    lost.rmdir()

    code, _ = run_command([*command, "--max-rounds", "2"], monkeypatch, capsys)
    assert code == "0"
    assert {path: path.stat().st_mtime_ns for path in kept} == kept  # finished jobs kept, not trained again
    assert (lost / "metrics.json").is_file()
    assert len(list((search / "round_02").glob("[0-9]*/metrics.json"))) >= 2
    with open(search / "rounds.csv") as file:
        rows = list(csv.DictReader(file))
    assert {row["round"] for row in rows} == {"1", "2"} and all(int(row["params"]) > 0 for row in rows)
    assert (search / "buildup.png").stat().st_size > 0
    summary = (search / "summary.md").read_text()
    assert "### Round 2" in summary and "Stopped: " in summary
    # the command that trains the chosen layout keeps the search's own model settings (rule 3's heads)
    assert (
        "alternet train model=alternet_tiny model.layout='" in summary
        and 'data=digits debug=fast "model.heads=[1,2,4]"' in summary
    )

    option = yaml.safe_load((search / "conf" / "model" / "buildup.yaml").read_text())
    chosen = option["layout"]
    run = tmp_path / "chosen"
    train = [
        "train",
        f"hydra.searchpath=[file://{search / 'conf'}]",
        "model=buildup",  # the search's model.heads in it
        *DIGITS[2:],
        f"hydra.run.dir={run}",
    ]
    code, _ = run_command(train, monkeypatch, capsys)
    assert code == "0"
    trained = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())["model"]
    assert trained["layout"] == chosen and trained["heads"] == [1, 2, 4]


def _finished_jobs(round_dir, count, epochs, seconds):
    from alternet.runs.directories import RunDir
    from alternet.runs.summary import RunSummary

    for job in range(count):
        run = RunDir(round_dir / str(job))
        run.path.mkdir(parents=True)
        summary = RunSummary("alternet_tiny", "digits", {"acc": 0.5, "nll": 1.0}, epochs=epochs, global_step=10)
        run.write_summary(replace(summary, wall_seconds=seconds))


@pytest.mark.parametrize(
    ("budget", "number", "planned", "stops"),
    [
        (Budget(rounds=2), 2, 10, None),
        (Budget(rounds=2), 3, 10, "the budget of 2 round(s) is spent"),
        (Budget(hours=2.0), 3, 10, None),  # 6 jobs x 1,000 s spent: 1.67 h
        (Budget(hours=1.5), 3, 10, "the budget of 1.5 job-hours is spent (1.67 h)"),
        (Budget(epochs=40), 3, 16, None),  # 6 jobs x 4 epochs spent: 24 + 16 fits
        (Budget(epochs=40), 3, 17, "round 3 would train 17 epochs, beyond the budget of 40 (24 spent)"),
    ],
)
def test_a_round_starts_only_within_the_budget(tmp_path, budget, number, planned, stops):
    """Rounds, job-hours (the finished jobs' summed wall time) and summed epochs, counted over every round on disk."""
    for index in (1, 2):
        _finished_jobs(tmp_path / f"round_{index:02d}", 3, epochs=4, seconds=1000.0)
    search = Search(tmp_path, Settings((), "", 3, "error", 0.05, 3), budget)
    assert search._over_budget(number, planned) == stops


def test_the_model_option_command_merges_the_searchs_own_searchpath():
    """Two hydra.searchpath= overrides do not merge: the printed command lost the search's folder of options (or
    the user's data set's), and failed with "is not an option"."""
    from alternet.apps.buildup import _searchpath

    option = Path("/runs/bu1/conf/model/buildup.yaml")
    assert _searchpath(option, ["data=blobs", "hydra.searchpath=[pkg://my_pkg.conf]"]) == (
        "hydra.searchpath=[file:///runs/bu1/conf,pkg://my_pkg.conf]"
    )
    assert _searchpath(option, ["data=digits"]) == "hydra.searchpath=[file:///runs/bu1/conf]"


def test_the_help_says_each_options_default(capsys):
    from alternet.apps.buildup import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for said in ("seed=0..N-1; default 3", "decided on (default error)", "Holm over a round; default 0.05"):
        assert said in text


def test_a_rounds_parameter_counts_are_its_models_with_the_datas_classes(digits_run, tmp_path):
    """The counts in rounds.csv and summary.md were of a 2-class head whatever the data (no data config states its
    class count): the class count is the one the round's jobs were built with, read from a job's checkpoint."""
    import alternet
    from alternet.apps.buildup import _class_count
    from alternet.report.buildup import Arm, Round
    from alternet.report.runs import Run
    from alternet.runs.directories import RunDir
    from alternet.runs.summary import RunSummary

    job = Run(RunDir(digits_run), {}, RunSummary.from_json(digits_run / "metrics.json"))  # alternet_tiny on digits
    assert _class_count([Round(1, (Arm("C|CC|CM", None, (job,)),), None, None, "")]) == 10
    assert _class_count([]) is None
    search = Search(tmp_path, Settings(tuple(DIGITS), "", 2, "error", 0.05, 2), Budget())
    params, macs = search._facts_of("C|CM|CM", 10)
    model = alternet.create_model("alternet_tiny", num_classes=10, img_size=16, layout="C|CM|CM")
    assert params == sum(p.numel() for p in model.parameters()) and macs > 0
    assert search._facts_of("C|CC|CM", None) == (None, None)


def test_the_chosen_layouts_model_option_is_the_searched_model(tmp_path):
    """conf/model/buildup.yaml held the base option and the layout alone: model=buildup, as the docs give it, built
    the zoo's heads and widths, not those the search trained (its model.* overrides)."""
    from alternet.apps.config import compose

    settings = Settings((*DIGITS, "model.heads=[1,2,4]", "+model.drop_rate=0.1"), "", 2, "error", 0.05, 2)
    search = Search(tmp_path, settings, Budget())
    search._option_file("C|CM|CM", ["model.heads=[1,2,4]", "+model.drop_rate=0.1"])
    config = compose("train", ["model=buildup", f"hydra.searchpath=[file://{tmp_path / 'conf'}]"])
    assert (config.model.name, config.model.layout, list(config.model.heads)) == ("alternet_tiny", "C|CM|CM", [1, 2, 4])


def test_the_summary_gives_errors_in_the_unit_of_their_differences():
    """Means and test errors were fractions (0.9111 ± 0.0000) beside differences and MDEs in percentage points."""
    from alternet.apps.buildup import _pm

    assert _pm(0.9111, 0.0123, 100, 2) == "91.11 ± 1.23" and _pm(2.3456, None, 1, 3) == "2.346 ± 0.000"
