"""How a model is named: the reference spellings every reader of weights takes (:func:`alternet.hub.load`,
``alternet evaluate ckpt=...``, export, push), and what the name alone and the file system tell of one
(:func:`check_named`); an export's files, and what an export or import is refused for before anything is read
(:func:`check_export_request`, :func:`check_hdvw_file`), and a push before the Hub is reached
(:func:`check_push_request`). Torch-free: the commands answer with it before torch is imported."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import AlternetError, CheckpointError, brief_reason
from ..files import check_output_dir, why_missing
from ..runs.checkpoint_files import check_archive, find_checkpoint
from ..runs.directories import RunDir

# entity/project/name:version (or project/name:version with the default entity)
ARTIFACT_REF = re.compile(r"^(?:[\w.-]+/){1,2}[\w.-]+:[\w.-]+$")
HDVW_PREFIX = "hdvw:"  # hdvw:FILE or hdvw:ARCH:FILE, a checkpoint saved by the paper's code (alternet.hub.hdvw)
TIMM_PREFIX = "timm:"  # timm:NAME[.TAG], e.g. timm:resnet50.a1_in1k
HF_HUB_PREFIX = "hf-hub:"  # hf-hub:OWNER/REPO[@REVISION], timm's spelling
LOCAL_DIR_PREFIX = "local-dir:"  # local-dir:DIR, timm's spelling
CONFIG_FILE = "config.json"  # what makes a folder an export (its architecture, classes and preprocessing)
WEIGHTS_FILE = "model.safetensors"
TORCH_WEIGHTS_FILE = "pytorch_model.bin"  # what timm's save_for_hf writes by default, read with weights_only=True
CARD_FILE = "README.md"  # the model card
EXPORT_FILES = (WEIGHTS_FILE, CONFIG_FILE, CARD_FILE)  # what an export writes, and push uploads
LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.+-]*")  # the Hub's licence identifiers: mit, apache-2.0, cc-by-nc-4.0, other
LOGIN = "run `hf auth login` (`huggingface-cli login` with older huggingface_hub) or set HF_TOKEN"
KINDS = (
    "a run directory, a checkpoint (.ckpt), an export directory, a .safetensors file, "
    "a W&B artifact reference entity/project/name:version, hdvw:[ARCH:]FILE, timm:NAME, hf-hub:REPO or local-dir:DIR"
)


class PushError(AlternetError, RuntimeError):
    """A push that cannot start or that the Hub refused; nothing was published unless the message says so."""


def check_named(source: str | Path) -> None:
    """Refuse ``source`` when its text and the file system tell that it names nothing: empty, ``hf-hub:`` without a
    repository, a folder (``local-dir:DIR``) or path that does not exist and is no W&B artifact reference, a run
    directory without checkpoints, a file that is no checkpoint by its first bytes. What needs the model registries
    (``timm:``, ``hdvw:``) is :func:`alternet.hub.sources.check_reference`'s."""
    text = str(source)
    if not text.strip():
        raise CheckpointError(f"an empty source names no model: expected {KINDS}")
    if text.startswith((TIMM_PREFIX, HDVW_PREFIX)):
        return
    if text.startswith(HF_HUB_PREFIX):
        if "/" not in text.removeprefix(HF_HUB_PREFIX):
            raise CheckpointError(f"{text} names no repository: expected hf-hub:OWNER/REPO[@REVISION]")
    elif text.startswith(LOCAL_DIR_PREFIX):
        if not (path := Path(text.removeprefix(LOCAL_DIR_PREFIX))).expanduser().exists():
            raise CheckpointError(f"{text}: {path} does not exist")
    elif not (path := Path(text).expanduser()).exists():
        if not ARTIFACT_REF.match(text):
            raise CheckpointError(f"{source} {why_missing(path)}: expected {KINDS}")
    elif not (path / CONFIG_FILE).is_file() and path.suffix != ".safetensors":
        checkpoint, _ = find_checkpoint(path)  # a run directory without checkpoints, or a folder of several
        check_archive(checkpoint, "checkpoint")  # a truncated file, or one that is no checkpoint


def check_license(license_id: str | None) -> None:
    """A licence identifier as the Hub's model cards spell it, before any work."""
    if license_id is not None and not LICENSE_ID.fullmatch(license_id):
        raise CheckpointError(
            f"--license {license_id!r} is not a Hugging Face Hub licence identifier (lowercase, e.g. mit, apache-2.0, "
            "cc-by-4.0, other: huggingface.co/docs/hub/repositories-licenses)"
        )


def check_destination(out: Path) -> Path:
    """Before anything is read or converted: ``out`` is a new directory that can be made, an empty one, or an earlier
    export of alternet's (its ``config.json`` has the ``alternet`` section and ``model.safetensors`` is beside it),
    whose three files an export replaces. Any other folder is the user's: a ``config.json`` of their own does not
    make it an export. Returns ``out`` as written to (a link followed to its folder)."""
    return check_output_dir(
        out, "export destination", _is_export, "an alternet export", "--out", error=CheckpointError, whole=_written
    )


def _written(name: str) -> bool:
    """Whether an entry of an export's folder is one an export writes (its three files)."""
    return name in EXPORT_FILES


def _is_export(out: Path) -> bool:
    try:
        config = json.loads((out / CONFIG_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get("alternet"), dict) and (out / WEIGHTS_FILE).is_file()


def check_export_request(
    source: str | Path, out: str | Path, license_id: str | None
) -> tuple[Path, Path, RunDir | None]:
    """What an export of ``source`` into ``out`` is refused for before anything is read: the destination first,
    the licence, then a source that is a timm or HDVW reference, does not exist, is weights alone, or is no run
    directory or checkpoint by its files. Returns the destination as written to (:func:`check_destination`), and
    the checkpoint the source stands for with its run directory (:func:`find_checkpoint`)."""
    out = check_destination(Path(out).expanduser())
    check_license(license_id)
    path = Path(source).expanduser()
    if not path.exists() and str(source).startswith((TIMM_PREFIX, HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        raise CheckpointError(
            f"{source} is a timm model, ready as it is: alternet.hub.load and alternet evaluate read it; export "
            "takes a run directory or a Lightning checkpoint (.ckpt)"
        )
    if not path.exists() and str(source).startswith(HDVW_PREFIX):
        raise CheckpointError(f"{source}: an HDVW checkpoint is exported by alternet import-hdvw FILE --out DIR")
    if not path.exists() or not str(source).strip():  # "" is the current directory to Path
        named = path if str(source).strip() else repr(source)
        raise CheckpointError(f"{named} does not exist: pass a run directory or a Lightning checkpoint (.ckpt)")
    checkpoint, run = _find_checkpoint(path)
    return out, checkpoint, run


def _find_checkpoint(path: Path) -> tuple[Path, RunDir | None]:
    """The checkpoint an existing ``path`` stands for (:func:`find_checkpoint`), refused when it is weights alone or
    no checkpoint by its first bytes."""
    if path.is_file() and path.suffix == ".safetensors":  # read as a torch file it was "not a torch checkpoint"
        raise CheckpointError(
            f"{path} holds weights alone (no architecture, classes or data): pass the run directory or the "
            "Lightning checkpoint (.ckpt) it came from (an export's own model.safetensors: its folder is the export)"
        )
    checkpoint, run = find_checkpoint(path)
    check_archive(checkpoint, "checkpoint")
    return checkpoint, run


def check_hdvw_file(path: Path) -> None:
    """A checkpoint HDVW saved, as far as the file system and its first bytes tell (a zip archive, or a pickle)."""
    if not path.is_file():
        raise CheckpointError(
            f"HDVW checkpoint {path} {'is a directory: pass the file' if path.is_dir() else 'does not exist'}"
        )
    check_archive(path, "HDVW checkpoint", pickles=True)


def check_push_request(source: str | Path, repo_id: str, revision: str | None) -> tuple[Path, str]:
    """What a push is refused for before anything is read or staged: what was typed (the repository id, the
    branch), the source (an export directory, a run directory or a checkpoint), then the credentials. Returns the
    source's path and the token."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise PushError(
            f"{repo_id!r} is not a Hub repository id: use NAME or USER/NAME ({brief_reason(error)})"
        ) from None
    if revision is not None:
        _check_revision(revision)
    path = Path(source).expanduser()
    if not path.exists():
        raise PushError(f"{path} does not exist: pass an export directory, a run directory or a checkpoint (.ckpt)")
    if not (path / CONFIG_FILE).is_file():  # a run or checkpoint, exported once the token is there
        try:
            _find_checkpoint(path)
        except CheckpointError as error:
            if not str(error).startswith(f"{path} is neither"):  # several checkpoints, one unreadable: said as it is
                raise
            raise PushError(
                f"{path} is neither an export directory ({CONFIG_FILE}), a run directory nor a checkpoint (.ckpt): "
                "pass one of those"
            ) from None
    return path, _require_token()


def _require_token() -> str:
    """Fail before any work when no upload could be authorised."""
    from huggingface_hub import constants, get_token

    if constants.HF_HUB_OFFLINE:
        raise PushError("HF_HUB_OFFLINE is set: pushing needs the network; unset HF_HUB_OFFLINE and run it again")
    token = get_token()
    if not token:
        raise PushError(f"no Hugging Face token found: {LOGIN} with a token that has write access, then run it again")
    return token


def _check_revision(revision: str) -> None:
    """A branch name git accepts (its check-ref-format rules), before the token is asked for or the Hub reached."""
    bad = (
        not revision.strip()
        or revision.startswith(("-", "/", "."))
        or re.search(r"(/|\.|\.lock)$", revision)  # git's rules: no trailing slash, dot, or .lock
        or any(part in revision for part in ("..", "@{", "//", "/."))
        or any(c in revision for c in " ~^:?*[\\")
        or not revision.isprintable()
    )
    if bad:
        raise PushError(
            f"--revision {revision!r} is invalid: a git branch name (letters, digits, '-', '_', '.', '/'; no '..', "
            "spaces or ~^:?*[\\), e.g. --revision v1 (or leave it out: main)"
        )
