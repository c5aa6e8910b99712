"""The analyses measure what the paper measures: each default against a value computed by hand on a tiny input
where HDVW's definition and the alternative differ, the per-mini-batch maximum Hessian eigenvalue against
``torch.linalg.eigvalsh`` of an exact Hessian, and ``position_only`` attention, the data-independent control."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from alternet.analysis.attention import attention_stats
from alternet.analysis.blocks import block_sequence
from alternet.apps.checks import CHOICES, check_choices
from alternet.models import PositionOnlyAttention, WindowAttention, create_model

from conftest import compose_train


def tiny(attention: str = "window", seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return create_model("alternet_tiny", num_classes=10, img_size=16, attention=attention)


# position_only attention ---------------------------------------------------------------------------------------


def test_position_only_gives_every_image_the_same_kernel_softmax_of_the_bias():
    model = tiny("position_only").eval()
    modules = [m for m in model.modules() if isinstance(m, PositionOnlyAttention)]
    assert len(modules) == 2
    for module in modules:
        with torch.no_grad():
            module.rel_pos_bias.normal_(0, 1.0)  # a kernel far from uniform
    for module in modules:
        channels = module.to_kv.in_features
        one, other = (
            module.attention_map(torch.randn(2, channels, 8, 8)),
            module.attention_map(torch.randn(3, channels, 8, 8)),
        )
        kernel = module.position_bias().softmax(dim=-1)[0]
        assert one.shape == (2 * 4, module.heads, 16, 16)  # 4 windows of 4x4 per image
        torch.testing.assert_close(one, kernel.expand_as(one))
        torch.testing.assert_close(other, kernel.expand_as(other))
    msa = [b for b in block_sequence(model).blocks if b.kind == "M"]
    for stats in attention_stats(model, msa, [torch.randn(4, 3, 16, 16)]):
        assert max(stats.specificity) < 1e-9  # data specificity of a data-independent kernel: zero


def test_position_only_output_equals_window_attention_with_zero_queries():
    window, position = tiny("window").eval(), tiny("position_only").eval()
    for module in window.modules():
        if isinstance(module, WindowAttention):
            with torch.no_grad():
                module.to_q.weight.zero_()  # logits q.k = 0: softmax(0 + B)
    position.load_state_dict(window.state_dict(), strict=True)
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(position(images), window(images), rtol=1e-5, atol=1e-6)
        channels_last = position.to(memory_format=torch.channels_last)
        torch.testing.assert_close(channels_last(images.contiguous(memory_format=torch.channels_last)), window(images))


def test_position_only_and_window_state_dicts_load_into_each_other_strictly():
    window, position = tiny("window", seed=1), tiny("position_only", seed=2)
    assert {k: v.shape for k, v in window.state_dict().items()} == {
        k: v.shape for k, v in position.state_dict().items()
    }
    position.load_state_dict(window.state_dict(), strict=True)
    assert all(torch.equal(v, window.state_dict()[k]) for k, v in position.state_dict().items())
    window.load_state_dict(tiny("position_only", seed=3).state_dict(), strict=True)


def test_position_only_trains_a_step_with_its_query_projection_frozen():
    model = tiny("position_only").train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [m.to_q.weight for m in model.modules() if isinstance(m, PositionOnlyAttention)]
    assert all(not p.requires_grad for p in frozen) and len(frozen) == 2
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.05)
    images, labels = torch.randn(8, 3, 16, 16), torch.arange(8) % 10
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    changed = {name for name, p in model.named_parameters() if not torch.equal(p.detach(), before[name])}
    assert any(name.endswith("rel_pos_bias") for name in changed)  # the kernel itself learns
    assert not any(name.endswith("to_q.weight") for name in changed)


def test_position_only_is_a_config_choice():
    assert "position_only" in CHOICES["model.attention"]
    check_choices(OmegaConf.to_container(compose_train("model=alternet_tiny", "model.attention=position_only")))
