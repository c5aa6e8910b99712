"""Gradient checkpointing (timm's ``set_grad_checkpointing``): same function, less saved memory, and the
``performance.grad_checkpointing`` switch."""

import copy

import pytest
import torch
from omegaconf import OmegaConf
from timm.models.pit import PoolingVisionTransformer

import alternet
from alternet.architectures.named import COMPARISONS
from alternet.errors import ConfigValueError
from alternet.models import AlterNet

from helpers import FAST, compose_train, datamodule_of, module_of


def saved_tensor_count(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The model's output, and how many tensors autograd saved for backward while computing it."""
    count = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        return model(x), count


def forward_backward(model: torch.nn.Module, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, dict, int]:
    torch.manual_seed(seed)  # the same stochastic-depth draws for both models
    out, saved = saved_tensor_count(model, x)
    out.square().mean().backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters()}, saved


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("alternet_tiny", dict(drop_path_rate=0.0, drop_rate=0.0)),
        ("alternet_tiny", dict(drop_path_rate=0.3, drop_rate=0.0)),  # checkpointing replays the RNG state
        ("pit_ti_cifar", dict(drop_path_rate=0.0, drop_rate=0.0)),
    ],
)
def test_checkpointing_keeps_outputs_and_gradients(name, kwargs):
    torch.manual_seed(0)
    plain = alternet.create_model(name, num_classes=10, **kwargs).train()
    checkpointed = copy.deepcopy(plain)
    checkpointed.set_grad_checkpointing()  # timm's spelling: enable defaults to True
    x = torch.randn(4, 3, 32, 32)

    out, grads, saved = forward_backward(plain, x, seed=1)
    out_ckpt, grads_ckpt, saved_ckpt = forward_backward(checkpointed, x, seed=1)

    torch.testing.assert_close(out_ckpt, out)
    assert grads_ckpt.keys() == grads.keys()
    for key, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[key], grad, msg=key)
    assert saved_ckpt < saved / 2  # the blocks' activations were not kept


def test_recomputation_updates_batchnorm_statistics_twice():
    """Documented, accepted by timm: a recomputed block runs its BatchNorms in train mode again."""
    model = alternet.create_model("alternet_tiny", num_classes=10).train()
    model.set_grad_checkpointing()
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert int(model.stages[0][0].pre_act[0].num_batches_tracked) == 2  # inside a checkpointed block
    assert int(model.norm.bn.num_batches_tracked) == 1  # the final norm is not checkpointed


def test_checkpointing_is_skipped_without_grad_and_can_be_switched_off():
    model = alternet.create_model("alternet_tiny", num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        model.set_grad_checkpointing()
        torch.testing.assert_close(model(x), expected)
    model.set_grad_checkpointing(False)
    assert model.grad_checkpointing is False
    _, saved = saved_tensor_count(model, x)
    model.set_grad_checkpointing(True)
    _, saved_ckpt = saved_tensor_count(model, x)
    assert saved_ckpt < saved


@pytest.mark.parametrize("name", ["vit_ti_cifar", "swin_ti_cifar", "pit_ti_cifar", "alternet_r50"])
def test_every_kind_of_zoo_model_accepts_set_grad_checkpointing(name):
    model = alternet.create_model(name, num_classes=10)
    model.set_grad_checkpointing()
    model.set_grad_checkpointing(False)


def test_pit_keeps_timm_parameter_names():
    ours = alternet.create_model("pit_ti_cifar", num_classes=10)
    timms = PoolingVisionTransformer(**COMPARISONS["pit_ti_cifar"].kwargs(), num_classes=10)
    assert list(ours.state_dict()) == list(timms.state_dict())
    ours.load_state_dict(timms.state_dict())


def build(*overrides: str):
    config = OmegaConf.to_container(compose_train(*FAST, *overrides), resolve=True)
    data = datamodule_of(config).facts()
    return module_of(config, data)


def test_performance_switch_turns_checkpointing_on():
    assert build().model.grad_checkpointing is False
    assert build("performance.grad_checkpointing=true").model.grad_checkpointing is True


def refuse(self, enable: bool = True) -> None:
    assert not enable, "gradient checkpointing not supported"  # as timm models without support do


@pytest.mark.parametrize("how", ["missing", "refused"])
def test_a_model_without_checkpointing_fails_with_the_key_named(how, monkeypatch):
    if how == "missing":
        monkeypatch.delattr(AlterNet, "set_grad_checkpointing")
    else:
        monkeypatch.setattr(AlterNet, "set_grad_checkpointing", refuse)
    with pytest.raises(ConfigValueError) as error:
        build("performance.grad_checkpointing=true")
    message = str(error.value)
    assert "'alternet_tiny'" in message and "performance.grad_checkpointing=false" in message
    assert "\n" not in message
    build()  # the switch off never asks the model
