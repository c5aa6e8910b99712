"""Attention kinds: fused/math parity, double backward, focused-linear finiteness and implied maps."""

import pytest
import torch
import torch.nn.functional as F

from alternet.models import FocusedLinearAttention, WindowAttention, create_model
from alternet.models.attention import (
    build_attention,
    merge_window_maps,
    window_maps,
    window_partition,
)


@pytest.mark.parametrize("bias_per_head", [False, True])
@pytest.mark.parametrize(("window", "size"), [((4, 4), (8, 8)), ((8, 8), (8, 8)), ((2, 4), (4, 8))])
def test_fused_and_math_paths_agree(bias_per_head, window, size):
    torch.manual_seed(0)
    attn = WindowAttention(16, 24, heads=3, head_dim=8, window=window, bias_per_head=bias_per_head, fused=True)
    with torch.no_grad():
        attn.rel_pos_bias.normal_(0, 1.0)  # a strong bias, so a mis-indexed table would show
    x = torch.randn(2, 16, *size)
    fused = attn(x)
    attn.fused = False
    math = attn(x)
    assert fused.shape == (2, 24, *size)
    torch.testing.assert_close(fused, math, rtol=1e-5, atol=1e-5)


def test_relative_position_bias_is_shared_by_heads_and_translation_invariant():
    attn = WindowAttention(8, 8, heads=2, head_dim=4, window=(3, 3))
    bias = attn.position_bias()[0]
    # (0,0)->(0,1) and (1,1)->(1,2) have the same offset, so the same bias
    assert bias[0, 1] == bias[4, 5]
    assert attn.rel_pos_bias.shape == (5, 5)


@pytest.mark.parametrize("kind", ["window", "position_only"])
@pytest.mark.parametrize(("size", "clipped"), [((3, 3), (3, 3)), ((2, 8), (2, 4))])
@pytest.mark.parametrize("channels_last", [False, True])
def test_a_map_smaller_than_the_window_is_one_window_with_the_centred_part_of_the_table(
    kind, size, clipped, channels_last
):
    """A 4x4-window MSA on a 3x3 map (or 2 rows of a 2x8 map) is the same MSA built for the clipped window with
    the centred (2h-1)x(2w-1) part of its relative position table: the offsets mean what they meant."""
    torch.manual_seed(0)
    common = {"heads": 2, "head_dim": 4, "bias_per_head": kind == "position_only"}
    big = build_attention(kind, 8, 8, window=(4, 4), **common)
    small = build_attention(kind, 8, 8, window=clipped, **common)
    with torch.no_grad():
        big.rel_pos_bias.normal_(0, 1.0)
        rows, cols = slice(4 - clipped[0], 3 + clipped[0]), slice(4 - clipped[1], 3 + clipped[1])
        state = {k: v for k, v in big.state_dict().items() if k != "rel_pos_bias"}
        small.load_state_dict({**state, "rel_pos_bias": big.rel_pos_bias[..., rows, cols]})
    x = torch.randn(2, 8, *size)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(big(x), small(x))
    torch.testing.assert_close(big.attention_map(x), small.attention_map(x))
    with pytest.raises(ValueError, match="feature map 6x6 is not divisible by the attention window 4x4"):
        big(torch.randn(1, 8, 6, 6))


def test_math_path_supports_double_backward():
    model = create_model("alternet_tiny", num_classes=4, img_size=16, fused_attn=False)
    x = torch.randn(2, 3, 16, 16)
    params = [p for p in model.parameters() if p.requires_grad]
    loss = model(x).logsumexp(-1).mean()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    vector = [torch.randn_like(p) for p in params]
    hvp = torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vector)), params)
    assert all(torch.isfinite(h).all() for h in hvp)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_focused_linear_is_finite_under_autocast(dtype):
    torch.manual_seed(0)
    attn = FocusedLinearAttention(32, 32, heads=2, head_dim=16, tokens=32 * 32)
    x = torch.randn(2, 32, 32, 32) * 30  # large activations: 1,024 tokens summed
    with torch.autocast("cpu", dtype=dtype):
        out = attn(x)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    reference = attn(x)
    torch.testing.assert_close(out.float(), reference, rtol=0.1, atol=0.1 * reference.abs().mean().item())


def test_focused_linear_handles_non_square_maps_and_matches_its_implied_attention():
    torch.manual_seed(0)
    attn = FocusedLinearAttention(8, 8, heads=2, head_dim=4, tokens=24)
    x = torch.randn(1, 8, 4, 6)
    assert attn(x).shape == (1, 8, 4, 6)
    amap = attn.attention_map(x)
    assert amap.shape == (1, 2, 24, 24)
    torch.testing.assert_close(amap.sum(-1), torch.ones(1, 2, 24))
    # the linear-time output equals the explicit map applied to V (plus the depthwise branch)
    q, k, v = attn._features(x)
    explicit = amap @ v
    local = attn.dwc(v.transpose(-2, -1).reshape(2, 4, 4, 6)).reshape(1, 2, 4, 24).transpose(-2, -1)
    # A token whose focused query is ~0 in some head (all its channels negative before the ReLU) is left to
    # the depthwise branch by the eps of the linear-time normaliser; compare the well-conditioned tokens.
    conditioned = ((q * k.sum(dim=2, keepdim=True)).sum(-1) > 0.1).all(dim=1)[0]
    assert conditioned.sum() >= 8
    expected = attn.merge_heads(explicit + local)  # (1, N, C)
    fast = attn(x).flatten(2).transpose(1, 2)
    torch.testing.assert_close(fast[:, conditioned], expected[:, conditioned], rtol=1e-3, atol=1e-4)


def test_window_attention_maps_are_distributions():
    attn = WindowAttention(8, 8, heads=2, head_dim=4, window=(4, 4))
    amap = attn.attention_map(torch.randn(1, 8, 8, 8))
    assert amap.shape == (4, 2, 16, 16)
    torch.testing.assert_close(amap.sum(-1), torch.ones(4, 2, 16))


def test_window_must_divide_the_runtime_map():
    attn = WindowAttention(8, 8, heads=1, head_dim=8, window=(4, 4))
    with pytest.raises(ValueError, match="feature map 6x6 is not divisible by the attention window 4x4"):
        attn(torch.randn(1, 8, 6, 6))


@pytest.mark.parametrize("kind", ["window", "global", "focused_linear"])
def test_every_attention_kind_trains_in_a_model(kind):
    model = create_model("alternet_tiny", num_classes=4, img_size=16, attention=kind)
    loss = model(torch.randn(4, 3, 16, 16)).logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def _flatten_swin_reference(attn: FocusedLinearAttention, x: torch.Tensor) -> torch.Tensor:
    """FLatten-Swin's focused linear attention written out from its equations (Han et al., ICCV 2023): the
    key positional encoding is added before the kernel, q/k/v come from biased projections."""
    b, _, h, w = x.shape
    n, heads = h * w, attn.heads
    tokens = x.flatten(2).transpose(1, 2)
    q = attn.to_q(tokens)
    k, v = attn.to_kv(tokens).chunk(2, dim=-1)
    k = k + attn.positional_encoding
    scale = F.softplus(attn.scale)

    def focus(t):
        t = (torch.relu(t) + 1e-6) / scale
        return t**3 / (t**3).norm(dim=-1, keepdim=True) * t.norm(dim=-1, keepdim=True)

    q, k = focus(q), focus(k)
    q, k, v = (t.reshape(b, n, heads, -1).permute(0, 2, 1, 3) for t in (q, k, v))
    z = 1 / (q @ k.mean(dim=-2, keepdim=True).transpose(-2, -1) + 1e-6)
    out = q @ ((k.transpose(-2, -1) * n**-0.5) @ (v * n**-0.5)) * z
    local = attn.dwc(v.reshape(b * heads, n, -1).transpose(1, 2).reshape(b * heads, -1, h, w))
    out = out + local.reshape(b, heads, -1, n).transpose(-2, -1)
    return attn.to_out(out.transpose(1, 2).reshape(b, n, -1)).transpose(1, 2).reshape(b, -1, h, w)


def test_focused_linear_is_flatten_swins_operator_with_key_positions_and_qkv_bias():
    torch.manual_seed(0)
    attn = FocusedLinearAttention(8, 8, heads=2, head_dim=4, tokens=16)
    assert attn.to_q.bias is not None and attn.to_kv.bias is not None  # FLatten-Swin's default
    assert attn.positional_encoding.shape == (1, 16, 8) and not attn.positional_encoding.any()  # zero at init
    with torch.no_grad():
        attn.positional_encoding.normal_(0, 1.0)  # learned positions, so a misplaced encoding would show
        attn.to_kv.bias.normal_(0, 1.0)
    x = torch.randn(2, 8, 4, 4)
    torch.testing.assert_close(attn(x), _flatten_swin_reference(attn, x), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"built for 16 tokens .* got a 4x6 map"):
        attn(torch.randn(1, 8, 4, 6))


def test_qkv_bias_follows_each_kind_unless_the_model_says():
    def biases(**kwargs):
        model = create_model("alternet_tiny", num_classes=4, img_size=16, **kwargs)
        return {m.to_q.bias is not None for m in model.modules() if hasattr(m, "to_q")}

    assert biases() == {False}  # the reference's softmax attention: no q/k/v bias
    assert biases(attention="focused_linear") == {True}  # FLatten-Swin's
    assert biases(attention="focused_linear", qkv_bias=False) == {False}
    assert biases(qkv_bias=True) == {True}


def test_fused_attention_follows_timms_global_switch_unless_the_model_says():
    from timm.layers import set_fused_attn, use_fused_attn

    def fused(switch=None, **kwargs):
        model = create_model("alternet_tiny", num_classes=4, img_size=16, **kwargs)
        if switch is not None:
            model.set_fused_attn(switch[0])
        return {m.fused for m in model.modules() if isinstance(m, WindowAttention)}

    before = use_fused_attn()
    try:
        set_fused_attn(False)
        assert fused() == {False} and fused(fused_attn=True) == {True}
        assert fused((None,), fused_attn=True) == {False} and fused((True,)) == {True}  # the switch holds, as built
        set_fused_attn(True)
        assert fused() == {None} and fused(fused_attn=False) == {False}  # None: the faster path per call
    finally:
        set_fused_attn(before)


@pytest.mark.parametrize(
    ("fused", "bf16", "side", "kernel"),
    [
        (None, False, 4, True),
        (None, True, 4, False),
        (None, True, 17, True),
        (True, True, 4, True),
        (False, False, 4, False),
    ],
    ids=["unset-fp32", "unset-bf16", "unset-bf16-289-tokens", "fused-bf16", "math-fp32"],
)
def test_unset_attention_takes_the_math_path_on_a_cpu_in_bf16(monkeypatch, fused, bf16, side, kernel):
    """Left unset, a CPU in bf16 runs windows of up to 256 tokens on the math path (faster there:
    bench/attention.py), larger ones and fp32 on the fused kernel; a choice the model states is kept. Both give
    the same function."""
    torch.manual_seed(0)
    attn = WindowAttention(16, 24, heads=2, head_dim=8, window=(side, side), fused=fused)
    x = torch.randn(2, 16, side, 2 * side)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        reference = WindowAttention(16, 24, heads=2, head_dim=8, window=(side, side), fused=True)
        reference.load_state_dict(attn.state_dict())
        expected = reference(x)
        calls = []
        kernel_call = F.scaled_dot_product_attention
        monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or kernel_call(*a, **k))
        got = attn(x)
    assert bool(calls) == kernel
    tolerance = 2e-2 if bf16 else 1e-5
    torch.testing.assert_close(got.float(), expected.float(), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("channels_last", [False, True])
def test_window_maps_round_trip_in_either_memory_format(channels_last):

    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(2, 6, 8, 12).contiguous(memory_format=layout)
    maps = window_maps(x, (4, 4))
    assert maps.shape == (2 * 2 * 3, 6, 4, 4) and maps.is_contiguous(memory_format=layout)
    torch.testing.assert_close(maps[1], x[0, :, 0:4, 4:8], rtol=0, atol=0)  # windows in row-major order
    torch.testing.assert_close(merge_window_maps(maps, (8, 12)), x, rtol=0, atol=0)


def test_window_attention_computes_the_same_function_in_channels_last():
    torch.manual_seed(0)
    attention = WindowAttention(16, 24, heads=2, head_dim=8, window=(4, 4), fused=False).eval()
    x = torch.randn(2, 16, 8, 8)
    expected = attention(x)
    attention.to(memory_format=torch.channels_last)
    got = attention(x.contiguous(memory_format=torch.channels_last))
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # and the projections are the token-wise linear layers the checkpoints hold
    tokens = window_partition(x, (4, 4))
    q, k, v = attention.qkv(tokens)
    reference = attention.to_out(
        (torch.softmax(q @ k.transpose(-2, -1) * attention.scale + attention.position_bias(), -1) @ v)
        .transpose(1, 2)
        .flatten(2)
    )
    maps = reference.transpose(1, 2).reshape(-1, reference.shape[-1], 4, 4)  # (windows, C, 4, 4)
    torch.testing.assert_close(got, merge_window_maps(maps, (8, 8)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_the_fused_kernel_gets_heads_of_unit_stride_in_either_layout(monkeypatch, memory_format):
    """CUDA's fused attention kernels refuse a head dimension of stride != 1, and SDPA then falls back to its math
    kernel without a word (found on an H100: the contiguous layout's head views have stride N = window tokens)."""
    strides = []
    sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        strides.append((q.stride(-1), k.stride(-1), v.stride(-1)))
        return sdpa(q, k, v, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    attn = WindowAttention(16, 16, heads=2, head_dim=8, window=(4, 4), fused=True)
    attn(torch.randn(2, 16, 8, 8).contiguous(memory_format=memory_format))
    assert strides == [(1, 1, 1)]
