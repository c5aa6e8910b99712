"""Any image folder as a data set: every format decodes to RGB, labels follow the folders, corrupt files are named or
skipped, layout mistakes fail before training, class names reach the export, and LitData shards hold the raw files
shuffled and stream the training split."""

import json
import math
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from litdata import StreamingDataset
from PIL import Image

from alternet.apps.train import train
from alternet.data import ImageFolderDataModule, build_datamodule, data_config
from alternet.data.base import stratified_holdout
from alternet.data.files.images import decode_rgb, scan_split
from alternet.data.files.shards import shard_images, write_shards
from alternet.errors import AlternetWarning, ConfigValueError, DataError
from alternet.hub import export

from helpers import FAST, compose_train, datamodule_of, module_output, resolved, run_main, without_collection
from helpers.imagefolders import COLOURS, make_image_folder

CLASSES = sorted(COLOURS)


def _datamodule(root: Path, **data) -> object:
    return ImageFolderDataModule(root=str(root), image_size=16, batch_size=8, eval_batch_size=16, **data)


@pytest.fixture
def folder(image_folder) -> Path:
    return image_folder  # conftest: 3 classes x (12 train + 3 val) images, plus 4 odd formats in train


def test_every_format_decodes_to_rgb(folder):
    for name in ("ant/png_named.JPEG", "bee/grey.jpg", "cat/cmyk.jpeg", "cat/larger.png"):
        image = decode_rgb(folder / "train" / name)
        assert image.mode == "RGB"
    cmyk = np.asarray(decode_rgb(folder / "train" / "cat" / "cmyk.jpeg"), dtype=float).mean(axis=(0, 1))
    assert cmyk.argmax() == 2  # still blue after the CMYK round trip


GREY = np.array([[0, 64, 128, 255]], dtype=np.uint8)  # the 8-bit values every mode below must decode to


def _palette(**info) -> Image.Image:
    image = Image.fromarray(np.repeat(GREY[..., None], 3, axis=2)).convert("P", palette=Image.Palette.ADAPTIVE)
    image.info |= info
    return image


def _saved(tmp_path: Path, image: Image.Image, name: str) -> Path:
    image.save(tmp_path / name)
    return tmp_path / name


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("bilevel.png", lambda: Image.fromarray(GREY >= 128).convert("1")),
        ("grey.png", lambda: Image.fromarray(GREY, "L")),
        ("grey16.png", lambda: Image.fromarray(GREY.astype(np.uint16) * 257)),  # I;16: 0, 16448, 32896, 65535
        ("grey16.tif", lambda: Image.fromarray(GREY.astype(np.uint16) * 257)),
        ("palette.png", lambda: _palette()),
        ("palette_alpha.png", lambda: _palette(transparency=0)),  # a transparent palette entry (tRNS)
        ("grey_alpha.png", lambda: Image.fromarray(np.stack([GREY, GREY[:, ::-1]], axis=2), "LA")),
        ("rgba.png", lambda: Image.fromarray(np.stack([GREY, GREY, GREY, GREY[:, ::-1]], axis=2), "RGBA")),
        ("cmyk.tif", lambda: Image.fromarray(np.repeat(GREY[..., None], 3, axis=2)).convert("CMYK")),
    ],
)
def test_each_image_mode_decodes_to_the_8_bit_rgb_it_holds(tmp_path, name, make):
    """16-bit greyscale saturated to 255 through Pillow's convert("RGB") (0.25 of full scale read as white); each
    mode now decodes to the same 8-bit grey values, alpha dropped (as timm and torchvision drop it)."""
    expected = (GREY >= 128).astype(np.uint8) * 255 if name == "bilevel.png" else GREY
    image = decode_rgb(_saved(tmp_path, make(), name))
    pixels = np.asarray(image)
    assert image.mode == "RGB" and pixels.dtype == np.uint8 and pixels.shape == (1, 4, 3)
    for channel in range(3):
        np.testing.assert_allclose(pixels[..., channel], expected, atol=1)  # CMYK's round trip may move one step


@pytest.mark.parametrize(
    ("name", "samples", "kind"),
    [
        ("int32.tif", GREY.astype(np.int32) * 1_000_000, "32-bit integer"),
        ("float.tif", GREY.astype(np.float32) / 255, "floating-point"),
    ],
)
def test_an_image_whose_range_the_file_does_not_state_is_refused_naming_it(tmp_path, name, samples, kind):
    path = _saved(tmp_path, Image.fromarray(samples), name)
    with pytest.raises(DataError, match=f"^image {path} is {kind} greyscale .*convert it to 8- or 16-bit") as error:
        decode_rgb(path)
    assert "\n" not in str(error.value)


def test_an_image_over_pillows_bomb_guard_is_named_with_its_cost_and_one_twice_over_it_is_refused(
    tmp_path, monkeypatch
):
    """Pillow warns of an image over ``Image.MAX_IMAGE_PIXELS`` without naming its file ("Image size (100000000
    pixels) exceeds limit ..."): said with the file and what each read of it decodes. Its limit, lowered here, is
    Pillow's own setting; over twice it, Pillow refuses the image, named as any unreadable one."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    large = _saved(tmp_path, Image.new("RGB", (40, 40)), "large.png")  # 1,600 pixels: warned
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert decode_rgb(large).size == (40, 40)
    assert [(w.category, str(w.message)) for w in said] == [
        (
            AlternetWarning,
            f"image {large} is 40x40 (1,600 pixels), above Pillow's 1,000-pixel guard against decompression bombs: "
            "every read of it decodes 0 MiB; downscale such files once, before training",
        )
    ]
    larger = _saved(tmp_path, Image.new("RGB", (50, 50)), "larger.png")  # 2,500 pixels: refused
    with pytest.raises(DataError, match=f"^cannot decode image {larger}: Image size \\(2500 pixels\\) exceeds"):
        decode_rgb(larger)


def test_each_training_image_is_seen_once_per_epoch_with_its_folder_label(folder):
    datamodule = _datamodule(folder)
    datamodule.setup("fit")
    files = datamodule.files["train"]
    assert len(files) == 3 * 12 + 4 and datamodule.class_names == CLASSES
    loader = datamodule.train_dataloader()
    assert loader.drop_last
    sampler = loader.sampler
    keys = [key for key in sampler]
    assert len({index for index, _ in keys}) == len(keys) == len(files)  # drop_last trims batches, not the order
    dataset = datamodule.splits["train"]
    for index, seed in keys:
        image, label = dataset[(index, seed)]
        folder_name = files.paths[index].decode().split("/")[0]
        assert label == CLASSES.index(folder_name)
        assert image.shape == (3, 16, 16) and image.dtype == torch.float32
        if b"grey" not in files.paths[index]:  # the dominant channel is the class colour's
            assert image.mean(dim=(1, 2)).argmax().item() == int(np.argmax(COLOURS[folder_name]))


def test_epochs_reshuffle_and_batches_mix_classes(folder):
    datamodule = _datamodule(folder)
    datamodule.setup("fit")
    labels = datamodule.files["train"].labels
    loader = datamodule.train_dataloader()
    orders = []
    for epoch in (0, 1):
        loader.sampler.set_epoch(epoch)
        orders.append([index for index, _ in loader.sampler])
    assert orders[0] != orders[1]
    for order in orders:
        batches = [labels[order[i : i + 8]] for i in range(0, len(order) - 7, 8)]
        assert min(len(set(batch.tolist())) for batch in batches) >= 2  # no batch of a single class


def test_validation_hold_out_is_stratified_and_seeded(tmp_path):
    root = make_image_folder(tmp_path, per_class=10, odd_formats=False, splits={"train": 10})
    datamodule = _datamodule(root, val_size=0.3)
    datamodule.setup("fit")
    val = datamodule.files["val"]
    assert len(val) == 9 and sorted(np.bincount(val.labels).tolist()) == [3, 3, 3]
    assert not set(val.paths.tolist()) & set(datamodule.files["train"].paths.tolist())
    assert datamodule.files["test"] is val  # no val/ or test/: the hold-out is also the test split
    mask = stratified_holdout(np.repeat(np.arange(4), 25), 20, seed=1)
    assert np.bincount(np.repeat(np.arange(4), 25)[mask]).tolist() == [5, 5, 5, 5]
    assert (mask == stratified_holdout(np.repeat(np.arange(4), 25), 20, seed=1)).all()


def test_a_corrupt_image_is_named_or_skipped_and_counted(tmp_path):
    root = make_image_folder(tmp_path, per_class=4, splits={"train": 4, "val": 2}, corrupt=True)
    datamodule = _datamodule(root)
    datamodule.setup("fit")
    files = datamodule.files["train"]
    broken = next(i for i in range(len(files)) if files.paths[i].endswith(b"broken.JPEG"))
    with pytest.raises(DataError, match=r"cannot decode image .*bee/broken\.JPEG.*data\.skip_corrupt=true"):
        datamodule.splits["train"][broken]

    skipping = _datamodule(root, skip_corrupt=True)
    skipping.setup("fit")
    with pytest.warns(UserWarning, match=r"skipped an unreadable image \(cannot decode image .*broken.JPEG: "):
        _, label = skipping.splits["train"][broken]
    assert label == files.labels[(broken + 1) % len(files)] and skipping.skipped_images == 1


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"train": {"ant": 2, "bee": 0}}, r"class folder .*train/bee holds no images"),
        (
            {"train": {"ant": 2, "bee": 2}, "val": {"ant": 1, "zebra": 1}},
            r"val has class folders the training split lacks: \['zebra'\]",
        ),
        ({"val": {"ant": 1}}, r"train not found\. data\.root must hold train/<class>"),
        ({"train": {}}, r"train holds no class folders: expected .*/train/<class>/<image> files$"),
        (  # ImageNet's val/ as downloaded: its images flat, their labels in the devkit
            {"train": {"ant": 2, "bee": 2}, "val": {"": 2}},
            r"val holds no class folders: .*; images lying flat in it \(as ImageNet's val/ comes\) go into their",
        ),
    ],
)
def test_layout_mistakes_fail_before_training(tmp_path, layout, message):
    for split, classes in layout.items():
        (tmp_path / split).mkdir()
        for name, count in classes.items():
            (tmp_path / split / name).mkdir(exist_ok=True)  # "": the images lie in the split itself
            for i in range(count):
                Image.new("RGB", (4, 4), (9, 9, 9)).save(tmp_path / split / name / f"{i}.png")
    with pytest.raises(DataError, match=message):
        _datamodule(tmp_path).setup("fit")


def test_cifar_style_augmentation_is_refused_for_image_files(folder):
    with pytest.raises(
        ConfigValueError, match=r"recipe\.augment\.files\.crop_padding is not a key of recipe\.augment\.files"
    ):
        data = data_config(resolved("data=imagefolder", f"data.root={folder}")["data"])
        build_datamodule(data, batch_size=8, augment={"files": {"crop_padding": 4}}, seed=0)


def test_class_names_travel_with_the_checkpoint_and_the_export(folder, tmp_path, monkeypatch, capsys):
    summary = train(
        compose_train(
            *FAST,
            "data=imagefolder",
            f"data.root={folder}",
            "data.image_size=16",
            "data.num_workers=0",
            "recipe.batch_size=8",
            output_dir=tmp_path / "run",
        )
    )
    checkpoint = torch.load(summary.last_checkpoint, weights_only=True)
    assert checkpoint["hyper_parameters"]["data"]["class_names"] == CLASSES
    out = export(summary.run_dir, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["label_names"] == CLASSES
    # generated corruptions are CIFAR-C's (32-px arrays): image-file data needs real corruption files
    arguments = [f"ckpt={summary.run_dir}", "robustness.enabled=true", f"hydra.run.dir={tmp_path}/e"]
    code, _ = run_main("evaluate.py", arguments, monkeypatch, capsys)  # in this process: ~8 s less than a fresh one
    assert code.startswith("error: ") and "give real corruption files with robustness.root=DIR" in code


def test_shards_hold_the_raw_files_shuffled_with_class_names_beside(folder, tmp_path, monkeypatch, capsys):
    out = tmp_path / "shards"
    arguments = [str(folder), str(out), "--chunk-bytes", "4KB", "--workers", "1"]
    code, stdout, stderr = module_output("alternet", ["shards", *arguments], monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    assert "wrote 40 images of 3 classes" in stdout
    assert json.loads((out / "classes.json").read_text())["classes"] == CLASSES
    records = [StreamingDataset(str(out))[i] for i in range(40)]
    for record in records:  # stored bytes are the file's bytes: no re-encode
        assert bytes(record["image"]) == (folder / "train" / record["name"]).read_bytes()
    first_chunk = json.loads((out / "index.json").read_text())["chunks"][0]["chunk_size"]
    assert len({r["label"] for r in records[:first_chunk]}) >= 2  # the file order was shuffled before writing
    with pytest.raises(DataError, match="already holds shards"):
        write_shards(folder, out)


def test_shards_take_a_file_name_that_is_not_utf_8(tmp_path):
    """A name the file system holds as bytes (Latin-1, say) trains from the folder; writing shards of it ended in
    litdata's traceback (UnicodeEncodeError: surrogates not allowed)."""
    folder = make_image_folder(tmp_path / "images", per_class=2, splits={"train": 2}, odd_formats=False)
    first = next(path for path in (folder / "train").rglob("*") if path.is_file())
    odd = os.fsdecode(os.fsencode(first.parent) + b"/caf\xe9" + os.fsencode(first.suffix))
    os.rename(first, odd)
    write_shards(folder, tmp_path / "shards", num_workers=1)
    names = {StreamingDataset(str(tmp_path / "shards"))[i]["name"] for i in range(4)}
    assert f"{first.parent.name}/caf\\xe9{first.suffix}" in names


def test_a_batch_larger_than_the_shards_or_the_folder_is_refused_before_training(folder, tmp_path):
    """Streamed shards are counted from their index (the folder's check was skipped for them: a run trained 0 steps
    and finished); a folder whose val/ is its validation split holds nothing out of train/, and says no hold-out."""
    shards = tmp_path / "shards"
    write_shards(folder, shards, num_workers=1)
    data = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", "recipe.batch_size=64"]
    for streamed in ([f"data.train_shards={shards}"], []):
        with pytest.raises(ConfigValueError) as refused:
            train(compose_train(*FAST, *data, *streamed, output_dir=tmp_path / "run"))
        assert str(refused.value).startswith("recipe.batch_size=64 is larger than the 40 training images: the")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_shards_of_a_folder_without_val_take_no_hold_out_and_say_where_they_came_from(tmp_path, monkeypatch, capsys):
    """The shards hold every image of train/: a hold-out of it (data.val_size) would be trained on, so it is refused,
    and the printed command turns it off where test/ can evaluate; shards written from another folder than
    data.root's train/ (its val/, say) are warned about."""
    held = make_image_folder(tmp_path / "held", per_class=4, splits={"train": 4, "test": 1}, odd_formats=False)
    shards = tmp_path / "held-shards"
    code, stdout, stderr = module_output(
        "alternet", ["shards", str(held), str(shards), "--workers", "1"], monkeypatch, capsys
    )
    assert code == "0" and stdout.rstrip().endswith(f"data.train_shards={shards} data.val_size=0"), stderr
    bare = make_image_folder(tmp_path / "bare", per_class=4, splits={"train": 4}, odd_formats=False)
    code, stdout, _ = module_output(
        "alternet", ["shards", str(bare), str(tmp_path / "bare-shards"), "--workers", "1"], monkeypatch, capsys
    )  # no val/ or test/: the command it printed failed on the default hold-out
    assert code == "0" and "\nonce it has one, train from them with: alternet train" in stdout
    assert stdout.rstrip().endswith("data.val_size=0")
    data = ["data=imagefolder", f"data.root={held}", f"data.train_shards={shards}", "data.image_size=16"]
    with pytest.raises(DataError, match=r"^data.val_size=0.25 holds validation images out of .*, which "):
        train(compose_train(*FAST, *data, "data.val_size=0.25", output_dir=tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    other = make_image_folder(tmp_path / "other", per_class=4, splits={"train": 4, "test": 1}, odd_formats=False)
    config = data_config(resolved(*data[:1], f"data.root={other}", data[2])["data"])
    module = build_datamodule(config, batch_size=4, seed=0)
    with pytest.warns(UserWarning, match=rf"was written from {held / 'train'}, not from {other / 'train'}: its"):
        assert module.class_names == CLASSES


def test_shards_refuse_a_corrupt_file_or_skip_it(tmp_path):
    root = make_image_folder(tmp_path / "data", per_class=3, splits={"train": 3}, corrupt=True)
    with pytest.raises(DataError, match=r"cannot decode image .*broken\.JPEG") as refused:
        write_shards(root, tmp_path / "a", num_workers=1)
    assert str(refused.value).endswith("or pass --skip-corrupt to leave unreadable images out of the shards")
    assert "BytesIO" not in str(refused.value) and "data.skip_corrupt" not in str(refused.value)
    written = write_shards(root, tmp_path / "b", num_workers=1, skip_corrupt=True)
    assert written["skipped"] == 1 and written["images"] == len(scan_split(root / "train")) - 1
    (root / "train" / "bee" / "broken.JPEG").unlink()
    Image.fromarray(np.ones((8, 8), np.float32)).save(root / "train" / "bee" / "float.tif")  # no stated range
    with pytest.raises(DataError, match=r"^image .*float\.tif is floating-point greyscale"):  # the reason alone
        write_shards(root, tmp_path / "c", num_workers=1)
    assert write_shards(root, tmp_path / "d", num_workers=1, skip_corrupt=True)["skipped"] == 1


def test_the_printed_training_command_names_the_data_root_and_the_skipping_the_shards_needed(
    tmp_path, monkeypatch, capsys
):
    """SRC may be the train/ split itself: data.root is the folder holding it (train/ inside it failed); shards
    that left unreadable images out train with data.skip_corrupt=true (validation reads the folder's files)."""
    root = make_image_folder(tmp_path / "data", per_class=3, splits={"train": 3, "val": 1}, corrupt=True)
    arguments = [str(root / "train"), str(tmp_path / "out"), "--skip-corrupt", "--workers", "1"]
    code, stdout, stderr = module_output("alternet", ["shards", *arguments], monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    command = stdout.strip().splitlines()[-1].removeprefix("train from them with: ")
    assert command == (
        f"alternet train data=imagefolder data.root={root} data.train_shards={tmp_path / 'out'} data.skip_corrupt=true"
    )


def test_shards_of_one_class_are_refused_before_any_is_written(tmp_path, monkeypatch, capsys):
    """They were written whole, with a training command to paste, which refused a data set of one class."""
    root = make_image_folder(tmp_path / "data", per_class=2, odd_formats=False)
    for extra in sorted(p for p in (root / "train").iterdir() if p.name != "ant"):
        shutil.rmtree(extra)
    code, _, stderr = module_output("alternet", ["shards", str(root), str(tmp_path / "out")], monkeypatch, capsys)
    assert code == (
        f"error: {root / 'train'} holds one class folder (ant); a classifier needs at least two, and training refuses "
        "a data set of one: add a folder per class, then write the shards"
    )
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()


def test_shards_of_a_folder_where_nothing_decodes_fail_and_leave_nothing(tmp_path, monkeypatch, capsys):
    """--skip-corrupt on a folder whose every image is unreadable once said "wrote 0 images" and exit 0, then printed
    a training command that died in a litdata traceback."""
    root = make_image_folder(tmp_path / "data", per_class=2, splits={"train": 2})
    images = [path for path in (root / "train").rglob("*") if path.is_file()]
    for image in images:
        image.write_bytes(b"not an image")
    code, _, stderr = module_output(
        "alternet",
        ["shards", str(root), str(tmp_path / "out"), "--skip-corrupt", "--workers", "1"],
        monkeypatch,
        capsys,
    )
    assert code.startswith(f"error: none of the {len(images)} images under ") and "no shards were written" in code
    assert "\n" not in code and "Traceback" not in stderr
    assert not (tmp_path / "out").exists()


def test_ctrl_c_while_shards_are_written_stops_with_a_failure_and_leaves_the_process_its_handler(
    tmp_path, monkeypatch, capsys
):
    """litdata's SIGINT handler ended the process with os._exit(0) (no word, status 0, the folder half-written) and
    stayed installed after write_shards. Its handler is the one litdata installs inside optimize: simulated here."""
    import signal

    from litdata.processing.data_processor import DataProcessor

    from alternet.data.files import shards

    before = signal.getsignal(signal.SIGINT)

    def interrupted(**_):  # optimize, as far as its handler goes: installed, then a Ctrl-C arrives
        processor = object.__new__(DataProcessor)
        signal.signal(signal.SIGINT, processor._signal_handler)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(shards.litdata, "optimize", interrupted)
    root = make_image_folder(tmp_path / "data", per_class=2, splits={"train": 2}, odd_formats=False)
    code, _, stderr = module_output("alternet", ["shards", str(root), str(tmp_path / "out")], monkeypatch, capsys)
    assert code.startswith(f"error: stopped: the shards in {tmp_path / 'out'} are incomplete") and "\n" not in code
    assert code.endswith("run the same command again to write them") and "Traceback" not in stderr
    assert signal.getsignal(signal.SIGINT) is before and not (tmp_path / "out" / "index.json").exists()


def test_missing_or_half_written_shards_say_what_writes_them(tmp_path, image_folder, image_shards):
    """Both read as '.../index.json is unreadable or not valid JSON: [Errno 2] ...', naming neither the setting nor
    the command that writes them."""
    common = [*FAST, "data=imagefolder", f"data.root={image_folder}", "data.image_size=16"]
    with pytest.raises(DataError, match=r"data.train_shards=\S+/nowhere does not exist: write the shards with"):
        train(compose_train(*common, f"data.train_shards={tmp_path / 'nowhere'}", output_dir=tmp_path / "a"))
    half = tmp_path / "half"
    shutil.copytree(image_shards, half)
    (half / "index.json").unlink()  # a writing stopped before litdata's last file
    with pytest.raises(DataError, match=r"holds no LitData index.json: .* \(the same command completes a writing"):
        train(compose_train(*common, f"data.train_shards={half}", output_dir=tmp_path / "b"))


def test_a_shards_run_is_evaluated_without_its_training_shards(
    tmp_path, image_folder, image_shards, monkeypatch, capsys
):
    """An evaluation reads val/ and test/ from the folders, never the training shards, and was refused once they
    had moved ('classes.json not found'), with data_root of no help."""
    shards = tmp_path / "shards"
    shutil.copytree(image_shards, shards)
    common = ["data=imagefolder", f"data.root={image_folder}", f"data.train_shards={shards}", "data.image_size=16"]
    run = [*FAST, *common, "data.num_workers=0", "recipe.batch_size=8"]
    summary = train(compose_train(*run, output_dir=tmp_path / "run"))
    shutil.rmtree(shards)
    arguments = [f"ckpt={summary.run_dir}", "robustness.enabled=false", f"out_dir={tmp_path / 'eval'}"]
    code, stderr = run_main("evaluate.py", arguments, monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["data"] == "imagefolder"


def test_the_banner_counts_the_shards_images_not_their_streams_batches(image_folder, image_shards):
    """It gave LitData's length, each worker's short last batch dropped (train 32 of 40 at batch 16, 2 workers)."""
    data = ["data=imagefolder", f"data.root={image_folder}", f"data.train_shards={image_shards}", "data.val_size=0"]
    data += ["data.num_workers=2"]
    datamodule = build_datamodule(data_config(resolved(*data)["data"]), batch_size=16, seed=0)
    datamodule.setup()
    datamodule.train_dataloader()  # the banner is printed once training built it, LitData's length then its own
    assert "(train 40, " in datamodule.describe()


@pytest.mark.parametrize(("shards", "workers"), [(False, 0), (True, 0), (True, 2)])
def test_a_loaders_position_one_batch_back_resumes_with_that_batch(image_folder, image_shards, shards, workers):
    """The non-finite guard's checkpoint is written inside a step, after its batch was delivered: its loader's
    position goes back one batch (LitData's: the samples yielded and the last worker of its round robin), so the
    resumed loader delivers that batch again and then the rest of the epoch, as the uninterrupted one did."""
    data = ["data=imagefolder", f"data.root={image_folder}", "data.val_size=0", f"data.num_workers={workers}"]
    data += [f"data.train_shards={image_shards}"] if shards else []

    def loader():
        datamodule = build_datamodule(data_config(resolved(*data)["data"]), batch_size=4, seed=0)
        datamodule.setup("fit")
        return datamodule.train_dataloader()

    first, whole, states = loader(), [], {}
    for index, (images, _) in enumerate(first):
        whole.append(images.sum(dim=(1, 2, 3)).tolist())
        if index in (0, 3):  # the step of the epoch's first batch, or of its fourth, goes non-finite
            states[index] = first.one_batch_back(first.state_dict())
    for index, state in states.items():  # at the first, LitData restores no position: the epoch starts again
        resumed = loader()
        resumed.load_state_dict(state)
        assert [images.sum(dim=(1, 2, 3)).tolist() for images, _ in resumed] == whole[index:], index


def test_a_dropped_shards_loader_ends_its_workers_at_once(image_folder, image_shards):
    """LitData's iterator held its loader and the loader it: dropped, the two waited for the garbage collector,
    which closed the workers' queues before asking the workers to end on them, and each worker then cost 5 s in
    whatever ran at that moment (30 s of an unrelated test in this module)."""
    data = ["data=imagefolder", f"data.root={image_folder}", f"data.train_shards={image_shards}", "data.val_size=0"]
    datamodule = build_datamodule(data_config(resolved(*data, "data.num_workers=2")["data"]), batch_size=4, seed=0)
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    next(iter(loader))
    workers = list(loader._iterator._workers)
    assert len(workers) == 2 and all(worker.is_alive() for worker in workers)
    with without_collection():
        del loader, datamodule
        assert not any(worker.is_alive() for worker in workers)


def test_shards_of_other_classes_name_them_and_an_output_that_cannot_be_made_is_one_line(tmp_path, monkeypatch):
    """The refusal gave the position of the first difference ('at the end'), not the classes; an OUT the system
    would not make (/proc/x) was a FileNotFoundError traceback."""
    root = make_image_folder(tmp_path / "data", per_class=2, splits={"train": 2, "test": 1}, odd_formats=False)
    shards = tmp_path / "shards"
    write_shards(root, shards, num_workers=1)
    (root / "train" / "zebra").mkdir()
    shutil.copy(next((root / "train").rglob("*.JPEG")), root / "train" / "zebra" / "z.JPEG")
    data = ["data=imagefolder", f"data.root={root}", f"data.train_shards={shards}", "data.val_size=0"]
    with pytest.raises(DataError, match=r"\(3 vs 4 classes; only in the folder: zebra\); write them anew"):
        build_datamodule(data_config(resolved(*data)["data"]), batch_size=2, seed=0).setup()

    def refused(self, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    monkeypatch.setattr(Path, "mkdir", refused)
    with pytest.raises(DataError, match=r"^shards output \S+ cannot be made: .*; choose another OUT$"):
        write_shards(root, tmp_path / "elsewhere", num_workers=1)


def test_object_store_shards_pass_through_to_litdata_unchecked(folder):
    datamodule = _datamodule(folder, train_shards="s3://bucket/imagenet-shards")
    with pytest.warns(UserWarning, match="is remote: its classes.json is not checked"):
        assert datamodule.class_names == CLASSES


def test_a_folder_of_one_class_is_refused_in_one_line_before_work(tmp_path, monkeypatch, capsys):
    """One class reached torchmetrics and ended in a traceback, leaving a run directory (issue 51)."""
    root = make_image_folder(tmp_path / "data", per_class=4, odd_formats=False)
    for name in ("bee", "cat"):
        for image in (root / "train" / name).iterdir():
            image.unlink()
        (root / "train" / name).rmdir()
    run_dir = tmp_path / "run"
    arguments = ["data=imagefolder", f"data.root={root}", "data.image_size=16", f"hydra.run.dir={run_dir}"]
    code, stderr = run_main("train.py", arguments, monkeypatch, capsys)
    assert code == (
        f"error: imagefolder: {root / 'train'} holds one class folder (ant); a classifier needs at least two: add a "
        "folder per class under train/"
    )
    assert "Traceback" not in stderr and not run_dir.exists()


def _photo_jpeg(path: Path, width: int, height: int, seed: int) -> Path:
    """A photo-like JPEG (structure at several scales, grain; quality 90), as bench/imagenet_data.py makes them."""
    rng = np.random.default_rng(seed)
    layers = [
        np.asarray(
            Image.fromarray(rng.integers(0, 256, (c * 3 // 4 + 1, c, 3), dtype=np.uint8)).resize(
                (width, height), Image.BICUBIC
            ),
            np.int16,
        )
        for c in (6, 24, 80)
    ]
    image = (2 * layers[0] + layers[1] + layers[2]) // 4 + rng.normal(0, 14, (height, width, 3)).astype(np.int16)
    Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(path, format="JPEG", quality=90)
    return path


def _fast_against_exact(path: Path, size: int, interpolation: str, seeds: int) -> tuple[float, int]:
    """The worst PSNR of data.decode=fast's crop against the exact path's over ``seeds`` of timm's boxes (the same box
    for the same seed), and how many of those decoded at a reduced DCT scale."""
    import random

    from timm.data.transforms import RandomResizedCropAndInterpolation

    from alternet.data.files.transforms import DraftedCrop

    crop = RandomResizedCropAndInterpolation(size, interpolation=interpolation)
    drafted, reduced, worst = DraftedCrop(crop), 0, math.inf
    with Image.open(path) as whole:
        full = whole.size
    for seed in range(seeds):
        random.seed(seed)
        with Image.open(path) as whole:
            exact = np.asarray(crop(whole.convert("RGB")), np.float64)
        random.seed(seed)
        with Image.open(path) as opened:
            fast = np.asarray(drafted(opened, path), np.float64)
            reduced += opened.size != full  # decoded at a reduced scale
        assert fast.shape == exact.shape == (size, size, 3)
        worst = min(worst, 10 * math.log10(255**2 / np.mean((fast - exact) ** 2)))
    return worst, reduced


@pytest.mark.parametrize("interpolation", ["bilinear", "bicubic"])
def test_the_fast_decode_crops_the_same_box_to_within_resampling_error(tmp_path, interpolation):
    """data.decode=fast draws the random-resized crop's box from the header with the same draws as timm's crop (the
    same box for the same seed), decodes the JPEG at a reduced DCT scale where the box allows, and its 224 px output
    stays within resampling error of the exact path's: PSNR >= 35 dB for every crop (measured on a Zen 4: 41.5-75 dB,
    median 59, over these 40 crops of 500x375 and 1200x900 photos, 18 of them decoded at a reduced scale; the bound
    keeps 6 dB below the worst)."""
    found = [
        _fast_against_exact(_photo_jpeg(tmp_path / f"{width}.jpg", width, height, seed=width), 224, interpolation, 20)
        for width, height in ((500, 375), (1200, 900))
    ]
    worst, reduced = min(w for w, _ in found), sum(r for _, r in found)
    assert worst >= 35, worst
    assert reduced >= 10, reduced  # most large boxes of the 1200x900 photo, some of the 500x375's


def test_the_fast_decode_reaches_the_scale_the_box_allows_whatever_the_photos_size(tmp_path):
    """Pillow decodes at min(W // w, H // h) of the size (w, h) asked: asking ceil(W / 4) x ceil(H / 4) of a 501x375
    photo got 375 // 94 = 3, so 1/2, and at 1/2 it got 1, the whole decode (ImageNet's 500x375 photos decoded whole
    nearly always). The whole photo as the box, 60 px out: 1/4 (93 px >= 60, 1/8's 46 < 60), within resampling error
    of the exact path's."""
    from timm.data.transforms import RandomResizedCropAndInterpolation

    from alternet.data.files.transforms import DraftedCrop

    path = _photo_jpeg(tmp_path / "photo.jpg", 501, 375, seed=1)
    crop = RandomResizedCropAndInterpolation(60, scale=(1.0, 1.0), ratio=(501 / 375, 501 / 375))
    with Image.open(path) as opened:
        fast = np.asarray(DraftedCrop(crop)(opened, path), np.float64)
        assert opened.size == (126, 94)  # ceil(501 / 4) x ceil(375 / 4)
    with Image.open(path) as whole:
        exact = np.asarray(crop(whole.convert("RGB")), np.float64)
    assert 10 * math.log10(255**2 / np.mean((fast - exact) ** 2)) >= 30


def test_the_fast_decode_crops_an_mpo_jpeg_as_the_plain_jpeg_of_its_first_picture(tmp_path):
    """Pillow opens a JPEG with more pictures (a phone's gain map) as MPO, which drafts as a JPEG does: the box was
    kept at full scale on the reduced image ("box can't exceed original image size", or a wrong crop)."""
    path = _photo_jpeg(tmp_path / "photo.jpg", 800, 600, seed=2)
    with Image.open(path) as plain:
        first = plain.convert("RGB")
    mpo = tmp_path / "photo_mpo.jpg"
    first.save(mpo, format="MPO", save_all=True, append_images=[first.resize((200, 150))], quality=95)
    with Image.open(mpo) as opened:
        assert opened.format == "MPO"
    worst, reduced = _fast_against_exact(mpo, 64, "bilinear", 10)
    assert worst >= 30 and reduced >= 5, (worst, reduced)


def test_the_fast_decode_of_a_real_photo_stays_within_resampling_error():
    """The same check on a real photo (matplotlib's sample grace_hopper.jpg, 512x600, shipped with a dependency): at
    112 px most of timm's boxes decode at a reduced DCT scale. Measured on a Zen 4, over these 40 boxes: 34 reduced,
    PSNR against the exact path 35.6-64 dB (bicubic); for scale, timm's bilinear and bicubic crops of the same boxes
    differ by 35.7-43 dB over 200 boxes. libjpeg-turbo's scaled IDCTs and Pillow's fixed-point resampling give the
    same bytes on every CPU, so the bound keeps 3.6 dB below the worst."""
    import matplotlib

    photo = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    worst, reduced = _fast_against_exact(photo, 112, "bicubic", 40)
    assert worst >= 32, worst
    assert reduced >= 25, reduced


def test_training_without_augmentation_takes_the_evaluation_pipeline_with_its_crop_settings(folder):
    """recipe.augment.files=null trains on the evaluation pipeline, as documented: it took timm's defaults
    (crop_pct 0.875, centre crop, bilinear) instead of the data's, so training zoomed and kept the aspect where the
    evaluation squashed with bicubic."""
    overrides = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", "recipe.augment.files=null"]
    settings = ["data.crop_pct=1.0", "data.crop_mode=squash", "data.interpolation=bicubic"]
    datamodule = datamodule_of(resolved(*overrides, *settings))
    assert str(datamodule.train_transform()) == str(datamodule.eval_transform())
    assert "bicubic" in str(datamodule.train_transform()) and "(16, 16)" in str(datamodule.train_transform())


def test_an_image_folder_trains_with_the_fast_decode_and_the_same_samples_shape(folder):
    """data.decode=fast with an augmenting recipe: the training split crops while decoding (the rest of timm's
    pipeline after it), its samples have the exact path's shape and are reproducible by their seed; evaluation
    splits decode whole."""
    overrides = ["data=imagefolder", f"data.root={folder}", "data.image_size=16", "recipe=imagefolder"]
    exact = datamodule_of(resolved(*overrides))
    fast = datamodule_of(resolved(*overrides, "data.decode=fast"))
    for module in (exact, fast):
        module.setup("fit")
    assert exact.splits["train"].crop is None and fast.splits["train"].crop is not None
    assert fast.splits["test"].crop is None
    key = (0, 1234)
    sample, label = fast.splits["train"][key]
    assert sample.shape == exact.splits["train"][key][0].shape == (3, 16, 16) and label == exact.splits["train"][key][1]
    torch.testing.assert_close(fast.splits["train"][key][0], sample)  # the seed fixes the crop


def test_the_printed_training_command_quotes_paths_for_the_shell_and_hydra():
    """alternet shards prints the command that trains from the shards: it reads back as the paths it names."""
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from alternet.data.files.cli import _override

    for path in ["/data/imagenet", "one class", "sh ü", "it's"]:
        (argument,) = shlex.split(_override("data.root", path))
        assert OverridesParser.create().parse_override(argument).value() == path


def test_any_file_name_is_listed_and_read_and_hidden_files_are_left_out(tmp_path):
    """Class and file names beyond ASCII (stored as the file system encodes them: the listing once raised
    UnicodeEncodeError); macOS's ._NAME resource forks and hidden folders inside a class are not images."""
    root = tmp_path / "data" / "train"
    for name, colour in (("ünï", (200, 0, 0)), ("猫 cat", (0, 200, 0))):
        (root / name).mkdir(parents=True)
        Image.new("RGB", (8, 8), colour).save(root / name / "café.png")
    (root / "ünï" / "._café.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (root / "ünï" / ".ipynb_checkpoints").mkdir()
    Image.new("RGB", (8, 8)).save(root / "ünï" / ".ipynb_checkpoints" / "copy.png")
    files = scan_split(root)
    assert len(files) == 2 and [path.parent.name for path, _, _ in (files[0], files[1])] == ["ünï", "猫 cat"]
    assert decode_rgb(files[1][0]).getpixel((0, 0)) == (0, 200, 0)
    written = write_shards(root.parent, tmp_path / "shards", num_workers=1)
    assert written["images"] == 2


def test_a_shards_run_stopped_inside_an_epoch_resumes_there_in_one_process(tmp_path, image_folder, image_shards):
    """data.num_workers=0: LitData left a restored epoch open when Lightning stopped at the loader's length, and the
    next epoch trained no step (200 of 300 steps, and a run that "finished"). Stopped by max_steps at step 4 of 10,
    the resumed run ends with the uninterrupted run's weights."""
    from helpers.models import assert_same_weights

    common = [
        "data=imagefolder", f"data.root={image_folder}", f"data.train_shards={image_shards}", "data.image_size=16",
        "data.num_workers=0", "recipe.batch_size=4", "trainer.max_epochs=2", "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1", "trainer.enable_progress_bar=false",
    ]  # fmt: skip
    whole = train(compose_train(*common, output_dir=tmp_path / "whole"))
    train(compose_train(*common, "trainer.max_steps=4", output_dir=tmp_path / "cut"))
    resumed = train(compose_train(*common, "ckpt_path=last", output_dir=tmp_path / "cut"))
    assert resumed.global_step == whole.global_step == 20
    assert whole.train_images == shard_images(image_shards) == 40  # the shards' count (not LitData's stream length)
    weights = [torch.load(run.last_checkpoint, weights_only=True)["state_dict"] for run in (whole, resumed)]
    assert_same_weights(*weights)


def test_a_shards_run_resumes_from_moved_shards_and_refuses_other_ones(tmp_path, image_folder, image_shards):
    """Stopped inside an epoch: the same shards at another path (a copy, another mount) crashed in LitData's state
    check; shards written again silently repeated and skipped images; the image folders in their place (or back)
    raised a bare KeyError."""
    common = [
        "data=imagefolder", f"data.root={image_folder}", "data.image_size=16", "data.num_workers=0",
        "recipe.batch_size=4", "trainer.max_epochs=1", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
        "trainer.enable_progress_bar=false",
    ]  # fmt: skip
    train(compose_train(*common, f"data.train_shards={image_shards}", "trainer.max_steps=4", output_dir=tmp_path))
    resume = [*common, "ckpt_path=last"]
    with pytest.raises(ConfigValueError, match=r"with no data.train_shards where it was saved streaming"):
        train(compose_train(*resume, output_dir=tmp_path))
    rewritten = tmp_path / "rewritten"
    write_shards(image_folder, rewritten, seed=1, num_workers=1)
    with pytest.raises(ConfigValueError, match=r"which hold other shards than the run stopped in \(their index.json"):
        train(compose_train(*resume, f"data.train_shards={rewritten}", output_dir=tmp_path))
    moved = tmp_path / "moved"
    shutil.copytree(image_shards, moved)
    resumed = train(compose_train(*resume, f"data.train_shards={moved}", output_dir=tmp_path))
    assert resumed.global_step == 10


@pytest.mark.slow  # two runs, ~8 s
def test_a_resume_that_reads_the_images_another_way_records_it(tmp_path, image_folder, capsys):
    """data.decode (or data.loader) changed on a resume: resumes.json recorded nothing changed."""
    common = [*FAST, "data=imagefolder", f"data.root={image_folder}", "data.image_size=16", "recipe.batch_size=4"]
    train(compose_train(*common, "trainer.max_steps=2", output_dir=tmp_path))
    train(compose_train(*common, "data.decode=fast", "ckpt_path=last", output_dir=tmp_path))
    assert json.loads((tmp_path / "resumes.json").read_text())[-1]["changed"] == {"data.decode": ["exact", "fast"]}
    assert "resuming with data.decode exact -> fast" in capsys.readouterr().err


def test_a_link_to_a_missing_image_says_so(tmp_path):
    """A dangling link is listed (its name is an image's) and cannot be read: its target is missing, not 'moved after
    the run listed it', and listing the folder again would not help."""
    link = tmp_path / "a.png"
    link.symlink_to(tmp_path / "nowhere.png")
    target = tmp_path / "nowhere.png"
    with pytest.raises(DataError, match=rf"^image {link} is a link to {target}, which does not exist"):
        decode_rgb(link)


def test_shards_written_before_the_folder_changed_are_said_to_be(tmp_path):
    """Validation, test and train_clean read the folder's files, training the shards: a folder grown or thinned since
    the shards were written trains on other images than it scores (the shards record how many they listed)."""
    root = make_image_folder(tmp_path / "data", per_class=4, splits={"train": 4, "test": 1}, odd_formats=False)
    shards = tmp_path / "shards"
    write_shards(root, shards, num_workers=1)
    data = ["data=imagefolder", f"data.root={root}", f"data.train_shards={shards}", "data.val_size=0"]
    config = data_config(resolved(*data)["data"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlternetWarning)
        build_datamodule(config, batch_size=4, seed=0).setup()  # as written: nothing said
    image = next((root / "train").rglob("*.JPEG"))
    image.rename(image.with_name("renamed.JPEG"))  # as many images, another listing (a move to val/ and back in)
    with pytest.warns(UserWarning, match=r"were written from 12 images of .* which holds other files \(moved"):
        build_datamodule(config, batch_size=4, seed=0).setup()
    shutil.copy(image.with_name("renamed.JPEG"), image.with_name("added.JPEG"))
    with pytest.warns(UserWarning, match=r"were written from 12 images of .* which holds 13 images now: .* NEW_DIR"):
        build_datamodule(config, batch_size=4, seed=0).setup()


def test_an_evaluation_draws_the_hold_out_again_only_from_the_listing_it_was_drawn_from(tmp_path, monkeypatch, capsys):
    """A folder without val/ or test/ is validated and tested on a seeded hold-out of train/: grown since training,
    the hold-out evaluate drew again held images the model trained on, and it said nothing."""
    root = make_image_folder(tmp_path / "data", per_class=12, odd_formats=False)
    run = [*FAST, "data=imagefolder", f"data.root={root}", "data.image_size=16", "data.num_workers=0"]
    summary = train(compose_train(*run, "recipe.batch_size=8", "data.val_size=0.25", output_dir=tmp_path / "run"))
    listing = torch.load(summary.last_checkpoint, weights_only=True)["hyper_parameters"]["data"]["train_listing"]
    assert len(listing) == 16
    evaluated = [f"ckpt={summary.run_dir}", "robustness.enabled=false"]
    code, stderr = run_main("evaluate.py", [*evaluated, f"hydra.run.dir={tmp_path}/e1"], monkeypatch, capsys)
    assert code == "0", stderr[-2000:]
    image = next((root / "train").rglob("*.JPEG"))
    shutil.copy(image, image.with_name("added.JPEG"))
    code, _ = run_main("evaluate.py", [*evaluated, f"hydra.run.dir={tmp_path}/e2"], monkeypatch, capsys)
    assert code.startswith("error: ") and "lists other images than when" in code and "\n" not in code.strip()
    assert not (tmp_path / "e2" / "metrics.json").exists()
    exported = export(summary.run_dir, tmp_path / "export")  # an export draws it from the same listing only
    code, _ = run_main(
        "evaluate.py", [f"ckpt={exported}", f"data_root={root}", f"hydra.run.dir={tmp_path}/e4"], monkeypatch, capsys
    )
    assert "lists other images than when" in code
    image.with_name("added.JPEG").unlink()  # as it was: a temperature would be fitted on the images it scores
    scaled = [*evaluated, "calibration.temperature_scaling=true", f"hydra.run.dir={tmp_path}/e3"]
    code, _ = run_main("evaluate.py", scaled, monkeypatch, capsys)
    assert code.startswith("error: calibration.temperature_scaling fits the temperature on the validation split")
    make_image_folder(root, per_class=2, splits={"test": 2}, odd_formats=False)  # a test/ folder of its own
    shutil.copy(image, image.with_name("added.JPEG"))  # train/ changed: its hold-out is not read, test/ alone
    code, _ = run_main("evaluate.py", [*evaluated, f"hydra.run.dir={tmp_path}/e5"], monkeypatch, capsys)
    assert code == "0", code


def test_shards_missing_a_chunk_are_refused_when_opened(image_shards, tmp_path):
    """A chunk gone (or cut short) was found mid-epoch, in LitData's 137-line ChunkWaitTimeoutError."""
    from alternet.data.files.shards import StreamingImages

    shards = Path(shutil.copytree(image_shards, tmp_path / "shards"))
    chunk = sorted(shards.glob("chunk-*.bin"))[1]
    chunk.unlink()
    with pytest.raises(DataError, match=rf"lacks {chunk.name} \(missing, or of another size .*alternet shards$"):
        StreamingImages(shards, lambda image: image, seed=0)


def test_a_folder_whose_test_is_its_validation_tests_its_last_checkpoint(tmp_path, image_folder, capsys):
    """No test/: the test split is val/, on which the best checkpoint is chosen; testing that one reported a test
    score selected on the test images (ImageNet's val/ too)."""
    from alternet.runs.checkpoint_files import select_checkpoint
    from alternet.runs.directories import RunDir

    common = [*FAST, "data=imagefolder", f"data.root={image_folder}", "data.image_size=16", "recipe.batch_size=4"]
    summary = train(compose_train(*common, output_dir=tmp_path))
    assert summary.best_checkpoint and summary.tested_checkpoint == summary.last_checkpoint
    assert summary.test_split == "validation"  # what the card's model-index says the numbers are of
    assert select_checkpoint(RunDir(tmp_path)) == Path(summary.last_checkpoint)  # what evaluate and export take
    assert "Test (last.ckpt: its test images are its validation images, on which the best was chosen" in (
        capsys.readouterr().out
    )
