"""Analysis toolkit, checked on operators whose answer is known: impulses, checkerboards, box blurs, identity
and zero-initialised blocks, uniform attention, diagonal and quadratic Hessians, band-limited noise."""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from torch import nn

from alternet.analysis.attention import attention_stats, js_divergence, row_distance, row_entropy
from alternet.analysis.blocks import SUPPORTED, Tap, block_sequence, grid_positions
from alternet.analysis.eigen import SpectralDensity, lanczos, power_iteration, rademacher
from alternet.analysis.errors import AnalysisError
from alternet.analysis.features import feature_maps
from alternet.analysis.fourier import delta_profiles, half_diagonal, log_amplitude
from alternet.analysis.hessian import force_math_attention, model_hvp
from alternet.analysis.landscape import filter_norms, random_direction, weight_offsets
from alternet.analysis.lesion import lesioned_accuracies
from alternet.analysis.noise import band_edges, band_mask, band_noise, radial_frequency
from alternet.analysis.objective import Objective, accuracy
from alternet.analysis.variance import mean_variances, spatial_variance
from alternet.models import WindowAttention, create_model

from helpers import typed
from helpers.models import record_softmaxes

CPU = torch.device("cpu")


def tiny_alternet(**kwargs) -> nn.Module:
    torch.manual_seed(0)
    return create_model("alternet_tiny", num_classes=10, img_size=16, **kwargs).eval()


def tiny_vit(depth: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=depth, num_classes=10
    ).eval()


class BoxBlur(nn.Module):
    """3x3 mean filter with circular padding: multiplies each FFT bin by (1 + 2 cos wy)(1 + 2 cos wx) / 9."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = torch.full((x.shape[1], 1, 3, 3), 1 / 9, dtype=x.dtype)
        return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="circular"), kernel, groups=x.shape[1])


# Fourier and variance --------------------------------------------------------------------------------------


def test_half_diagonal_nyquist_runs_from_zero_to_pi_including_the_nyquist_bin():
    checkerboard = (-1.0) ** (torch.arange(8)[:, None] + torch.arange(8)[None, :])  # all energy at (pi, pi)
    spectrum = log_amplitude(checkerboard.expand(1, 1, 8, 8))[0, 0]
    frequencies, values = half_diagonal(spectrum, "nyquist")
    np.testing.assert_allclose(frequencies, [0, 0.25, 0.5, 0.75, 1.0])
    assert values[-1] == pytest.approx(math.log(64), abs=1e-4)
    assert np.all(values[:-1] < -13)  # log(eps): no energy anywhere else
    odd_frequencies, _ = half_diagonal(torch.zeros(7, 7), "nyquist")
    np.testing.assert_allclose(odd_frequencies, [0, 2 / 7, 4 / 7, 6 / 7])


def test_half_diagonal_hdvw_stops_before_the_nyquist_bin():
    """HDVW's diag()[h/2:]: the checkerboard's (pi, pi) energy is not on the profile; odd maps are unchanged."""
    checkerboard = (-1.0) ** (torch.arange(8)[:, None] + torch.arange(8)[None, :])
    spectrum = log_amplitude(checkerboard.expand(1, 1, 8, 8))[0, 0]
    frequencies, values = half_diagonal(spectrum, "hdvw")
    np.testing.assert_allclose(frequencies, [0, 0.25, 0.5, 0.75])
    assert np.all(values < -13)
    odd_frequencies, _ = half_diagonal(torch.zeros(7, 7), "hdvw")
    np.testing.assert_allclose(odd_frequencies, [0, 2 / 7, 4 / 7, 6 / 7])


def test_half_diagonal_rejects_non_square_maps():
    with pytest.raises(AnalysisError, match="square"):
        half_diagonal(torch.zeros(4, 8), "hdvw")


def test_impulse_maps_have_a_zero_delta_profile():
    maps = torch.zeros(3, 5, 8, 8)
    maps[..., 2, 5] = torch.randn(3, 5).abs() + 0.5  # |FFT| of an impulse is flat
    model = nn.Identity()
    ((frequencies, delta),) = delta_profiles(model, [Tap(model)], [maps], "hdvw")
    assert len(frequencies) == 4  # diag()[h/2:] of an 8x8 map
    np.testing.assert_allclose(delta, 0.0, atol=1e-6)


def test_identity_block_leaves_the_profile_and_variance_unchanged():
    model = tiny_alternet()
    sequence = block_sequence(model)
    index = next(i for i, b in enumerate(sequence.blocks) if i > 0 and b.output.module.shortcut is None)
    images = [torch.randn(4, 3, 16, 16)]
    with sequence.blocks[index].lesion():  # residual branch removed, no projection shortcut: identity
        profiles = delta_profiles(model, sequence.taps, images, "hdvw")
        variances = mean_variances(model, sequence.taps, images, "unbiased")
    before, after = profiles[index], profiles[index + 1]  # depth index is the block's input, index + 1 its output
    np.testing.assert_allclose(after[1], before[1], atol=1e-6)
    assert variances[index + 1] == pytest.approx(variances[index], rel=1e-6)


def test_box_blur_lowers_high_frequency_amplitude_by_log9_and_variance_ninefold():
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict(stem=nn.Identity(), blur=BoxBlur()))
    taps = [Tap(model.stem), Tap(model.blur)]
    white = [torch.randn(16, 8, 16, 16)]
    (_, original), (_, blurred) = delta_profiles(model, taps, white, "nyquist")
    # The filter's gain is 1 at frequency 0 and 1/9 at (pi, pi): the delta drops by exactly log 9 there.
    assert blurred[-1] - original[-1] == pytest.approx(-math.log(9), abs=1e-3)
    assert np.all(blurred[1:] <= original[1:] + 1e-6)
    # HDVW's last point on a 16x16 map is 0.875 pi, where the gain is ((1 + 2 cos 0.875 pi) / 3)^2.
    (_, original), (_, blurred) = delta_profiles(model, taps, white, "hdvw")
    gain = ((1 + 2 * math.cos(0.875 * math.pi)) / 3) ** 2
    assert blurred[-1] - original[-1] == pytest.approx(math.log(gain), abs=1e-3)
    var_original, var_blurred = mean_variances(model, taps, white, "unbiased")
    assert var_blurred / var_original == pytest.approx(1 / 9, rel=0.1)  # sum of squared taps of white noise


def test_spatial_variance_of_known_maps():
    constant = torch.full((2, 3, 4, 4), 7.0)
    checkerboard = ((-1.0) ** (torch.arange(4)[:, None] + torch.arange(4)[None, :])).expand(2, 3, 4, 4)
    assert torch.all(spatial_variance(constant, "unbiased") == 0)
    torch.testing.assert_close(spatial_variance(checkerboard, "population"), torch.ones(2, 3))
    torch.testing.assert_close(spatial_variance(checkerboard, "unbiased"), torch.full((2, 3), 16 / 15))
    single = torch.ones(2, 3, 1, 1)  # a last stage's 1x1 map: no spatial variance, NaN, and no torch warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert spatial_variance(single, "unbiased").isnan().all() and spatial_variance(single, "population").eq(0).all()


# Block adapters ----------------------------------------------------------------------------------------------


def test_alternet_adapter_labels_blocks_by_layout():
    sequence = block_sequence(create_model("alternet_r18", num_classes=10))
    assert "".join(b.kind for b in sequence.blocks) == "CCCMCMCM"
    assert [b.stage for b in sequence.blocks] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all((b.attention is not None) == (b.kind == "M") for b in sequence.blocks)


def test_timm_resnet18_adapter_gives_eight_conv_blocks_and_lesions_the_branch():
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).eval()
    sequence = block_sequence(model)
    assert [b.name for b in sequence.blocks][:3] == ["layer1.0", "layer1.1", "layer2.0"]
    assert [b.kind for b in sequence.blocks] == ["C"] * 8
    assert [b.stage for b in sequence.blocks] == [0, 0, 1, 1, 2, 2, 3, 3]
    images = [torch.randn(2, 3, 32, 32)]
    with sequence.blocks[0].lesion():  # BasicBlock without downsample: out = relu(0 + x)
        stem, first = next(feature_maps(model, sequence.taps[:2], images))
    torch.testing.assert_close(first, F.relu(stem))
    maps = next(feature_maps(model, sequence.taps, images))
    assert [m.shape[1] for m in maps] == [64, 64, 64, 128, 128, 256, 256, 512, 512]
    assert [m.shape[-1] for m in maps] == [8, 8, 8, 4, 4, 2, 2, 1, 1]


def test_vit_adapter_splits_attention_and_mlp_residuals_into_maps():
    model = tiny_vit(depth=3)
    sequence = block_sequence(model)
    assert [b.name for b in sequence.blocks][:2] == ["blocks.0.attn", "blocks.0.mlp"]
    assert "".join(b.kind for b in sequence.blocks) == "MCMCMC"
    maps = next(feature_maps(model, sequence.taps, [torch.randn(2, 3, 32, 32)]))
    assert all(m.shape == (2, 192, 4, 4) for m in maps)  # class token dropped, 16 patches as a 4x4 map
    images = [torch.randn(2, 3, 32, 32)]
    with sequence.blocks[2].lesion():  # attention residual of block 1 removed: its output is its input
        before, after = next(feature_maps(model, sequence.taps[2:4], images))
    torch.testing.assert_close(after, before)


def _attention_maps(model: nn.Module, block, images: torch.Tensor) -> torch.Tensor:
    """The adapter's attention map of ``block`` on the input its attention layer receives from ``images``."""
    inputs = []
    handle = block.attention.module.register_forward_pre_hook(lambda _m, args: inputs.append(args[0]))
    with torch.no_grad():
        model(images)
    handle.remove()
    return block.attention.probabilities(inputs[0])


def _use_math_attention(model: nn.Module) -> None:
    for module in model.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False


def test_pit_adapter_follows_each_stage_on_its_pooled_grid(monkeypatch):
    """PiT: two residual blocks per transformer block, each stage on its own grid (the pooling convolution's
    output), the stem the embedded map; the attention maps are the layers' own over the patch tokens."""
    torch.manual_seed(0)
    model = create_model("pit_mini_cifar", num_classes=10).eval()
    _use_math_attention(model)
    sequence = block_sequence(model)
    depths = [len(stage.blocks) for stage in model.transformers]
    assert "".join(b.kind for b in sequence.blocks) == "MC" * sum(depths)
    assert [b.stage for b in sequence.blocks] == [s for s, d in enumerate(depths) for _ in range(2 * d)]
    images = torch.randn(2, 3, 32, 32)
    maps = next(feature_maps(model, sequence.taps, [images]))
    grids = [m.shape[-2:] for m in maps]
    stem = model.patch_embed.grid_size
    assert grids[0] == stem and grids[-1] == tuple(-(-side // 2 ** (len(depths) - 1)) for side in stem)
    assert [m.shape[1] for m in maps[1:]] == [
        stage.blocks[0].norm1.normalized_shape[0] for stage in model.transformers for _ in range(2 * len(stage.blocks))
    ]
    last = [b for b in sequence.blocks if b.kind == "M"][-1]
    seen = record_softmaxes(monkeypatch)
    ours = _attention_maps(model, last, images)
    own = seen[-1][..., model.num_tokens :, model.num_tokens :]  # the last softmax of the forward: the last block's
    torch.testing.assert_close(ours, own / own.sum(-1, keepdim=True))
    with sequence.blocks[4].lesion():  # stage 1's second attention residual removed: its output is its input
        before, after = next(feature_maps(model, sequence.taps[4:6], [images]))
    torch.testing.assert_close(after, before)


def test_swin_adapter_maps_shifted_window_attention_with_its_mask(monkeypatch):
    """Swin: each block's window attention (M) and MLP (C) residuals; a shifted block's maps are its own softmax
    with the relative position bias and the shift's mask, so tokens the roll brought together get ~0."""
    torch.manual_seed(0)
    model = create_model("swin_mini_cifar", num_classes=10, depths=(2, 1, 2, 1)).eval()  # a shifted first stage
    _use_math_attention(model)
    sequence = block_sequence(model)
    swin_blocks = [block for stage in model.layers for block in stage.blocks]
    assert "".join(b.kind for b in sequence.blocks) == "MC" * len(swin_blocks)
    images = torch.randn(2, 3, 32, 32)
    maps = next(feature_maps(model, sequence.taps, [images]))
    assert [tuple(m.shape[-2:]) for m in maps[1::2]] == [tuple(b.input_resolution) for b in swin_blocks]
    shifted = next(i for i, b in enumerate(swin_blocks) if b.attn_mask is not None)
    block = [b for b in sequence.blocks if b.kind == "M"][shifted]
    seen = record_softmaxes(monkeypatch)
    ours = _attention_maps(model, block, images)
    torch.testing.assert_close(ours, seen[shifted])  # one softmax per Swin block, in order
    blocked = swin_blocks[shifted].attn_mask < 0  # (windows, N, N): pairs from regions the roll brought together
    per_window = ours.view(2, blocked.shape[0], *ours.shape[1:]).transpose(1, 2)  # (B, heads, windows, N, N)
    assert blocked.any() and (per_window[..., blocked] < 1e-30).all()  # timm's mask adds -100 to the logit


def test_sliding_window_vit_maps_are_masked_like_its_attention(monkeypatch):
    """model.local_kernel: the maps the instruments read are the masked ones the layer computes (0 outside the
    window), not the unmasked softmax."""
    torch.manual_seed(0)
    model = create_model("vit_mini_cifar", num_classes=10, local_kernel=3).eval()
    _use_math_attention(model)
    block = next(b for b in block_sequence(model).blocks if b.kind == "M")
    images = torch.randn(2, 3, 32, 32)
    seen = record_softmaxes(monkeypatch)
    ours = _attention_maps(model, block, images)
    own = seen[0][..., 1:, 1:]
    torch.testing.assert_close(ours, own / own.sum(-1, keepdim=True))
    outside = ~model.blocks[0].attn.local_mask[1:, 1:]
    assert outside.any() and (ours[..., outside] == 0).all()


def test_unsupported_models_are_named_in_the_error():
    with pytest.raises(AnalysisError, match="supported") as error:
        block_sequence(nn.Linear(2, 2))
    assert SUPPORTED in str(error.value)


# Lesion ------------------------------------------------------------------------------------------------------


def test_lesioning_a_zero_initialised_block_changes_nothing():
    model = tiny_alternet()
    sequence = block_sequence(model)
    block = sequence.blocks[1]
    with torch.no_grad():
        block.output.module.conv2[-1].weight.zero_()  # the residual branch now outputs exactly zero
    images = torch.randn(8, 3, 16, 16)
    batches = [(images, torch.arange(8) % 10)]
    with torch.no_grad():
        reference = model(images)
        with block.lesion():
            torch.testing.assert_close(model(images), reference, rtol=0, atol=0)
    assert lesioned_accuracies(model, [block], batches) == [accuracy(model, batches)]
    assert block.output.module.residual_scale == 1.0
    with torch.no_grad(), sequence.blocks[0].lesion():
        assert not torch.equal(model(images), reference)  # a non-zero block does matter


# Attention ---------------------------------------------------------------------------------------------------


def test_entropy_and_distance_of_known_maps():
    n = 16
    uniform = torch.full((2, 3, n, n), 1 / n)
    torch.testing.assert_close(row_entropy(uniform), torch.full((2, 3, n), math.log(n)))
    positions = grid_positions(4, 4)
    identity = torch.eye(n).expand(1, 1, n, n)
    assert torch.all(row_entropy(identity) == 0)
    assert torch.all(row_distance(identity, positions) == 0)
    # From the corner (0, 0) to the opposite corner (3, 3): distance 3 * sqrt(2).
    corner = torch.zeros(1, 1, n, n)
    corner[..., 0, n - 1] = 1
    assert row_distance(corner, positions)[0, 0, 0] == pytest.approx(3 * math.sqrt(2))


def test_constant_logits_give_uniform_window_attention_statistics():
    model = tiny_alternet()
    for module in model.modules():
        if isinstance(module, WindowAttention):
            with torch.no_grad():
                module.to_q.weight.zero_()
                module.rel_pos_bias.zero_()
    msa = [b for b in block_sequence(model).blocks if b.kind == "M"]
    stats = attention_stats(model, msa, [torch.randn(2, 3, 16, 16)])
    for s in stats:
        assert s.tokens == 16  # 4x4 windows
        np.testing.assert_allclose(s.entropy, math.log(16), rtol=1e-5)
        np.testing.assert_allclose(s.distance, s.uniform_distance, rtol=1e-5)
    # at 8 px the last stage's map is 2x2: the layer clips its 4x4 window to it, and so must the statistics
    stats = attention_stats(model, msa, [torch.randn(2, 3, 8, 8)])
    assert [s.tokens for s in stats] == [16, 4]
    for s in stats:
        np.testing.assert_allclose(s.entropy, math.log(s.tokens), rtol=1e-5)
        np.testing.assert_allclose(s.distance, s.uniform_distance, rtol=1e-5)


def test_focused_linear_attention_statistics_use_the_whole_map():
    model = tiny_alternet(attention="focused_linear")
    msa = [b for b in block_sequence(model).blocks if b.kind == "M"]
    stats = attention_stats(model, msa, [torch.randn(2, 3, 16, 16)])
    assert [s.tokens for s in stats] == [8 * 8, 4 * 4]  # stage maps of a 16 px input
    for s in stats:
        assert all(0 <= e <= math.log(s.tokens) + 1e-5 for e in s.entropy)


def test_js_divergence_is_symmetric_zero_for_equal_rows_and_log2_for_disjoint_ones():
    p, q = torch.tensor([0.7, 0.2, 0.1]), torch.tensor([0.1, 0.3, 0.6])
    assert js_divergence(p, q) == pytest.approx(js_divergence(q, p).item())
    assert js_divergence(p, p) == pytest.approx(0.0, abs=1e-7)
    assert js_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])) == pytest.approx(math.log(2))


def test_data_specificity_is_zero_for_a_position_only_kernel_and_positive_with_content():
    """With q = 0 the attention is softmax(B) for every image, a Conv-like kernel: specificity 0 and no shift from
    the position kernel; with content (q.k) the rows differ between images and move away from the kernel."""
    images = [torch.randn(4, 3, 16, 16)]
    model = tiny_alternet()
    msa = [b for b in block_sequence(model).blocks if b.kind == "M"]

    def scale_queries(factor: float) -> None:
        for module in model.modules():
            if isinstance(module, WindowAttention):
                with torch.no_grad():
                    module.to_q.weight.mul_(factor)

    scale_queries(10.0)  # at initialisation q.k is tiny and the rows nearly uniform
    with_content = attention_stats(model, msa, images)
    scale_queries(3.0)  # sharper content attention
    sharper = attention_stats(model, msa, images)
    for module in model.modules():
        if isinstance(module, WindowAttention):
            with torch.no_grad():
                module.to_q.weight.zero_()
    position_only = attention_stats(model, msa, images)
    for content, sharp, fixed in zip(with_content, sharper, position_only):
        np.testing.assert_allclose(fixed.specificity, 0.0, atol=1e-6)
        np.testing.assert_allclose(fixed.content_shift, 0.0, atol=1e-6)
        np.testing.assert_allclose(content.position_kernel_specificity, 0.0, atol=1e-6)
        assert all(0 < v <= math.log(2) for v in content.specificity + content.content_shift)
        assert np.mean(sharp.specificity) > np.mean(content.specificity)


def test_a_batch_of_one_image_adds_no_specificity():
    """The position kernel's own specificity is 0 by construction, whatever the batches' sizes (a last batch of one
    image has no pair to compare and adds nothing to either specificity)."""
    model = tiny_alternet()
    msa = [b for b in block_sequence(model).blocks if b.kind == "M"]
    pair = torch.randn(2, 3, 16, 16)
    with_one_more = attention_stats(model, msa, [pair, torch.randn(1, 3, 16, 16)])
    alone = attention_stats(model, msa, [torch.randn(1, 3, 16, 16)])
    for stats, paired, single in zip(with_one_more, attention_stats(model, msa, [pair]), alone, strict=True):
        np.testing.assert_allclose(stats.position_kernel_specificity, 0.0, atol=1e-6)
        np.testing.assert_allclose(stats.specificity, paired.specificity, rtol=1e-6)
        assert single.specificity is None and single.position_kernel_specificity is None


def test_focused_linear_reports_specificity_without_a_position_kernel():
    model = tiny_alternet(attention="focused_linear")
    msa = [b for b in block_sequence(model).blocks if b.kind == "M"]
    stats = attention_stats(model, msa, [torch.randn(3, 3, 16, 16)])
    assert all(s.position_kernel_specificity is None and s.content_shift is None for s in stats)
    assert all(0 < v <= math.log(2) for s in stats for v in s.specificity)


# Hessian -----------------------------------------------------------------------------------------------------


def diagonal_operator(eigenvalues: torch.Tensor):
    return lambda v: eigenvalues * v


def test_power_iteration_with_deflation_finds_the_largest_magnitudes():
    eigenvalues = torch.tensor([10.0, -8.0, 5.0, 3.0, 1.0, 0.5, -0.2, 0.1])
    generator = torch.Generator().manual_seed(0)
    result = power_iteration(diagonal_operator(eigenvalues), lambda: torch.randn(8, generator=generator), 3, 500, 1e-9)
    np.testing.assert_allclose(result.eigenvalues, [10.0, -8.0, 5.0], rtol=1e-4)


def test_lanczos_is_exact_with_as_many_steps_as_dimensions_and_slq_estimates_the_spectrum():
    generator = torch.Generator().manual_seed(0)
    eigenvalues = torch.cat([torch.linspace(-3, -1, 6), torch.linspace(0.5, 9, 14)])  # 30% negative
    operator = diagonal_operator(eigenvalues)
    run = lanczos(operator, rademacher(20, generator, CPU), 20)
    np.testing.assert_allclose(np.sort(run.values), eigenvalues.numpy(), atol=1e-4)
    assert run.weights.sum() == pytest.approx(1.0)
    top, residuals = run.top_by_magnitude(2)
    np.testing.assert_allclose(top, [9.0, eigenvalues[-2]], rtol=1e-5)
    assert np.all(residuals < 1e-4)  # a full Krylov space: every Ritz pair is exact
    runs = [lanczos(operator, rademacher(20, generator, CPU), 20) for _ in range(200)]
    density = SpectralDensity(runs, 20)
    assert density.negative_fraction() == pytest.approx(0.3, abs=0.03)
    assert density.trace() == pytest.approx(float(eigenvalues.sum()), rel=0.05)
    fractions = [r.weights[r.values < 0].sum() for r in runs]  # the runs' own scatter, over the root of their count
    assert density.negative_fraction_se() == pytest.approx(np.std(fractions, ddof=1) / np.sqrt(200))
    assert SpectralDensity(runs[:1], 20).negative_fraction_se() is None  # one run: no estimate of its error


def test_model_hvp_on_a_quadratic_loss_recovers_its_top_eigenvalues():
    torch.manual_seed(0)
    x, y = torch.randn(40, 6) * torch.linspace(0.5, 3, 6), torch.randn(40, 1)
    model = nn.Linear(6, 1, bias=False)
    weight_decay = 0.1
    operator = model_hvp(
        model,
        list(model.parameters()),
        [(x[:25], y[:25]), (x[25:], y[25:])],  # unequal batches, weighted by size
        lambda out, target: 0.5 * ((out - target) ** 2).sum(dim=1).mean(),
        lambda: 0.5 * weight_decay * model.weight.pow(2).sum(),
    )
    expected = np.sort(np.linalg.eigvalsh((x.T @ x / 40).double().numpy()) + weight_decay)[::-1]
    generator = torch.Generator().manual_seed(1)
    power = power_iteration(operator, lambda: torch.randn(6, generator=generator), 3, 1000, 1e-10)
    np.testing.assert_allclose(power.eigenvalues, expected[:3], rtol=1e-4)
    top, _ = lanczos(operator, rademacher(6, generator, CPU), 6).top_by_magnitude(3)
    np.testing.assert_allclose(top, expected[:3], rtol=1e-4)


def test_model_hvp_matches_the_exact_hessian_of_nll_plus_l2():
    torch.manual_seed(0)
    model = nn.Linear(3, 4)
    x, y = torch.randn(10, 3), torch.randint(0, 4, (10,))
    recipe = typed("recipe.optimizer.weight_decay=0.3", "recipe.no_decay_norm_bias=true").recipe
    objective = Objective.from_recipe(model, recipe, "decay_squared")
    assert objective.penalised == [model.weight]  # the bias is not decayed, as in training
    params = list(model.parameters())
    operator = model_hvp(model, params, [(x, y)], objective.nll, objective.l2)

    def loss(flat: torch.Tensor) -> torch.Tensor:
        weight, bias = flat[:12].view(4, 3), flat[12:]
        return F.cross_entropy(x @ weight.T + bias, y) + 0.15 * weight.pow(2).sum()

    exact = torch.autograd.functional.hessian(loss, torch.cat([p.detach().flatten() for p in params]))
    v = torch.randn(16)
    torch.testing.assert_close(operator(v), exact @ v, rtol=1e-4, atol=1e-5)


def test_math_attention_is_forced_for_alternet_and_timm():
    alternet, vit = tiny_alternet(), tiny_vit(depth=1)
    force_math_attention(alternet)
    force_math_attention(vit)
    assert all(not m.fused for m in alternet.modules() if isinstance(m, WindowAttention))
    assert vit.blocks[0].attn.fused_attn is False


# Landscape ---------------------------------------------------------------------------------------------------


def test_filter_normalised_direction_matches_filter_norms_and_zeroes_norm_bias_and_position():
    model = tiny_alternet()
    direction = random_direction(model, torch.Generator().manual_seed(0), "filter")
    checked = 0
    for name, param in model.named_parameters():
        d = direction[name]
        if param.ndim <= 1 or name.endswith("rel_pos_bias"):
            assert torch.all(d == 0), name
        else:
            torch.testing.assert_close(filter_norms(d), filter_norms(param.detach()), rtol=1e-5, atol=1e-7)
            checked += 1
    assert checked > 10


def test_weight_offsets_move_and_restore_weights_exactly():
    model = tiny_alternet()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    directions = [random_direction(model, torch.Generator().manual_seed(s), "hdvw") for s in (0, 1)]
    conv = model.stem.conv.weight
    with weight_offsets(model) as move:
        move([0.5, -0.25], directions)
        expected = saved["stem.conv.weight"] + 0.5 * directions[0]["stem.conv.weight"]
        torch.testing.assert_close(conv.detach(), expected - 0.25 * directions[1]["stem.conv.weight"])
        move([0.0, 0.0], directions)
        assert torch.equal(conv.detach(), saved["stem.conv.weight"])
        move([0.3, 0.3], directions)
    assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items())


# Noise -------------------------------------------------------------------------------------------------------


def test_band_limited_noise_has_its_energy_in_the_band_and_the_requested_norm():
    generator = torch.Generator().manual_seed(0)
    edges = band_edges(4, 1.0)
    for band in range(4):
        mask = band_mask(32, 32, edges[band], edges[band + 1], closed=band == 3)
        noise = band_noise((6, 3, 32, 32), mask, 5.0, generator).double()
        power = torch.fft.fft2(noise).abs() ** 2
        assert float(power[..., mask].sum() / power.sum()) > 1 - 1e-6
        torch.testing.assert_close(noise.flatten(1).norm(dim=1), torch.full((6,), 5.0, dtype=torch.float64))


def test_bands_partition_the_spectrum():
    edges = band_edges(5, math.sqrt(2))
    masks = [band_mask(16, 16, edges[i], edges[i + 1], closed=i == 4) for i in range(5)]
    assert torch.equal(torch.stack(masks).sum(dim=0), torch.ones(16, 16, dtype=torch.long))
    assert radial_frequency(16, 16)[8, 8] == pytest.approx(math.sqrt(2))  # the (pi, pi) corner
    with pytest.raises(AnalysisError, match="fewer rings"):
        band_mask(4, 4, 0.1, 0.2, closed=False)


def test_close_max_eigenvalues_are_seen_in_their_histogram(tmp_path, monkeypatch):
    """Zero marked far from values within 3e-4 of each other stretched the axis to it: empty axes, no bar."""
    from alternet.analysis import plots

    drawn = {}
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: drawn.setdefault("axes", fig.axes[0]) and path)
    plots.max_eigenvalue_density(np.array([17.4741, 17.4743, 17.4744]), "a long title " * 8, tmp_path / "h.png")
    low, high = drawn["axes"].get_xlim()
    assert 17.47 < low < 17.4741 and 17.4744 < high < 17.48
    plots.max_eigenvalue_density(np.array([-2.0, 1.0, 3.0]), "straddling zero", tmp_path / "h2.png")
