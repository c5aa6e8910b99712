"""Any timm model as a training target (``model=timm model.name=NAME``): its name checked with a did-you-mean, only
the keywords its constructor takes, and timm's own pretrained weights (``model.pretrained=true``) fetched or refused
in one line naming where they come from."""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import socket
import threading
import urllib.request
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import timm
import torch
from huggingface_hub import try_to_load_from_cache
from timm.models import get_pretrained_cfg, parse_model_name
from torch import nn

from ..architectures.named import base_name
from ..errors import CheckpointError, ConfigValueError

# keywords alternet adds to every model config (the data's image size, the recipe's stochastic depth): passed only
# to constructors that take them (timm's ResNet takes no img_size, VGG no drop_path_rate)
INJECTED = ("img_size", "drop_path_rate")
HF_FILES = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")
HUB_HOST = "huggingface.co"


class UnknownModelError(ConfigValueError):
    """A model name that neither alternet nor timm knows."""


def check_name(name: str, own: tuple[str, ...] = ()) -> None:
    """A name timm (or alternet) knows, else one line listing alternet's and the closest names: checked before
    any work is done (``hf-hub:`` / ``local-dir:`` sources are resolved by timm when the model is built)."""
    if parse_model_name(name)[0] is not None:
        return
    arch = base_name(name)
    if arch in own or timm.is_model(arch):
        return
    close = difflib.get_close_matches(arch, list(dict.fromkeys([*own, *timm.list_models()])), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise UnknownModelError(
        f"unknown model {name!r}. alternet models: {', '.join(sorted(own))}. Any timm model name also works "
        f"(see timm.list_models()), and one your package registers: import it first (on alternet's command line: "
        f"imports=[your_pkg.models]){hint}"
    )


@cache
def constructor_parameters(arch: str) -> frozenset[str] | None:
    """The keywords ``arch`` takes: those its registered function names (a user's ``def my_net(pretrained=False,
    num_classes=1000, **kwargs)`` that returns an ``nn.Sequential``) and those of the model class it builds (its
    ``__init__``, found by building it on the meta device: no memory, no weights; timm's own functions pass
    ``**kwargs`` on to it). ``None`` where the class takes ``**kwargs`` or cannot be built so (all are passed)."""
    try:
        with torch.device("meta"):
            model = timm.create_model(arch, pretrained=False)
    except Exception:  # an entry point that cannot build on the meta device: pass every keyword, as before
        return None
    parameters = inspect.signature(type(model).__init__).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    named = inspect.signature(timm.models.model_entrypoint(arch)).parameters.values()
    own = {p.name for p in named if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)}
    return frozenset(p.name for p in parameters if p.name != "self") | own


def check_output_width(name: str, model: nn.Module, num_classes: int, img_size: int) -> None:
    """A model built for ``num_classes`` classes has that many outputs (a forward on the meta device: no memory,
    no compute); one line where a registered function ignores ``num_classes``. A model that cannot run on the meta
    device is left to its first step."""
    try:
        with torch.device("meta"), torch.no_grad():
            width = model.eval()(torch.empty(1, 3, img_size, img_size)).shape[-1]
    except Exception:  # a forward the meta device cannot run (data-dependent shapes): nothing to compare here
        return
    if width != num_classes:
        raise ConfigValueError(
            f"model.name={name} ignores num_classes: asked for {num_classes} classes, it builds a model with {width} "
            "outputs; its registered function must pass num_classes on to the model it builds (alternet asks for "
            "the data's class count)"
        )


def constructor_args(name: str, args: Mapping[str, Any], given: tuple[str, ...] = ()) -> dict[str, Any]:
    """``args`` without the injected keywords (:data:`INJECTED`) the model's constructor does not take; a keyword
    the user set (``given``) that it does not take fails in one line."""
    accepted = None if parse_model_name(name)[0] is not None else constructor_parameters(base_name(name))
    if accepted is None:  # a hub or local source, or no signature to hold the keywords to: all are passed
        return dict(args)
    unknown = sorted(k for k in args if k in given and k not in accepted and k not in INJECTED)
    if unknown:
        close = difflib.get_close_matches(unknown[0], accepted, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; it takes {sorted(accepted - {'device', 'dtype'})}"
        raise ConfigValueError(f"model.{unknown[0]} is not an argument of {name}{hint}")
    return {k: v for k, v in args.items() if k in accepted or (k in given and k not in INJECTED)}


PRETRAINED = "model.pretrained=true"  # what asked for timm's weights, in messages (alternet evaluate: timm:NAME)
NO_WEIGHTS_ADVICE = "train from scratch, or set model.pretrained to an export, checkpoint or run directory"


def weights_location(name: str, asked: str = PRETRAINED, advice: str = NO_WEIGHTS_ADVICE) -> str:
    """Where timm fetches ``name``'s pretrained weights from: ``hf-hub:ID``, a URL or a file (what its
    ``pretrained_cfg`` names); one line when it names none (``asked``: what asked for them, ``advice``: what to do
    instead)."""
    try:
        cfg = get_pretrained_cfg(name, allow_unregistered=False)
    except RuntimeError as error:
        raise ConfigValueError(
            f"{asked}: {error} (pick a tag from timm.list_pretrained('{base_name(name)}*'))"
        ) from None
    if cfg is None or not (cfg.hf_hub_id or cfg.url or cfg.file):
        raise ConfigValueError(
            f"{asked}: timm has no pretrained weights for {name!r} (its pretrained_cfg names no hub id, URL or "
            f"file); {advice}"
        )
    if cfg.file:
        return str(cfg.file)
    return f"hf-hub:{cfg.hf_hub_id}" if cfg.hf_hub_id else str(cfg.url)


def _cached(location: str) -> bool:
    """Whether the weights at ``location`` are already on this machine (Hugging Face or torch hub cache)."""
    if location.startswith("hf-hub:"):
        repo = location.removeprefix("hf-hub:").split("@")[0]
        return any(isinstance(try_to_load_from_cache(repo, f), str) for f in HF_FILES)
    if "://" not in location:
        return Path(location).is_file()
    return (Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(location).path).name).is_file()


def _reachable(location: str, timeout: float = 3.0) -> bool:
    """Whether a connection to the weights' host opens within ``timeout`` seconds, its name lookup included (in a
    thread: a resolver that never answers takes no socket timeout)."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") and location.startswith("hf-hub:"):
        return False
    host = HUB_HOST if location.startswith("hf-hub:") else urlparse(location).hostname
    if not host:
        return False
    if urllib.request.getproxies().get("https"):  # egress through a proxy: a direct connection says nothing
        return True
    opened: list[bool] = []

    def connect() -> None:
        with contextlib.suppress(OSError), socket.create_connection((host, 443), timeout=timeout):
            opened.append(True)

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(opened)


def require_pretrained(
    name: str, asked: str = PRETRAINED, advice: str = NO_WEIGHTS_ADVICE, or_else: str | None = "drop model.pretrained"
) -> str:
    """Before any work: timm's weights for ``name`` are cached here or their source can be reached; else one line
    naming what would be fetched (``asked``, ``advice``: as :func:`weights_location`) and, after the fetch command,
    ``or_else`` (what else the user may do; None: nothing). Returns the location."""
    location = weights_location(name, asked, advice)
    if not _cached(location) and not _reachable(location):
        raise CheckpointError(
            f"{asked}: timm's weights for {name} come from {location}, which is not in the local cache "
            "and cannot be reached (offline?); fetch them once with network access "
            f"(python -c \"import timm; timm.create_model('{name}', pretrained=True)\")"
            + (f" or {or_else}" if or_else else "")
        )
    return location


def load_timm_pretrained(model: nn.Module, name: str, **kwargs: Any) -> None:
    """Copy timm's pretrained weights for ``name`` into ``model`` (built with the same ``kwargs``): timm builds a
    twin with ``pretrained=True`` (its own filters adapt the checkpoint and drop a classifier of another class
    count), and every tensor of the twin is loaded strictly."""
    location = require_pretrained(name)
    try:
        twin = timm.create_model(name, pretrained=True, **kwargs)
    except (OSError, RuntimeError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(
            f"model.pretrained=true: fetching timm's weights for {name} from {location} failed: {reason}"
        ) from None
    model.load_state_dict(twin.state_dict())
