"""model.local_kernel: a ViT's sliding k x k local attention (the locality instrument of paper/locality_vit)."""

import pytest
import timm
import torch

import alternet.models  # noqa: F401  (registers the zoo with timm)
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


def test_a_callers_mask_restricts_further_as_a_boolean_or_an_additive_mask():
    """timm's attention takes a boolean mask (True: attend) or an additive one (0 or -inf): both narrow the window."""
    torch.manual_seed(0)
    model = timm.create_model("vit_mini_cifar", num_classes=10, local_kernel=3).eval()
    attention, tokens = model.blocks[0].attn, torch.randn(1, 65, model.embed_dim)
    keep = torch.ones(65, 65, dtype=torch.bool)
    keep[:, 2] = False  # no query reads the second patch token
    additive = torch.zeros(65, 65).masked_fill(~keep, float("-inf"))
    with torch.no_grad():
        plain, everything = attention(tokens), attention(tokens, attn_mask=torch.zeros(65, 65))
        by_bool, by_bias = attention(tokens, attn_mask=keep), attention(tokens, attn_mask=additive)
    torch.testing.assert_close(everything, plain)
    torch.testing.assert_close(by_bias, by_bool)
    assert not torch.allclose(by_bool, plain, atol=1e-4)


@pytest.mark.parametrize("kernel", [2, 3, 4, 5, 8])
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")  # torch's note on its speed
def test_each_token_sees_the_window_a_same_convolution_reads(kernel):
    """Odd and even kernels (the paper's 8 x 8): the keys of a query are the positions a k x k convolution with
    padding="same" reads for that output, computed here by torch's own convolution of one impulse per key."""
    grid = (6, 7)
    mask = local_attention_mask(grid, kernel, prefix_tokens=0)
    impulses = torch.eye(grid[0] * grid[1]).reshape(-1, 1, *grid)
    reach = torch.nn.functional.conv2d(impulses, torch.ones(1, 1, kernel, kernel), padding="same")
    reached = reach.reshape(grid[0] * grid[1], -1).T > 0  # [query, key]: the output at query reads the key
    assert torch.equal(mask, reached)
    assert mask.sum(1).max() == min(kernel, grid[0]) * min(kernel, grid[1])  # an inner query: the whole window


def test_hdvw_convit_head_without_a_class_token():
    """model.class_token=false model.global_pool=avg: HDVW's ConViT (no class token; average pooling, LayerNorm,
    linear), with an even (4 x 4) local window on the mini ViT's 8 x 8 grid; no mask row for a class token."""
    torch.manual_seed(0)
    model = timm.create_model(
        "vit_mini_cifar", num_classes=10, local_kernel=4, class_token=False, global_pool="avg"
    ).eval()
    assert model.num_prefix_tokens == 0 and model.cls_token is None
    assert isinstance(model.fc_norm, torch.nn.LayerNorm) and isinstance(model.norm, torch.nn.Identity)
    assert model.blocks[0].attn.local_mask.shape == (64, 64)
    images = torch.randn(1, 3, 32, 32)
    nudged = images.clone()
    nudged[..., 28:, 28:] += 1.0  # token (7, 7): the queries whose window [i - 1, i + 2] holds row and column 7
    with torch.no_grad():
        changed = (_first_block_tokens(model, images) - _first_block_tokens(model, nudged)).abs().amax(-1)[0]
    expected = torch.zeros(8, 8, dtype=torch.bool)
    expected[5:, 5:] = True
    assert torch.equal(changed.reshape(8, 8) > 1e-6, expected)
    assert model(images).shape == (1, 10)


@pytest.mark.parametrize(
    ("kernel", "message"),
    [
        (1, r"model.local_kernel=1 is invalid: a window side >= 2 \(1 would be a softmax over one key"),
        (True, r"model.local_kernel=True is invalid: a window side >= 2"),
        (15, r"model.local_kernel=15 covers the whole 8x8 token grid .* use model.local_kernel=null"),
    ],
)
def test_a_kernel_that_is_not_local_attention_is_refused(kernel, message):
    with pytest.raises(ConfigValueError, match=message):
        timm.create_model("vit_mini_cifar", num_classes=10, local_kernel=kernel)
