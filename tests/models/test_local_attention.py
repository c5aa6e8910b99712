"""model.local_kernel: a ViT's sliding k x k local attention (the locality instrument of paper/locality_vit)."""

import pytest
import timm
import torch

import alternet  # noqa: F401  (registers the zoo)
from alternet.errors import ConfigValueError
from alternet.models.local_attention import local_attention_mask


def _first_block_tokens(model, images):
    x = model._pos_embed(model.patch_embed(images))
    return model.blocks[0].attn(model.blocks[0].norm1(x))


def test_a_patch_token_sees_only_its_k_by_k_neighbourhood():
    torch.manual_seed(0)
    model = timm.create_model("vit_mini_cifar", num_classes=10, local_kernel=3).eval()
    images = torch.randn(1, 3, 32, 32)
    nudged = images.clone()
    nudged[..., 28:, 28:] += 1.0  # the bottom-right 4x4 patch: token (7, 7) of the 8x8 grid
    with torch.no_grad():
        before, after = _first_block_tokens(model, images), _first_block_tokens(model, nudged)
    changed = (before - after).abs().amax(-1)[0, 1:].reshape(8, 8) > 1e-6
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[6:, 6:] = True  # the tokens whose 3x3 neighbourhood holds (7, 7)
    assert torch.equal(changed, expected)
    assert (before - after)[0, 0].abs().max() > 1e-6  # the class token reads every token


def test_mask_counts_neighbours_and_the_class_token_reads_all():
    mask = local_attention_mask((8, 8), 5)
    assert mask.shape == (65, 65)
    assert mask[0].all() and not mask[1:, 0].any()
    assert mask[1 + 0].sum() == 9 and mask[1 + 3 * 8 + 3].sum() == 25  # a corner, an inner token


def test_local_and_global_share_weights_and_the_fused_and_math_paths_agree():
    torch.manual_seed(0)
    local = timm.create_model("vit_mini_cifar", num_classes=10, local_kernel=5).eval()
    plain = timm.create_model("vit_mini_cifar", num_classes=10).eval()
    assert local.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(local.state_dict())
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        fused = local(images)
        for block in local.blocks:
            block.attn.fused_attn = False
        assert torch.allclose(local(images), fused, atol=1e-5)
        assert not torch.allclose(plain(images), fused, atol=1e-3)


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        (1, r"model.local_kernel=1 is invalid: an odd window side >= 3 \(1 would be a softmax over one key"),
        (4, r"model.local_kernel=4 is invalid: an odd window side >= 3"),
        (15, r"model.local_kernel=15 covers the whole 8x8 token grid .* use model.local_kernel=null"),
    ],
)
def test_a_kernel_that_is_not_local_attention_is_refused(kernel, message):
    with pytest.raises(ConfigValueError, match=message):
        timm.create_model("vit_mini_cifar", num_classes=10, local_kernel=kernel)
