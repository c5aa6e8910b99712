"""Experiment tracking: every call into Weights & Biases (the Lightning loggers a training run writes through are
:mod:`alternet.training.loggers`).

CSV always; W&B on request, falling back to offline mode (``wandb sync`` later) when it cannot reach its server.
W&B is imported only where it is used, so commands that do not track pay nothing for it.
"""

from __future__ import annotations

import csv
import logging
import netrc
import os
import sys
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from .architectures.config import model_config
from .errors import AlternetError, AlternetWarning, ConfigValueError
from .files import write_text
from .runs.directories import RunDir
from .runs.results import Condition, EvaluationReport, RobustnessResult
from .typed import Section, build, shown

log = logging.getLogger(__name__)

WANDB_HOST = "api.wandb.ai"
ARTIFACT_ALIASES = ("best", "latest")


class ArtifactError(AlternetError, RuntimeError):
    """A W&B artifact that cannot be downloaded (offline, no API key, unknown reference)."""


# settings --------------------------------------------------------------------------------------

WANDB_SECTION = "logger.wandb"  # where the settings sit in train's and evaluate's configs (logger=wandb)


@dataclass(kw_only=True)
class WandbSettings(Section):
    """The one shape of W&B settings (the typed ``logger.wandb`` section), for ``alternet train``, ``alternet
    evaluate`` and ``alternet report``: ``logger=wandb`` (conf/logger/wandb.yaml, which holds every default)
    in train's and evaluate's configs; the report reads its sweep's runs' section (:func:`wandb_settings`). ``name``
    and ``group`` name the run the command starts (null: the command's own choice); the report names its run
    itself."""

    project: str
    entity: str | None
    group: str | None
    name: str | None
    tags: list[str]
    offline: bool
    init_timeout: float

    def check(self) -> None:
        self.require(
            "project",
            _w_and_b_name,
            f"must be a W&B project name (at most {NAME_LENGTH} characters, none of {NOT_IN_NAMES})",
        )
        self.require(
            "entity",
            lambda v: _w_and_b_name(v, NOT_IN_NAMES + " \t"),
            f"must be a W&B entity (a user or team name, none of {NOT_IN_NAMES} or spaces)",
        )
        self.require(
            "group", lambda v: 0 < len(str(v)) <= NAME_LENGTH, f"must be a group name of 1 to {NAME_LENGTH} characters"
        )
        for tag in map(str, self.tags or []):
            if not 0 < len(tag) <= TAG_LENGTH:
                shown_tag = repr(tag if len(tag) <= 20 else tag[:20] + "...")
                raise ConfigValueError(f"tags: {shown_tag} has {len(tag)} characters; W&B takes 1 to {TAG_LENGTH}")
        if not isinstance(self.offline, bool):  # a null here is no default: it must be said
            raise ConfigValueError(f"offline={shown(self.offline)} is invalid: must be true or false")
        self.require("init_timeout", lambda v: not isinstance(v, bool) and v > 0, "must be seconds > 0")

    def init_args(self) -> dict[str, Any]:
        """What every run of these settings passes to ``wandb.init`` (the run's own name, group and job go apart)."""
        return {"project": self.project, "entity": self.entity, "tags": [str(tag) for tag in self.tags or []]}


WANDB_KEYS = tuple(f.name for f in fields(WandbSettings))
NAME_LENGTH, TAG_LENGTH = 128, 64  # W&B's limits on project and group names, and on tags
NOT_IN_NAMES = "/\\#?%:"  # W&B refuses a project name holding any of them


def _w_and_b_name(value: Any, refused: str = NOT_IN_NAMES) -> bool:
    return isinstance(value, str) and 0 < len(value) <= NAME_LENGTH and not set(value) & set(refused)


def usable(settings: WandbSettings | None) -> WandbSettings | None:
    """``settings`` for a command about to log to W&B, checked before any work: None, with a warning, when W&B's
    own switch ``WANDB_MODE=disabled`` turns it off; a W&B that cannot be imported is refused in one line."""
    if settings is None:
        return None
    if os.environ.get("WANDB_MODE") == "disabled":
        warnings.warn(
            "WANDB_MODE=disabled: nothing is logged to W&B, though logger=wandb asks for it (WANDB_MODE=offline "
            "logs for `wandb sync` later)",
            AlternetWarning,
            stacklevel=2,
        )
        return None
    try:
        import wandb  # noqa: F401
    except Exception as error:  # an ImportError, or whatever a broken installation raises
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigValueError(
            f"logger=wandb needs W&B, which cannot be imported ({reason}): pip install 'wandb>=0.31', or leave "
            "logger=wandb out"
        ) from None
    return settings


@cache
def _packaged_wandb() -> dict[str, Any]:
    text = resources.files("alternet.conf").joinpath("logger", "wandb.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text)["wandb"])


def wandb_settings(
    section: Mapping[str, Any] | None, enabled: bool | None = None, key: str = WANDB_SECTION
) -> WandbSettings | None:
    """W&B settings from a section that need not hold every key (a sweep's recorded ``logger.wandb``, for the
    report): the section over the packaged defaults, checked as the typed section (one line naming ``key``), or
    None when W&B is off (a null section). ``enabled`` switches it explicitly: False turns it off, True on, with the
    packaged defaults where there is no section (the report's ``--wandb``). Train and evaluate get theirs composed
    (``logger.wandb`` of their typed configs)."""
    if enabled is False or (section is None and not enabled):
        return None
    return build(WandbSettings, {**_packaged_wandb(), **(section or {})}, prefix=f"{key}.")


# offline detection -----------------------------------------------------------------------------


def _has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", f"https://{WANDB_HOST}")).hostname or WANDB_HOST
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def offline_reason(requested_offline: bool) -> str | None:
    """Why W&B must run offline before trying the server (``None``: try it): asked for (``offline``,
    ``WANDB_MODE``), or no API key. Whether the server answers is W&B's own business: :func:`start_run` asks it,
    through any proxy the environment names (``HTTPS_PROXY``), within ``init_timeout``."""
    if requested_offline or os.environ.get("WANDB_MODE") in ("offline", "dryrun"):
        return "requested"
    if not _has_api_key():
        return "no W&B API key (set WANDB_API_KEY or run `wandb login`)"
    return None


def start_run(settings: WandbSettings, **init: Any) -> Any:
    """``wandb.init`` with the project, entity and tags of ``settings`` and the run's own ``init`` (name, group,
    job type, directory, config ...), online when it can be, else offline with a one-line notice saying why and how
    to upload later. An unreachable server (network, proxy, firewall) costs at most ``settings.init_timeout``."""
    import wandb

    init = settings.init_args() | init
    reason = offline_reason(settings.offline)
    if reason is None:
        try:
            return wandb.init(mode="online", settings=wandb.Settings(init_timeout=settings.init_timeout), **init)
        except wandb.errors.Error as error:  # CommError: no answer within init_timeout; AuthenticationError
            reason = f"the W&B server did not accept the run ({str(error).splitlines()[0]})"
            wandb.teardown()  # W&B's service still holds the run's id: an offline run of that id needs a new one
    try:
        run = wandb.init(mode="offline", **init)
    except OSError as error:  # its folder cannot be written (read-only, full)
        raise ConfigValueError(f"W&B cannot write its run into {init.get('dir', '.')}/wandb: {error}") from None
    if reason != "requested":
        log.warning(f"W&B: {reason}; logging offline to {offline_directory(run)} (upload later: `wandb sync`).")
    return run


# training runs ---------------------------------------------------------------------------------


def _kept(path: Path, value: str) -> str:
    """The value ``path`` holds, ``value`` written there first when it holds none."""
    if path.is_file():
        return path.read_text().strip()
    write_text(path, value + "\n")
    return value


def wandb_run_id(run: RunDir) -> str:
    """The W&B run id of this run directory, created once and kept in it, so a resumed run continues its W&B run
    instead of starting a second one."""
    return _kept(run.wandb_run_id, uuid.uuid4().hex[:8])


def wandb_group(run: RunDir, group: str) -> str:
    """The W&B group of this run directory, fixed at its first start (a resumed run and the evaluation runs of
    its checkpoints join it): the configured group, a sweep's, or the run's own id."""
    return _kept(run.wandb_group, group)


def training_run(run: RunDir | None) -> dict[str, str]:
    """The W&B id and group a training run directory recorded (empty when it did not log to W&B)."""
    if run is None:
        return {}
    files = {"id": run.wandb_run_id, "group": run.wandb_group}
    return {key: path.read_text().strip() for key, path in files.items() if path.is_file()}


def run_name(run_config: Mapping[str, Any], run: RunDir) -> str:
    """What ran, for the W&B runs table: ``<model>-<data>-s<seed>``, the model by its label
    (:meth:`~alternet.architectures.config.ModelConfig.label`; the run directory's name without them)."""
    try:
        return f"{model_config(run_config['model']).label()}-{run_config['data']['name']}-s{run_config['seed']}"
    except (KeyError, TypeError):
        return run.path.name


def sweep_group() -> str | None:
    """The W&B group of a multirun job: its sweep directory's and its parent's names (one group per sweep: the
    rounds of two build-up searches are both ``round_01``); None for a single run."""
    try:
        hydra = HydraConfig.get()
    except ValueError:  # not inside a Hydra job
        return None
    if hydra.mode != RunMode.MULTIRUN:
        return None
    return group_of_sweep(Path(hydra.sweep.dir))


def group_of_sweep(sweep: Path) -> str:
    """The W&B group of the jobs of the sweep directory ``sweep``, with its parent's name: multirun/DATE/TIME is
    ``DATE-TIME``, a build-up search's SEARCH/round_01 ``SEARCH-round_01``."""
    sweep = Path(os.path.abspath(sweep))
    return f"{sweep.parent.name}-{sweep.name}"[-NAME_LENGTH:] if sweep.parent.name else sweep.name


def active_run() -> Any:
    """The W&B run this process is logging to, if one is active and not disabled."""
    if sys.modules.get("wandb") is None:  # nothing started one: a run without W&B never imports it
        return None
    import wandb

    run = wandb.run
    return None if run is None or run.disabled else run


def offline_directory(run: Any) -> Path:
    """The directory ``wandb sync`` uploads an offline run from (``run.dir`` is its ``files/`` inside)."""
    return Path(run.dir).parent


def sync_command(run: Any) -> str:
    """The command that uploads an offline run: every segment of it (a resumed run starts one per start, in its
    run directory's ``wandb/``), which ``wandb sync`` uploads in the order they started."""
    folder = offline_directory(run)
    if len(segments := _segments(folder.parent, run.id)) > 1:
        return f"wandb sync {folder.parent}/offline-run-*-{run.id}  # its {len(segments)} segments, in order"
    return f"wandb sync {folder}"


def unsynced_segments(run: RunDir, run_id: str) -> list[Path]:
    """The offline segments of the W&B run ``run_id`` in ``run``'s ``wandb/`` that ``wandb sync`` has not uploaded
    (it leaves ``run-<id>.wandb.synced`` beside the run's file)."""
    return [s for s in _segments(run.wandb_dir, run_id) if not (s / f"run-{run_id}.wandb.synced").is_file()]


def _segments(wandb_dir: Path, run_id: str) -> list[Path]:
    """The offline runs of id ``run_id`` in a ``wandb/`` folder: one per start of a resumed run, oldest first."""
    return sorted(wandb_dir.glob(f"offline-run-*-{run_id}"))


def run_location(run: Any) -> str:
    """Where to look at ``run``: its URL, or for an offline run its directory and the command that uploads it."""
    if run.offline:
        return f"offline run {run.id} in {offline_directory(run)} (upload later: {sync_command(run)})"
    return str(run.url)


def finish(exit_code: int = 0) -> None:
    """Close the active W&B run, if any (also after a failure, and between multirun jobs)."""
    if sys.modules.get("wandb") is None:
        return
    import wandb

    if wandb.run is not None:
        wandb.finish(exit_code=exit_code)


# evaluation runs -------------------------------------------------------------------------------


def start_evaluation_run(
    settings: WandbSettings, name: str, config: Mapping[str, Any], out_dir: Path, group: str | None = None
) -> Any:
    """A W&B run of job type ``evaluation`` named ``settings.name`` or ``name``, in ``settings.group`` when set, else
    in ``group`` (the training run's, so a model's training and evaluations sit together)."""
    return start_run(
        settings,
        name=settings.name or name,
        group=settings.group or group,
        job_type="evaluation",
        config=dict(config),
        dir=str(out_dir),
        reinit="finish_previous",
    )


def use_checkpoint(run: Any, checkpoint: Path, training_id: str | None) -> str:
    """Declare the scored checkpoint an input of ``run``: the same artifact (name and content digest) its training
    run logged, so W&B's lineage links training -> checkpoint -> evaluation. A checkpoint from a run that did not
    use W&B gets an artifact of its own, named after its run directory. W&B cannot declare inputs offline: an
    offline run records the artifact's name in its config (``scored_artifact``) instead. Returns the name."""
    name = checkpoint_artifact_name(training_id or checkpoint.resolve().parent.parent.name)
    run.config.update({"scored_artifact": name}, allow_val_change=True)
    if not run.offline:
        run.use_artifact(_checkpoint_artifact(name, checkpoint, {}))
    return name


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


def log_report(run: Any, report: EvaluationReport, prefix: str = "eval") -> None:
    """Put an evaluation report (its metrics.json) into ``run``: summary numbers, the robustness table, images."""
    import wandb

    sections = {
        "test": report.test,
        "temperature_scaling": report.temperature_scaling,
        "selective": report.selective,
        "ood": report.ood,
    }
    for section, value in sections.items():
        if value:
            run.summary.update(flatten(value if isinstance(value, dict) else value.to_json(), f"{prefix}/{section}"))
    if report.test_images is not None:  # max_images: the numbers above are of the first images only
        images = report.test_images
        run.summary.update({f"{prefix}/test_images": images.scored, f"{prefix}/test_images_of": images.of})
    payload: dict[str, Any] = {}
    robustness = report.robustness
    if robustness:
        run.summary.update(flatten(robustness.summary.to_json(), f"{prefix}/robustness"))
        if robustness.extra:  # the corruptions beyond the 15, apart from the headline numbers
            run.summary.update(flatten(robustness.extra.summary.to_json(), f"{prefix}/robustness_extra"))
        columns = [item.name for item in fields(Condition)]
        payload[f"{prefix}/robustness_table"] = wandb.Table(
            columns=columns, data=[[getattr(row, c) for c in columns] for row in robustness.table]
        )
        payload |= _robustness_charts(robustness, prefix)
    for path in map(Path, report.files):
        if path.suffix == ".png":
            payload[f"{prefix}/{path.stem}"] = wandb.Image(str(path))
    for name, result in (report.analysis or {}).items():
        run.summary.update(flatten({k: v for k, v in result.items() if k != "files"}, f"{prefix}/analysis/{name}"))
        for path in map(Path, result.get("files", [])):
            if path.suffix == ".png":
                payload[f"{prefix}/analysis/{path.stem}"] = wandb.Image(str(path))
            elif path.suffix == ".csv":
                payload |= _csv_charts(path, f"{prefix}/analysis/{name}")
    if payload:
        run.log(payload)


def _robustness_charts(robustness: RobustnessResult, prefix: str) -> dict[str, Any]:
    """Interactive charts (hover, zoom, toggle series): accuracy against severity per corruption, and the mean
    accuracy per corruption family."""
    import wandb

    table = robustness.table
    severities = sorted({row.severity for row in table})
    corruptions = list(dict.fromkeys(row.corruption for row in table))
    acc = {row.key: row.acc for row in table}
    families = robustness.summary.per_family
    family_table = wandb.Table(columns=["family", "acc"], data=[[f, block["acc"]] for f, block in families.items()])
    return {
        f"{prefix}/robustness_by_severity": wandb.plot.line_series(
            xs=severities,
            ys=[[acc.get((c, s), float("nan")) for s in severities] for c in corruptions],
            keys=corruptions,
            title="accuracy by corruption severity",
            xname="severity",
        ),
        f"{prefix}/robustness_by_family": wandb.plot.bar(family_table, "family", "acc", title="accuracy by family"),
    }


def _csv_charts(path: Path, prefix: str) -> dict[str, Any]:
    """An analysis CSV as a W&B table (sortable, chartable in the UI), and, for a per-block table (one row per
    depth), a line chart of each numeric column against depth."""
    import wandb

    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    if not rows:
        return {}
    columns = list(rows[0])
    data = [[_number_or_text(row[c]) for c in columns] for row in rows]
    table = wandb.Table(columns=columns, data=data)
    charts: dict[str, Any] = {f"{prefix}/{path.stem}_table": table}
    depths = [row.get("depth") for row in rows]
    if "depth" in columns and len(set(depths)) == len(depths):
        numeric = [
            c for i, c in enumerate(columns) if c not in DEPTH_COLUMNS and all(isinstance(r[i], float) for r in data)
        ]
        for column in numeric:
            charts[f"{prefix}/{column}_by_depth"] = wandb.plot.line(table, "depth", column, title=f"{column} by depth")
    return charts


DEPTH_COLUMNS = ("depth", "normalized_depth", "stage")  # the x axis and block descriptions, not measurements


def _number_or_text(value: str) -> Any:
    try:
        return float(value)
    except ValueError:
        return value


def log_sweep_report(
    settings: WandbSettings,
    sweep: str,
    group: str,
    out_dir: Path,
    files: Sequence[Path],
    rows: Sequence[Mapping[str, Any]],
) -> str:
    """A W&B run ``report-<sweep>`` of job type ``report`` in the sweep's project and ``group`` (``settings``: the
    runs' own; their group) holding the report's variant table and figures; returns where to look at it
    (:func:`run_location`)."""
    import wandb

    run = start_run(
        settings,
        group=settings.group or group,
        name=f"report-{sweep}",
        job_type="report",
        dir=str(out_dir),
        reinit="finish_previous",
    )
    columns = list(rows[0]) if rows else []
    payload: dict[str, Any] = {
        "report/variants": wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])
    }
    payload |= {f"report/{path.stem}": wandb.Image(str(path)) for path in files if path.suffix == ".png"}
    run.log(payload)
    where = run_location(run)  # its URL, or offline its folder and the upload command
    run.finish()
    return where


# model artifacts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoggedArtifact:
    name: str  # e.g. model-1a2b3c4d
    kind: str  # "checkpoint" or "export"
    path: Path
    aliases: tuple[str, ...] = ARTIFACT_ALIASES


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
    run: Any,
    checkpoint: Path,
    export_dir: Path | None,
    metadata: dict[str, Any],
    best: bool = True,
    export_metadata: dict[str, Any] | None = None,
) -> list[LoggedArtifact]:
    """Log the checkpoint (``model-<run id>``) and the export (``export-<run id>``) as ``model`` artifacts with
    aliases best and latest, or latest alone where the checkpoint is not the monitor's best (``best=False``: the
    final weights, tested where the test split is the validation split or no monitor chose). Files are referenced
    in place (immutable policy): an offline run records them for ``wandb sync``, an online run uploads them.
    ``export_metadata``: the export's where its weights are not the checkpoint's (EMA: its own test numbers)."""
    aliases = ARTIFACT_ALIASES if best else ("latest",)
    logged = []
    entries = [(checkpoint_artifact_name(run.id), "checkpoint", checkpoint, metadata)]
    if export_dir is not None:
        entries.append((f"export-{run.id}", "export", export_dir, export_metadata or metadata))
    for name, kind, path, described in entries:
        artifact = _checkpoint_artifact(name, path, {**described, "kind": kind})
        run.log_artifact(artifact, aliases=list(aliases))
        logged.append(LoggedArtifact(artifact.name, kind, path, aliases))
    return logged


def checkpoint_artifact_name(run_id: str) -> str:
    """The one name of a training run's checkpoint artifact (only alternet writes it: Lightning's ``log_model``,
    which would write the same name with other contents, is not used)."""
    return f"model-{run_id}"


def _checkpoint_artifact(name: str, path: Path, metadata: dict[str, Any]) -> Any:
    """A ``model`` artifact of a checkpoint file (as ``model.ckpt``) or an export directory, referenced in place
    (immutable policy): the same file gives the same digest, whichever run declares it."""
    import wandb

    artifact = wandb.Artifact(name, type="model", metadata=metadata)
    if path.is_dir():
        artifact.add_dir(str(path), policy="immutable")
    else:
        artifact.add_file(str(path), name="model.ckpt", policy="immutable")
    return artifact


def artifact_notice(run: Any, logged: list[LoggedArtifact]) -> str:
    """What happened to the artifacts: where they are, and for an offline run how to upload them."""
    names = ", ".join(f"{a.name} ({a.kind}, {a.path})" for a in logged)
    if run.offline:
        return (
            f"W&B is offline: nothing was uploaded. Model artifacts {names} are recorded in the offline run and "
            f"the files stay in place; upload them with `{sync_command(run)}` (keep the files until then)."
        )
    ref = f"{run.entity}/{run.project}/{logged[-1].name}:{logged[-1].aliases[0]}"
    return (
        f"W&B: logged model artifacts {names} with aliases {', '.join(logged[-1].aliases)}; "
        f"pull: alternet.hub.load({ref!r})"
    )
