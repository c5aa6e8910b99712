"""An evaluation's results as records (alternet/runs/results.py): each reads back from its file's object as the same
record, a run's summary holds them typed, and a file that is not an evaluation's is refused in one line."""

import json

import pytest

from alternet.errors import CheckpointError
from alternet.runs.results import EvaluationReport, OodResult, OodScores, Selective, Temperature, TestImages
from alternet.runs.summary import RunSummary

from helpers.results import robustness_result

ROBUST = robustness_result(0.7, images=50)
REPORT = EvaluationReport(
    model="alternet_tiny",
    data="digits",
    test={"acc": 0.9, "nll": 0.3, "acc90": None},
    checkpoint="best.ckpt",
    ema=False,
    selective=Selective(0.05, 0.04, 0.95, 0.93),
    temperature_scaling=Temperature(1.3, {"acc": 0.9, "nll": 0.28}),
    test_images=TestImages(40, 360),
    ood=OodResult(
        "/ood", "folder", 12, 40, {"msp": OodScores(0.8, 0.9, 0.6, 0.5), "energy": OodScores(0.7, 0.8, 0.5, 0.6)}
    ),
    robustness=ROBUST,
    files=["reliability.png"],
    extra={"written_by_a_later_version": 1},
)


def test_every_record_reads_back_from_its_file_as_itself(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(REPORT.to_json()))
    payload = json.loads(path.read_text())
    assert EvaluationReport.from_json(path) == REPORT
    assert payload["ood"]["msp"] == {"auroc": 0.8, "aupr_in": 0.9, "aupr_out": 0.6, "fpr95": 0.5}  # the file's shape
    assert payload["robustness"]["summary"]["robustness"] == pytest.approx(0.7)
    assert payload["test_images"] == {"scored": 40, "of": 360} and "temperature_scaling" in payload
    assert "analysis" not in payload and payload["written_by_a_later_version"] == 1  # unset left out, unknown kept


def test_a_runs_summary_holds_the_results_typed():
    summary = RunSummary("m", "digits", {"acc": 0.5}, selective=REPORT.selective, ood=REPORT.ood, robustness=ROBUST)
    read = RunSummary.from_payload(json.loads(json.dumps(summary.to_json())))
    assert read == summary and read.robustness.summary.robustness == pytest.approx(0.7)


def test_a_result_missing_what_it_needs_is_refused_in_one_line(tmp_path):
    payload = REPORT.to_json()
    del payload["robustness"]["table"][0]["acc"]
    with pytest.raises(CheckpointError, match=r"^a row of robustness.table lacks acc: the file is not an alternet"):
        EvaluationReport.from_payload(payload)
    (tmp_path / "metrics.json").write_text(json.dumps(payload))
    with pytest.raises(CheckpointError, match=r"metrics.json: a row of robustness.table lacks acc") as error:
        EvaluationReport.from_json(tmp_path / "metrics.json")
    assert str(error.value).startswith(str(tmp_path)) and "\n" not in str(error.value)
    run = {"model": "m", "data": "d", "test": {}, "epochs": 1, "global_step": 1, "selective": {"aurc": 0.1}}
    with pytest.raises(
        CheckpointError, match=r"^the summary is malformed: selective lacks augrc, acc_cov90, acc_cov95"
    ):
        RunSummary.from_payload(run)


def test_a_training_summary_is_not_read_as_an_evaluation(tmp_path):
    """A run's metrics.json has an evaluation's keys (model, data, test) and more: it was read as one, with no
    selective results, and the docs' report.selective.aurc failed on None."""
    (tmp_path / "metrics.json").write_text(json.dumps(RunSummary("m", "digits", {"acc": 0.5}).to_json()))
    with pytest.raises(CheckpointError, match=r"metrics.json: a training run's summary, not an evaluation's"):
        EvaluationReport.from_json(tmp_path / "metrics.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"test": {"acc": 1.7, "nll": 0.3}}, r"test.acc=1.7 is out of its range"),
        ({"test": {"acc": 0.5, "nll": -3}}, r"test.nll=-3 is out of its range"),
        ({"train_clean": {"ece": -0.1}}, r"train_clean.ece=-0.1 is out of its range"),
        ({"epochs": -4}, r"epochs=-4 is no count >= 0"),
        ({"train_images": 2.5}, r"train_images=2.5 is no count >= 0"),
    ],
)
def test_a_summary_holding_an_impossible_number_is_refused(change, message):
    """Only the types were checked: a report printed a test error of -0.7 and an NLL of -3 from an edited file."""
    run = {"model": "m", "data": "d", "test": {"acc": 0.5, "nll": 0.3}, "epochs": 1, "global_step": 1} | change
    with pytest.raises(CheckpointError, match=rf"^the summary is malformed: {message}"):
        RunSummary.from_payload(run)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"test": {"acc": "0.9"}}, r"the evaluation is malformed: test.acc='0.9' is not a number; evaluate the"),
        ({"test": {"acc": 97.0}}, r"the evaluation is malformed: test.acc=97.0 is out of its range \(a share in"),
        ({"test": [1]}, r"the evaluation is malformed: its 'test' is not a mapping of metrics"),
        ({"robustness": {**ROBUST.to_json(), "schema": 99}}, r"robustness is of schema 99, which this alternet \("),
        ({"robustness": {**ROBUST.to_json(), "table": 5}}, r"robustness.table is not a list of conditions"),
    ],
)
def test_an_evaluation_holding_a_malformed_or_newer_result_is_refused_as_a_summary_is(change, message, tmp_path):
    """Read as they were (a report would have averaged the string '0.9' and an accuracy of 97), a newer robustness
    schema read as this one, a table of 5 a TypeError: RunSummary refused the same numbers."""
    (tmp_path / "metrics.json").write_text(json.dumps(REPORT.to_json() | change))
    with pytest.raises(CheckpointError, match=rf"^{tmp_path / 'metrics.json'}: {message}"):
        EvaluationReport.from_json(tmp_path / "metrics.json")


def test_an_evaluation_read_from_no_file_or_a_folder_says_which_once(tmp_path):
    """``from_json`` of a missing file or a folder said "unreadable or not valid JSON: [Errno 2] ..." and a file
    that is no JSON named its path twice."""
    from alternet.errors import CheckpointError
    from alternet.runs.results import EvaluationReport

    text = tmp_path / "comparison.csv"
    text.write_text("model,acc\n")
    for path, said in (
        (tmp_path / "nope.json", f"{tmp_path / 'nope.json'} does not exist"),
        (tmp_path, f"{tmp_path} is a directory, not a JSON file"),
        (text, f"{text} is unreadable or not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    ):
        with pytest.raises(CheckpointError) as refused:
            EvaluationReport.from_json(path)
        assert str(refused.value) == said
