"""How a model is named: the reference spellings every reader of weights takes (:func:`alternet.hub.load`,
``alternet evaluate ckpt=...``, export, push), and what the name alone and the file system tell of one
(:func:`check_named`). Torch-free: evaluate's config check answers with it before torch is imported."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import CheckpointError
from ..runs.checkpoint_files import check_archive, find_checkpoint

# entity/project/name:version (or project/name:version with the default entity)
ARTIFACT_REF = re.compile(r"^(?:[\w.-]+/){1,2}[\w.-]+:[\w.-]+$")
HDVW_PREFIX = "hdvw:"  # hdvw:FILE or hdvw:ARCH:FILE, a checkpoint saved by the paper's code (alternet.hub.hdvw)
TIMM_PREFIX = "timm:"  # timm:NAME[.TAG], e.g. timm:resnet50.a1_in1k
HF_HUB_PREFIX = "hf-hub:"  # hf-hub:OWNER/REPO[@REVISION], timm's spelling
LOCAL_DIR_PREFIX = "local-dir:"  # local-dir:DIR, timm's spelling
CONFIG_FILE = "config.json"  # what makes a folder an export (its architecture, classes and preprocessing)
KINDS = (
    "a run directory, a checkpoint (.ckpt), an export directory, a .safetensors file, "
    "a W&B artifact reference entity/project/name:version, hdvw:[ARCH:]FILE, timm:NAME, hf-hub:REPO or local-dir:DIR"
)


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
            raise CheckpointError(f"{source} does not exist: expected {KINDS}")
    elif not (path / CONFIG_FILE).is_file() and path.suffix != ".safetensors":
        checkpoint, _ = find_checkpoint(path)  # a run directory without checkpoints, or a folder of several
        check_archive(checkpoint, "checkpoint")  # a truncated file, or one that is no checkpoint
