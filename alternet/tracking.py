"""Experiment tracking: every call into Weights & Biases, and the loggers a training run writes through.

CSV always; W&B on request, falling back to offline mode (``wandb sync`` later) when it cannot reach its server.
W&B is imported only where it is used, so commands that do not track pay nothing for it.
"""

from __future__ import annotations

import csv
import netrc
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_info

from .errors import AlternetError
from .files import write_text

WANDB_HOST = "api.wandb.ai"
ARTIFACT_ALIASES = ("best", "latest")


class ArtifactError(AlternetError, RuntimeError):
    """A W&B artifact that cannot be downloaded (offline, no API key, unknown reference)."""


# offline detection -----------------------------------------------------------------------------


def _wandb_host() -> str:
    return urlparse(os.environ.get("WANDB_BASE_URL", f"https://{WANDB_HOST}")).hostname or WANDB_HOST


def _has_api_key(host: str) -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def _reachable(host: str, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def offline_reason(requested_offline: bool) -> str | None:
    """Why W&B must run offline (``None`` when it can sync): asked for, no API key, or no network."""
    if requested_offline or os.environ.get("WANDB_MODE") in ("offline", "disabled", "dryrun"):
        return "requested"
    host = _wandb_host()
    if not _has_api_key(host):
        return "no W&B API key (set WANDB_API_KEY or run `wandb login`)"
    if not _reachable(host):
        return f"{host} is unreachable"
    return None


# training runs ---------------------------------------------------------------------------------


class HistoryCSVLogger(CSVLogger):
    """Lightning's CSV logger, except that a resumed run keeps the rows the interrupted run wrote before the
    checkpoint it resumes from (Lightning's writer deletes ``metrics.csv``); rows from that step on are dropped,
    because the resumed run logs them again."""

    def __init__(self, *args: Any, resume_step: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._experiment is not None:
            return self._experiment
        path = Path(self.log_dir) / "metrics.csv"
        kept, keys = [], []
        if self.resume_step is not None and path.is_file():
            with open(path, newline="") as file:
                reader = csv.DictReader(file)
                keys = list(reader.fieldnames or [])
                kept = [row for row in reader if row.get("step") and int(float(row["step"])) < self.resume_step]
        writer = super().experiment  # Lightning's writer; it removes the old file
        if keys:
            with open(path, "w", newline="") as file:
                out = csv.DictWriter(file, fieldnames=sorted(keys))
                out.writeheader()
                out.writerows(kept)
            writer.metrics_keys = sorted(keys)
        return writer


def wandb_run_id(run_dir: Path) -> str:
    """The W&B run id of this run directory, created once and kept in it, so a resumed run continues its W&B run
    instead of starting a second one."""
    path = run_dir / "wandb-run-id"
    if path.is_file():
        return path.read_text().strip()
    run_id = uuid.uuid4().hex[:8]
    write_text(path, run_id + "\n")
    return run_id


def build_loggers(
    config: Mapping[str, Any], run_dir: Path, run_config: dict, resume_step: int | None = None
) -> list[Logger]:
    """CSV logger into ``<run_dir>/logs``, plus W&B when ``config.wandb`` (the ``logger`` group) is set. A resumed
    run (``resume_step``: the checkpoint's global step) keeps the CSV rows logged before it and its W&B run."""
    loggers: list[Logger] = [HistoryCSVLogger(save_dir=str(run_dir), name="", version="logs", resume_step=resume_step)]
    wandb_cfg = config.get("wandb")
    if not wandb_cfg:
        return loggers
    reason = offline_reason(bool(wandb_cfg["offline"]))
    offline = reason is not None
    if offline and reason != "requested":
        rank_zero_info(f"W&B: {reason}; logging offline to {run_dir}/wandb (sync later with `wandb sync`).")
    loggers.append(
        WandbLogger(
            project=wandb_cfg["project"],
            entity=wandb_cfg["entity"],
            group=wandb_cfg["group"] or sweep_group(),
            tags=list(wandb_cfg["tags"] or []),
            name=wandb_cfg["name"] or run_name(run_config, run_dir),
            save_dir=str(run_dir),
            offline=offline,
            log_model=bool(wandb_cfg["log_model"]) and not offline,
            config=run_config,
            id=wandb_run_id(run_dir),
            resume="allow",
            settings={"init_timeout": 30, "silent": True} if offline else {"init_timeout": 60},
        )
    )
    return loggers


def run_name(run_config: Mapping[str, Any], run_dir: Path) -> str:
    """What ran, for the W&B runs table: ``<model>-<data>-s<seed>`` (the run directory's name without them)."""
    try:
        return f"{run_config['model']['name']}-{run_config['data']['name']}-s{run_config['seed']}"
    except (KeyError, TypeError):
        return run_dir.name


def sweep_group() -> str | None:
    """The W&B group of a multirun job: its sweep directory's name (one group per sweep); None for a single run."""
    try:
        hydra = HydraConfig.get()
    except ValueError:  # not inside a Hydra job
        return None
    return Path(hydra.sweep.dir).name if hydra.mode == RunMode.MULTIRUN else None


# the direction of each validation metric, so the W&B runs table shows its best value (max or min) per run
BEST_OF = {"val/acc": "max", "val/top5": "max", "val/nll": "min", "val/ece": "min", "train_clean/nll": "min"}


def define_best_metrics(loggers: list[Logger]) -> None:
    """``define_metric`` for :data:`BEST_OF` on each W&B logger's run (rank zero's; other ranks have none)."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            experiment = logger.experiment
            if hasattr(experiment, "define_metric"):
                for name, goal in BEST_OF.items():
                    experiment.define_metric(name, summary=goal)


def active_run() -> Any:
    """The W&B run this process is logging to, if one is active and not disabled."""
    import wandb

    run = wandb.run
    return None if run is None or run.disabled else run


def run_location(run: Any) -> str:
    """Where to look at ``run``: its URL, or for an offline run its directory and the command that uploads it."""
    if run.offline:
        sync_dir = Path(run.dir).parent
        return f"offline run {run.id} in {sync_dir} (upload later: wandb sync {sync_dir})"
    return str(run.url)


def finish(exit_code: int = 0) -> None:
    """Close the active W&B run, if any (also after a failure, and between multirun jobs)."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)


# evaluation runs -------------------------------------------------------------------------------


def start_evaluation_run(settings: Mapping[str, Any], name: str, config: Mapping[str, Any], out_dir: Path) -> Any:
    """A W&B run of job type ``evaluation`` (``settings``: evaluate.yaml's ``wandb`` section)."""
    import wandb

    offline = offline_reason(bool(settings["offline"])) is not None
    return wandb.init(
        project=settings["project"],
        entity=settings["entity"],
        name=name,
        job_type="evaluation",
        tags=list(settings["tags"] or []),
        config=dict(config),
        mode="offline" if offline else "online",
        dir=str(out_dir),
        reinit="finish_previous",
    )


def flatten(metrics: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """Nested numbers as ``prefix/a/b`` keys (lists and strings are left out)."""
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}/{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, name)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = value
    return flat


def log_report(run: Any, report: Mapping[str, Any], prefix: str = "eval") -> None:
    """Put an evaluation report (its metrics.json) into ``run``: summary numbers, the robustness table, images."""
    import wandb

    for section in ("test", "temperature_scaling"):
        if section in report:
            run.summary.update(flatten(report[section], f"{prefix}/{section}"))
    payload: dict[str, Any] = {}
    robustness = report.get("robustness")
    if robustness:
        run.summary.update(flatten(robustness["summary"], f"{prefix}/robustness"))
        if robustness.get("extra"):  # the corruptions beyond the 15, apart from the headline numbers
            run.summary.update(flatten(robustness["extra"]["summary"], f"{prefix}/robustness_extra"))
        table = robustness["table"]
        columns = list(table[0])
        payload[f"{prefix}/robustness_table"] = wandb.Table(
            columns=columns, data=[[r[c] for c in columns] for r in table]
        )
    for path in map(Path, report.get("files", [])):
        if path.suffix == ".png":
            payload[f"{prefix}/{path.stem}"] = wandb.Image(str(path))
    for name, result in (report.get("analysis") or {}).items():
        run.summary.update(flatten({k: v for k, v in result.items() if k != "files"}, f"{prefix}/analysis/{name}"))
        for path in map(Path, result.get("files", [])):
            if path.suffix == ".png":
                payload[f"{prefix}/analysis/{path.stem}"] = wandb.Image(str(path))
    if payload:
        run.log(payload)


def log_sweep_report(
    settings: Mapping[str, Any], sweep: str, out_dir: Path, files: Sequence[Path], rows: Sequence[Mapping[str, Any]]
) -> str:
    """A W&B run of job type ``report`` in the sweep's project and group (``settings``: the runs' logger.wandb
    section) holding the report's variant table and figures; returns the run's path (``entity/project/id``)."""
    import wandb

    offline = offline_reason(bool(settings.get("offline"))) is not None
    run = wandb.init(
        project=settings.get("project") or "alternet",
        entity=settings.get("entity"),
        group=settings.get("group") or sweep,
        name=f"report-{sweep}",
        job_type="report",
        mode="offline" if offline else "online",
        dir=str(out_dir),
        reinit="finish_previous",
    )
    columns = list(rows[0]) if rows else []
    payload: dict[str, Any] = {
        "report/variants": wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])
    }
    payload |= {f"report/{path.stem}": wandb.Image(str(path)) for path in files if path.suffix == ".png"}
    run.log(payload)
    path = run.path
    run.finish()
    return str(path)


# model artifacts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggedArtifact:
    name: str  # e.g. model-1a2b3c4d
    kind: str  # "checkpoint" or "export"
    path: Path


def download_artifact(ref: str) -> Path:
    """Download ``entity/project/name:version`` (into W&B's artifact directory) and return the folder."""
    reason = offline_reason(False)
    if reason is not None:
        why = "W&B is in offline mode (WANDB_MODE)" if reason == "requested" else reason
        raise ArtifactError(
            f"cannot download W&B artifact {ref}: {why}. Download it where W&B is reachable "
            f"(`wandb artifact get {ref} --root DIR`) and pass DIR instead"
        )
    import wandb

    try:
        return Path(wandb.Api(timeout=60).artifact(ref).download())
    except (wandb.errors.Error, ValueError, OSError) as error:
        raise ArtifactError(f"cannot download W&B artifact {ref}: {error}") from error


def log_model_artifacts(
    run: Any, checkpoint: Path, export_dir: Path | None, metadata: dict[str, Any]
) -> list[LoggedArtifact]:
    """Log the checkpoint (``model-<run id>``, as Lightning names checkpoint artifacts) and the export
    (``export-<run id>``) as ``model`` artifacts with aliases best and latest. Files are referenced in place
    (immutable policy): an offline run records them for ``wandb sync``, an online run uploads them."""
    import wandb

    logged = []
    entries: Sequence[tuple[str, str, Path]] = [("model", "checkpoint", checkpoint)]
    if export_dir is not None:
        entries = [*entries, ("export", "export", export_dir)]
    for prefix, kind, path in entries:
        artifact = wandb.Artifact(f"{prefix}-{run.id}", type="model", metadata={**metadata, "kind": kind})
        if path.is_dir():
            artifact.add_dir(str(path), policy="immutable")
        else:
            artifact.add_file(str(path), name="model.ckpt", policy="immutable")
        run.log_artifact(artifact, aliases=list(ARTIFACT_ALIASES))
        logged.append(LoggedArtifact(artifact.name, kind, path))
    return logged


def artifact_notice(run: Any, logged: list[LoggedArtifact]) -> str:
    """What happened to the artifacts: where they are, and for an offline run how to upload them."""
    names = ", ".join(f"{a.name} ({a.kind}, {a.path})" for a in logged)
    if run.offline:
        sync_dir = Path(run.dir).parent
        return (
            f"W&B is offline: nothing was uploaded. Model artifacts {names} are recorded in the offline run and "
            f"the files stay in place; upload them with `wandb sync {sync_dir}` (keep the files until then)."
        )
    ref = f"{run.entity}/{run.project}/{logged[-1].name}:best"
    return (
        f"W&B: logged model artifacts {names} with aliases {', '.join(ARTIFACT_ALIASES)}; "
        f"pull: alternet.hub.load({ref!r})"
    )
