"""Layout strings, the build-up rule and the validator's messages."""

import pytest

from alternet.architectures.layout import next_candidates, with_one_more_msa
from alternet.models import AlterNet, LayoutError, alternate_layout, format_layout, parse_layout, resolve_stages


@pytest.mark.parametrize("layout", ["CC|CM|CM|CM", "CCC|CCCM|CCCCCM|CMCM", "C", "CMCM|CC"])
def test_parse_format_round_trip(layout):
    assert format_layout(parse_layout(layout)) == layout


def test_parse_normalises_case_and_spaces():
    assert parse_layout(" cc | cm ") == ["CC", "CM"]


@pytest.mark.parametrize(
    ("depths", "msas", "expected"),
    [
        ((2, 2, 2, 2), (0, 1, 1, 1), "CC|CM|CM|CM"),
        ((3, 4, 6, 4), (0, 1, 3, 2), "CCC|CCCM|CMCMCM|CMCM"),
        ((3, 4, 6, 4), (0, 1, 1, 2), "CCC|CCCM|CCCCCM|CMCM"),
        ((3, 4, 6, 3), (0, 0, 0, 0), "CCC|CCCC|CCCCCC|CCC"),
    ],
)
def test_alternate_layout_puts_msas_at_the_end_of_stages(depths, msas, expected):
    assert alternate_layout(depths, msas) == expected


def test_alternate_layout_rejects_too_many_msas():
    with pytest.raises(LayoutError, match=r"stage 2: 3 MSA block\(s\) need 6 positions"):
        alternate_layout((2, 4), (0, 3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(layout="CC||CM"), "stage 2 is empty"),
        (dict(layout="CC|CX"), r"unknown token\(s\) \['X'\]"),
        (dict(layout="CC|MC"), r"stage 2 \('MC'\): the first block of a stage .* must be a Conv block"),
        (dict(layout="CC|CM", window=3), r"window 3 does not divide the stage's 16x16 feature map .*valid windows"),
        (dict(layout="CC|CM", attn_dims=[None, 300]), r"attn_dim 300 != heads \* head_dim = 6 \* 64 = 384"),
        (dict(layout="CC|CM", heads=[0, 0]), "has MSA blocks, so heads must be >= 1"),
        (
            dict(layout="CC|CM|CM", widths=[64, 128, 256], heads=[3, 6]),
            r"heads has 2 value\(s\) \[3, 6\] but the layout has 3 stage",
        ),
        (dict(layout="", heads=[3]), "layout must be a non-empty string"),
        (dict(layout="C|C|C|C|C|C|C", heads=[1] * 7, widths=[8] * 7), "cannot be reduced by stride 2"),
    ],
)
def test_validator_messages(kwargs, message):
    args = dict(widths=[64, 128], heads=[3, 6], img_size=32) | kwargs
    with pytest.raises(LayoutError, match=message):
        resolve_stages(args.pop("layout"), args.pop("widths"), args.pop("heads"), **args)


def test_window_that_does_not_fit_rejected_when_building_a_model():
    with pytest.raises(LayoutError, match="window 7 does not divide"):
        AlterNet(layout="CC|CM|CM|CM", window=7, img_size=32)


def test_automatic_window_follows_stem_and_feature_map():
    cifar = resolve_stages("CC|CM|CM|CM", [64] * 4, [3, 6, 12, 24], img_size=32)
    assert [s.window for s in cifar[1:]] == [(4, 4)] * 3
    assert [s.feature_size for s in cifar] == [(32, 32), (16, 16), (8, 8), (4, 4)]
    imagenet = resolve_stages("CC|CM|CM|CM", [64] * 4, [3, 6, 12, 24], img_size=224, stem_reduction=4, default_window=7)
    assert [s.window for s in imagenet[1:]] == [(7, 7)] * 3
    small = resolve_stages("C|CM|CM", [8] * 3, [1, 1, 1], img_size=8)  # maps 8/4/2: window capped at 2
    assert [s.window for s in small] == [(0, 0), (4, 4), (2, 2)]


# the build-up search's candidates (alternet buildup): rule 1 extends a stage's alternating tail, rule 2 goes to the
# nearest earlier stage with room ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layout, stage, expected",
    [
        ("CCC|CCCC|CCCCCC|CCCC", 3, "CCC|CCCC|CCCCCC|CCCM"),
        ("CCC|CCCC|CCCCCC|CCCM", 3, "CCC|CCCC|CCCCCC|CMCM"),
        ("CCC|CCCC|CCCCCC|CMCM", 3, None),  # full: the first block stays a Conv block
        ("CCC|CCCC|CCCCCC|CMCM", 2, "CCC|CCCC|CCCCCM|CMCM"),
        ("C|CC|CC", 0, None),  # a one-block stage has no room
        ("CCC|CC", 0, "CCM|CC"),
    ],
)
def test_one_more_msa_extends_the_stage_tail(layout, stage, expected):
    assert with_one_more_msa(layout, stage) == expected


def test_one_more_msa_refuses_a_stage_that_is_not_a_tail():
    with pytest.raises(LayoutError, match=r"stage 2 \(CMCC\) is not Conv blocks ending in an alternating"):
        with_one_more_msa("CC|CMCC", 1)


@pytest.mark.parametrize(
    "layout, stage, expected",
    [
        # the paper's Fig. 11 path on ResNet-50's depths: the last stage, then the one before it
        ("CCC|CCCC|CCCCCC|CCCC", 3, [(3, "CCC|CCCC|CCCCCC|CCCM"), (2, "CCC|CCCC|CCCCCM|CCCC")]),
        # the last stage full: the search stands at the nearest stage with room, and the one before that
        ("CCC|CCCC|CCCCCC|CMCM", 3, [(2, "CCC|CCCC|CCCCCM|CMCM"), (1, "CCC|CCCM|CCCCCC|CMCM")]),
        ("C|CC|CM", 2, [(1, "C|CM|CM")]),  # stage 1 (one block) never has room
        ("C|CM|CM", 2, []),
        ("CC|CC|CC", 0, [(0, "CM|CC|CC")]),
    ],
)
def test_next_candidates_follow_rules_1_and_2(layout, stage, expected):
    assert next_candidates(layout, stage) == expected
