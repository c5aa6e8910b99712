"""Every ``model=`` option builds exactly the zoo's architecture: a model config names a zoo entry and holds only
the keys a user overrides (``null``: the zoo's value), so the two can never disagree."""

import re
import warnings

import pytest
import timm
import torch

import alternet.models  # noqa: F401  (registers the zoo with timm)
from alternet.apps.checks import validate_train_config
from alternet.architectures.config import NOT_MODEL_ARGS, model_config
from alternet.architectures.layout import buildup_violations
from alternet.architectures.named import spec_kwargs
from alternet.models import MODEL_NAMES, LayoutError, format_layout, list_models
from alternet.models.factory import check_builds

from helpers import CONF, compose_train, resolved
from helpers.models import build_from_config, n_params

# options that are no zoo entry of their own: a family built from a layout (starting from one of its zoo entries)
# and any timm model by name (tests/models/test_hybrids.py)
GENERIC_OPTIONS = ("byob", "maxxvit", "timm")
MODEL_OPTIONS = sorted(
    p.stem for p in (CONF / "model").glob("*.yaml") if not p.stem.startswith("_") and p.stem not in GENERIC_OPTIONS
)


def test_every_zoo_model_has_an_option_and_every_option_names_a_zoo_model():
    assert sorted(MODEL_NAMES) == MODEL_OPTIONS


@pytest.mark.parametrize("name", MODEL_OPTIONS)
def test_model_option_builds_the_zoo_architecture(name):
    config = compose_train(f"model={name}").model
    assert config.name == name
    restated = [key for key, value in config.items() if key not in NOT_MODEL_ARGS and value is not None]
    assert not restated, f"a model config restates the zoo: {restated}"
    built = build_from_config(f"model={name}")
    with torch.device("meta"):
        zoo = timm.create_model(name, num_classes=10, img_size=32)
    assert type(built) is type(zoo)
    assert n_params(built) == n_params(zoo)
    if hasattr(zoo, "layout"):  # AlterNets and pre-activation ResNets
        assert built.layout == zoo.layout == format_layout(s.sequence for s in zoo.specs)
        assert [(s.width, s.heads, s.head_dim, s.window) for s in built.specs] == [
            (s.width, s.heads, s.head_dim, s.window) for s in zoo.specs
        ]


def test_a_model_override_takes_effect():
    model = build_from_config("model=alternet_r50", "model.layout=CCC|CCCC|CCCCCC|CCC")
    assert model.layout == "CCC|CCCC|CCCCCC|CCC"
    with torch.device("meta"):
        assert n_params(model) == n_params(timm.create_model("preresnet50", num_classes=10, img_size=32))
    tiny = build_from_config("model=alternet_tiny", "model.heads=[2,4,8]", "model.head_dim=16", "model.window=2")
    assert [(s.heads, s.head_dim, s.window) for s in tiny.specs if s.num_msa] == [(4, 16, (2, 2)), (8, 16, (2, 2))]
    vit = build_from_config("model=vit_ti_cifar", "model.depth=6")
    assert len(vit.blocks) == 6


@pytest.mark.parametrize(
    ("layout", "rule"),
    [
        ("C|CMC|CM", "ends with a Conv block after its MSAs"),
        ("C|CMM|CM", "consecutive MSA blocks"),
        ("C|CM|CC", "later stage(s) [3] have none"),
        ("C|CMCCM|CM", "not an alternating Conv/MSA tail"),
    ],
)
def test_a_layout_breaking_the_buildup_rules_is_warned_in_one_line_unless_silenced(layout, rule):
    with pytest.warns(UserWarning, match=re.escape(rule)):
        validate_train_config(resolved("model=alternet_tiny", f"model.layout={layout}"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate_train_config(resolved("model=alternet_tiny", f"model.layout={layout}", "model.buildup_rules=off"))


def test_the_zoo_follows_the_buildup_rules_and_fewer_heads_later_is_warned():
    for name in list_models():
        kwargs = spec_kwargs(name)
        if not kwargs.get("layout"):
            continue
        if compose_train(f"model={name}").model.get("buildup_rules") == "off":  # a family's own pattern, on purpose
            continue
        assert buildup_violations(kwargs["layout"], kwargs.get("heads")) == [], name
    assert "fewer heads (2) than stage 2 (4)" in " ".join(buildup_violations("C|CM|CM", [1, 4, 2]))


@pytest.mark.parametrize("name", sorted(MODEL_NAMES))
def test_every_zoo_model_passes_the_meta_device_build_the_config_checks_make(name):
    """The config checks build our models on the meta device before any work (``check_builds``): each zoo model at
    its own input size must pass (a false refusal would stop a valid run or sweep), with no weights made."""
    size = int(timm.models.get_pretrained_cfg(name).input_size[-1])
    check_builds(model_config(resolved(f"model={name}")["model"]), num_classes=10, img_size=size, drop_path_rate=0.1)


def test_the_meta_device_build_refuses_a_layout_the_architecture_cannot_build():
    with pytest.raises(LayoutError, match="the first block of a stage"):
        model = model_config(resolved("model=alternet_tiny", "model.layout=C|MC|CM")["model"])
        check_builds(model, num_classes=10, img_size=32, drop_path_rate=0.0)


def test_each_family_yaml_lists_exactly_its_sections_keys():
    """A family's ``conf/model/_FAMILY.yaml`` (the keys a user may override, each with its comment) and its section
    (derived from its spec: alternet/architectures/config.py) name the same keys: a field added to a spec and not to
    its YAML is caught here instead of at a user's override."""
    import dataclasses

    from omegaconf import OmegaConf

    from alternet.architectures.config import model_section

    folder = CONF / "model"
    users: dict[str, set[str]] = {}  # family file -> the zoo names of the options built on it
    for option in sorted(folder.glob("[!_]*.yaml")):
        values = OmegaConf.to_container(OmegaConf.load(option))
        for base in values.get("defaults", []):
            if isinstance(base, str) and base.startswith("_") and base != "_self_":
                users.setdefault(base, set()).add(values["name"])
    assert set(users) == {path.stem for path in folder.glob("_*.yaml")}  # every family file is used
    for base, names in users.items():
        keys = set(OmegaConf.to_container(OmegaConf.load(folder / f"{base}.yaml"))) - {"defaults"}
        for section in {model_section({"name": name}) for name in names}:
            fields = {field.name for field in dataclasses.fields(section)} - {"extra"}
            assert keys == fields, (base, section.__name__, sorted(keys ^ fields))


@pytest.mark.parametrize(
    ("overrides", "label"),
    [
        (["model=botnet_cifar"], "botnet_cifar"),
        (
            ["model=byob", "model.self_attn_layer=halo", "model.block_size=2"],
            "botnet_cifar[self_attn_layer=halo, block_size=2]",
        ),
        (
            ["model=alternet_tiny", "model.layout=C|CC|CM", "model.heads=[1,2,8]"],
            "alternet_tiny[layout=C|CC|CM, heads=[1,2,8]]",
        ),
        (["model=alternet_tiny", "model.widths=[32,64,128]", "model.fused_attn=false"], "alternet_tiny"),  # as named
        (["model=timm", "model.name=resnet18", "+model.drop_rate=0.1"], "resnet18[drop_rate=0.1]"),
    ],
)
def test_a_run_is_labelled_by_its_model_and_the_architecture_keys_its_config_changes(overrides, label):
    """model=byob model.self_attn_layer=halo builds a HaloNet from botnet_cifar's entry: its runs are not recorded
    as BoTNet's. The label leaves out the named model's own values and keys that change how it computes, not what."""
    assert validate_train_config(resolved(*overrides)).model.label() == label


def test_an_evaluation_labels_its_model_as_the_run_did():
    from alternet.hub.sources import Source

    halo = {"name": "botnet_cifar", "pretrained": None, "self_attn_layer": "halo", "buildup_rules": "warn"}
    source = Source(location="run", state_dict={}, architecture="botnet_cifar", hyper_parameters={"model": halo})
    assert source.label() == "botnet_cifar[self_attn_layer=halo]"
    assert Source(location="hub", state_dict={}, architecture="resnet18").label() == "resnet18"  # no config kept
