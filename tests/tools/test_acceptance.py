"""tools/acceptance.py: HDVW's acceptance numbers against an evaluation's metrics.json (synthesized here: the released
checkpoints cannot be downloaded), within or outside each tolerance, and an evaluation off HDVW's protocol refused in
one line."""

import json

import pytest

from tools.acceptance import PROTOCOL, WEIGHT_DECAY, main


def evaluation(tmp_path, **landscape):
    path = tmp_path / "metrics.json"
    record = PROTOCOL | {"l2_origin": 1534.204 * WEIGHT_DECAY, "nll_origin": 2.21} | landscape
    path.write_text(
        json.dumps({"model": "resnet_50", "data": "cifar100", "test": {}, "analysis": {"landscape": record}})
    )
    return path


def test_each_row_is_read_within_or_outside_its_tolerance(tmp_path, capsys):
    assert main(["resnet_50", str(evaluation(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "resnet_50 Σ‖w‖ at the origin: HDVW 1534.2 ± 0.01, alternet 1534.2040: within" in out
    assert "resnet_50 NLL at the origin: HDVW 2.194 ± 0.02, alternet 2.2100: within" in out
    assert main(["resnet_50", str(evaluation(tmp_path, nll_origin=2.22))]) == 1
    assert "NLL at the origin: HDVW 2.194 ± 0.02, alternet 2.2200: OUTSIDE" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("landscape", "message"),
    [
        ({"images": 1024}, "did not follow HDVW's protocol, so its origin values are not comparable: images=1024"),
        ({"nll_origin": None}, "has no finite nll_origin: the evaluation did not finish"),
    ],
)
def test_an_evaluation_off_hdvws_protocol_is_refused_in_one_line(tmp_path, capsys, landscape, message):
    assert main(["vit_ti", str(evaluation(tmp_path, **landscape))]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_an_evaluation_without_a_landscape_says_how_to_get_one(tmp_path, capsys):
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"model": "vit_ti", "data": "cifar100", "test": {}}))
    assert main(["vit_ti", str(path)]) == 2
    assert "holds no landscape analysis: evaluate with analysis=[landscape]" in capsys.readouterr().err
