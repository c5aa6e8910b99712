"""Models and weights: parameter counts, the model a config builds, exact equality of two state dicts, a mid-epoch
checkpoint kept for a resume, a repository in the Hugging Face cache, the attention maps a layer computes itself."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from helpers.configs import compose_train


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def build_from_config(*overrides: str, img_size: int = 32, num_classes: int = 10) -> torch.nn.Module:
    """The model a training run composed with ``overrides`` builds (on the meta device: shapes, no memory)."""
    from omegaconf import OmegaConf

    from alternet.architectures.config import model_config
    from alternet.models import create_model
    from alternet.models.factory import model_args

    config = model_config(OmegaConf.to_container(compose_train(*overrides).model, resolve=True))
    with torch.device("meta"):
        args = model_args(config, num_classes=num_classes, img_size=img_size, drop_path_rate=0)
        return create_model(config.name, **args)


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """Two state dicts hold the same tensors, bit for bit."""
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"{len(different)} tensors differ, e.g. {different[:3]}"


def cached_repo(cache: Path, repo_id: str) -> Path:
    """The snapshot folder of ``repo_id`` as huggingface_hub caches a download (``models--OWNER--NAME/refs/main``
    naming ``snapshots/COMMIT``), where offline loads find its files: write them into the returned folder."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    base = cache / f"models--{repo_id.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    (base / "snapshots" / commit).mkdir(parents=True)
    return base / "snapshots" / commit


def record_softmaxes(monkeypatch) -> list[torch.Tensor]:
    """Every ``Tensor.softmax`` a forward computes from now on (the attention layers' own maps on their math paths,
    ``F.softmax`` included), in order."""
    seen, original = [], torch.Tensor.softmax

    def recording(self, *args, **kwargs):
        seen.append(original(self, *args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(torch.Tensor, "softmax", recording)
    return seen


@contextlib.contextmanager
def keeping_checkpoint(step: int, run_dir: Path, to: Path) -> Iterator[None]:
    """While a run trains in this process: ``run_dir``'s last.ckpt copied to ``to`` as the checkpoint callbacks
    leave it after optimizer step ``step`` (a run saving every step: a mid-epoch point to resume from)."""
    from alternet.training.module import ClassificationModule

    end = ClassificationModule.on_train_batch_end

    def keep(module, *args):  # after the callbacks', whose periodic checkpoint of this step is written
        end(module, *args)
        if module.global_step == step:
            shutil.copy(run_dir / "checkpoints" / "last.ckpt", to)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ClassificationModule, "on_train_batch_end", keep)
        yield
