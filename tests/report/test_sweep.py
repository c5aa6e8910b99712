"""Multirun: separate job directories, a W&B run per job, the sweep summary CSV, and the report of the sweep
(``alternet report``): figures, tables and the paper's verdicts."""

import csv
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from alternet import tracking
from alternet.errors import ConfigValueError
from alternet.report import build_report
from alternet.report.cli import main as report_main
from alternet.report.runs import read_history
from alternet.report.verdicts import INSUFFICIENT

from helpers import main_output, module_output, script_output
from helpers.paths import fingerprint

# pytest-xdist: the whole module on one worker, so that its sweep (session-scoped) is made once
pytestmark = pytest.mark.xdist_group("test_sweep")


@pytest.fixture(scope="session")
def sweep(tmp_path_factory):
    """Two models x two seeds of debug=fast on digits, logged to W&B offline, as one real multirun (in this process:
    a fresh interpreter's imports cost seconds; tests/test_faults.py runs sweeps in processes of their own)."""
    sweep_dir = tmp_path_factory.mktemp("sweep")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")  # the tests' WANDB_MODE=disabled switches W&B off
        code, stdout, stderr = script_output(
            "train.py",
            [
                "-m",
                "model=alternet_tiny,preresnet_tiny",
                "seed=0,1",
                "debug=fast",
                "trainer.limit_val_batches=1",
                "logger=wandb",
                "logger.wandb.offline=true",
                "evaluate.after_training=true",  # eval/predictions.npz: the test set's own noise in the intervals
                f"hydra.sweep.dir={sweep_dir}",
            ],
        )
    assert code == "0", stderr[-3000:]
    return sweep_dir, stdout


def test_multirun_writes_job_directories_and_a_summary(sweep):
    sweep_dir, stdout = sweep
    for job in ("0", "1", "2", "3"):
        assert (sweep_dir / job / "metrics.json").is_file()
        assert len(list((sweep_dir / job / "wandb").glob("offline-run-*"))) == 1  # each job its own W&B run
    with open(sweep_dir / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], r["seed"]) for r in rows] == [
        ("alternet_tiny", "0"),
        ("alternet_tiny", "1"),
        ("preresnet_tiny", "0"),
        ("preresnet_tiny", "1"),
    ]
    assert all(r["status"] == "ok" and 0 <= float(r["test/acc"]) <= 1 for r in rows)
    assert f"Sweep summary: {sweep_dir / 'summary.csv'}" in stdout
    from PIL import Image

    with Image.open(sweep_dir / "summary.png") as image:  # one bar per job, next to the table
        assert image.format == "PNG"


def test_report_of_a_sweep_writes_figures_tables_and_verdicts(sweep, tmp_path, monkeypatch, capsys):
    sweep_dir, _ = sweep
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "report"
    arguments = [str(sweep_dir), "--baseline", "model=preresnet_tiny", "--out", str(out)]
    started, start = [], tracking.start_run
    monkeypatch.setattr(tracking, "start_run", lambda settings, **init: started.append(init) or start(settings, **init))
    code, stdout, stderr = module_output("alternet", ["report", *arguments], monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    groups = {
        (job / "wandb-group").read_text().strip() for job in sweep_dir.iterdir() if (job / "wandb-group").is_file()
    }
    assert len(groups) == 1 and [init["group"] for init in started] == [*groups]  # the report sits with its runs
    with open(out / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert [(r["model"], r["seed"]) for r in runs] == [
        ("alternet_tiny", "0"),
        ("alternet_tiny", "1"),
        ("preresnet_tiny", "0"),
        ("preresnet_tiny", "1"),
    ]
    for row in runs:  # the report's numbers are the runs' own
        metrics = json.loads((sweep_dir / row["job"] / "metrics.json").read_text())
        assert float(row["test_acc"]) == pytest.approx(metrics["test"]["acc"])
        assert float(row["train_clean_nll"]) == pytest.approx(metrics["train_clean"]["nll"])
        assert float(row["test_ece"]) == pytest.approx(metrics["test"]["ece"])
    with open(out / "variants.csv") as f:
        variants = {r["variant"]: r for r in csv.DictReader(f)}
    assert variants["model=preresnet_tiny"]["verdict"] == "baseline"
    alternet = variants["model=alternet_tiny"]
    assert alternet["verdict"] == f"{INSUFFICIENT} (2; 3 needed)"  # two seeds: an interval, never a verdict
    errors = {r["seed"]: 1 - float(r["test_acc"]) for r in runs if r["model"] == "alternet_tiny"}
    base = {r["seed"]: 1 - float(r["test_acc"]) for r in runs if r["model"] == "preresnet_tiny"}
    assert float(alternet["error_delta"]) == pytest.approx(sum(errors.values()) / 2 - sum(base.values()) / 2)
    assert alternet["error_method"] == "welch"  # two architectures: no shared initialisation, never seed-paired
    assert alternet["test_set_noise"] == "True"
    assert float(alternet["error_ci_low"]) < float(alternet["error_delta"]) < float(alternet["error_ci_high"])
    half_width = (float(alternet["error_ci_high"]) - float(alternet["error_ci_low"])) / 2  # t[0.975] se
    assert float(alternet["error_mde"]) > half_width  # (t[0.975] + t[0.8]) se: its closed form in test_verdicts
    assert alternet["schedule_completed"] == "False"  # debug=fast: 1 epoch of the recipe's schedule
    epoch_nlls = [  # HDVW's training NLL: each run's last train/nll_epoch, read with the clean one
        list(read_history(sweep_dir / r["job"] / "logs" / "metrics.csv")["train/nll_epoch"].values())[-1]
        for r in runs
        if r["model"] == "alternet_tiny"
    ]
    assert float(alternet["train_nll_epoch"]) == pytest.approx(sum(epoch_nlls) / 2)
    assert alternet["nll_epoch_method"] == "welch" and alternet["verdict_hdvw_nll"] == f"{INSUFFICIENT} (2; 3 needed)"
    errors = list(errors.values())
    assert float(alternet["test_error"]) == pytest.approx(sum(errors) / 2)
    assert float(alternet["test_error_sd"]) == pytest.approx(abs(errors[0] - errors[1]) / math.sqrt(2))
    eces = [float(r["test_ece"]) for r in runs if r["model"] == "alternet_tiny"]
    assert float(alternet["test_ece"]) == pytest.approx(sum(eces) / 2)  # calibration beside accuracy (issue 36)
    assert float(alternet["test_nll"]) > 0 and "| test NLL | test ECE |" in (out / "summary.md").read_text()
    for name in ("error_vs_train_nll.png", "metrics_vs_model.png", "train_nll_curves.png", "summary.md"):
        assert (out / name).stat().st_size > 0, name
    summary = (out / "summary.md").read_text()
    assert "| model=alternet_tiny | 2 |" in summary and "Baseline: `model=preresnet_tiny`" in summary
    assert "include an estimate of the test set's own sampling noise" in summary and "Holm" in summary
    row = next(line for line in summary.splitlines() if line.startswith("| model=alternet_tiny"))
    assert " pp [" in row and "p=" in row  # delta, interval and p per row
    assert re.match(r" [+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\] p=", row.split("|")[7])  # NLL: 3 places
    assert "| MDE error |" in summary and "80% power" in summary and "| HDVW's training NLL |" in summary
    assert summary in stdout
    assert len(list((out / "wandb").glob("offline-run-*"))) == 1  # the sweep used W&B, so the report goes there too
    assert re.search(r"^W&B: offline run \w+ in .*/wandb/offline-run-.* \(upload later: wandb sync ", stderr, re.M)
    unbootstrapped = tmp_path / "no_bootstrap"
    code, _, stderr = module_output(
        "alternet", ["report", *arguments[:-1], str(unbootstrapped), "--bootstrap", "0"], monkeypatch, capsys
    )
    assert code == "0", stderr[-3000:]
    with open(unbootstrapped / "variants.csv") as f:  # predictions kept, bootstrap off: not in the intervals
        assert next(r for r in csv.DictReader(f) if r["variant"] == "model=alternet_tiny")["test_set_noise"] == "False"
    assert "sampling noise is not included (--bootstrap 0" in (unbootstrapped / "summary.md").read_text()


def test_a_second_report_into_a_folder_being_written_stops_in_one_line(sweep, tmp_path, monkeypatch, capsys):
    """Another process holds the report folder's lock (as a first report into it does while it writes)."""
    import os

    from alternet.apps import cli
    from alternet.files import OUTPUT_LOCK, OUTPUT_MARKER, lock_file, mark_output

    sweep_dir, _ = sweep
    out = tmp_path / "report"
    out.mkdir()
    mark_output(out, "report")
    holder = lock_file(out / OUTPUT_LOCK)
    try:
        with pytest.raises(SystemExit) as exited:
            cli.main(["report", str(sweep_dir), "--out", str(out)])
        assert str(exited.value.code).startswith(f"error: report directory {out} is being written by another command")
        assert f"(pid {os.getpid()} on" in str(exited.value.code)
        assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, OUTPUT_LOCK]
    finally:
        holder.close()


def test_a_report_stopped_midway_leaves_the_earlier_report_whole_and_says_how_to_go_on(sweep, tmp_path, monkeypatch):
    """Ctrl-C after the tables, before the last figure: the earlier report's files are all there, unmixed with the
    new tables, nothing staged is left beside them, and the command ends on one line saying so."""
    from alternet.apps import cli
    from alternet.report import build
    from alternet.training.stopping import COMMAND_INTERRUPTED

    sweep_dir, _ = sweep
    out = tmp_path / "report"
    build_report(sweep_dir, out, wandb=False)
    (out / "runs.csv").write_text("an earlier report's table\n")  # told apart from the table a new report writes
    before = {path.name: path.read_bytes() for path in out.iterdir()}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build.figures, "train_nll_curves", interrupted)
    with pytest.raises(SystemExit) as exited:
        cli.main(["report", str(sweep_dir), "--out", str(out), "--no-wandb"])
    assert exited.value.code == f"error: {COMMAND_INTERRUPTED['report']}"
    assert "run the same command again" in exited.value.code
    after = {path.name: path.read_bytes() for path in out.iterdir() if path.name != ".alternet-writing"}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_report_written_again_keeps_the_earlier_reports_wandb_runs(sweep, tmp_path):
    """The report replaced its folder whole, its ``wandb/`` included: an earlier report's offline W&B run, not yet
    synced and perhaps the only copy, went without a word, and the ``wandb sync`` command it had printed failed."""
    sweep_dir, _ = sweep
    out = tmp_path / "report"
    build_report(sweep_dir, out, wandb=False)
    earlier = out / "wandb" / "offline-run-20261203_131941-9znjxt0p"
    (earlier / "files").mkdir(parents=True)
    (earlier / "run-9znjxt0p.wandb").write_bytes(b"not yet synced")
    (out / "runs.csv").write_text("an earlier report's table\n")
    build_report(sweep_dir, out, wandb=False)
    assert (earlier / "run-9znjxt0p.wandb").read_bytes() == b"not yet synced" and (earlier / "files").is_dir()
    assert (out / "runs.csv").read_text() != "an earlier report's table\n"  # the report itself is new


def test_a_report_into_another_sweeps_report_folder_is_refused(sweep, tmp_path):
    """``--out B/report`` for sweep A silently replaced sweep B's own report with A's (both are reports, and the
    marker does not say of which sweep); B's report is left as it was."""
    sweep_dir, _ = sweep
    other = tmp_path / "other"
    shutil.copytree(sweep_dir, other, ignore=shutil.ignore_patterns("wandb", "report"))
    build_report(other, wandb=False)
    before = fingerprint(other / "report")
    with pytest.raises(ConfigValueError, match=f"^--out {other / 'report'} is the report folder of another sweep, "):
        build_report(sweep_dir, other / "report", wandb=False)
    assert fingerprint(other / "report") == before


def test_report_refuses_what_it_cannot_read(sweep, tmp_path):
    sweep_dir, _ = sweep
    no_sweep = pytest.warns(UserWarning, match="no -m sweep")  # said, beside what else is wrong
    with pytest.raises(ConfigValueError, match="holds no finished runs"), no_sweep:
        build_report(tmp_path)
    with pytest.raises(ConfigValueError, match=r"--baseline 'model=vit' matches 0 variants; choose one of"):
        build_report(sweep_dir, tmp_path / "out", baseline="model=vit", wandb=False)
    with pytest.raises(SystemExit, match=r"^error: sweep directory .*missing does not exist$"):
        report_main([str(tmp_path / "missing")])  # the CLI's own exit


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--alpha", "1.5", "--alpha 1.5 is invalid: it must be a family-wise significance level in (0, 0.5]"),
        ("--alpha", "0", "--alpha 0.0 is invalid"),
        ("--alpha", "nan", "--alpha nan is invalid"),
        ("--min-seeds", "1", "--min-seeds 1 is invalid: it must be an integer >= 2"),
        ("--error-margin", "-0.01", "--error-margin -0.01 is invalid: it must be a fraction of test error in (0, 1)"),
        ("--nll-margin", "0", "--nll-margin 0.0 is invalid: it must be nats of training NLL, > 0"),
        ("--power", "1", "--power 1.0 is invalid: it must be a power in [0.5, 1)"),
        ("--bootstrap", "10", "--bootstrap 10 is invalid: it must be 0 (off) or at least 100 draws"),
    ],
)
def test_report_options_out_of_range_fail_in_one_line_before_any_run_is_read(option, value, message, tmp_path):
    """--alpha 1.5 once printed "significance at alpha = 1.5" and turned an inconclusive result into "hurts";
    --min-seeds 1 gave "insufficient seeds (1; 1 needed)". The sweep directory here does not even exist: the
    options are refused first, and nothing is written."""
    with pytest.raises(SystemExit) as refused:
        report_main([str(tmp_path / "sweep"), option, value, "--out", str(tmp_path / "out")])
    assert str(refused.value.code).startswith(f"error: {message}") and "\n" not in str(refused.value.code)
    assert list(tmp_path.iterdir()) == []


def test_a_multirun_job_joins_its_sweeps_wandb_group(tmp_path):
    """W&B group of a multirun job: the sweep directory's and its parent's names (a build-up search's rounds are
    all round_NN, a default sweep's folder the time alone); a single run has none (see test_resume_mid_epoch)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from alternet.tracking import sweep_group

    from helpers import CONF

    with initialize_config_dir(str(CONF), version_base="1.3"):
        overrides = ["hydra.mode=MULTIRUN", f"hydra.sweep.dir={tmp_path / 'searchA' / 'round_01'}"]
        config = compose("train", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(config)
    try:
        assert sweep_group() == "searchA-round_01"
    finally:
        HydraConfig.instance().cfg = None
    assert sweep_group() is None


def test_a_relaunched_sweep_keeps_finished_jobs_and_resumes_interrupted_ones(tmp_path, monkeypatch, capsys):
    """The paper presets' contract (ckpt_path=last, a fixed hydra.sweep.dir): the command again completes a sweep,
    also one first launched without ckpt_path=last, as the report advises (its jobs' recorded overrides then lack
    it, which is no other sweep's). A finished job is kept untouched; one that stopped with a last.ckpt continues
    from it. (Both commands run in this process: a fresh interpreter costs ~8 s each.)"""
    command = ["-m", "seed=0,1", "debug=fast", "ckpt_path=last", f"hydra.sweep.dir={tmp_path}"]
    code, _, stderr = main_output("train.py", [o for o in command if o != "ckpt_path=last"], monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    finished, interrupted = tmp_path / "0", tmp_path / "1"
    kept = (finished / "metrics.json").stat().st_mtime_ns
    (interrupted / "metrics.json").unlink()  # job 1 stopped after its last checkpoint, before its records
    code, stdout, stderr = main_output("train.py", command, monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    assert f"{finished} holds a finished run (metrics.json): kept, nothing to train" in stdout
    assert (finished / "metrics.json").stat().st_mtime_ns == kept
    assert (interrupted / "metrics.json").is_file()
    resumes = json.loads((interrupted / "resumes.json").read_text())
    assert resumes[-1]["checkpoint"] == str(interrupted / "checkpoints" / "last.ckpt")


@pytest.mark.slow  # three sweeps, ~11 s
def test_a_sweep_in_folders_named_by_its_overrides_is_relaunched_into_them(tmp_path, monkeypatch, capsys):
    """hydra.sweep.subdir=${hydra.job.override_dirname} named the relaunch's folders with ckpt_path=last in them:
    every job trained again beside the first; and a relaunch without ckpt_path=last is told of the sweep's own
    directory (hydra.run.dir, which its hint named, is refused for a sweep)."""
    command = [
        "-m",
        "seed=0",
        "debug=fast",
        f"hydra.sweep.dir={tmp_path}",
        "hydra.sweep.subdir=${hydra.job.override_dirname}",
    ]
    code, _, stderr = main_output("train.py", command, monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    code, stdout, stderr = main_output("train.py", [*command, "ckpt_path=last"], monkeypatch, capsys)
    assert code == "0", stderr[-3000:]
    assert f"{tmp_path / 'debug=fast,seed=0'} holds a finished run (metrics.json): kept, nothing to train" in stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["debug=fast,seed=0"]
    code, _, _ = main_output("train.py", command, monkeypatch, capsys)
    assert (
        "already holds a finished run (metrics.json): resume it with ckpt_path=last, give the sweep its own "
        "directory (hydra.sweep.dir=...)" in code
    )


def test_the_report_of_a_partial_sweep_says_what_is_missing(sweep, tmp_path):
    sweep_dir, _ = sweep
    partial = tmp_path / "sweep"
    shutil.copytree(sweep_dir, partial, ignore=shutil.ignore_patterns("wandb", "report"))
    shutil.rmtree(partial / "3")  # never started
    (partial / "2" / "metrics.json").unlink()  # started, not finished
    report = build_report(partial, wandb=False)
    summary = (report["out_dir"] / "summary.md").read_text()
    assert (
        "A partial sweep, the unfinished jobs left out: "
        "2 of 4 jobs finished. Started, not finished: 1 (job 2). Not started: 1." in summary
    )
    assert "tested on the first images" not in summary  # the sweep's jobs tested the whole split
    for job in ("0", "2"):
        shutil.rmtree(partial / job)
    shutil.rmtree(report["out_dir"])
    summary = (build_report(partial, wandb=False)["out_dir"] / "summary.md").read_text()
    assert "1 of 4 jobs finished" in summary and "Swept: nothing (one run)." in summary  # not 'seeds only'
    with pytest.raises(ConfigValueError, match=r"matches 0 variants; choose one of: --baseline 'all runs'$"):
        build_report(partial, tmp_path / "r", baseline="model=vit", wandb=False)  # not 'all= runs='


def test_a_value_whose_every_job_failed_is_still_said_to_be_swept(sweep, tmp_path):
    """When both jobs of one model stopped unfinished (diverged, say), the report said "Swept: nothing (seeds
    only)", labelled the other model's runs "all runs" and refused ``--baseline model=THAT_MODEL``."""
    sweep_dir, _ = sweep
    partial = tmp_path / "sweep"
    shutil.copytree(sweep_dir, partial, ignore=shutil.ignore_patterns("wandb", "report"))
    for job in ("2", "3"):  # preresnet_tiny, both seeds: started, not finished
        (partial / job / "metrics.json").unlink()
    report = build_report(partial, baseline="model=alternet_tiny", wandb=False)
    assert report["baseline"] == "model=alternet_tiny"
    summary = (report["out_dir"] / "summary.md").read_text()
    assert "Swept: nothing" not in summary and "Started, not finished: 2 (jobs 2, 3)" in summary
    with open(report["out_dir"] / "runs.csv") as f:
        assert {row["model"] for row in csv.DictReader(f)} == {"alternet_tiny"}


def test_the_report_names_jobs_tested_on_part_of_the_split(sweep, tmp_path):
    """trainer.limit_test_batches: a job's test numbers are its first images' only, and the report says which."""
    from alternet.evaluation.robustness import update_metrics_json

    sweep_dir, _ = sweep
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("wandb", "report"))
    update_metrics_json(copy / "1" / "metrics.json", {"test_images": {"scored": 64, "of": 360}})
    summary = (build_report(copy, wandb=False)["out_dir"] / "summary.md").read_text()
    assert (
        "1 job(s) tested on the first images of the test split only (trainer.limit_test_batches; of 360): 1 (64)."
        in summary
    )


def test_the_report_compares_each_variants_robustness_with_the_baselines(tmp_path):
    """Robustness (the mean accuracy over the corruption sets a run scored after training, metrics.json's
    robustness.summary.robustness) per variant, and its seed-paired difference from the baseline with an interval;
    runs without it leave the columns empty (a sweep of two models x three seeds, written as the runs write it)."""
    from alternet.runs.directories import RunDir
    from alternet.runs.results import Selective
    from alternet.runs.summary import RunSummary

    from helpers.results import robustness_result

    robustness = {"a": [0.30, 0.31, 0.32], "b": [0.33, 0.35, 0.36]}
    for job, (model, seed) in enumerate((m, s) for m in ("a", "b", "c") for s in range(3)):
        run = RunDir(tmp_path / "sweep" / str(job))
        run.hydra.mkdir(parents=True)
        run.overrides_file.write_text(f"- seed={seed}\n- model={model}\n")
        scored = None
        if model in robustness:  # c did not score corruptions
            scored = robustness_result(robustness[model][seed], images=2000)
        aurc = 0.1 + 0.01 * seed  # the risk-coverage area, for b alone
        selective = Selective(aurc, aurc, 0.9, 0.9) if model == "b" else None
        test = {"acc": 0.6 + 0.01 * seed, "nll": 1.5}
        run.write_summary(RunSummary(model=model, data="cifar100", test=test, robustness=scored, selective=selective))
    report = build_report(tmp_path / "sweep", tmp_path / "report", baseline="model=a", wandb=False)
    rows = {row["variant"]: row for row in report["variants"]}
    assert rows["model=b"]["robustness"] == pytest.approx(sum(robustness["b"]) / 3)
    delta = rows["model=b"]["robustness_delta"]
    assert delta == pytest.approx((sum(robustness["b"]) - sum(robustness["a"])) / 3)
    assert rows["model=b"]["robustness_method"] == "welch"
    assert rows["model=b"]["robustness_ci_low"] < delta < rows["model=b"]["robustness_ci_high"]
    assert rows["model=a"]["robustness_delta"] is None and rows["model=c"]["robustness"] is None
    assert rows["model=c"]["robustness_delta"] is None
    assert rows["model=b"]["test_aurc"] == pytest.approx(0.11) and rows["model=a"]["test_aurc"] is None
    with open(tmp_path / "report" / "runs.csv") as f:
        assert [r["robustness"] for r in csv.DictReader(f)][:3] == ["0.3", "0.31", "0.32"]
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "| robustness | Δ robustness | verdict |" in summary
    assert "Robustness: mean accuracy over 5 generated corruption sets of 2,000 images each" in summary
    row = next(line for line in summary.splitlines() if line.startswith("| model=b"))
    assert f"{100 * delta:+.2f} pp [" in row.split("|")[13]  # the robustness difference in percentage points


def test_the_preflight_numbers_jobs_as_hydra_launches_them(sweep):
    """``apps.hydra.preflight.grid_jobs`` (what the pre-flight checks, and the job number its errors name) expands the
    sweep into the jobs Hydra ran, in the same order: each job directory's recorded overrides."""
    from omegaconf import OmegaConf

    from alternet.apps.hydra.preflight import grid_jobs
    from alternet.runs.directories import RunDir

    sweep_dir, _ = sweep
    config = OmegaConf.load(sweep_dir / "multirun.yaml")
    launched = [RunDir(sweep_dir / str(index)).overrides() for index in range(4)]
    assert grid_jobs(config) == launched
    assert [job[:2] for job in launched] == [
        [f"model={model}", f"seed={seed}"] for model in ("alternet_tiny", "preresnet_tiny") for seed in (0, 1)
    ]


def test_the_figure_scripts_read_each_models_scored_jobs_in_seed_order(sweep, monkeypatch):
    """docs/figures/arms.py, what the reproduction page's scripts read of a sweep: per model, its jobs' seeds, test
    accuracies and per-image correctness, keyed as their saved .npz files are; a model asked for and absent is
    refused in one line."""
    import numpy as np

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "docs" / "figures"))
    from arms import read_arms

    sweep_dir, _ = sweep
    arrays = read_arms([sweep_dir], ("seed", "acc", "correct"))
    models, fields = ("alternet_tiny", "preresnet_tiny"), ("acc", "correct", "seed")
    assert sorted(arrays) == [f"{model}/{field}" for model in models for field in fields]
    for model, first in (("alternet_tiny", 0), ("preresnet_tiny", 2)):
        assert arrays[f"{model}/seed"].tolist() == [0, 1]
        for seed in (0, 1):
            job = sweep_dir / str(first + seed)
            assert arrays[f"{model}/acc"][seed] == json.loads((job / "metrics.json").read_text())["test"]["acc"]
            with np.load(job / "eval" / "predictions.npz") as saved:
                correct = saved["probs"].argmax(axis=1) == saved["labels"]
            assert arrays[f"{model}/correct"].dtype == bool
            assert (arrays[f"{model}/correct"][seed] == correct).all()
    assert list(read_arms([sweep_dir], ("seed",), ("preresnet_tiny",))) == ["preresnet_tiny/seed"]
    with pytest.raises(SystemExit, match=r"no scored jobs of model=vit_tiny \(each job's eval/predictions.npz\)$"):
        read_arms([sweep_dir], ("seed",), ("preresnet_tiny", "vit_tiny"))


def test_records_the_report_reads_are_checked_named_and_counted(sweep, tmp_path):
    """A malformed number in a job's metrics.csv or metrics.json is refused in one line naming the file; a job whose
    test metrics are not finite (it diverged) is left out and named, not dropped silently; a job of another data set
    is warned about."""
    from alternet.errors import AlternetWarning, CheckpointError

    sweep_dir, _ = sweep
    copy = shutil.copytree(sweep_dir, tmp_path / "sweep")
    history = copy / "0" / "logs" / "metrics.csv"
    text = history.read_text().splitlines()
    header = text[0].split(",")
    row = text[1].split(",")
    column = next(i for i, name in enumerate(header) if name not in ("epoch", "step") and row[i])
    row[column] = "n/a"
    history.write_text("\n".join([text[0], ",".join(row), *text[2:]]) + "\n")
    with pytest.raises(ConfigValueError, match=rf"^{history} line 2 is malformed \({header[column]}='n/a'"):
        build_report(copy, tmp_path / "r1", wandb=False)
    shutil.copy(sweep_dir / "0" / "logs" / "metrics.csv", history)

    metrics = copy / "1" / "metrics.json"
    payload = json.loads(metrics.read_text())
    payload["test"]["acc"] = "high"
    metrics.write_text(json.dumps(payload))
    with pytest.raises(CheckpointError, match=rf"^{metrics} is malformed: test.acc='high' is not a number"):
        build_report(copy, tmp_path / "r2", wandb=False)
    payload["test"]["acc"] = None  # what a NaN accuracy is written as
    metrics.write_text(json.dumps(payload))
    other = copy / "2" / "metrics.json"
    other.write_text(json.dumps(json.loads(other.read_text()) | {"data": "cifar10"}))
    with pytest.warns(AlternetWarning, match=r"different data sets \(digits for most; cifar10: jobs 2\)"):
        report = build_report(copy, tmp_path / "r3", wandb=False)
    flipped = copy / "0" / "metrics.json"  # a job that tested two views of each image beside one-view jobs
    flipped.write_text(json.dumps(json.loads(flipped.read_text()) | {"test_flip": True}))
    with pytest.warns(AlternetWarning, match=r"jobs 0 tested with recipe.test_flip .* compared as if measured alike"):
        build_report(copy, tmp_path / "r3_flip", wandb=False)
    with open(tmp_path / "r3_flip" / "runs.csv") as f:
        assert {row["job"]: row["test_flip"] for row in csv.DictReader(f)} == {"0": "True", "2": "False", "3": "False"}
    summary = (tmp_path / "r3" / "summary.md").read_text()
    assert "1 finished job(s) left out, their test metrics not finite (diverged): 1 (test acc not finite)" in summary
    assert sum(int(row["seeds"]) for row in report["variants"]) == 3
    shutil.rmtree(copy / "3" / ".hydra")  # its settings unknown: it was a variant of its own, and the baseline
    with pytest.warns(AlternetWarning, match=r"job 3 has no Hydra record of its overrides .*: left out of the"):
        report = build_report(copy, tmp_path / "r4", wandb=False)
    assert sum(int(row["seeds"]) for row in report["variants"]) == 2 and "-" not in report["baseline"]


def test_a_swept_layout_is_named_with_or_without_hydras_quotes_and_kept_whole_in_the_table():
    from alternet.report.build import Variant, _escaped, pick_baseline

    variants = [Variant("model.layout='C|CC|CC'", []), Variant("model.layout='C|CC|CM'", [])]
    assert pick_baseline(variants, "model.layout=C|CC|CM") is variants[1]
    assert pick_baseline(variants, "model.layout='C|CC|CC'") is variants[0]
    assert _escaped("model.layout='C|CC|CM'") == "model.layout='C\\|CC\\|CM'"
    with pytest.raises(ConfigValueError) as refused:  # its advice pasted into a shell: a pipe quoted
        pick_baseline(variants, "model.layout=C|MM|MM")
    assert str(refused.value).endswith(
        "choose one of: --baseline 'model.layout=C|CC|CC', --baseline 'model.layout=C|CC|CM'"
    )


def test_the_sweep_summary_gives_a_quoted_value_without_hydras_quotes(tmp_path):
    from alternet.apps.hydra.sweep import job_row
    from alternet.runs.directories import RunDir

    records = tmp_path / "0" / ".hydra"
    records.mkdir(parents=True)
    (records / "overrides.yaml").write_text("- model.layout='C|CM|CM'\n- seed=1\n")
    row = job_row(RunDir(tmp_path / "0"))
    assert row["model.layout"] == "C|CM|CM" and row["seed"] == "1" and row["status"] == "unfinished"


def test_a_copied_job_inside_the_sweep_is_refused_not_counted_twice(sweep, tmp_path):
    """A backup copy of job 2 beside it counted its seed twice: n=4 and another mean, beside an unchanged delta."""
    sweep_dir, _ = sweep
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("wandb", "report"))
    shutil.copytree(copy / "2", copy / "2_bak")
    with pytest.raises(ConfigValueError, match=r"jobs 2 and 2_bak ran the same overrides and seed .* move one"):
        build_report(copy, wandb=False)
    assert not (copy / "report").exists()
    shutil.rmtree(copy / "2_bak")
    for job in ("0", "1", "2", "3"):  # no job records its overrides (hydra.output_subdir=null): none is a twin
        shutil.rmtree(copy / job / ".hydra")
    assert build_report(copy, tmp_path / "unrecorded", wandb=False)["variants"]


def test_a_sweeps_bars_are_labelled_by_what_tells_its_jobs_apart():
    """A search's summary.png labelled each bar with every override, the shared ones and a drawn learning rate's 17
    digits included, which ran into each other at three jobs."""
    from alternet.report.figures import _job_labels

    jobs = [
        {"job": "0", "overrides": "debug=fast recipe.optimizer.lr=0.008419498462635601 optimized_metric=val/nll"},
        {"job": "1", "overrides": "debug=fast recipe.optimizer.lr=0.00529 optimized_metric=val/nll seed=3"},
    ]
    assert _job_labels(jobs) == ["0\nrecipe.optimizer.lr=0.008419\nseed=-", "1\nrecipe.optimizer.lr=0.00529\nseed=3"]
    assert _job_labels([{"job": "0", "overrides": "model=vit_mini_cifar"}]) == ["0"]  # one job: nothing to tell apart
