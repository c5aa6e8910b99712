"""Weights & Biases model artifacts: log a run's best checkpoint and export, and download one by reference."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AlternetError
from ..training.loggers import wandb_offline_reason

ALIASES = ("best", "latest")


class ArtifactError(AlternetError, RuntimeError):
    """A W&B artifact that cannot be downloaded (offline, no API key, unknown reference)."""


@dataclass(frozen=True)
class LoggedArtifact:
    name: str  # e.g. model-1a2b3c4d
    kind: str  # "checkpoint" or "export"
    path: Path


def download_artifact(ref: str) -> Path:
    """Download ``entity/project/name:version`` (into W&B's artifact directory) and return the folder."""
    reason = wandb_offline_reason(False)
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
        run.log_artifact(artifact, aliases=list(ALIASES))
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
    return f"W&B: logged model artifacts {names} with aliases {', '.join(ALIASES)}; pull: alternet.hub.load({ref!r})"
