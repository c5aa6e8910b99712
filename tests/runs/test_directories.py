"""The one home of a run directory (alternet/runs/directories.py): every file name spelled only there, the run's summary
(metrics.json) as a typed record, and one reader of a sweep's jobs for the multirun callback and the report."""

from __future__ import annotations

import ast
import csv
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from alternet.apps.hydra.sweep import write_sweep_summary
from alternet.errors import CheckpointError, ConfigValueError
from alternet.report import build_report
from alternet.report.runs import read_sweep
from alternet.runs.directories import RunDir, SweepDir, SweepJobs, best_epoch
from alternet.runs.summary import OptimizedMetric, RunSummary

from helpers import ROOT

PACKAGE = ROOT / "alternet"
HOME = PACKAGE / "runs" / "directories.py"
# file names of a run or sweep directory: a string naming one of these anywhere outside the home is a second spelling
FILES = {
    "last.ckpt",
    "best-*.ckpt",
    "metrics.json",
    "environment.json",
    "config.yaml",
    "resumes.json",
    "metrics.csv",
    "hparams.yaml",
    "curves.png",
    "predictions.npz",
    "wandb-run-id",
    "wandb-group",
    ".lock",
    ".hydra",
    "overrides.yaml",
    "multirun.yaml",
    "summary.csv",
    "summary.png",
}
PREFIXES = ("best-epoch", "nonfinite-step")
# folder names that are also ordinary words (a config section, a command, a W&B key): a second spelling when joined
# onto a path or globbed
FOLDERS = {"checkpoints", "logs", "eval", "export", "report"}
ELSEWHERE = {("models/external.py", "checkpoints")}  # torch.hub's own cache folder, not a run's


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings or bare string statements (prose, not code)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _in_a_path(node: ast.Constant, parents: dict[int, ast.AST]) -> bool:
    """A string joined onto a path (``x / "name"``) or handed to a glob."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div):
        return True
    return isinstance(parent, ast.Call) and getattr(parent.func, "attr", None) in ("glob", "rglob", "joinpath")


def spelled_names(path: Path) -> list[str]:
    """``file:line: 'literal'`` for every string of ``path`` that names a run or sweep directory's file."""
    tree = ast.parse(path.read_text())
    prose = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    relative = path.relative_to(PACKAGE).as_posix()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in prose:
            continue
        parts = node.value.split("/")
        globbed = len(parts) > 1 and "*" in node.value
        folder = [part for part in parts if part in FOLDERS and (globbed or _in_a_path(node, parents))]
        folder = [part for part in folder if (relative, part) not in ELSEWHERE]
        if folder or any(part in FILES or part.startswith(PREFIXES) for part in parts):
            found.append((node.lineno, node.col_offset, f"alternet/{relative}:{node.lineno}: {node.value!r}"))
    return [hit for *_, hit in sorted(found)]


def test_a_run_directorys_files_are_named_only_by_its_home():
    spelled = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != HOME for hit in spelled_names(path)]
    assert spelled == [], "name these through alternet.runs.directories.RunDir / SweepDir:\n" + "\n".join(spelled)


def test_the_checker_catches_a_second_spelling(tmp_path, monkeypatch):
    package = tmp_path / "alternet"
    package.mkdir()
    source = package / "x.py"
    source.write_text(
        '"""metrics.json in prose is fine."""\n'
        'a = run / "metrics.json"\n'
        'b = run / "checkpoints" / name\n'
        'c = f"nonfinite-step{step}.ckpt"\n'
        'd = run.glob("logs/*.csv")\n'
        'e = config["export"]\n'  # a config section: not a path
    )
    monkeypatch.setitem(globals(), "PACKAGE", package)
    assert [hit.split(": ", 1)[1] for hit in spelled_names(source)] == [
        "'metrics.json'",
        "'checkpoints'",
        "'nonfinite-step'",
        "'logs/*.csv'",
    ]


def test_the_names_on_disk_are_the_ones_runs_have_always_had(tmp_path):
    run = RunDir(tmp_path)
    expected = {
        run.checkpoints: "checkpoints",
        run.last_checkpoint: "checkpoints/last.ckpt",
        run.nonfinite_checkpoint(7): "checkpoints/nonfinite-step7.ckpt",
        run.config: "config.yaml",
        run.environment: "environment.json",
        run.metrics: "metrics.json",
        run.resumes: "resumes.json",
        run.lock: ".lock",
        run.metrics_csv: "logs/metrics.csv",
        run.hparams: "logs/hparams.yaml",
        run.curves: "curves.png",
        run.eval_dir: "eval",
        run.predictions: "eval/predictions.npz",
        run.export_dir: "export",
        run.wandb_run_id: "wandb-run-id",
        run.wandb_group: "wandb-group",
        run.overrides_file: ".hydra/overrides.yaml",
    }
    assert [path.relative_to(tmp_path).as_posix() for path in expected] == list(expected.values())
    assert RunDir.BEST_FILENAME.format(epoch=4) + ".ckpt" == "best-epoch004.ckpt"
    assert best_epoch(run.checkpoints / "best-epoch004.ckpt") == 5  # Lightning's 0-based index, 1-based epoch
    sweep = SweepDir(tmp_path)
    assert [p.name for p in (sweep.multirun_record, sweep.summary_csv, sweep.summary_png, sweep.report_dir)] == [
        "multirun.yaml",
        "summary.csv",
        "summary.png",
        "report",
    ]


def _summary(run_dir: Path, **changes) -> RunSummary:
    summary = RunSummary(
        model="alternet_tiny",
        data="digits",
        test={"acc": 0.9, "top5": 1.0, "nll": 0.3, "ece": 0.02},
        train_clean={"acc": 0.95, "nll": 0.2},
        train_images=1257,
        epochs=2,
        global_step=20,
        best_val_score=0.25,
        best_epoch=2,
        monitor="val/nll",
        tested_checkpoint=str(run_dir / "checkpoints" / "best-epoch001.ckpt"),
        best_checkpoint=str(run_dir / "checkpoints" / "best-epoch001.ckpt"),
        last_checkpoint=str(run_dir / "checkpoints" / "last.ckpt"),
        run_dir=str(run_dir),
        train_images_per_sec=1000.0,
        optimized_metric=OptimizedMetric("val/nll", 0.25),
        curves=str(run_dir / "curves.png"),
        wall_seconds=12.5,
    )
    return replace(summary, **changes)


def test_a_summary_is_written_once_and_read_back_as_fields(tmp_path):
    run = RunDir(tmp_path)
    summary = _summary(tmp_path)
    assert run.summary() is None and not run.is_finished()
    run.write_summary(summary)
    assert run.summary() == summary and run.is_finished()
    payload = json.loads(run.metrics.read_text())
    assert list(payload) == [  # the keys in the order metrics.json has always had them; unset optional ones absent
        "model",
        "data",
        "test",
        "train_clean",
        "train_images",
        "data_subset",
        "epochs",
        "global_step",
        "best_val_score",
        "best_epoch",
        "monitor",
        "tested_checkpoint",
        "best_checkpoint",
        "last_checkpoint",
        "run_dir",
        "train_images_per_sec",
        "optimized_metric",
        "curves",
        "wall_seconds",
    ]
    assert payload["optimized_metric"] == {"name": "val/nll", "value": 0.25}
    # read back as fields (a RunSummary is no mapping: its JSON is to_json())
    assert summary.test["nll"] == 0.3 and summary.optimized_metric.value == 0.25
    assert summary.test_ema is None and summary.to_json() == payload
    assert summary.metric("val/nll") == 0.25 and summary.metric("test/acc") == 0.9
    assert summary.metric("train_clean/nll") == 0.2 and summary.metric("test_ema/acc") is None


def test_an_older_summary_reads_with_defaults_and_keeps_keys_it_does_not_know(tmp_path):
    older = {  # what the first training runs wrote: nine keys
        "model": "alternet_tiny",
        "data": "digits",
        "test": {"acc": 0.5, "nll": 1.2},
        "epochs": 1,
        "global_step": 10,
        "tested_checkpoint": "final weights",
        "best_checkpoint": None,
        "last_checkpoint": str(tmp_path / "checkpoints" / "last.ckpt"),
        "run_dir": str(tmp_path),
        "a_later_key": [1, 2],
    }
    (tmp_path / "metrics.json").write_text(json.dumps(older))
    summary = RunDir(tmp_path).summary()
    assert (summary.test["acc"], summary.epochs, summary.global_step) == (0.5, 1, 10)
    assert summary.optimized_metric is None and summary.train_clean is None and summary.wall_seconds is None
    assert summary.extra == {"a_later_key": [1, 2]} and summary.to_json()["a_later_key"] == [1, 2]


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ({"model": "m", "data": "d", "test": {"acc": 1.0}, "checkpoint": "c"}, r"\(no epochs, global_step\)"),
        ({"model": "m", "data": "d", "test": 0.5, "epochs": 1, "global_step": 1}, "its 'test' is not a mapping"),
        ([1, 2], "should hold a JSON object"),
    ],
)
def test_a_file_that_is_not_a_run_summary_is_refused_in_one_line(tmp_path, payload, why):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(CheckpointError, match=why) as caught:
        RunSummary.from_json(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def _job(sweep: Path, name: str, seed: int, *, finished: bool, hydra: bool = True) -> Path:
    run = RunDir(sweep / name)
    run.checkpoints.mkdir(parents=True)
    run.last_checkpoint.write_bytes(b"x")
    if hydra:
        run.hydra.mkdir()
        run.overrides_file.write_text(f"- seed={seed}\n- recipe.ema.decay=0.9\n")
    if finished:
        run.write_summary(_summary(run.path, test={"acc": 0.8 + seed / 100, "nll": 0.5}))
    return run.path


def test_one_sweep_reader_gives_the_callback_and_the_report_the_same_jobs(tmp_path):
    """A finished job, an interrupted one (only its last.ckpt) and one that never started: the multirun callback's
    summary.csv and the report list the same jobs, and both say what is missing."""
    sweep = tmp_path / "sweep"
    _job(sweep, "0", 0, finished=True)
    _job(sweep, "1", 1, finished=False, hydra=False)  # killed after its first checkpoint: no Hydra record copied
    (sweep / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - seed=0,1,2\n")  # job 2: no directory
    (sweep / "report").mkdir()  # what is written beside the jobs is not a job
    jobs = SweepDir(sweep).jobs()
    assert [job.path.name for job in jobs.finished] == ["0"]
    assert [job.path.name for job in jobs.unfinished] == ["1"]
    assert (jobs.expected, jobs.not_started, jobs.complete) == (3, 1, False)
    assert jobs.describe() == "1 of 3 jobs finished. Started, not finished: 1 (job 1). Not started: 1."
    unfinished = tmp_path / "unfinished"  # every job failed: the report named no sweep at all
    _job(unfinished, "0", 0, finished=False)
    (unfinished / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - seed=0,1\n")
    with pytest.raises(ConfigValueError, match=r"is a sweep none of whose jobs finished \(0 of 2 jobs finished\."):
        read_sweep(unfinished)
    fewer = SweepJobs(jobs.jobs, expected=1)  # relaunched as a 1-job sweep into the folder: it said "1 of 1"
    assert fewer.describe() == (
        "1 of 1 job finished. Started, not finished: 1 (job 1). The folder holds 2 job folders for the sweep's 1 "
        "jobs: the others are an earlier sweep's, counted here."
    )

    path = write_sweep_summary(sweep)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert [(r["job"], r["status"]) for r in rows] == [("0", "ok"), ("1", "unfinished")]
    assert rows[0]["seed"] == "0" and rows[0]["recipe.ema.decay"] == "0.9" and float(rows[0]["test/acc"]) == 0.8
    assert rows[0]["optimized_metric"] == "val/nll" and float(rows[0]["val/nll"]) == 0.25

    runs, read = read_sweep(sweep)
    assert [run.job.path.name for run in runs] == [job.path.name for job in read.finished] == ["0"]
    assert read == jobs and runs[0].overrides == {"seed": "0", "recipe.ema.decay": "0.9"}
    report = build_report(sweep, tmp_path / "report", wandb=False)
    text = (report["out_dir"] / "summary.md").read_text()
    assert (
        "A partial sweep, the unfinished jobs left out: "
        "1 of 3 jobs finished. Started, not finished: 1 (job 1). Not started: 1." in text
    )


def test_a_sweep_job_stopped_at_a_non_finite_loss_is_not_said_to_be_completed_by_the_sweeps_command(tmp_path):
    """A diverged job (its guard's nonfinite-stepN.ckpt, no newer last.ckpt) would diverge again from ckpt_path=last:
    the jobs line names it and points at its own resume; a job resumed past its divergence is an interrupted one."""
    sweep = tmp_path / "sweep"
    _job(sweep, "0", 0, finished=True)
    diverged = RunDir(_job(sweep, "1", 1, finished=False))
    diverged.nonfinite_checkpoint(3).write_bytes(b"x")
    resumed = RunDir(_job(sweep, "2", 2, finished=False))
    resumed.nonfinite_checkpoint(3).write_bytes(b"x")
    os.utime(resumed.nonfinite_checkpoint(3), (1, 1))  # older than its last.ckpt: resumed past it, then stopped
    (sweep / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - seed=0,1,2\n")
    jobs = SweepDir(sweep).jobs()
    assert [job.path.name for job in jobs.diverged] == ["1"]
    assert jobs.describe() == (
        "1 of 3 jobs finished. Started, not finished: 2 (jobs 1, 2). Stopped at a non-finite loss: job 1 (its "
        "train.log ends on the command that resumes it with a lower learning rate; the sweep's command would diverge "
        "again)."
    )
    text = (build_report(sweep, tmp_path / "report", wandb=False)["out_dir"] / "summary.md").read_text()
    assert "hydra.sweep.dir completes the others." in text
    shutil.rmtree(sweep / "2")
    (sweep / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - seed=0,1\n")
    shutil.rmtree(tmp_path / "report")
    text = (build_report(sweep, tmp_path / "report", wandb=False)["out_dir"] / "summary.md").read_text()
    assert "diverge again)." in text and "completes" not in text  # the only unfinished job: no relaunch advised
    shutil.rmtree(sweep / "0")
    (sweep / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - seed=1\n")
    with pytest.raises(ConfigValueError, match=r"diverge again\)\.\): each job's train.log says why$"):
        read_sweep(sweep)


def test_a_missing_sweep_directory_is_refused(tmp_path):
    with pytest.raises(ConfigValueError, match=r"sweep directory .* does not exist"):
        SweepDir(tmp_path / "missing").jobs()
    assert write_sweep_summary(tmp_path / "missing") is None
