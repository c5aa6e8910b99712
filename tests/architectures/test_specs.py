"""The families' specs and rules (alternet/architectures) against what they stand for: timm's arithmetic they restate
without torch, the classes alternet.models builds for each name, the defaults of timm's constructors."""

import dataclasses
import inspect
import itertools
import pickle
import typing

import pytest
import timm
import torch
from timm.layers import make_divisible
from timm.models.byobnet import create_byob_stem
from timm.models.vision_transformer import VisionTransformer

from alternet.architectures import config, rules
from alternet.architectures.config import SECTIONS, LayoutModel
from alternet.architectures.named import MODEL_NAMES, SPECS, base_name
from alternet.architectures.specs import FAMILY_SPECS, ByobSpec, ViTSpec, _divisible
from alternet.models.blocks import BLOCK_TYPES, STEM_TYPES
from alternet.models.resnet import RESNET_BLOCKS
from alternet.models.zoo import MODEL_CLASSES


def test_the_channel_rounding_is_timms():
    values = [w * r for w in range(1, 2049, 7) for r in (0.25, 0.5, 1 / 3, 0.75, 1.0)]
    assert [_divisible(v) for v in values] == [make_divisible(v) for v in values]


@pytest.mark.parametrize(
    "stem_type, pool",
    itertools.product(("", "quad", "quad2", "tiered", "deep", "rep", "one", "7x7", "3x3"), ("", "maxpool")),
)
def test_the_byob_stem_reduction_is_what_timms_stem_builder_makes(stem_type, pool):
    with torch.device("meta"):
        _, info = create_byob_stem(3, 64, stem_type, pool)
    spec = ByobSpec(layout="C|M", stem_type=stem_type, stem_pool=pool)
    assert spec.stem_reduction("imagenet") == info[-1]["reduction"]
    assert spec.stem_reduction("cifar") == 1


def test_the_rule_tables_name_the_classes_that_build_them():
    assert set(rules.BLOCKS) == set(BLOCK_TYPES) == set(RESNET_BLOCKS)
    assert set(rules.STEMS) == set(STEM_TYPES)


def test_every_named_model_has_a_family_a_section_and_a_registered_builder():
    assert tuple(SPECS) == MODEL_NAMES
    assert {type(spec) for spec in SPECS.values()} <= set(FAMILY_SPECS) == set(SECTIONS)
    assert set(MODEL_CLASSES) <= set(FAMILY_SPECS)
    assert all(timm.is_model(name) for name in MODEL_NAMES)
    assert base_name("alternet_r50.cifar100") == "alternet_r50" and base_name("hf-hub:a/b.c") == "hf-hub:a/b.c"


def test_a_derived_section_is_importable_by_its_name_and_pickles():
    """The sections are made at import (``make_dataclass``); a process that receives one (a DDP spawn, a launcher)
    finds its class by module and name."""
    for section in SECTIONS.values():
        assert getattr(config, section.__name__) is section and section.__module__ == config.__name__
    made = config.model_config({"name": "botnet_cifar", "pretrained": None, "buildup_rules": "warn", "heads": 2})
    assert pickle.loads(pickle.dumps(made)) == made


@pytest.mark.parametrize("spec", FAMILY_SPECS, ids=lambda spec: spec.__name__)
def test_a_section_has_each_spec_field_a_config_sets_as_an_optional_key(spec):
    """Derived, not declared: every field but the data's (``img_size``), null for the zoo's value, a tuple a list;
    a family with a layout also has ``buildup_rules``."""
    section = SECTIONS[spec]
    hints = {f.name: typing.get_type_hints(section)[f.name] for f in dataclasses.fields(section)}
    keys = [f.name for f in dataclasses.fields(spec) if f.name not in spec.config_only]
    assert set(keys) <= set(hints)
    for key in keys:
        assert type(None) in typing.get_args(hints[key]) and "tuple" not in str(hints[key]), (key, hints[key])
    assert issubclass(section, LayoutModel) == ("layout" in keys)
    assert set(hints) - set(keys) == {"name", "pretrained", *(("buildup_rules",) if "layout" in keys else ())}


@pytest.mark.parametrize("spec, cls", [(ViTSpec, VisionTransformer)])
def test_a_specs_defaults_for_timms_own_keywords_are_timms(spec, cls):
    """A spec field that is a timm constructor's keyword defaults to timm's value (the zoo's name then builds the
    model timm's class builds); ``qkv_bias`` is the one the paper's ViTs set apart."""
    signature = inspect.signature(cls.__init__).parameters
    for field in dataclasses.fields(spec):
        if field.name in signature and field.default is not dataclasses.MISSING and field.name != "img_size":
            assert field.default == signature[field.name].default, field.name
