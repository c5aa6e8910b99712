"""Data modules: splits, deterministic sharded sampling, real CIFAR-100, and the errors users see."""

import logging
import shutil
import threading
import time
from pathlib import Path
from urllib.error import URLError

import numpy as np
import pytest
import torch
import torchvision.datasets.cifar
import yaml
from torch.utils.data import DataLoader

from alternet.data import DATAMODULES, CIFAR100DataModule, DigitsDataModule, EpochSampler
from alternet.data.arrays.cifar import DOWNLOAD_LOCK
from alternet.errors import ConfigValueError, DataError
from alternet.files import lock_file

from helpers import CONF

AUGMENT = {"crop_padding": 2, "hflip": True}


def digits(**kwargs) -> DigitsDataModule:
    module = DigitsDataModule(**({"image_size": 16, "val_size": 180, "batch_size": 32} | kwargs))
    module.setup()
    return module


def test_digits_split_is_fixed_and_independent_of_the_training_seed():
    a, b = digits(seed=0), digits(seed=123)
    assert {k: len(v) for k, v in a.splits.items()} == {"train": 1257, "val": 180, "test": 360}
    for split in a.splits:
        np.testing.assert_array_equal(a.splits[split].labels, b.splits[split].labels)
    assert np.bincount(a.splits["test"].labels).min() >= 35  # stratified: ~36 per class
    image = a.splits["train"].images[0]
    assert image.shape == (16, 16, 3) and image.dtype == np.uint8


def test_validation_split_size_is_checked_with_the_key():
    with pytest.raises(ConfigValueError, match=r"data.val_size=5000 is not smaller than the 1437 training images"):
        digits(val_size=5000)
    assert "val" not in digits(val_size=0).splits
    for fraction, held in [(0.0003, 0), (0.9999, 1437)]:  # a fraction holding out no image, or every one
        with pytest.raises(ConfigValueError, match=rf"data.val_size={fraction} holds out {held} of the 1437 training"):
            digits(val_size=fraction)


def test_epoch_sampler_is_a_function_of_seed_and_epoch():
    sampler = EpochSampler(100, seed=3, shuffle=True)
    first, again = list(sampler), list(sampler)
    assert first == again
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert sorted(i for i, _ in first) == list(range(100))


def test_epoch_sampler_keys_carry_each_samples_own_augmentation_seed():
    """The epoch's seeds are derived at once (alternet.seeds.derive_seeds) and equal the per-sample derivation, for
    every rank, a repeated subset's later passes and a resumed epoch's remainder."""
    from alternet.seeds import derive_seed

    sampler = EpochSampler(10, seed=5, shuffle=True, rank=1, world_size=2, draws=35)
    sampler.set_epoch(4)
    sampler.skip = 3
    keys = list(sampler)
    positions = range(1, 34, 2)[3:]  # rank 1's positions in the epoch's 34 draws, the first 3 skipped
    assert len(keys) == len(positions) == 14
    for (index, seed), position in zip(keys, positions, strict=True):
        suffix = (position // 10,) if position >= 10 else ()
        assert type(index) is int and seed == derive_seed(5, "augment", 4, index, *suffix)


def test_epoch_sampler_shards_are_disjoint_and_equal():
    shards = [list(EpochSampler(103, seed=0, shuffle=True, rank=r, world_size=2)) for r in range(2)]
    indices = [{i for i, _ in shard} for shard in shards]
    assert len(shards[0]) == len(shards[1]) == 51
    assert not indices[0] & indices[1]
    evaluation = [list(EpochSampler(103, seed=0, shuffle=False, rank=r, world_size=2)) for r in range(2)]
    assert sorted(evaluation[0] + evaluation[1]) == list(range(103))


def test_augmented_batches_do_not_depend_on_the_number_of_workers():
    module = digits(augment=AUGMENT)
    dataset = module.splits["train"]

    def batches(workers: int) -> list[torch.Tensor]:
        loader = DataLoader(
            dataset, batch_size=64, sampler=EpochSampler(len(dataset), 0, shuffle=True), num_workers=workers
        )
        return [x for x, _ in loader][:3]

    serial, parallel = batches(0), batches(2)
    for a, b in zip(serial, parallel):
        torch.testing.assert_close(a, b)
    plain = module.splits["train"].transform(image=dataset.images[0])["image"]
    assert plain.shape == (3, 16, 16)


def test_real_cifar100_loads_and_verifies(cifar100_root):
    module = CIFAR100DataModule(root=str(cifar100_root), val_size=5000, batch_size=16)
    module.setup()
    assert {k: len(v) for k, v in module.splits.items()} == {"train": 45000, "val": 5000, "test": 10000}
    train = module.splits["train"]
    assert train.images.shape[1:] == (32, 32, 3) and train.images.dtype == np.uint8
    assert set(np.unique(module.splits["test"].labels)) == set(range(100))
    assert len(module.class_names) == 100 and module.class_names[0] == "apple"
    images, labels = next(iter(module.train_dataloader()))
    assert images.shape == (16, 3, 32, 32) and labels.max() < 100


def test_missing_cifar_says_where_it_looked_and_how_to_fix(tmp_path):
    module = CIFAR100DataModule(root=str(tmp_path))
    with pytest.raises(DataError) as error:
        module.setup()
    message = str(error.value)
    assert str(tmp_path / "cifar-100-python") in message
    assert "['meta', 'test', 'train']" in message
    assert "data.root=" in message and "data.download=true" in message
    with pytest.raises(DataError, match=r"meta does not exist: set data.root to the folder that holds cifar-100-py"):
        assert module.class_names  # what evaluation reads first, without the training split's check
    with pytest.raises(DataError, match=r"\(alternet evaluate: data_root=DIR\), or data.download=true to fetch it"):
        module.load_split(train=False)


def test_corrupt_cifar_is_detected_by_md5(cifar100_root, tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for name in ("train", "test"):
        (folder / name).symlink_to(cifar100_root / "cifar-100-python" / name)
    shutil.copy(cifar100_root / "cifar-100-python" / "meta", folder / "meta")
    with open(folder / "meta", "r+b") as f:
        f.seek(100)
        f.write(b"\x00")
    with pytest.raises(
        DataError, match=r"meta is corrupt: md5 [0-9a-f]{32}, expected 7973b15100ade9c7d40fb424638fde48"
    ):
        CIFAR100DataModule(root=str(folder)).setup()  # the folder itself is accepted as root too


@pytest.mark.parametrize("name", ["digits", "cifar10", "cifar100"])
def test_a_data_module_built_directly_normalises_like_its_config(name):
    """Code that builds a DataModule itself (a notebook, a benchmark) gets the statistics training used."""
    config = yaml.safe_load((CONF / "data" / f"{name}.yaml").read_text())
    assert config["mean"] is None and config["std"] is None  # null: the DataModule's own statistics
    configured, direct = DATAMODULES[name](mean=config["mean"], std=config["std"]), DATAMODULES[name]()
    assert (configured.mean, configured.std) == (direct.mean, direct.std)


def test_download_without_network_names_the_archive_and_what_to_do(tmp_path, monkeypatch):
    def unreachable(*args, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", unreachable)
    datamodule = CIFAR100DataModule(root=str(tmp_path), download=True)
    with pytest.raises(
        DataError, match=r"cannot download cifar100 \(https://www\.cs\.toronto\.edu/.*\) to .*: .*name resolution"
    ):
        datamodule.prepare_data()


def test_download_fetches_before_the_first_read_once_and_one_process_at_a_time(
    cifar100_root, tmp_path, monkeypatch, caplog
):
    """data.download=true: the archive is fetched before the checks that precede training read the files (they
    refused, "set data.download=true", before Lightning's own prepare_data ran), and before an evaluation reads the
    class names; a second process waits for the first (the lock in data.root), then finds the files whole."""
    fetched = []

    def served(url, root, **kwargs):  # the archive, unpacked as torchvision unpacks it (the real files, linked)
        fetched.append(root)
        (Path(root) / "cifar-100-python").mkdir()
        for name in ("meta", "train", "test"):
            (Path(root) / "cifar-100-python" / name).symlink_to(cifar100_root / "cifar-100-python" / name)

    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", served)
    module = CIFAR100DataModule(root=str(tmp_path / "train"), download=True)
    module.check_before_fit()  # what training runs before the Trainer starts
    assert fetched == [str(tmp_path / "train")] and len(module.splits["test"]) == 10000
    assert len(CIFAR100DataModule(root=str(tmp_path / "evaluate"), download=True).class_names) == 100

    (tmp_path / "train" / DOWNLOAD_LOCK).unlink()
    CIFAR100DataModule(root=str(tmp_path / "train"), download=True).prepare_data()  # the files there: no lock taken
    assert not (tmp_path / "train" / DOWNLOAD_LOCK).exists() and len(fetched) == 2

    (tmp_path / "third").mkdir()
    holder = lock_file(tmp_path / "third" / DOWNLOAD_LOCK)  # another process downloading
    waiting = threading.Thread(target=CIFAR100DataModule(root=str(tmp_path / "third"), download=True).prepare_data)
    with caplog.at_level(logging.WARNING, logger="alternet.data.arrays.cifar"):
        waiting.start()
        deadline = time.monotonic() + 30
        while "is being downloaded into" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waiting.is_alive() and len(fetched) == 2  # waiting, not downloading
        holder.close()
        waiting.join(30)
    assert not waiting.is_alive() and len(fetched) == 3


def test_a_split_that_leaves_a_class_without_training_images_is_refused_naming_it(tmp_path):
    """data.subset (or a validation hold-out) that leaves whole classes with no training image: refused in one line
    naming them, before any work (the model could never learn them, and would be scored as if it could)."""
    from alternet.data import ImageFolderDataModule

    from helpers.imagefolders import make_image_folder

    digits = DigitsDataModule(image_size=16, batch_size=4, subset=0.004)  # 6 of 1,437 images for 10 classes
    says = r"^digits: 4 of 10 classes have no training image left \(0, 3, 6, 9\)"
    with pytest.raises(DataError, match=says) as refused:
        digits.setup()
    assert "data.subset=0.004" in str(refused.value) and "\n" not in str(refused.value)
    folder = make_image_folder(tmp_path / "images", splits={"train": 2, "val": 1}, odd_formats=False)
    images = ImageFolderDataModule(root=str(folder), image_size=16, batch_size=2, subset=0.4)  # 2 of 6 images
    with pytest.raises(DataError, match=r"^imagefolder: 1 of 3 classes have no training image left \((ant|bee|cat)\)"):
        images.setup()


def test_the_schemas_table_of_sections_is_the_registrys():
    """data.name types its section from a torch-free table (the command line's help imports no torch); each data
    set's entry is its DataModule's settings, and registering a user's data module adds its own."""
    from alternet.data import ImageDataModule, register_datamodule
    from alternet.data.config import DATA_SECTIONS, FolderDataConfig
    from alternet.data.registry import DATAMODULES

    assert {name: cls.settings for name, cls in DATAMODULES.items()} == DATA_SECTIONS

    class Mine(ImageDataModule):
        name = "mine_for_the_table_test"
        settings = FolderDataConfig

    try:
        register_datamodule(Mine)
        assert DATA_SECTIONS["mine_for_the_table_test"] is FolderDataConfig
    finally:
        DATAMODULES.pop("mine_for_the_table_test", None)
        DATA_SECTIONS.pop("mine_for_the_table_test", None)


def test_the_digits_test_split_is_the_same_whatever_split_seed():
    """data.split_seed draws the validation split; a sweep over it must score every run on the same test images."""
    first, other = (DigitsDataModule(image_size=8, val_size=100, split_seed=seed) for seed in (0, 3))
    first.setup(), other.setup()
    np.testing.assert_array_equal(first.splits["test"].images, other.splits["test"].images)
    assert not np.array_equal(first.splits["val"].images, other.splits["val"].images)


def _blobs(images: np.ndarray, labels: np.ndarray, test: tuple | None = None, mean=(0.5,) * 3):
    """A user's in-memory data set (docs/training.md) whose load_split gives these arrays."""
    from alternet.data import ArrayDataModule

    class Blobs(ArrayDataModule):
        name, num_classes = "blobs", 3
        default_mean, default_std = mean, (0.25,) * 3

        def load_split(self, train):
            return (images, labels) if train or test is None else test

    return Blobs(image_size=16, batch_size=4)


GOOD = (np.zeros((12, 16, 16, 3), np.uint8), np.arange(12) % 3)


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (
            (GOOD[0].astype(np.float32) / 255, GOOD[1]),
            r"float32 images of shape \(12, 16, 16, 3\); it must give uint8",
        ),
        ((GOOD[0].transpose(0, 3, 1, 2), GOOD[1]), r"uint8 images of shape \(12, 3, 16, 16\)"),
        ((GOOD[0][..., 0], GOOD[1]), r"uint8 images of shape \(12, 16, 16\)"),
        ((GOOD[0], GOOD[1] + 1), r"labels in \[1, 3\]; they must lie in \[0, 2\] for its 3 classes"),
        ((GOOD[0], GOOD[1] - 1), r"labels in \[-1, 1\]"),
        ((GOOD[0], GOOD[1] * 0.5), r"labels of shape \(12,\) and dtype float64"),
    ],
)
def test_what_a_users_load_split_gives_is_checked_before_any_work(arrays, message):
    """Float images were divided by 255 again and trained to chance in silence; the others failed mid-run in a
    traceback (or with advice about the validation hold-out)."""
    with pytest.raises(DataError, match=rf"^blobs: load_split\(train=True\) gave {message}"):
        _blobs(*arrays).setup()


def test_a_test_split_of_another_size_or_a_grey_mean_is_refused_before_any_work():
    small = (np.zeros((6, 12, 16, 3), np.uint8), np.arange(6) % 3)
    with pytest.raises(DataError, match=r"train=False\) gave 12x16 images where the training split's are 16x16"):
        _blobs(*GOOD, test=small).setup()
    with pytest.raises(DataError, match=r"^blobs: default_mean \(0.5,\) and default_std .* must be 3 values each"):
        _blobs(*GOOD, mean=(0.5,))
    _blobs(*GOOD, test=GOOD).setup()  # as documented: fine


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"std": (0, 0, 0)}, r"^data.std=\(0, 0, 0\) is invalid: must be 3 values in \(0, 1\]"),
        ({"std": (-1, -1, -1)}, r"^data.std=\(-1, -1, -1\) is invalid"),
        ({"std": (float("nan"),) * 3}, r"^data.std=\(nan, nan, nan\) is invalid"),
        ({"mean": (77.9,) * 3}, r"^data.mean=\(77.9, 77.9, 77.9\) is invalid: .*0-255 units: divide them by 255"),
        ({"mean": (0.3,)}, r"^data.mean=\(0.3,\) is invalid: must be 3 values"),
        ({"image_size": 0}, r"^data.image_size=0 is invalid: must be an integer >= 1"),
        ({"image_size": 8.5}, r"^data.image_size=8.5 is invalid"),
    ],
)
def test_a_data_module_built_in_python_checks_its_size_and_statistics_as_the_config_does(arguments, message):
    """A std of 0 made every image inf, a negative one flipped it, 0-255 statistics made it nearly constant (-0.95),
    in silence (a numpy RuntimeWarning at most); the sizes failed inside OpenCV's resize."""
    with pytest.raises(ConfigValueError, match=message):
        DigitsDataModule(**arguments)
    with pytest.raises(ConfigValueError, match=r"^blobs: default_mean=\(128, 128, 128\) is invalid"):
        _blobs(*GOOD, mean=(128,) * 3)


def test_a_loader_asked_for_before_setup_says_to_call_it():
    """A bare KeyError: 'train' from inside the sampler."""
    for loader in ("train_dataloader", "test_dataloader"):
        with pytest.raises(DataError, match=r"^digits: no (train|test) split to load \(it has not been set up\): call"):
            getattr(DigitsDataModule(image_size=8), loader)()


def test_each_process_needs_a_batch_of_its_share_and_an_image_of_every_evaluation_split():
    """Under DDP the batch was checked against the whole training split: 31 images a rank trained at batch 48,
    recorded as a global batch of 96 with its scaled learning rate; a validation split of one failed on every rank."""
    data = DigitsDataModule(image_size=8, batch_size=700, val_size=180)
    data.setup()
    data.check_world(1)
    with pytest.raises(ConfigValueError, match=r"recipe.batch_size=700 is larger than the 628 training images each of"):
        data.check_world(2)
    tiny = DigitsDataModule(image_size=8, batch_size=4, val_size=1)
    tiny.setup()
    with pytest.raises(ConfigValueError, match=r"^the val \(1\) split holds fewer images than the 2 processes"):
        tiny.check_world(2)
