"""The model zoo: exact parameter counts, shapes, timm integration and downstream interfaces."""

import numpy as np
import pytest
import timm
import timm.optim
import torch

import alternet
from alternet.architectures.named import spec_kwargs
from alternet.errors import ConfigValueError
from alternet.models import MODEL_NAMES, UnknownModelError, create_model

from helpers.models import n_params

ALTERNETS = [n for n in MODEL_NAMES if n.startswith(("alternet", "preresnet"))]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("alternet_r50_hdvw", 34_062_538), ("alternet_r50", 33_012_840), ("preresnet50", 23_697_572)],
)
def test_parameter_counts_equal_the_reference_implementation(name, expected):
    model = timm.create_model(name, num_classes=100, img_size=32)
    assert n_params(model) == expected


def test_layouts_of_named_models():
    assert create_model("alternet_r50").layout == "CCC|CCCM|CCCCCM|CMCM"
    assert create_model("alternet_r50_hdvw").layout == "CCC|CCCM|CMCMCM|CMCM"
    assert create_model("alternet_r18").layout == "CC|CM|CM|CM"
    assert create_model("preresnet50").layout == "CCC|CCCC|CCCCCC|CCC"
    assert spec_kwargs("alternet_r50")["layout"] == "CCC|CCCM|CCCCCM|CMCM" and spec_kwargs("resnet18") == {}


@pytest.mark.parametrize("name", sorted(MODEL_NAMES))
def test_every_named_model_classifies_32px_images(name):
    model = timm.create_model(name, num_classes=7).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_alternet_r50_at_224_uses_the_imagenet_stem_and_window_7():
    model = timm.create_model("alternet_r50", num_classes=10, img_size=224).eval()
    assert type(model.stem).__name__ == "ImageNetStem"
    assert [s.window for s in model.specs if s.num_msa] == [(7, 7)] * 3
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).shape == (1, 10)


def test_the_patch2_stem_sees_every_pixel_and_halves_every_feature_map():
    """model.stem=patch2 (the speedrun's): a 2x2 stride-2 conv, so each map is half the CIFAR stem's side, the
    last stage's 4x4 map is one 4x4 window, and changing one pixel changes the output."""
    model = create_model("alternet_tiny", num_classes=5, layout="C|CC|CM", stem="patch2").eval()
    cifar = create_model("alternet_tiny", num_classes=5, layout="C|CC|CM", stem="cifar").eval()
    assert type(model.stem).__name__ == "Patch2Stem" and model.stem.conv.stride == (2, 2)
    assert [info["reduction"] for info in model.feature_info] == [2 * i["reduction"] for i in cifar.feature_info]
    assert [s.window for s in model.specs if s.num_msa] == [(4, 4)]
    assert n_params(model) == n_params(cifar) - 5 * 32 * 3  # a 2x2 kernel instead of a 3x3 one
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        maps = model.forward_intermediates(images, intermediates_only=True)
        assert [m.shape[-1] for m in maps] == [16, 8, 4]
        nudged = images.clone()
        nudged[:, :, 31, 31] += 1.0  # the last pixel: a stride-2 2x2 kernel covers it
        assert not torch.allclose(model(images), model(nudged))


def test_the_laptop_twins_match_in_parameters_and_multiply_adds():
    """alternet_laptop (the speedrun's model) and preresnet_laptop (the paper presets' Conv-only twin) differ in
    the last block's kind and, so that a comparison does not measure size, the twin's last-stage width: both within
    1% in parameters and in multiply-adds per image."""
    from torch.utils.flop_counter import FlopCounterMode

    alternet, twin = create_model("alternet_laptop", num_classes=100), create_model("preresnet_laptop", num_classes=100)
    assert (alternet.layout, twin.layout) == ("C|CC|CM", "C|CC|CC")
    assert type(alternet.stem).__name__ == type(twin.stem).__name__ == "Patch2Stem"
    assert n_params(alternet) == 1_059_509 and n_params(twin) == 1_051_780
    flops = []
    for model in (alternet, twin):
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model.eval()(torch.randn(1, 3, 32, 32))
        flops.append(counter.get_total_flops())
    assert flops[1] == pytest.approx(flops[0], rel=0.01)


def test_stochastic_depth_rises_linearly_over_all_blocks():
    model = create_model("alternet_r18", drop_path_rate=0.1)
    rates = [getattr(b.module.drop_path, "drop_prob", 0.0) for b in model.blocks()]
    assert len(rates) == 8
    assert rates == pytest.approx([0.1 * j / 7 for j in range(8)])


def test_block_sequence_is_labelled():
    model = create_model("alternet_r50")
    assert "".join(b.kind for b in model.blocks()) == "CCCCCCMCCCCCMCMCM"
    assert [b.stage for b in model.blocks()][:4] == [0, 0, 0, 1]


@pytest.mark.parametrize(
    ("img_size", "shapes"),
    [
        (32, [(256, 32, 32), (512, 16, 16), (1024, 8, 8), (2048, 4, 4)]),
        (224, [(256, 56, 56), (512, 28, 28), (1024, 14, 14), (2048, 7, 7)]),
    ],
)
def test_features_only_returns_stage_maps(img_size, shapes):
    model = timm.create_model("alternet_r50", features_only=True, img_size=img_size).eval()
    with torch.no_grad():
        features = model(torch.randn(1, 3, img_size, img_size))
    assert [tuple(f.shape[1:]) for f in features] == shapes
    assert model.feature_info.channels() == [s[0] for s in shapes]
    assert model.feature_info.reduction() == [img_size // s[1] for s in shapes]


@pytest.mark.parametrize(
    "name",
    [
        "resnet50_hdvw",
        "vit_mini_cifar",
        "pit_mini_cifar",
        "swin_mini_cifar",
        "botnet_cifar",
        "coatnet_cifar",
        "maxvit_cifar",
    ],
)
def test_features_only_gives_each_family_its_stage_maps(name):
    """Every family of the zoo, as timm's features_only builds it (ByobNets count three stages where timm's
    builder counts four; the transformers through forward_intermediates): a map per entry of the classifier's
    feature_info, and out_indices selects among them."""
    torch.manual_seed(0)
    classifier = timm.create_model(name).eval()
    model = timm.create_model(name, features_only=True).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        maps = model(x)
        last_two = timm.create_model(name, features_only=True, out_indices=(-2, -1)).eval()(x)
    channels = [info["num_chs"] for info in classifier.feature_info]
    assert [m.shape[1] for m in maps] == model.feature_info.channels() == channels
    if not name.startswith("pit"):  # PiT's are timm's own (timm 1.0.26, the lowest supported, miscounts them)
        assert model.feature_info.reduction() == [32 // m.shape[-1] for m in maps]  # a neck's strides (CoAtNet's)
    assert [m.shape for m in last_two] == [m.shape for m in maps[-2:]]


@pytest.mark.parametrize("name", ["alternet_tiny", "pit_mini_cifar", "coatnet_cifar"])
def test_feature_maps_chosen_outside_the_model_or_without_features_only_are_refused_in_one_line(name):
    """timm's bare IndexError 13 frames deep for an index past the last map (hub.load said it in one line), and
    out_indices without features_only ignored in silence: a whole classifier came back."""
    maps = len(timm.create_model(name).feature_info)
    for indices in [(maps,), (), "banana"]:
        with pytest.raises(ConfigValueError, match=rf"^out_indices=.* must be feature-map indices in \[-{maps}, "):
            timm.create_model(name, features_only=True, out_indices=indices)
    with pytest.raises(ConfigValueError, match=r"^out_indices=\(1,\) and feature_cls='getter' select feature maps"):
        timm.create_model(name, out_indices=(1,), feature_cls="getter")


@pytest.mark.parametrize("name", ["alternet_tiny", "pit_mini_cifar", "coatnet_cifar", "resnet50_hdvw"])
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_classes": -1}, r"num_classes=-1 must be an integer >= 0 \(0: no classifier, the features\)"),
        ({"num_classes": 10.0}, r"num_classes=10.0 must be an integer >= 0"),
        ({"img_size": 16.0}, r"img_size=16.0 must be an integer >= 1, or a \(height, width\) pair of them"),
        ({"img_size": "16"}, r"img_size='16' must be an integer >= 1"),
        ({"in_chans": 0}, r"in_chans=0 must be an integer >= 1 \(3: RGB, 1: grey\)"),
    ],
)
def test_the_arguments_a_model_is_built_with_are_checked_in_one_line_through_timm_too(name, arguments, message):
    """Only alternet.create_model checked num_classes: through timm -1 built a model of num_classes -1 and 10.0 failed
    inside nn.Linear; a float img_size was "'float' object is not subscriptable", in_chans=0 a stem of no channels."""
    with pytest.raises(ConfigValueError, match=rf"^{message}"):
        timm.create_model(name, **arguments)


def test_a_pit_fed_another_input_size_says_so_in_one_line_and_its_feature_maps_too():
    """timm's PiT failed inside with "The size of tensor a (6) must match the size of tensor b (8)"; the other
    fixed-size hybrids said it in one line."""
    from alternet.architectures.layout import LayoutError

    for model in (timm.create_model("pit_mini_cifar"), timm.create_model("pit_mini_cifar", features_only=True)):
        model(torch.randn(1, 3, 32, 32))
        with pytest.raises(LayoutError, match=r"^this model was built for 32x32 inputs and got 24x24 \(its position"):
            model(torch.randn(1, 3, 24, 24))


def test_a_classifier_reset_to_no_class_count_is_refused_and_keeps_its_head():
    model = timm.create_model("alternet_tiny", num_classes=10)
    with pytest.raises(ConfigValueError, match=r"^num_classes=-3 must be an integer >= 0"):
        model.reset_classifier(-3)
    assert model.num_classes == 10 and model.head.fc.out_features == 10


def test_the_model_exports_and_traces_for_deployment():
    """docs/downstream.md: torch.export and torch.jit.trace give the model's logits."""
    model = create_model("alternet_tiny", num_classes=10, img_size=16).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(torch.export.export(model, (x,)).module()(x), expected)
        torch.testing.assert_close(torch.jit.trace(model, x, check_trace=False)(x), expected)


@pytest.mark.parametrize("name", ["resnet50_hdvw", "vit_mini_cifar", "pit_mini_cifar", "swin_mini_cifar"])
def test_the_comparison_models_script_as_timms_own_do(name):
    """PiT's checkpointable blocks kept their switch as a class attribute, which TorchScript cannot see."""
    model = create_model(name, num_classes=10).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(torch.jit.script(model)(x), model(x))


def test_the_head_follows_timms_global_pool():
    """catavgmax doubles the pooled width the classifier reads; '' keeps the map unpooled (timm: only without a
    classifier) and reset_classifier(N, '') sets it rather than keeping the old pooling."""
    x = torch.randn(2, 3, 16, 16)
    model = create_model("alternet_tiny", num_classes=10, img_size=16, global_pool="catavgmax").eval()
    with torch.no_grad():
        assert model(x).shape == (2, 10)
        assert model.forward_head(model.forward_features(x), pre_logits=True).shape == (2, 2 * model.num_features)
        model.reset_classifier(0, global_pool="")
        assert model(x).shape == (2, model.num_features, 4, 4)
    with pytest.raises(ConfigValueError, match="global_pool='' leaves the map unpooled: it needs num_classes=0, not 3"):
        model.reset_classifier(3)


def test_downstream_interfaces():
    model = create_model("alternet_tiny", num_classes=10, img_size=16).eval()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        features = model.forward_features(x)
        assert features.shape == (2, model.num_features, 4, 4)
        assert model.forward_head(features, pre_logits=True).shape == (2, model.num_features)
        assert torch.allclose(model.forward_head(features), model(x))
        model.reset_classifier(3)
        assert model(x).shape == (2, 3)
        assert model.get_classifier().out_features == 3
    assert model.no_weight_decay() == {"stages.1.1.attn.rel_pos_bias", "stages.2.1.attn.rel_pos_bias"}


def test_overrides_reach_the_backbone():
    model = timm.create_model("alternet_r18", layout="CC|CC|CM|CMCM", heads=[1, 2, 4, 8], head_dim=16)
    assert model.layout == "CC|CC|CM|CMCM"
    assert model.blocks()[-1].module.attn.heads == 8
    assert model.blocks()[-1].module.attn.head_dim == 16


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(UnknownModelError, match="alternet_r50, alternet_r50_hdvw") as error:
        alternet.create_model("alternet_r9000")
    # advice for a Python caller as for the command line (an export of a user's model, loaded in a fresh interpreter)
    assert "one your package registers: import it first (on alternet's command line: imports=" in str(error.value)


def test_an_unknown_name_suggests_each_close_name_once():
    """alternet's models are timm models too: a suggestion is not repeated ('alternet_r50' or 'alternet_r50')."""
    with pytest.raises(UnknownModelError, match=r"did you mean 'alternet_r50' or 'alternet_r101' or 'alternet_r34'\?"):
        alternet.create_model("alternet_r9000")


def test_comparison_models_have_cifar_settings():
    vit = create_model("vit_ti_cifar", num_classes=100)
    assert vit.patch_embed.patch_size == (2, 2) and vit.embed_dim == 192 and len(vit.blocks) == 12
    swin = create_model("swin_ti_cifar", num_classes=100)
    assert swin.patch_embed.patch_size == (1, 1) and swin.embed_dim == 96
    pit = create_model("pit_ti_cifar", num_classes=100)
    assert pit.patch_embed.conv.stride == (1, 1) and pit.patch_embed.conv.kernel_size == (2, 2)


# timm's intermediate-feature and parameter-group conventions ------------------------------------------------


def test_forward_intermediates_gives_stage_maps_as_features_only_does():
    torch.manual_seed(0)
    model = create_model("alternet_tiny", num_classes=10).eval()
    torch.manual_seed(0)
    features = create_model("alternet_tiny", num_classes=10, features_only=True).eval()  # the same weights
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        final, maps = model.forward_intermediates(x, norm=True)
        expected = features(x)
        torch.testing.assert_close(final, model.forward_features(x))
        assert (
            [m.shape for m in maps] == [e.shape for e in expected] == [(2, 32, 32, 32), (2, 64, 16, 16), (2, 128, 8, 8)]
        )
        for ours, theirs in zip(maps, expected):
            torch.testing.assert_close(ours, theirs)
        last_two = model.forward_intermediates(x, indices=2, intermediates_only=True)
        torch.testing.assert_close(last_two[0], maps[1])
        first = model.forward_intermediates(x, indices=[0], stop_early=True, intermediates_only=True)
        torch.testing.assert_close(first[0], maps[0])
        for feature_cls in ("list", "getter"):  # timm's two wrappers give the same maps (the last after the norm)
            torch.manual_seed(0)
            chosen = create_model("alternet_tiny", num_classes=10, features_only=True, feature_cls=feature_cls)
            for ours, theirs in zip(chosen.eval()(x), expected):
                torch.testing.assert_close(ours, theirs)


def test_prune_intermediate_layers_keeps_what_forward_intermediates_takes():
    model = create_model("alternet_tiny", num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        before = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
        assert model.prune_intermediate_layers([0, 1]) == [0, 1]
        assert len(model.stages) == 2 and model.num_classes == 0
        after = model.forward_intermediates(x, indices=[0, 1], intermediates_only=True)
    for a, b in zip(before, after):
        torch.testing.assert_close(a, b)


def test_layer_decay_through_timm_and_through_the_recipe():
    model = create_model("alternet_tiny", num_classes=10)
    optimizer = timm.optim.create_optimizer_v2(model, "adamw", lr=1e-3, weight_decay=0.05, layer_decay=0.5)
    scales = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            scales[param] = group["lr_scale"]
    named = dict(model.named_parameters())
    assert scales[named["head.fc.weight"]] == 1.0  # the head learns at the full rate
    assert scales[named["stem.conv.weight"]] == min(scales.values())  # the stem the slowest
    first_block, last_block = named["stages.0.0.conv1.weight"], named["stages.2.1.attn.to_q.weight"]
    assert scales[first_block] < scales[last_block] < 1.0

    from alternet.dataset_facts import DataFacts
    from alternet.training.module import ClassificationModule

    from helpers import typed

    sections = typed("recipe.layer_decay=0.5")
    data = DataFacts("digits", num_classes=10, image_size=16, mean=(0.5,) * 3, std=(0.5,) * 3)
    module = ClassificationModule(model=sections.model, recipe=sections.recipe, data=data)
    groups = module._parameter_groups(0.05)
    grouped = [p for g in groups for p in g["params"]]
    assert len(grouped) == len(set(grouped)) == len(list(module.model.parameters()))  # each parameter once
    lr_scales = sorted({g["lr_scale"] for g in groups})
    assert lr_scales[-1] == 1.0 and lr_scales[0] == pytest.approx(0.5 ** (len(lr_scales) - 1))


def test_create_model_takes_what_timm_create_model_takes():
    tagged = alternet.create_model("resnet18.a1_in1k", pretrained=False, num_classes=3)  # a tag, no download
    assert tagged.pretrained_cfg["tag"] == "a1_in1k" and tagged.num_classes == 3
    with pytest.raises(UnknownModelError, match=r"unknown model 'resnet9000\.a1_in1k'"):
        alternet.create_model("resnet9000.a1_in1k")


@pytest.mark.parametrize(
    ("name", "kwargs", "says"),
    [  # each a raw TypeError, AttributeError or FileNotFoundError from inside torch or timm before
        (None, {}, "a model's name is a string (alternet_r50, resnet50.a1_in1k, hf-hub:OWNER/REPO), not None"),
        ("alternet_tiny", {"num_classes": 2.5}, "num_classes=2.5 must be an integer >= 0"),
        ("alternet_tiny", {"num_classes": "10"}, "num_classes='10' must be an integer >= 0"),
        ("local-dir:/nonexistent/model", {}, "local-dir:/nonexistent/model: /nonexistent/model has no config.json"),
    ],
)
def test_create_model_refuses_what_it_cannot_build_in_one_line(name, kwargs, says):
    assert alternet.create_model("alternet_tiny", num_classes=np.int64(3)).num_classes == 3  # a count, as timm takes
    with pytest.raises(ConfigValueError) as refused:
        alternet.create_model(name, **kwargs)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)


def test_registry_cfgs_are_neutral_and_tags_describe_training_data():
    from timm.data import IMAGENET_DEFAULT_MEAN, resolve_data_config

    from alternet.data import CIFAR10DataModule, CIFAR100DataModule

    for name in MODEL_NAMES:
        neutral = timm.models.get_pretrained_cfg(name)
        assert (neutral.mean, neutral.num_classes) == (IMAGENET_DEFAULT_MEAN, 1000), name  # no CIFAR stamped on
    tagged = timm.create_model("alternet_r50.cifar100")
    assert tagged.num_classes == 100 and tagged.pretrained_cfg["tag"] == "cifar100"
    config = resolve_data_config(model=tagged)
    assert config["mean"] == CIFAR100DataModule.default_mean and config["input_size"] == (3, 32, 32)  # one fact
    assert timm.create_model("preresnet18.cifar10").pretrained_cfg["std"] == CIFAR10DataModule.default_std
    assert alternet.create_model("vit_ti_cifar.cifar100").num_classes == 100


def test_the_imagenet_tag_and_a_224_px_build_describe_the_imagenet_stem():
    model = timm.create_model("alternet_r18.in1k")
    assert type(model.stem).__name__ == "ImageNetStem" and model.pretrained_cfg["input_size"] == (3, 224, 224)
    assert model.pretrained_cfg["interpolation"] == "bicubic" and model.num_classes == 1000
    built = timm.create_model("alternet_r18", img_size=224, num_classes=5)
    assert built.pretrained_cfg["input_size"] == (3, 224, 224)  # the cfg says what was built, not the default
    assert timm.create_model("alternet_r18").pretrained_cfg["input_size"] == (3, 32, 32)


@pytest.mark.parametrize("name", ["resnet50_hdvw", "vit_mini_cifar", "pit_mini_cifar", "swin_mini_cifar"])
def test_a_comparison_models_cfg_says_the_size_it_was_built_for_and_its_checkpoint_loads_at_another(name, tmp_path):
    """timm's data config reads the built size (it said 32 px of a 64 px ViT, whose forward then refused timm's own
    transform's images), and a checkpoint loads at another input size with its position tables resized, as timm's
    ViT and Swin do (PiT's too, which timm leaves undone); at its own size it loads exactly."""
    from timm.data import resolve_model_data_config

    torch.manual_seed(0)
    source = timm.create_model(name, num_classes=10).eval()
    path = tmp_path / "weights.pth"
    torch.save(source.state_dict(), path)
    overlay = dict(file=str(path), num_classes=10)
    for size in (32, 64):
        model = timm.create_model(name, img_size=size, num_classes=10, pretrained=True, pretrained_cfg_overlay=overlay)
        assert model.pretrained_cfg["input_size"] == resolve_model_data_config(model)["input_size"] == (3, size, size)
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            logits = model.eval()(x)
            if size == 32:
                torch.testing.assert_close(logits, source(x), rtol=0, atol=0)
        assert logits.shape == (2, 10) and torch.isfinite(logits).all()
    from safetensors.torch import save_file

    from alternet.hub import load_pretrained

    save_file(source.state_dict(), tmp_path / "weights.safetensors")  # alternet's loaders adapt them alike
    model = timm.create_model(name, img_size=64, num_classes=10)
    assert load_pretrained(model, tmp_path / "weights.safetensors").complete
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(x), logits)
