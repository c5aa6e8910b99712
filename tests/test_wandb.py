"""W&B as its users use it, on real offline runs: an evaluation consumes the checkpoint artifact its training run
logged (same name, same digest: lineage) and joins that run's group; robustness and analysis results arrive as
interactive charts; an unreachable server costs init_timeout, then the run logs offline."""

import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import wandb
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from wandb.sdk.wandb_run import Run

from alternet import tracking
from alternet.apps.evaluate import run_evaluate
from alternet.apps.train import train
from alternet.errors import AlternetWarning, ConfigValueError
from alternet.tracking import WandbSettings, log_model_artifacts, start_run, use_checkpoint, wandb_settings

from helpers import CONF, FAST, compose_train


def _spy(monkeypatch, name, record):
    original = getattr(Run, name)

    def spy(self, *args, **kwargs):
        record.append((self, args, kwargs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Run, name, spy)


def test_evaluation_consumes_the_training_checkpoint_artifact_joins_its_group_and_logs_charts(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    logged, used, payloads, groups = [], [], [], []
    _spy(monkeypatch, "log_artifact", logged)
    _spy(monkeypatch, "use_artifact", used)
    _spy(monkeypatch, "log", payloads)
    finish = wandb.finish

    configs, summaries = [], []

    def record_group_then_finish(*args, **kwargs):
        if wandb.run is not None:
            groups.append((wandb.run.job_type, wandb.run.group))
            configs.append(dict(wandb.run.config))
            summaries.append(dict(wandb.run.summary))
        return finish(*args, **kwargs)

    monkeypatch.setattr(wandb, "finish", record_group_then_finish)
    run_dir = tmp_path / "run"
    summary = train(compose_train(*FAST, "logger=wandb", output_dir=run_dir))
    run_id = (run_dir / "wandb-run-id").read_text().strip()
    checkpoint = next(a[0] for _, a, _ in logged if a[0].metadata.get("kind") == "checkpoint")
    assert checkpoint.name == f"model-{run_id}"  # one naming scheme: only alternet writes model-<run id>

    overrides = [
        f"ckpt={summary.best_checkpoint}",
        "logger=wandb",
        "robustness.enabled=true",
        "robustness.max_images=24",
        "robustness.corruptions=[gaussian_noise,fog]",
        "robustness.workers=1",
        f"robustness.cache_dir={tmp_path / 'cache'}",
        "analysis=[lesion]",
        "analysis.lesion.images=16",
        f"paths.output_dir={tmp_path / 'eval'}",
    ]
    with initialize_config_dir(str(CONF), version_base="1.3"):
        run_evaluate(compose("evaluate", overrides=overrides))
    assert not used  # W&B refuses to declare inputs offline ...
    assert configs[-1]["scored_artifact"] == checkpoint.name  # ... so the offline run names its input instead
    assert groups[-1] == ("evaluation", run_id) and groups[0][1] == run_id  # training's group: its own id

    charts = {key: value for _, (payload, *_), _ in payloads for key, value in payload.items()}
    for key in ("eval/robustness_by_severity", "eval/robustness_by_family", "eval/analysis/lesion/drop_by_depth"):
        assert type(charts[key]).__name__ == "CustomChart", key  # interactive, not a picture
    assert isinstance(charts["eval/analysis/lesion/lesion_table"], wandb.Table)
    assert isinstance(charts["eval/robustness_heatmap"], wandb.Image)  # the static figures still come along
    assert isinstance(charts["eval/risk_coverage"], wandb.Image)
    assert {"eval/selective/aurc", "eval/selective/augrc", "eval/test/ece_adaptive"} <= set(summaries[-1])
    assert summaries[-1]["eval/test_images"] <= summaries[-1]["eval/test_images_of"]  # how many the numbers cover


def test_an_unreachable_server_falls_back_to_offline_within_init_timeout(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there: no answer
    wandb.teardown()  # W&B reads its environment once per process: start afresh with this one
    started = time.monotonic()
    init = dict(dir=str(tmp_path), id="0a1b2c3d", resume="allow")  # as training starts it: the offline run takes
    run = start_run(wandb_settings({"project": "p", "init_timeout": 1}), **init)  # the id the online one was given
    assert time.monotonic() - started < 60
    try:
        assert run.offline and run.id == "0a1b2c3d"
    finally:
        wandb.finish()
        wandb.teardown()
    assert "the W&B server did not accept the run (" in caplog.text  # W&B's own reason: the address it could not
    assert "127.0.0.1:9" in caplog.text or "resume status" in caplog.text  # reach, or the run id's it could not ask
    assert "upload later: `wandb sync`" in caplog.text


class OnlineRun:
    """Stands in for an online ``wandb.run``: records what it is told to log and use."""

    id, entity, project, offline = "abc123", "me", "alternet", False

    def __init__(self):
        self.logged, self.used, self.config = [], [], {}
        self.config = type("Config", (), {"update": lambda _, values, **kw: self.values.update(values)})()
        self.values = {}

    def log_artifact(self, artifact, aliases):
        self.logged.append(artifact)

    def use_artifact(self, artifact):
        self.used.append(artifact)


def test_an_online_evaluation_uses_the_artifact_its_training_run_logged(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "best-epoch003.ckpt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    training, evaluation = OnlineRun(), OnlineRun()
    (logged,) = log_model_artifacts(training, checkpoint, None, {})
    assert use_checkpoint(evaluation, checkpoint, training.id) == logged.name == "model-abc123"
    (declared,) = evaluation.used
    assert (declared.name, declared.type) == ("model-abc123", "model")
    assert declared.digest == training.logged[0].digest  # same name, same content: one artifact, linked
    assert evaluation.values == {"scored_artifact": "model-abc123"}
    assert use_checkpoint(OnlineRun(), checkpoint, None) == "model-run"  # no W&B training run: its directory


def test_train_evaluate_and_report_build_the_same_wandb_settings_from_the_same_values(tmp_path, monkeypatch):
    """One settings shape (conf/logger/wandb.yaml, ``logger.wandb.*``) parsed by one function for the three commands
    that log to W&B: the same values give the same settings; the report's ``--wandb`` gives the packaged ones, as
    ``logger=wandb`` does; evaluate's retired ``wandb.*`` keys are refused by name."""
    monkeypatch.setenv("WANDB_MODE", "offline")  # the tests' "disabled" switches W&B off
    import yaml

    from alternet.apps import evaluate as evaluate_app
    from alternet.report import build_report
    from alternet.runs.directories import RunDir
    from alternet.runs.summary import RunSummary
    from alternet.tracking import WandbSettings
    from alternet.training.loggers import build_loggers

    seen: list[WandbSettings] = []
    monkeypatch.setattr(tracking, "start_run", lambda settings, **init: seen.append(settings))  # no W&B run
    monkeypatch.setattr(evaluate_app, "check_reference", lambda source: None)  # no model is read
    monkeypatch.setattr(evaluate_app, "evaluate_model", lambda config, *rest: (seen.append(config.logger.wandb), 0))
    monkeypatch.setattr(evaluate_app, "log_evaluation", lambda *args: None)
    monkeypatch.setattr(evaluate_app, "evaluation_report", lambda report, out: "")
    monkeypatch.setattr(tracking, "log_sweep_report", lambda settings, *args: seen.append(settings) or "p/r")

    def train(*values: str) -> WandbSettings:
        config = OmegaConf.to_container(compose_train(*values, output_dir=tmp_path / "run"), resolve=True)
        build_loggers(wandb_settings(config["logger"]["wandb"]), RunDir(tmp_path / "run"), {})
        return seen.pop()

    model = tmp_path / "model"  # an export, as far as the file system tells: the stand-in job reads no weights
    model.mkdir()
    (model / "config.json").write_text("{}")

    def evaluate(*values: str) -> WandbSettings | None:
        with initialize_config_dir(str(CONF), version_base="1.3"):
            overrides = [f"ckpt={model}", f"paths.output_dir={tmp_path / 'eval'}", *values]
            run_evaluate(compose("evaluate", overrides=overrides))
        return seen.pop()

    def report(section: dict | None, *flag: bool) -> WandbSettings | None:
        run = RunDir(tmp_path / "sweep" / "0")
        run.hydra.mkdir(parents=True, exist_ok=True)
        run.overrides_file.write_text("- seed=0\n")
        run.config.write_text(yaml.safe_dump({"logger": {"wandb": section}}))
        run.write_summary(RunSummary(model="m", data="digits", test={"acc": 0.5, "nll": 1.0}))
        result = build_report(tmp_path / "sweep", tmp_path / "report", wandb=flag[0] if flag else None)
        return seen.pop() if result["wandb_run"] else None

    values = ["logger=wandb", "logger.wandb.project=p", "logger.wandb.entity=me", "logger.wandb.tags=[a,b]"]
    values += ["logger.wandb.offline=true", "logger.wandb.init_timeout=5", "logger.wandb.group=g"]
    trained = train(*values)
    assert trained == WandbSettings(
        project="p", entity="me", group="g", name=None, tags=["a", "b"], offline=True, init_timeout=5
    )
    assert evaluate(*values) == trained
    recorded = OmegaConf.to_container(compose_train(*values), resolve=True)["logger"]["wandb"]
    assert report(recorded) == trained  # the report logs where its sweep's runs did
    assert report(recorded, False) is None and report(None) is None  # --no-wandb; runs without W&B

    packaged = train("logger=wandb")
    assert packaged == WandbSettings(
        project="alternet", entity=None, group=None, name=None, tags=[], offline=False, init_timeout=60
    )
    assert evaluate("logger=wandb") == packaged
    with pytest.raises(ConfigCompositionException, match="wandb"):  # the retired spelling: Hydra names the key
        evaluate("wandb.enabled=true")
    assert report(None, True) == packaged  # --wandb for a sweep that did not use W&B
    assert evaluate() is None


def test_a_run_without_wandb_never_imports_it_and_one_asking_for_it_is_told_in_one_line(tmp_path, monkeypatch):
    """W&B that cannot be imported (a broken installation): training with the CSV logger alone went on to import it
    at its start and end (a traceback); ``logger=wandb`` is refused before any work."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    summary = train(compose_train(*FAST, output_dir=tmp_path / "csv"))
    assert (tmp_path / "csv" / "metrics.json").is_file() and summary.global_step > 0
    with pytest.raises(ConfigValueError, match=r"^logger=wandb needs W&B, which cannot be imported \(.*\): pip"):
        train(compose_train(*FAST, "logger=wandb", output_dir=tmp_path / "wandb"))
    assert not (tmp_path / "wandb").exists()


def test_wandb_mode_disabled_switches_wandb_off_as_wandb_documents(tmp_path, monkeypatch):
    """W&B's own switch: a run with WANDB_MODE=disabled logged a whole offline run and said to upload it."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with pytest.warns(AlternetWarning, match="WANDB_MODE=disabled: nothing is logged to W&B"):
        train(compose_train(*FAST, "logger=wandb", output_dir=tmp_path))
    assert not (tmp_path / "wandb").exists() and not (tmp_path / "wandb-run-id").exists()


def test_a_wandb_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    def unwritable(*args, **kwargs):
        raise PermissionError(f"{tmp_path}/wandb/offline-run-x/logs is not writable")

    monkeypatch.setattr(wandb, "init", unwritable)
    with pytest.raises(ConfigValueError, match=r"^W&B cannot write its run into .*/wandb: .* is not writable$"):
        start_run(wandb_settings({"project": "p", "offline": True}), dir=str(tmp_path))


def test_a_resumed_offline_run_is_uploaded_whole_and_its_earlier_segment_is_named(
    tmp_path, monkeypatch, caplog, capsys
):
    """Each start of an offline run writes a segment of its own; the upload command named only the last."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    first = train(compose_train(*FAST, "logger=wandb", "trainer.max_epochs=1", output_dir=tmp_path))
    run_id = (tmp_path / "wandb-run-id").read_text().strip()
    time.sleep(1.1)  # W&B names a segment's folder to the second: a start in the same second shares the first's
    resumed = train(compose_train(*FAST, "logger=wandb", "trainer.max_epochs=2", "ckpt_path=last", output_dir=tmp_path))
    assert resumed.global_step > first.global_step
    segments = sorted((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(segments) == 2
    assert "earlier offline segment(s) of this run are not uploaded" in caplog.text
    assert f"wandb sync {tmp_path / 'wandb'}/offline-run-*-{run_id}  # its 2 segments" in capsys.readouterr().out


def test_an_evaluation_runs_in_the_group_its_settings_name_else_the_training_runs(monkeypatch):
    """logger.wandb.group set in alternet evaluate lost to the training run's group without a word."""
    started = []
    monkeypatch.setattr(tracking, "start_run", lambda settings, **init: started.append(init["group"]))
    settings = WandbSettings(project="p", entity=None, group=None, name=None, tags=[], offline=True, init_timeout=5)
    tracking.start_evaluation_run(settings, "eval", {}, Path("."), group="training-group")
    tracking.start_evaluation_run(replace(settings, group="mine"), "eval", {}, Path("."), group="training-group")
    assert started == ["training-group", "mine"]
