"""Publish an export on the Hugging Face Hub, where ``timm.create_model("hf-hub:REPO_ID", pretrained=True)``
loads it (after ``import alternet.models``).

Nothing remote happens until the files are complete: what was typed is checked first (the repository id, the
branch, the source), then the token; the export is staged and verified in a temporary directory (removed whatever
happens), and only then is the repository created and the three files uploaded as one commit.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import timm
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.errors import HfHubHTTPError

from .. import __version__
from ..errors import AlternetError, brief_reason
from ..files import read_json, write_text
from .card import PLACEHOLDER_REPO, card_data, model_card
from .exporting import export
from .loading import build_model
from .references import (
    CARD_FILE,
    CONFIG_FILE,
    EXPORT_FILES,
    LOGIN,
    TORCH_WEIGHTS_FILE,
    PushError,
    check_push_request,
)
from .sources import Source, read_export

log = logging.getLogger("alternet.hub")

# huggingface_hub raises its HTTP client's own errors for network failures (requests, httpx or httpx2, by
# version); HfHubHTTPError derives from that client's HTTPError, so its bases name the client's error class.
NETWORK_ERRORS = (OSError, *HfHubHTTPError.__bases__)


@dataclass(frozen=True)
class Pushed:
    repo_id: str
    url: str
    commit_url: str | None
    revision: str | None
    timm_loads: bool = True  # False: a user's own model function, which timm does not build the upload with

    @property
    def timm_name(self) -> str:
        """The name ``timm.create_model`` loads this upload by."""
        return f"hf-hub:{self.repo_id}" + (f"@{self.revision}" if self.revision else "")


def push_to_hub(
    source: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    ema: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
) -> Pushed:
    """Upload ``source`` (an export directory, or a run directory or checkpoint, exported first) to the Hub model
    repository ``repo_id`` (created when missing) as one commit of model.safetensors, config.json and README.md."""
    path, token = check_push_request(source, repo_id, revision)  # before a run is exported
    with tempfile.TemporaryDirectory(prefix="alternet-push-") as tmp:
        staged = f"{repo_id}@{revision}" if revision else repo_id  # what the card's loading snippet names
        folder = stage(path, Path(tmp) / "upload", repo_id=staged, ema=ema)
        timm_loads = read_json(folder / CONFIG_FILE, error=PushError)["alternet"].get("timm_loads", True)
        api = HfApi(token=token, library_name="alternet", library_version=__version__)
        try:
            url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
            full = getattr(url, "repo_id", None) or repo_id  # the full id when the namespace was implied
            if full != repo_id:  # the card named NAME alone, a repository at the Hub's root: it names USER/NAME
                card = folder / CARD_FILE
                named = f"{full}@{revision}" if revision else full
                write_text(card, card.read_text().replace(f"hf-hub:{staged}", f"hf-hub:{named}"))
            repo_id = full
            if revision:
                api.create_branch(repo_id, branch=revision, repo_type="model", exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id,
                folder_path=str(folder),
                repo_type="model",
                revision=revision,
                commit_message=commit_message or f"Upload {path.name} with alternet {__version__}",
                delete_patterns=[TORCH_WEIGHTS_FILE],  # an earlier push's other weights, which loaders may read
            )
        except HfHubHTTPError as error:
            raise PushError(_refused(error, repo_id)) from error
        except NETWORK_ERRORS as error:
            raise PushError(
                f"could not reach the Hugging Face Hub at {api.endpoint} to push {repo_id} ({brief_reason(error)}); "
                "check the network connection (and HF_ENDPOINT or proxy settings), then run the command again"
            ) from error
    return Pushed(repo_id, str(url), getattr(commit, "commit_url", None), revision, timm_loads)


def stage(source: Path, folder: Path, *, repo_id: str, ema: bool = False) -> Path:
    """The three files to upload, in ``folder``: an export directory's (its weights verified), or a fresh export
    of a run or checkpoint. alternet's own model card is rewritten to name ``repo_id``; an edited one is kept."""
    if source.is_dir() and (source / CONFIG_FILE).is_file():
        opened = read_export(source)  # the config's keys and the weights' digest, before anything is uploaded
        if ema and not opened.ema:
            raise PushError(f"{source} holds no EMA weights; push the run with --ema, or export it with --ema")
        missing = [name for name in EXPORT_FILES if not (source / name).is_file()]
        if missing:
            raise PushError(f"{source} is an incomplete export (no {', '.join(missing)}); export it again")
        folder.mkdir(parents=True)
        for name in EXPORT_FILES:
            _link_or_copy(source / name, folder / name)
    else:
        export(source, folder, ema=ema)
    opened = read_export(folder, location=str(source))  # staged, read again: an export replaced while linked is refused
    config = read_json(folder / CONFIG_FILE, error=PushError)
    if not isinstance(config.get("alternet"), dict):
        raise PushError(
            f"{source} is not an alternet export (its {CONFIG_FILE} has no alternet section, as timm's save_for_hf "
            "writes it): upload it with huggingface_hub's upload_folder, or push the run it came from"
        )
    _check_it_loads(source, opened)
    card = folder / CARD_FILE
    text = card.read_text()
    if text == model_card(config):
        write_text(card, model_card(config, repo_id))  # replaces the file: the export's own card is untouched
    else:  # edited, or generated by an earlier alternet: kept, its repository named where it still says <user>/<repo>
        _check_card_agrees(source, text, config, repo_id)
        if PLACEHOLDER_REPO in text:
            write_text(card, text.replace(PLACEHOLDER_REPO, repo_id))
        log.info("%s is not this alternet's card for this export: uploading it as it is", source / CARD_FILE)
    found = sorted(p.name for p in folder.iterdir())
    if found != sorted(EXPORT_FILES):
        raise PushError(f"the staged upload holds {found}, not {sorted(EXPORT_FILES)}; nothing was uploaded")
    return folder


def _check_it_loads(source: Path, opened: Source) -> None:
    """The staged export builds its architecture from its own config and loads every tensor into it (a config
    edited by hand, or of other weights, loads nowhere): built where the architecture is registered here."""
    if not timm.is_model(opened.architecture):  # a user's model, registered by a module this command did not import
        log.info("%s was not built as a check: %s is not a registered model here", source, opened.architecture)
        return
    try:
        build_model(opened, strict=True)
    except AlternetError as error:
        raise PushError(f"{source} does not load as its {CONFIG_FILE} says ({error}); nothing was uploaded") from None


def _check_card_agrees(source: Path, card: str, config: dict[str, Any], repo_id: str) -> None:
    """A card the user edited (or an earlier alternet wrote) is uploaded as it is, but not where its metadata
    contradicts the export's config: its licence, its data set, a result the config records otherwise, or results
    where the config records none (a card from another export, or one a config edit left behind). A result the
    config leaves out by design (top-5 of 5 classes or fewer, which an earlier alternet listed) is no contradiction."""
    try:
        theirs = ModelCard(card).data
    except Exception as error:  # huggingface_hub's parser: YAML and metadata errors of its own types
        raise PushError(f"{source / CARD_FILE} has metadata the Hub cannot read ({brief_reason(error)})") from None
    ours = card_data(config, repo_id)
    results = [
        {(r.dataset_type, r.dataset_split, r.metric_type): r.metric_value for r in data.eval_results or []}
        for data in (theirs, ours)
    ]
    shared = sorted(set(results[0]) & set(results[1]))
    differing = {key[2]: (results[0][key], results[1][key]) for key in shared if results[0][key] != results[1][key]}
    if results[0] and not results[1]:
        differing["results"] = (sorted(key[2] for key in results[0]), "none of its weights'")
    elif results[0] and not shared:
        differing["results"] = (sorted(set(results[0])), sorted(set(results[1])))
    disagreements = [
        f"{key}: the card says {mine!r}, the config {wanted!r}"
        for key, (mine, wanted) in {
            "license": (theirs.license, ours.license),
            "datasets": (theirs.datasets, ours.datasets),
            **differing,
        }.items()
        if mine and mine != wanted
    ]
    if disagreements:
        raise PushError(
            f"{source / CARD_FILE} contradicts its {CONFIG_FILE} ({'; '.join(disagreements)}): a card of another "
            "model, one a config edit left behind, or a licence set in the card alone; write the export again to "
            "regenerate its card (alternet export RUN --out DIR, or import-hdvw FILE --out DIR; --license ID sets "
            "the licence). Nothing was uploaded"
        )


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(source, target)


def _refused(error: HfHubHTTPError, repo_id: str) -> str:
    status = getattr(getattr(error, "response", None), "status_code", None)
    if status == 401:
        return f"the Hugging Face Hub rejected the token (401) pushing to {repo_id}: {LOGIN} with a valid token"
    if status == 403:
        return (
            f"the token may not write to {repo_id} (403): use a token with write access to that namespace, "
            "or push to a repository of your own user or organisation"
        )
    return (
        f"the Hugging Face Hub refused the push to {repo_id} ({status or 'error'}: {brief_reason(error)}); nothing was "
        "committed: fix the cause and run the command again"
    )
