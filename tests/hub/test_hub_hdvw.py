"""The paper authors' checkpoints (HDVW, github.com/xxxnell/how-do-vits-work) import as alternet exports.

No HDVW code is needed: each test writes a checkpoint as HDVW writes one (``torch.save({"name", "state_dict"})``,
``models/__init__.py`` ``_save``) from one of our models with its tensors renamed and reshaped *into* HDVW's layout
(the inverse of the importer's mapping, written here from HDVW's key names: ``models/resnet.py`` +
``resnet_dnn_block.py``, ``models/alternet.py`` + ``preresnet_dnn_block.py``, and timm 0.4's ViT / PiT / Swin, which
HDVW's README loads its released ViT-Ti, PiT-Ti and Swin-Ti into), imports it with the command line and checks
that the imported model computes the original's logits.
"""

from __future__ import annotations

import argparse

import pytest
import torch
from huggingface_hub import ModelCard

import alternet.hub as hub
from alternet.errors import CheckpointError
from alternet.files import OUTPUT_LOCK
from alternet.hub.cli import main as hub_cli
from alternet.models import create_model

from helpers import run_main
from helpers.hdvw import (
    alternet_to_hdvw,
    pit_to_old_timm,
    randomized,
    resnet_to_hdvw,
    save_as_hdvw,
    swin_to_old_timm,
    vit_to_hdvw,
)


def logits(model: torch.nn.Module) -> torch.Tensor:
    torch.manual_seed(1)
    with torch.no_grad():
        return model.eval()(torch.randn(2, 3, 32, 32))


ROUND_TRIPS = {
    # HDVW's name: (our model, our tensors in HDVW's layout)
    "resnet_dnn_50": ("resnet50_hdvw", resnet_to_hdvw),
    "vit_ti": ("vit_ti_cifar", vit_to_hdvw),
    "pit_ti": ("pit_ti_cifar", pit_to_old_timm),
    "swin_ti": ("swin_ti_cifar", swin_to_old_timm),
    "alternet_50": ("alternet_r50_hdvw", alternet_to_hdvw),
}


@pytest.mark.parametrize("arch", list(ROUND_TRIPS))
def test_an_hdvw_checkpoint_imports_as_an_export_that_computes_the_same_logits(arch, tmp_path):
    ours, to_hdvw = ROUND_TRIPS[arch]
    original = randomized(ours)
    file = save_as_hdvw(tmp_path / f"{arch}_cifar100.pth.tar", arch, to_hdvw(original))
    hub_cli(["import-hdvw", str(file), "--arch", arch, "--out", str(tmp_path / "export")])
    assert {p.name for p in (tmp_path / "export").iterdir()} == {"model.safetensors", "config.json", "README.md"}
    imported = hub.load(tmp_path / "export", strict=True)
    assert imported.pretrained_cfg["architecture"] == ours and imported.pretrained_cfg["mean"] == [
        0.5071,
        0.4867,
        0.4408,
    ]
    torch.testing.assert_close(logits(imported), logits(original), rtol=0, atol=0)
    assert ModelCard.load(tmp_path / "export" / "README.md").data.license == "apache-2.0"  # the authors' (NOTICE)


def test_an_imagenet_import_records_the_crop_it_was_evaluated_with():
    """HDVW evaluates ImageNet at Resize(256) + CenterCrop(224): an in1k import recorded crop_pct 1.0 (the arrays'
    whole image), and its card named the data set 'in1k' rather than the Hub's."""
    from alternet.dataset_facts import FACTS
    from alternet.hub.card import HUB_DATASETS
    from alternet.hub.sources import data_pretrained_cfg

    cfg = data_pretrained_cfg("resnet50_hdvw", FACTS["in1k"])
    assert (cfg["crop_pct"], cfg["interpolation"], cfg["input_size"]) == (0.875, "bilinear", [3, 224, 224])
    assert HUB_DATASETS["in1k"] == "ILSVRC/imagenet-1k"


def test_the_arch_defaults_to_the_checkpoint_name_and_hdvw_files_load_as_a_source(tmp_path):
    original = randomized("pit_ti_cifar")
    file = save_as_hdvw(tmp_path / "pit.pth", "pit_ti", dict(original.state_dict()))  # already today's timm layout
    hub_cli(["import-hdvw", str(file), "--out", str(tmp_path / "export")])
    torch.testing.assert_close(logits(hub.load(tmp_path / "export")), logits(original), rtol=0, atol=0)
    torch.testing.assert_close(logits(hub.load(f"hdvw:{file}")), logits(original), rtol=0, atol=0)
    for arch in ("pit_tiny", "nosuch"):  # a file there, an arch HDVW has not: "nosuch:FILE does not exist" before
        with pytest.raises(CheckpointError, match=rf"^hdvw:{arch}:{file}: '{arch}' is not an architecture of HDVW's; "):
            hub.load(f"hdvw:{arch}:{file}")


def test_an_alternet_checkpoint_given_to_import_hdvw_is_sent_to_export(digits_summary, tmp_path):
    checkpoint = digits_summary.last_checkpoint
    with pytest.raises(SystemExit, match=r"is a Lightning checkpoint \(alternet's, say\), not HDVW's: export it with"):
        hub_cli(["import-hdvw", checkpoint, "--out", str(tmp_path / "export")])
    assert not (tmp_path / "export").exists()


def test_an_import_that_does_not_read_back_leaves_the_earlier_export(tmp_path, monkeypatch):
    """The read-back check runs on the new folder before it replaces the earlier export."""
    from alternet.hub import exporting

    original = randomized("pit_ti_cifar")
    file = save_as_hdvw(tmp_path / "pit.pth", "pit_ti", dict(original.state_dict()))
    hub_cli(["import-hdvw", str(file), "--out", str(tmp_path / "export")])
    before = {p.name: p.read_bytes() for p in (tmp_path / "export").iterdir()}

    def no_read_back(out, staged, model):
        assert staged.parent == out.parent and staged != out  # read before it replaces the earlier export
        raise CheckpointError(f"the export for {out} does not read back as the imported weights; {out} is unchanged")

    monkeypatch.setattr(exporting, "_check_reads_back", no_read_back)
    with pytest.raises(SystemExit, match=r"does not read back as the imported weights; .* is unchanged"):
        hub_cli(["import-hdvw", str(file), "--out", str(tmp_path / "export")])
    after = {p.name: p.read_bytes() for p in (tmp_path / "export").iterdir() if p.name != OUTPUT_LOCK}
    assert after == before  # (the writers' lock file stays where it was taken)


def test_a_data_root_without_the_class_names_is_refused_not_exported_with_indices(tmp_path):
    """--data-root asks for the names: a folder without them exported class indices, exit 0, a note in README."""
    file = save_as_hdvw(tmp_path / "pit.pth", "pit_ti", dict(randomized("pit_ti_cifar").state_dict()))
    with pytest.raises(SystemExit) as refused:
        hub_cli(["import-hdvw", str(file), "--data-root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "ex")])
    message = str(refused.value.code)
    assert message.startswith(f"error: --data-root {tmp_path / 'nowhere'}: the data set's class names are unavailable")
    assert "\n" not in message and "leave --data-root out" in message and not (tmp_path / "ex").exists()


def test_a_checkpoint_that_needs_unpickling_is_refused_in_one_line(tmp_path, capsys):
    weights = vit_to_hdvw(create_model("vit_mini_cifar", num_classes=100))
    file = save_as_hdvw(tmp_path / "vit.pth.tar", "vit_ti", weights, args=argparse.Namespace(lr=0.1))
    with pytest.raises(SystemExit) as refused:
        hub_cli(["import-hdvw", str(file), "--arch", "vit_ti", "--out", str(tmp_path / "export")])
    message = str(refused.value.code)
    assert "\n" not in message and "argparse.Namespace" in message and "weights_only=True" in message
    assert not (tmp_path / "export").exists()


NOT_TORCH = "is not a torch checkpoint: it does not begin as torch.save's zip archive does, or a pickle as torch"
PICKLE = "is not a torch checkpoint (torch.save writes a zip archive, or a pickle in older versions): it is unreadable"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"hello, these are my notes\n", f"error: HDVW checkpoint {{file}} {NOT_TORCH}"),
        (bytes(range(256)) * 8, f"error: HDVW checkpoint {{file}} {NOT_TORCH}"),
        (b"PK\x03\x04 an archive that stops", "error: HDVW checkpoint {file} is truncated: a torch checkpoint archive"),
        (b"\x80\x02 a pickle that stops", f"error: {{file}} {PICKLE} or truncated"),
    ],
    ids=["text", "binary", "truncated archive", "truncated pickle"],
)
def test_a_file_that_is_not_a_checkpoint_is_refused_in_one_line(content, says, tmp_path, monkeypatch, capsys):
    """Given to import-hdvw or to training as model.pretrained=hdvw:FILE (issue 51): one line, no traceback from
    inside torch's unpickler, a truncated file told apart from one that is no checkpoint, and the training run leaves
    no run directory behind."""
    file = tmp_path / "notes.pth"
    file.write_bytes(content)
    with pytest.raises(SystemExit) as refused:
        hub_cli(["import-hdvw", str(file), "--out", str(tmp_path / "export")])
    message = str(refused.value.code)
    assert message.startswith(says.format(file=file)) and "\n" not in message, message
    assert not (tmp_path / "export").exists()
    run_dir = tmp_path / "run"
    code, stderr = run_main(
        "train.py", ["debug=fast", f"model.pretrained=hdvw:{file}", f"hydra.run.dir={run_dir}"], monkeypatch, capsys
    )
    assert code == message and "Traceback" not in stderr and not run_dir.exists()


def test_a_checkpoint_of_another_arch_is_refused_in_one_line_naming_its_first_tensor(tmp_path):
    weights = vit_to_hdvw(randomized("vit_ti_cifar"))
    file = save_as_hdvw(tmp_path / "vit.pth.tar", "vit_ti", weights)
    with pytest.raises(SystemExit) as refused:
        hub_cli(["import-hdvw", str(file), "--arch", "swin_ti", "--out", str(tmp_path / "export")])
    message = str(refused.value.code)
    assert "\n" not in message and "--arch swin_ti (swin_ti_cifar)" in message and "'cls_token' has no place" in message
    wrong_shape = dict(weights, **{"head.weight": torch.zeros(100, 96)})
    save_as_hdvw(file, "vit_ti", wrong_shape)
    with pytest.raises(
        SystemExit, match=r"'head.weight' has shape \(100, 96\), the model's 'head.weight' \(100, 192\)"
    ):
        hub_cli(["import-hdvw", str(file), "--out", str(tmp_path / "export")])


# Parameter counts at 100 classes, measured once (outside this repository) on HDVW's code at commit 9571ff1:
# models/resnet.py dnn_50(stem=False) 23,705,252; models/alternet.py dnn_50(stem=False, window_size=4) 34,062,538;
# models/vit.py tiny(image_size=32, patch_size=2) 5,403,172, the parameters of timm's ViT-Ti without q/k/v bias
# that HDVW's README loads its ViT-Ti into. PiT-Ti and Swin-Ti are timm 0.4's classes as that README builds them
# (img_size=32; PiT patch 2 stride 1, Swin patch 1 window 4 qkv_bias=False), counted by hand from timm 0.4's code:
# 4,582,436 and 27,562,126 (HDVW's own models/pit.py, 4,576,740, is not the released model).
HDVW_PARAMETERS = {
    "resnet50_hdvw": 23_705_252,
    "alternet_r50_hdvw": 34_062_538,
    "vit_ti_cifar": 5_403_172,
    "pit_ti_cifar": 4_582_436,
    "swin_ti_cifar": 27_562_126,
}


@pytest.mark.parametrize(("name", "expected"), HDVW_PARAMETERS.items())
def test_parameter_counts_equal_hdvws(name, expected):
    with torch.device("meta"):
        model = create_model(name, num_classes=100)
    assert sum(p.numel() for p in model.parameters()) == expected
