"""``data.loader=dali`` (alternet/data/files/dali.py), on DALI's CPU backend: the torch loader's images in its order
and shares, augmentation fixed by (seed, epoch, rank), a resumed epoch exactly the uninterrupted one's, timm's random
erasing, unreadable images named, and every setting DALI cannot honour refused in one line before any work."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from alternet.data import ImageFolderDataModule, data_config
from alternet.data.base import EpochSampler
from alternet.data.files.dali import erase, randaugment_levels
from alternet.errors import ConfigValueError, DataError

from helpers import DDP_CPU, FAST, assert_one_line_error, compose_train, datamodule_of, resolved, run_main, run_script
from helpers.imagefolders import dali_loader

has_dali = pytest.mark.skipif(
    importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None,
    reason="NVIDIA DALI is not installed (pip install 'alternet[dali]'; the dev extra has it on Linux x86-64)",
)
pytestmark = pytest.mark.xdist_group("dali")  # one worker imports DALI and builds its pipelines

PAPER = {  # recipe=imagenet's training augmentation
    "random_resized_crop": {"scale": [0.08, 1.0], "ratio": [0.75, 4 / 3]},
    "interpolation": "random",
    "hflip": True,
    "randaugment": "rand-m9-n2-mstd0.5",
    "random_erasing": 0.25,
}
WHOLE = {"random_resized_crop": {"scale": [1.0, 1.0], "ratio": [1.0, 1.0]}, "interpolation": "bilinear"}


def _module(folder: Path, augment: dict, **data) -> ImageFolderDataModule:
    module = ImageFolderDataModule(
        root=str(folder), image_size=16, batch_size=8, loader="dali", augment=augment, seed=3, **data
    )
    module.setup("fit")
    return module


@has_dali
@pytest.mark.parametrize(("rank", "world"), [(0, 1), (0, 2), (1, 2)])
def test_dali_decodes_the_torch_loaders_images_in_its_order_and_shares(image_folder, rank, world):
    """The whole image as the crop, no flip: each batch holds the images the torch loader's batch holds, in its
    order and with its labels, on each rank of two; DALI's decode and resize against Pillow's differ by resampling
    error only (measured on three folders: at most 0.035 of a unit of normalised pixel, mean 0.004)."""
    module = _module(image_folder, WHOLE)
    loader = dali_loader(module, rank=rank, world=world)
    batches = list(loader)
    assert len(batches) == len(loader) == len(loader.sampler) // 8
    exact = module.splits["train"]
    keys = [key for key in EpochSampler(len(exact), 3, shuffle=True, rank=rank, world_size=world)]
    for number, (images, labels) in enumerate(batches):
        assert images.shape == (8, 3, 16, 16) and images.dtype == torch.float32 and labels.dtype == torch.int64
        expected = [exact[(index, 0)] for index, _ in keys[8 * number : 8 * number + 8]]
        assert labels.tolist() == [label for _, label in expected]
        difference = (images - torch.stack([image for image, _ in expected])).abs()
        assert difference.max() < 0.15 and difference.mean() < 0.02, (difference.max(), difference.mean())


@has_dali
def test_dali_reads_the_pixels_as_stored_whatever_the_exif_orientation_says(tmp_path):
    """A phone's photo carries an EXIF orientation; Pillow, timm and the torch loader read the pixels as stored, and
    so must DALI (its decoder rotates them by default: trained rotated, evaluated upright)."""
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise
    for index in range(8):
        pixels = np.zeros((16, 16, 3), np.uint8)
        pixels[:8, :, index % 3] = 255  # the top half lit: a rotation moves it to a side
        for split in ("train", "test"):
            folder = tmp_path / split / f"class{index % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(folder / f"{index}.jpg", quality=95, exif=exif)
    module = _module(tmp_path, WHOLE, val_size=0)
    (images, _), *_ = list(dali_loader(module))
    exact = module.splits["train"]
    keys = list(EpochSampler(len(exact), 3, shuffle=True))[:8]
    expected = torch.stack([exact[(index, 0)][0] for index, _ in keys])
    assert (images - expected).abs().mean() < 0.1  # measured: 7e-8 as stored, 0.77 rotated (mean |difference|)


@has_dali
def test_the_augmentation_is_fixed_by_seed_epoch_and_rank_and_resumes_mid_epoch(image_folder):
    """The same seed, epoch and rank give the same batches; another epoch, seed or rank others. With the paper's
    augmentation (RandAugment, random interpolation, erasing), an epoch resumed from the state saved after its second
    batch continues with exactly the batches the uninterrupted epoch had."""
    module = _module(image_folder, {**PAPER, "randaugment": None})
    first = next(iter(dali_loader(module, epoch=1)))[0]
    assert torch.equal(first, next(iter(dali_loader(module, epoch=1)))[0])
    for other in ({"epoch": 2}, {"seed": 4, "epoch": 1}, {"rank": 1, "world": 2, "epoch": 1}):
        assert not torch.equal(first, next(iter(dali_loader(module, **other)))[0])
    threads = dali_loader(module, epoch=1)
    threads.threads = 3
    assert torch.equal(first, next(iter(threads))[0])  # whatever DALI's thread count
    module = _module(image_folder, PAPER)
    interrupted = dali_loader(module, epoch=1)
    batches = iter(interrupted)
    seen = [next(batches)[0], next(batches)[0]]
    state = interrupted.state_dict()
    assert state["epoch"] == 1 and state["batches"] == 2 and "dali" in state
    whole = seen + [images for images, _ in batches]
    resumed = dali_loader(module, epoch=1)
    resumed.load_state_dict(state)
    rest = [images for images, _ in resumed]
    assert len(rest) == len(whole) - 2 and all(torch.equal(a, b) for a, b in zip(whole[2:], rest))
    assert interrupted.state_dict() == {"epoch": 1, "batches": len(whole), "of": len(whole)}  # nothing of DALI's
    # the non-finite guard's checkpoint, written inside the second batch's step: the same images from that batch on,
    # DALI's draws afresh (its state is the one after the batch)
    earlier = interrupted.one_batch_back(state)
    assert earlier == {"epoch": 1, "batches": 1, "of": len(whole)}
    again = dali_loader(module, epoch=1)
    again.load_state_dict(earlier)
    assert [labels.tolist() for _, labels in again] == [labels.tolist() for _, labels in dali_loader(module, epoch=1)][
        1:
    ]


@has_dali
def test_a_run_on_dali_resumed_from_a_mid_epoch_checkpoint_ends_with_the_uninterrupted_weights(
    image_folder, tmp_path, monkeypatch, capsys
):
    """Through Lightning: 2 epochs of 5 steps with recipe=imagenet's augmentation (RandAugment aside: the test above
    resumes it); the run resumed from the periodic checkpoint written after step 7 ends bit for bit where the
    uninterrupted run ends. The run is then evaluated where DALI is not installed: evaluation never needs it."""
    from alternet.apps.train import train

    from helpers.models import assert_same_weights, keeping_checkpoint

    run = [
        *FAST,
        "data=imagefolder",
        f"data.root={image_folder}",
        "data.image_size=16",
        "data.loader=dali",
        "recipe=imagenet",
        "recipe.augment.files.randaugment=null",
        "recipe.batch_size=8",
        "recipe.epochs=2",
        "recipe.warmup_epochs=1",
        "trainer.max_epochs=2",
        "trainer.limit_train_batches=null",
        "trainer.precision=32-true",
        "callbacks.checkpoint.every_n_train_steps=1",
    ]
    with keeping_checkpoint(7, tmp_path / "whole", tmp_path / "step7.ckpt"):
        train(compose_train(*run, output_dir=tmp_path / "whole"))
    train(compose_train(*run, f"ckpt_path={tmp_path / 'step7.ckpt'}", output_dir=tmp_path / "resumed"))
    whole, resumed = (torch.load(tmp_path / r / "checkpoints" / "last.ckpt") for r in ("whole", "resumed"))
    assert whole["global_step"] == resumed["global_step"] == 10
    assert_same_weights(whole["state_dict"], resumed["state_dict"])
    _without_dali(monkeypatch)
    evaluated = ["ckpt=" + str(tmp_path / "whole"), f"out_dir={tmp_path / 'eval'}", "robustness.enabled=false"]
    code, stderr = run_main("evaluate.py", evaluated, monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    assert (tmp_path / "eval" / "metrics.json").is_file()


@has_dali
@pytest.mark.parametrize(
    ("fault", "says"),
    [
        ("broken", "data.loader=torch data.skip_corrupt=true"),
        ("gone", "moved or deleted after the run listed it"),
        ("gif", "is a GIF image, which DALI does not decode"),  # the torch loader reads it: DALI's '#4' named none
    ],
)
def test_an_unreadable_or_vanished_image_is_named_in_one_line(tmp_path, fault, says):
    from PIL import Image

    from helpers.imagefolders import make_image_folder

    folder = make_image_folder(tmp_path / "folder", size=20, splits={"train": 4, "val": 1}, odd_formats=False)
    if fault == "gif":
        Image.new("RGB", (20, 20), (200, 30, 30)).save(folder / "train" / "bee" / "bee_001.JPEG", format="GIF")
    else:
        (folder / "train" / "bee" / "bee_001.JPEG").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG")
    module = ImageFolderDataModule(root=str(folder), image_size=16, batch_size=16, loader="dali", augment=WHOLE)
    module.setup("fit")
    if fault == "gone":
        (folder / "train" / "bee" / "bee_001.JPEG").unlink()  # after the listing
    with pytest.raises(DataError) as error:
        list(module.train_dataloader())  # one batch of all 12 images
    message = str(error.value)
    assert "\n" not in message and "bee_001.JPEG" in message and says in message, message


def test_random_erasing_draws_timms_boxes_from_its_seed():
    """timm's RandomErasing (const mode, one box, as the paper's code): probability 1 erases one box in each image,
    2-33% of its area and of aspect 0.3-3.3, filled with 0 (the mean colour); the seed fixes it; probability 0
    changes nothing."""
    images = torch.ones(200, 3, 24, 20)
    assert erase(images, 0.0, seed=1) is images
    erased = erase(images, 1.0, seed=1)
    torch.testing.assert_close(erased, erase(images, 1.0, seed=1))
    assert set(erased.unique().tolist()) == {0.0, 1.0}
    changed = erased != 1
    assert torch.equal(changed[:, 0], changed[:, 1]) and torch.equal(changed[:, 0], changed[:, 2])
    for mask in changed[:, 0]:
        rows, cols = mask.any(1).nonzero().squeeze(1), mask.any(0).nonzero().squeeze(1)
        tall, wide = len(rows), len(cols)
        assert tall and wide and mask.sum() == tall * wide  # one box in every image
        assert 4 <= tall * wide <= 180  # 9.6 to 160 pixels drawn (2-33% of 480), each side rounded
        assert 0.3 / 2 <= tall / wide <= 3.3 * 2
    share = (erase(images, 0.25, seed=2) != 1).flatten(1).any(1).float().mean()
    assert 0.15 < share < 0.35  # 200 images at p 0.25: sd 0.031


@pytest.mark.parametrize(
    ("spec", "levels"),
    [("rand-m9-n2-mstd0.5", (2, 9)), ("rand-n3", (3, 10)), ("rand-m0-n1", (1, 0)), ("rand-m7-inc0", (2, 7))],
)
def test_timms_randaugment_string_gives_dalis_ops_and_level(spec, levels):
    assert randaugment_levels(spec) == levels


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("recipe.augment.files.randaugment=rand-m9-inc1", "rand-m<M>-n<N>[-mstd<S>] only, not inc1"),
        ("recipe.augment.files.randaugment=augmix-m5", "a RandAugment policy starts with 'rand'"),  # not RandAugment
        ("recipe.augment.files.randaugment=rand-m11", "whole m in 0..10"),
        ("recipe.augment.files=null", "recipe.augment.files is null"),
    ],
)
def test_an_augmentation_dali_cannot_run_is_refused_before_work(image_folder, override, message):
    config = resolved(
        "data=imagefolder", f"data.root={image_folder}", "recipe=imagefolder", "data.loader=dali", override
    )
    with pytest.raises(ConfigValueError, match=re.escape(message)):
        datamodule_of(config)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("data.train_shards=/data/shards", "data.train_shards=/data/shards does not apply with data.loader=dali"),
        ("data.skip_corrupt=true", "data.skip_corrupt=true does not apply"),
        ("data.decode=fast", "data.decode=fast does not apply"),
    ],
)
def test_a_torch_loader_setting_is_refused_with_dali(setting, message):
    config = resolved("data=imagefolder", "data.root=/data", "data.loader=dali", setting)
    if not importlib.util.find_spec("nvidia.dali" if importlib.util.find_spec("nvidia") else "nvidia"):
        message = "needs NVIDIA DALI"  # refused for that first
    with pytest.raises(ConfigValueError, match=message):
        data_config(config["data"])


def _without_dali(monkeypatch) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("nvidia") else found(name, *a)
    )


def test_dali_asked_for_and_not_installed_is_refused_in_one_line_naming_the_extra(monkeypatch, capsys, tmp_path):
    _without_dali(monkeypatch)
    arguments = ["data=imagefolder", f"data.root={tmp_path}", "data.loader=dali", f"hydra.run.dir={tmp_path / 'run'}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert_one_line_error(code, stderr, "data.loader=dali needs NVIDIA DALI", "pip install 'alternet[dali]'")
    assert not (tmp_path / "run").exists()


@has_dali
@pytest.mark.slow  # three 2-process runs in fresh interpreters, about a minute
@pytest.mark.xdist_group("processes")
def test_a_ddp_run_on_dali_stopped_mid_epoch_resumes_each_ranks_augmentation_exactly(image_folder, tmp_path):
    """Two ranks, each with its own DALI random state: a run stopped by SIGTERM at step 7 (mid-epoch 2) and resumed
    with ckpt_path=last ends with the uninterrupted run's weights. Lightning writes rank 0's checkpoint, so the
    loader's state gathers every rank's (restoring rank 0's on both would change rank 1's draws)."""
    script = "tests/scripts/interrupted_train.py"
    run = [
        *DDP_CPU,
        "data=imagefolder",
        f"data.root={image_folder}",
        "data.image_size=16",
        "data.loader=dali",
        "data.num_workers=1",
        "recipe=imagenet",
        "recipe.batch_size=4",
        "recipe.epochs=2",
        "recipe.warmup_epochs=1",
        "trainer.max_epochs=2",
        "trainer.precision=32-true",
        "callbacks.checkpoint.every_n_train_steps=1",
        "callbacks.preemption.sync_every_n_steps=1",
    ]
    whole = run_script(script, str(tmp_path / "whole"), "NONE", "0", *run, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    stopped = run_script(script, str(tmp_path / "stopped"), "TERM", "7", *run, timeout=300)
    assert stopped.returncode == 1 and "stopped by SIGTERM at global step 7" in stopped.stderr, stopped.stderr[-3000:]
    resumed = run_script(script, str(tmp_path / "stopped"), "NONE", "0", *run, "ckpt_path=last", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ends = [torch.load(tmp_path / r / "checkpoints" / "last.ckpt", weights_only=True) for r in ("whole", "stopped")]
    assert ends[0]["global_step"] == ends[1]["global_step"] == 10
    from helpers.models import assert_same_weights

    assert_same_weights(ends[0]["state_dict"], ends[1]["state_dict"])
