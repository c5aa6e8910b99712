"""The analyses measure what the paper measures: each default against a value computed by hand on a tiny input
where HDVW's definition and the alternative differ, the per-mini-batch maximum Hessian eigenvalue against
``torch.linalg.eigvalsh`` of an exact Hessian, and ``position_only`` attention, the data-independent control."""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import timm
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from alternet.analysis import AnalysisConfigError, parse_configs
from alternet.analysis.attention import attention_stats
from alternet.analysis.blocks import Tap, block_sequence
from alternet.analysis.config import default_values
from alternet.analysis.data import mixed_batches
from alternet.analysis.eigen import extreme_eigenvalues, power_iteration
from alternet.analysis.fourier import batch_statistics, delta_profiles, high_values, plotted_frequencies
from alternet.analysis.hessian import HessianConfig, minibatch_max_eigenvalues, minibatch_top_eigenvalues
from alternet.analysis.landscape import dim0_norms, measure, normalised, random_direction
from alternet.analysis.noise import band_mask, frequency_bands, radial_frequency
from alternet.analysis.objective import objective_of
from alternet.analysis.variance import mean_variances
from alternet.apps.checks import validate_train_config
from alternet.data.mixing import recipe_mixup
from alternet.errors import ConfigValueError
from alternet.models import ATTENTION_KINDS, PositionOnlyAttention, WindowAttention, create_model

from helpers import compose_train, typed


def tiny(attention: str = "window", seed: int = 0) -> torch.nn.Module:
    """alternet_tiny (two MSA blocks) with one bias table per head, as both arms of ``paper/specificity``."""
    torch.manual_seed(seed)
    return create_model("alternet_tiny", num_classes=10, img_size=16, attention=attention, bias_per_head=True)


# position_only attention ---------------------------------------------------------------------------------------


def test_position_only_gives_every_image_the_same_kernel_per_head_softmax_of_its_bias():
    model = tiny("position_only").eval()
    modules = [m for m in model.modules() if isinstance(m, PositionOnlyAttention)]
    assert len(modules) == 2
    for module in modules:
        with torch.no_grad():
            module.rel_pos_bias.normal_(0, 1.0)  # kernels far from uniform
    for module in modules:
        channels = module.to_v.in_features
        one, other = (
            module.attention_map(torch.randn(2, channels, 8, 8)),
            module.attention_map(torch.randn(3, channels, 8, 8)),
        )
        kernel = module.position_bias().softmax(dim=-1)
        assert kernel.shape == (module.heads, 16, 16) and one.shape == (2 * 4, module.heads, 16, 16)
        assert not torch.allclose(kernel[0], kernel[1])  # a kernel per head
        torch.testing.assert_close(one, kernel.expand_as(one))
        torch.testing.assert_close(other, kernel.expand_as(other))
    msa = [b for b in block_sequence(model).blocks if b.kind == "M"]
    for stats in attention_stats(model, msa, [torch.randn(4, 3, 16, 16)]):
        assert max(stats.specificity) < 1e-9  # data specificity of a data-independent kernel: zero


def _as_position_only(window_state: dict) -> dict:
    """A window model's weights for its position_only twin: each attention's value half of ``to_kv`` as ``to_v``,
    its query and key projections dropped."""
    state = {}
    for key, value in window_state.items():
        if ".to_q." in key:
            continue
        if ".to_kv." in key:
            state[key.replace(".to_kv.", ".to_v.")] = value[value.shape[0] // 2 :]
        else:
            state[key] = value
    return state


def test_position_only_output_equals_window_attention_with_zero_queries():
    window, position = tiny("window").eval(), tiny("position_only").eval()
    for module in window.modules():
        if isinstance(module, WindowAttention):
            with torch.no_grad():
                module.to_q.weight.zero_()  # logits q.k = 0: softmax(0 + B_h)
    position.load_state_dict(_as_position_only(window.state_dict()), strict=True)
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(position(images), window(images), rtol=1e-5, atol=1e-6)
        channels_last = position.to(memory_format=torch.channels_last)
        torch.testing.assert_close(channels_last(images.contiguous(memory_format=torch.channels_last)), window(images))


def test_position_only_holds_no_dead_parameter():
    """No query or key projection: one training step moves every parameter (the per-head kernels included), and
    the model has exactly window attention's parameters minus q and k."""
    window, model = tiny("window"), tiny("position_only").train()
    assert all(p.requires_grad for p in model.parameters())
    qk = sum(
        m.to_q.weight.numel() + m.to_kv.weight.numel() // 2 for m in window.modules() if isinstance(m, WindowAttention)
    )
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in window.parameters()) - qk
    images, labels = torch.randn(8, 3, 16, 16), torch.arange(8) % 10
    torch.nn.functional.cross_entropy(model(images), labels).backward()
    dead = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert dead == []


def test_position_only_needs_a_bias_table_per_head_before_any_work():
    shared = OmegaConf.to_container(compose_train("model=alternet_tiny", "model.attention=position_only"))
    with pytest.raises(ConfigValueError) as error:
        validate_train_config(shared)
    assert str(error.value).startswith("model.attention=position_only needs model.bias_per_head=true")
    validate_train_config(
        OmegaConf.to_container(
            compose_train("model=alternet_tiny", "model.attention=position_only", "model.bias_per_head=true"),
            resolve=True,
        )
    )
    assert "position_only" in ATTENTION_KINDS


# Defaults and their alternatives, on inputs where they differ ----------------------------------------------------


def defaults(name: str):
    return parse_configs([name], {})[name]


def test_fourier_bn_mode_batch_normalises_each_batch_with_its_own_statistics_and_leaves_the_model_as_it_was():
    """HDVW's notebook runs timm's models without .eval() (BatchNorm on the batch's statistics, one image);
    bn_mode=batch does the same on the analysed model, which ends in eval mode with its running statistics."""
    model = tiny().eval()
    with torch.no_grad():  # running statistics far from any batch's own
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.fill_(3.0)
                module.running_var.fill_(9.0)
    before = {key: value.clone() for key, value in model.state_dict().items()}
    images = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = copy.deepcopy(model).train()(
            images
        )  # every layer in training mode, as timm's create_model leaves it
        with batch_statistics(model):
            found = model(images)
        evaluated = model(images)
    torch.testing.assert_close(found, expected)
    assert not torch.allclose(evaluated, found)
    assert all(torch.equal(value, before[key]) for key, value in model.state_dict().items())
    assert not any(module.training for module in model.modules())
    assert defaults("fourier").bn_mode == "eval"
    with pytest.raises(AnalysisConfigError, match="bn_mode"):
        parse_configs(["fourier"], {"fourier": {"bn_mode": "train"}})


def test_fourier_default_ends_a_4x4_map_at_half_pi_and_nyquist_at_pi():
    """x = 1 + cos(pi/2 (m + n)) + 0.25 (-1)^(m + n) on a 4x4 map: |FFT| is 16 at 0, 8 at (pi/2, pi/2), 4 at
    (pi, pi). HDVW's diag()[2:] ends at 0.5 pi: delta -log 2; the Nyquist profile ends at pi: delta -log 4."""
    m, n = torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij")
    x = (1 + torch.cos(math.pi / 2 * (m + n)) + 0.25 * (-1.0) ** (m + n)).expand(1, 1, 4, 4)
    identity = nn.Identity()
    assert defaults("fourier").high_frequency == "hdvw"
    ((frequencies, delta),) = delta_profiles(identity, [Tap(identity)], [x], defaults("fourier").high_frequency)
    np.testing.assert_allclose(frequencies, [0.0, 0.5])  # the last point: (1 - 2/4) pi
    assert delta[-1] == pytest.approx(-math.log(2), abs=1e-5)
    np.testing.assert_allclose(plotted_frequencies(frequencies, "hdvw"), [0.0, 1.0])  # where HDVW plots it
    ((frequencies, delta),) = delta_profiles(identity, [Tap(identity)], [x], "nyquist")
    np.testing.assert_allclose(frequencies, [0.0, 0.5, 1.0])
    assert delta[-1] == pytest.approx(-math.log(4), abs=1e-5)


def test_a_map_too_small_for_a_high_frequency_reports_none_not_zero():
    """HDVW's half diagonal of a 2x2 (or 1x1) map holds the zero frequency alone: its Δ is 0 by construction, which
    the summary's means would take as a measurement (a ResNet-50's last stages at 32 px). NaN, which they drop."""
    identity, x = nn.Identity(), torch.randn(2, 3, 4, 4)
    for size, profile, finite in ((4, "hdvw", True), (2, "hdvw", False), (1, "hdvw", False), (2, "nyquist", True)):
        (value,) = high_values(delta_profiles(identity, [Tap(identity)], [x[..., :size, :size]], profile))
        assert math.isfinite(value) == finite, (size, profile)


def test_the_msa_conv_contrast_compares_blocks_at_one_frequency():
    """The summary's M and C means mix frequencies: a 32x32 Conv stage's last point (0.94π) against a 4x4 MSA's
    (0.5π). The contrast takes the M less the C mean per map size where both are, here 8x8 alone: +0.5, where the
    means differ by 1.75."""
    from alternet.analysis.fourier import msa_minus_conv

    def profile(size, value):
        return np.arange(size // 2) * 2 / size, np.linspace(0.0, value, size // 2)

    profiles = [profile(32, -3.0), profile(8, -1.0), profile(8, -0.5), profile(4, 0.0), profile(2, 5.0)]
    kinds = ["C", "C", "M", "M", "M"]  # the 2x2 map has no high frequency (NaN): left out
    assert msa_minus_conv(profiles, kinds) == pytest.approx(0.5)
    assert math.isnan(msa_minus_conv(profiles[:1] + profiles[3:4], ["C", "M"]))  # no size holds both


def test_variance_default_is_unbiased():
    """A 2x2 map [[0, 2], [0, 2]]: mean 1, squared deviations sum to 4: 4/3 unbiased, 4/4 population."""
    maps = torch.tensor([[0.0, 2.0], [0.0, 2.0]]).expand(1, 1, 2, 2)
    identity = nn.Identity()
    assert defaults("variance").estimator == "unbiased"
    assert mean_variances(identity, [Tap(identity)], [maps], defaults("variance").estimator) == [pytest.approx(4 / 3)]
    assert mean_variances(identity, [Tap(identity)], [maps], "population") == [pytest.approx(1.0)]


def linear_with(weight: float, bias: float) -> nn.Linear:
    model = nn.Linear(1, 1)
    with torch.no_grad():
        model.weight.fill_(weight)
        model.bias.fill_(bias)
    return model


RECIPE = typed("recipe.optimizer.weight_decay=0.1", "recipe.no_decay_norm_bias=true", "recipe.label_smoothing=0").recipe


@pytest.mark.parametrize("name", ["landscape", "hessian"])
def test_l2_default_is_hdvws_unsquared_norm_of_every_parameter(name):
    """Weight 3, bias -4, weight decay 0.1: HDVW's 0.1 * (|3| + |-4|) = 0.7; the decay's own term
    0.5 * 0.1 * 3^2 = 0.45 (the bias is not decayed under no_decay_norm_bias)."""
    model = linear_with(3.0, -4.0)
    config = defaults(name)
    assert (config.regulariser, config.targets) == ("hdvw", "training")
    objective = objective_of(model, RECIPE, config)
    assert float(objective.l2().detach()) == pytest.approx(0.7)
    (grad_w, grad_b) = torch.autograd.grad(objective.l2(), list(model.parameters()))
    assert (float(grad_w), float(grad_b)) == pytest.approx((0.1, -0.1))  # wd * w / ||w||
    squared = objective_of(model, RECIPE, replace(config, regulariser="decay_squared"))
    assert float(squared.l2().detach()) == pytest.approx(0.45)
    assert float(objective_of(model, RECIPE, replace(config, regulariser="none")).l2().detach()) == 0.0


def test_landscape_origin_loss_is_nll_plus_the_hdvw_term():
    model = linear_with(3.0, -4.0)  # one output: the NLL of a one-class problem is 0
    batches = [(torch.randn(4, 1), torch.zeros(4, dtype=torch.long))]
    measured = measure(model, batches, objective_of(model, RECIPE, defaults("landscape")))
    assert measured == dict(nll=0.0, l2=pytest.approx(0.7), loss=pytest.approx(0.7), acc=1.0)


def test_all_zero_tensors_add_nothing_to_the_hdvw_gradient():
    model = linear_with(3.0, 0.0)
    objective = objective_of(model, RECIPE, defaults("landscape"))
    assert float(objective.l2().detach()) == pytest.approx(0.3)
    grads = torch.autograd.grad(objective.l2(), list(model.parameters()), allow_unused=True, create_graph=True)
    assert float(grads[0].detach()) == pytest.approx(0.1) and grads[1] is None  # not 0/0 = NaN


def test_soft_targets_take_the_soft_target_cross_entropy():
    logits = torch.tensor([[2.0, 0.0, -1.0]])
    soft = torch.tensor([[0.7, 0.3, 0.0]])
    objective = objective_of(linear_with(1.0, 0.0), RECIPE, defaults("landscape"))
    expected = -(soft * F.log_softmax(logits, dim=-1)).sum()
    assert float(objective.nll(logits, soft)) == pytest.approx(float(expected))


def test_hdvws_log_of_softmax_equals_the_stable_nll_until_a_probability_underflows():
    """landscape.nll=log_of_softmax (HDVW's ops/tests.py: the loss of torch.log(softmax(z))): the same NLL for
    moderate logits, hard and soft targets; infinite once the target class's probability underflows float32 (a
    logit 200 below: e^-200 < 1e-45), where log_softmax stays finite (200)."""
    stable = objective_of(linear_with(1.0, 0.0), RECIPE, defaults("landscape"))
    hdvw = replace(stable, log_of_softmax=True)
    logits, soft = torch.tensor([[2.0, 0.0, -1.0]]), torch.tensor([[0.7, 0.2, 0.1]])
    for targets in (torch.tensor([1]), soft):
        assert float(hdvw.nll(logits, targets)) == pytest.approx(float(stable.nll(logits, targets)), rel=1e-6)
    far = torch.tensor([[0.0, -200.0]])
    assert float(stable.nll(far, torch.tensor([1]))) == pytest.approx(200.0)
    assert float(hdvw.nll(far, torch.tensor([1]))) == math.inf


def test_landscape_default_normalisation_is_hdvws_norm_over_dim_0():
    """d = ones(2, 2), w = [[3, 0], [4, 1]]: HDVW scales each column to w's column norms (5, 1); Li et al.'s
    filter normalisation each row to w's row norms (3, sqrt 17)."""
    weight, direction = torch.tensor([[3.0, 0.0], [4.0, 1.0]]), torch.ones(2, 2)
    assert defaults("landscape").normalisation == "hdvw"
    expected = torch.tensor([[5.0, 1.0], [5.0, 1.0]]) / math.sqrt(2)
    torch.testing.assert_close(normalised(direction, weight, "hdvw"), expected, rtol=1e-6, atol=1e-6)
    rows = torch.tensor([[3.0, 3.0], [math.sqrt(17), math.sqrt(17)]]) / math.sqrt(2)
    torch.testing.assert_close(normalised(direction, weight, "filter"), rows)


def test_hdvw_directions_move_class_tokens_but_not_positions_norms_or_biases():
    torch.manual_seed(0)
    vit = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=1, num_classes=10
    )
    hdvw = random_direction(vit, torch.Generator().manual_seed(0), "hdvw")
    filtered = random_direction(vit, torch.Generator().manual_seed(0), "filter")
    assert hdvw["cls_token"].abs().sum() > 0 and torch.all(filtered["cls_token"] == 0)
    for direction in (hdvw, filtered):
        assert torch.all(direction["pos_embed"] == 0)
        assert torch.all(direction["blocks.0.norm1.weight"] == 0) and torch.all(direction["head.bias"] == 0)
    alternet = tiny()
    direction = random_direction(alternet, torch.Generator().manual_seed(0), "hdvw")
    for name, param in alternet.named_parameters():
        if name.endswith("rel_pos_bias") or param.ndim < 2:
            assert torch.all(direction[name] == 0), name
        else:
            torch.testing.assert_close(dim0_norms(direction[name]), dim0_norms(param.detach()), rtol=1e-4, atol=1e-6)


def test_noise_default_bands_are_centred_at_tenths_of_pi_and_exclude_dc():
    config = defaults("noise")
    bands = frequency_bands(config)
    np.testing.assert_allclose([b.centre for b in bands], np.arange(1, 10) / 10)
    np.testing.assert_allclose([b.high - b.low for b in bands], 0.1)
    masks = torch.stack([band_mask(32, 32, b.low, b.high, b.closed) for b in bands])
    assert not masks[:, 0, 0].any()  # DC (bin 0, 0) in no band
    assert masks.sum(dim=0).max() == 1  # disjoint
    radius = radial_frequency(32, 32)
    assert torch.equal(masks[0], (radius >= 0.05 - 1e-9) & (radius < 0.15 - 1e-9))
    rings = frequency_bands(replace(config, bands="rings", rings=4))
    assert band_mask(32, 32, rings[0].low, rings[0].high, rings[0].closed)[0, 0]  # the alternative's lowest: DC


def test_lesion_flags_blocks_whose_shortcut_is_a_projection():
    torch.manual_seed(0)
    resnet = block_sequence(timm.create_model("resnet18", pretrained=False, num_classes=10))
    assert [b.projection for b in resnet.blocks] == [False, False, True, False, True, False, True, False]
    alternet = block_sequence(tiny())
    assert [b.projection for b in alternet.blocks] == [b.output.module.shortcut is not None for b in alternet.blocks]


# Per-mini-batch maximum eigenvalue -----------------------------------------------------------------------------


def exact_dominant_eigenvalue(loss, params: list[nn.Parameter]) -> float:
    """The eigenvalue of largest magnitude (sign kept) of the exact Hessian of ``loss`` at ``params``."""
    flat = torch.cat([p.detach().flatten() for p in params]).double()
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]

    def of_flat(vector: torch.Tensor) -> torch.Tensor:
        return loss([v.view(s) for v, s in zip(vector.split(sizes), shapes)])

    eigenvalues = torch.linalg.eigvalsh(torch.autograd.functional.hessian(of_flat, flat))
    return float(eigenvalues[eigenvalues.abs().argmax()])


def test_minibatch_max_eigenvalues_match_eigvalsh_of_each_exact_hessian():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    params = list(model.parameters())
    minibatches = [(torch.randn(6, 3, dtype=torch.float64), torch.randint(0, 3, (6,))) for _ in range(4)]
    config = parse_configs(["hessian"], {"hessian": dict(minibatches=4, minibatch_steps=200, tol=1e-12)})["hessian"]
    objective = objective_of(model, replace(RECIPE, no_decay_norm_bias=False), config)
    maxima = minibatch_max_eigenvalues(model, params, minibatches, objective, config)
    for value, (x, y) in zip(maxima.values, minibatches):

        def loss(weights, x=x, y=y):
            w1, b1, w2, b2 = weights
            logits = torch.tanh(x @ w1.T + b1) @ w2.T + b2
            return F.cross_entropy(logits, y) + 0.1 * sum(w.norm() for w in weights)

        assert value == pytest.approx(exact_dominant_eigenvalue(loss, params), rel=1e-5)
    assert len(set(maxima.values.round(8))) == 4  # a value per mini-batch


def test_hdvws_top_5_per_minibatch_match_eigvalsh_and_begin_with_our_statistic():
    """per_minibatch=5 (HDVW's statistic): each mini-batch's 5 eigenvalues of largest magnitude, signs kept, equal the
    exact Hessian's; the first of each is the dominant eigenvalue the default reports from the same start."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3)).double()
    params = list(model.parameters())
    minibatches = [(torch.randn(6, 3, dtype=torch.float64), torch.randint(0, 3, (6,))) for _ in range(3)]
    budget = dict(minibatches=3, minibatch_steps=200, tol=1e-12)
    config = parse_configs(["hessian"], {"hessian": {**budget, "per_minibatch": 5}})["hessian"]
    objective = objective_of(model, replace(RECIPE, no_decay_norm_bias=False), config)
    tops = minibatch_top_eigenvalues(model, params, minibatches, objective, config)
    flat = torch.cat([p.detach().flatten() for p in params])
    sizes, shapes = [p.numel() for p in params], [p.shape for p in params]
    for top, (x, y) in zip(tops.tops, minibatches):

        def loss(vector, x=x, y=y):
            w1, b1, w2, b2 = [v.view(s) for v, s in zip(vector.split(sizes), shapes)]
            logits = torch.tanh(x @ w1.T + b1) @ w2.T + b2
            return F.cross_entropy(logits, y) + 0.1 * sum(w.norm() for w in (w1, b1, w2, b2))

        exact = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, flat)).numpy()
        expected = exact[np.argsort(-np.abs(exact))[:5]]
        np.testing.assert_allclose(top.values, expected, rtol=1e-5, atol=1e-9)
        assert top.converged.all()
    default = parse_configs(["hessian"], {"hessian": budget})["hessian"]
    maxima = minibatch_max_eigenvalues(model, params, minibatches, objective, default)
    np.testing.assert_allclose(tops.dominant, maxima.values, rtol=1e-6)
    assert tops.values.shape == (15,) and tops.unconverged == 0
    capped = parse_configs(["hessian"], {"hessian": {**budget, "per_minibatch": 5, "minibatch_steps": 5}})["hessian"]
    assert minibatch_top_eigenvalues(model, params, minibatches, objective, capped).unconverged > 0


def test_minibatch_max_eigenvalue_keeps_a_negative_sign():
    """A concave loss -0.5 * mean((w.x)^2): H = -X^T X / n, whose largest-magnitude eigenvalue is negative."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1, bias=False).double()
    x = torch.randn(8, 3, dtype=torch.float64) * torch.tensor([3.0, 1.0, 0.5], dtype=torch.float64)
    concave = SimpleNamespace(nll=lambda out, _t: -0.5 * out.pow(2).mean(), l2=lambda: torch.zeros(()))
    config = parse_configs(["hessian"], {"hessian": dict(minibatches=1, minibatch_steps=200, tol=1e-12)})["hessian"]
    maxima = minibatch_max_eigenvalues(model, list(model.parameters()), [(x, torch.zeros(8))], concave, config)
    expected = float(torch.linalg.eigvalsh(-x.T @ x / 8).min())
    assert expected < 0 and maxima.values[0] == pytest.approx(expected, rel=1e-6)
    assert maxima.negative_fraction == 1.0


def _near_tie(n: int = 80) -> torch.Tensor:
    """A symmetric matrix whose ends nearly tie in magnitude: eigenvalues -1.0 and +0.995, the rest in (-0.5, 0.5)."""
    generator = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=generator, dtype=torch.float64))
    bulk = torch.rand(n - 2, generator=generator, dtype=torch.float64) - 0.5
    return q @ torch.diag(torch.cat([torch.tensor([-1.0, 0.995], dtype=torch.float64), bulk])) @ q.T


def test_lanczos_finds_both_ends_and_the_dominant_sign_where_they_nearly_tie():
    """Where |lambda_min| ~ |lambda_max| (a ViT's Hessian), power iteration at PyHessian's budget (100 products,
    tol 1e-3) stops between the two; Lanczos finds both ends to eigvalsh's digits, and so the dominant one's sign."""
    matrix = _near_tie()
    exact = torch.linalg.eigvalsh(matrix)
    start = torch.randn(80, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    found = extreme_eigenvalues(lambda v: matrix @ v, start, 200, 1e-10)
    assert (found.lambda_max, found.lambda_min) == (pytest.approx(float(exact[-1])), pytest.approx(float(exact[0])))
    assert found.converged and found.steps < 80 and found.dominant == pytest.approx(-1.0)
    power = power_iteration(lambda v: matrix @ v, lambda: start.clone(), 1, 100, 1e-3).eigenvalues[0]
    assert abs(power - -1.0) > 0.05  # the reason the mini-batch statistic is no longer power iteration's

    capped = extreme_eigenvalues(lambda v: matrix @ v, start, 4, 1e-10)  # the flag trips at a low cap
    assert capped.steps == 4 and not capped.converged_max and not capped.converged_min


def test_minibatch_extremes_of_a_model_whose_ends_nearly_tie():
    """0.5 * mean(t * (w.x)^2) with t = +-1 per image: H = X^T diag(t) X / n = diag(1.0, -1.002, 0.3) here. The
    dominant eigenvalue is the negative one, by 0.2%; a cap of one product leaves the mini-batch unconverged."""
    model = nn.Linear(3, 1, bias=False).double()
    x = torch.diag(torch.tensor([1.0, 1.002, 0.3], dtype=torch.float64).sqrt() * math.sqrt(3))
    t = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    saddle = SimpleNamespace(
        nll=lambda out, targets: 0.5 * (targets * out[:, 0] ** 2).mean(), l2=lambda: torch.zeros(())
    )
    config = parse_configs(["hessian"], {"hessian": dict(minibatches=1, minibatch_steps=50, tol=1e-10)})["hessian"]
    maxima = minibatch_max_eigenvalues(model, list(model.parameters()), [(x, t)], saddle, config)
    (ends,) = maxima.extremes
    assert (ends.lambda_max, ends.lambda_min) == (pytest.approx(1.0), pytest.approx(-1.002))
    assert maxima.values[0] == pytest.approx(-1.002) and maxima.unconverged == 0
    capped = parse_configs(["hessian"], {"hessian": dict(minibatches=1, minibatch_steps=1, tol=1e-10)})["hessian"]
    assert minibatch_max_eigenvalues(model, list(model.parameters()), [(x, t)], saddle, capped).unconverged == 1


# Bad values of the new keys: one line naming the key ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "values", "message"),
    [
        ("fourier", {"high_frequency": "pi"}, "high_frequency='pi' is not one of ['hdvw', 'nyquist']"),
        (
            "variance",
            {"estimator": "biased"},
            "estimator='biased' is not one of ['unbiased', 'population'] (did you mean 'unbiased'?)",
        ),
        ("noise", {"bands": "octaves"}, "bands='octaves' is not one of ['hdvw', 'rings']"),
        ("noise", {"bands": 8}, "bands=8 is invalid: must be a string"),
        ("noise", {"rings": 0}, "rings=0 is invalid: must be >= 1"),
        ("noise", {"max_frequency": 2}, "max_frequency=2 is invalid: must be in (0, sqrt(2)] (units of pi)"),
        ("landscape", {"normalisation": "layer"}, "normalisation='layer' is not one of ['hdvw', 'filter']"),
        ("landscape", {"regulariser": "l1"}, "regulariser='l1' is not one of ['hdvw', 'decay_squared', 'none']"),
        ("landscape", {"targets": "clean"}, "targets='clean' is not one of ['training', 'labels']"),
        ("landscape", {"nll": "log"}, "nll='log' is not one of ['log_softmax', 'log_of_softmax']"),
        ("landscape", {"redraw": "yes"}, "redraw='yes' is invalid: must be true or false"),
        ("landscape", {"redraw": 1}, "redraw=1 is invalid: must be true or false"),
        ("landscape", {"clip": 0}, "clip=0 is invalid: must be > 0 or null"),
        ("landscape", {"clip": True}, "clip=True is invalid: must be a finite number"),
        ("landscape", {"points_1d": 4}, "points_1d=4 is invalid: must be odd and >= 3 (to include 0)"),
        (
            "landscape",
            {"label_smoothing": 0.1},
            "label_smoothing applies to targets=labels only (targets=training uses the recipe's)",
        ),
        ("hessian", {"minibatches": -1}, "minibatches=-1 is invalid: must be >= 0"),
        ("hessian", {"minibatch_steps": 0}, "minibatch_steps=0 is invalid: must be >= 1"),
        ("hessian", {"per_minibatch": 200}, "per_minibatch=200 is invalid: must be in [1, minibatch_steps]"),
        ("hessian", {"k": 40}, "iterations=30 is invalid: method=lanczos needs iterations >= k (40)"),
        ("hessian", {"batch_size": 0}, "batch_size=0 is invalid: must be >= 1 or null (the recipe's)"),
        ("hessian", {"tol": 0.0}, "tol=0 is invalid: must be > 0"),
        ("lesion", {"images": None}, "images=null is invalid: must be an integer"),
    ],
)
def test_bad_values_of_the_new_keys_are_refused_in_one_line(name, values, message):
    with pytest.raises(AnalysisConfigError) as error:
        parse_configs([name], {name: values})
    assert str(error.value) == f"analysis.{name}.{message}"  # the key as the command line sets it


def test_an_analysis_config_made_in_python_is_checked_as_a_composed_one():
    assert defaults("hessian") == HessianConfig(**default_values("hessian"))
    with pytest.raises(ConfigValueError, match=r"^images=0 is invalid: must be >= 1$"):
        replace(defaults("lesion"), images=0)


def test_mixed_batches_need_an_even_size():
    model_recipe = typed("recipe.mixup={mixup_alpha: 1.0}", "recipe.label_smoothing=0.1").recipe
    mixer = recipe_mixup(model_recipe, 10)
    batches = [(torch.randn(3, 3, 8, 8), torch.arange(3))]
    with pytest.raises(AnalysisConfigError, match="even size") as error:
        mixed_batches(batches, mixer, 0, "landscape")
    assert "\n" not in str(error.value)
    _, targets = mixed_batches([(torch.randn(4, 3, 8, 8), torch.arange(4))], mixer, 0, "landscape")[0]
    assert targets.shape == (4, 10) and torch.allclose(targets.sum(dim=1), torch.ones(4))
    again = mixed_batches([(torch.randn(4, 3, 8, 8), torch.arange(4))], mixer, 0, "landscape")[0][1]
    torch.testing.assert_close(again, targets)  # the same seeded draw
    assert recipe_mixup(replace(model_recipe, mixup=replace(model_recipe.mixup, mixup_alpha=0.0)), 10) is None


def test_the_hessian_says_when_its_maxima_are_the_l2_terms_curvature():
    """The unsquared L2 term's curvature wd / ||w|| is unbounded as a norm nears 0: a trained BatchNorm shift of norm
    0.0126 at weight decay 0.05 made every mini-batch's max eigenvalue 3.98, the penalty's, not the loss's."""
    import warnings

    from alternet.analysis.hessian import _warn_if_the_l2_term_dominates
    from alternet.errors import AlternetWarning

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    with torch.no_grad():
        model[1].bias.fill_(0.0063)  # norm 0.0126
    summary = {"max_eig_median": 3.984, "l2_curvature_max": 0.05 / 0.0126}
    with pytest.warns(AlternetWarning, match=r"are the L2 term's own curvature .* of 1\.bias \(norm 0\.0126\)"):
        _warn_if_the_l2_term_dominates(summary, model, 0.05)
    assert summary["max_eig_is_l2"] is True
    summary = {"max_eig_median": 12.0, "l2_curvature_max": 0.05 / 0.0126}  # the loss's curvature above it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_if_the_l2_term_dominates(summary, model, 0.05)
    assert summary["max_eig_is_l2"] is False
