"""The base every data set shares, whatever its images are (in-memory arrays: :mod:`alternet.data.arrays`; image
files: :mod:`alternet.data.files`): the loader settings, seeded validation hold-outs and ``data.subset`` /
``train_clean`` subsets, loaders whose order and augmentation are a pure function of (seed, epoch, index), sharded
over ranks, and the facts a checkpoint records about its data.

That property makes runs reproducible for any number of workers, and with the train loader's position saved in
every checkpoint (:class:`ResumableLoader`) a run resumed mid-epoch sees exactly the batches an uninterrupted run
would have seen.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset, Sampler

from ..dataset_facts import DataFacts
from ..errors import AlternetError, ConfigValueError, DataError, is_integer, one_line, require
from ..seeds import derive_seed, derive_seeds
from .augment import StackSection, stack_section
from .config import DataConfig, check_statistics, check_subset, check_val_size
from .workers import (
    MEASURED_BATCHES,
    BusyDataset,
    PlainLoader,
    StartsWorkersSafely,
    WorkerLedger,
    dead_worker_error,
    init_loader_worker,
    loader_workers,
    more_workers,
    node_share,
    spare_cores,
)


class EpochSampler(Sampler):
    """Deterministic per-epoch order, sharded over ``world_size`` ranks.

    Training (``shuffle=True``): a permutation seeded by (seed, epoch), truncated to a multiple of
    ``world_size`` so that ranks get disjoint, equally long shards; each key carries a per-sample
    augmentation seed. ``draws`` > ``size`` makes an epoch that many samples: passes over fresh permutations, each
    pass its own augmentation seeds (``data.subset_repeat``: a subset trained for the full split's steps).
    Evaluation (``shuffle=False``): indices in order, strided over ranks, nothing dropped.
    """

    def __init__(
        self, size: int, seed: int, *, shuffle: bool, rank: int = 0, world_size: int = 1, draws: int | None = None
    ):
        super().__init__()
        self.size, self.seed, self.shuffle = size, seed, shuffle
        self.draws = max(size, draws or 0) if shuffle else size
        self.rank, self.world_size = rank, world_size
        self.epoch = 0
        self.skip = 0  # samples of this epoch's shard to leave out: the part a resumed run has already seen

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        if self.shuffle:
            return self.draws // self.world_size
        return len(range(self.rank, self.size, self.world_size))

    def __iter__(self) -> Iterator[int | tuple[int, int]]:
        skip, self.skip = self.skip, 0
        if not self.shuffle:
            yield from range(self.rank + skip * self.world_size, self.size, self.world_size)
            return
        passes = range(-(-self.draws // self.size))  # ceil: enough passes over the split for the draws
        seeds = (derive_seed(self.seed, "order", self.epoch, *_of_pass(p)) for p in passes)
        order = torch.cat([torch.randperm(self.size, generator=torch.Generator().manual_seed(s)) for s in seeds])
        keys = order[: len(self) * self.world_size].numpy()
        positions = np.arange(len(keys))[self.rank :: self.world_size][skip:]
        indices, passes = keys[positions], positions // self.size
        seeds = np.empty(len(positions), dtype=np.uint32)  # the epoch's at once: derive_seed's, 200x sooner
        first = passes == 0
        seeds[first] = derive_seeds(self.seed, "augment", self.epoch, indices[first])
        if not first.all():
            seeds[~first] = derive_seeds(self.seed, "augment", self.epoch, indices[~first], passes[~first])
        yield from zip(indices.tolist(), seeds.tolist(), strict=True)


def _of_pass(pass_: int) -> tuple[int, ...]:
    """The seed-key suffix of a pass over a repeated subset: none for pass 0, which keeps a plain epoch's seeds."""
    return (pass_,) if pass_ else ()


class ResumableLoader(StartsWorkersSafely, DataLoader):
    """A DataLoader over an :class:`EpochSampler` that knows how many batches of the current epoch it delivered.

    Lightning saves :meth:`state_dict` in every checkpoint and hands it back through :meth:`load_state_dict` on
    resume, before the first iterator of the resumed epoch is created; that iterator then skips what was seen.

    With ``most_workers`` (``data.num_workers=auto``) it measures how long its consumer waited for batches each
    epoch and starts more workers for the next while that was more than a few percent (:func:`more_workers`): the
    fewest that keep up with the step, found by the step. Which batches it delivers does not depend on them.
    """

    sampler: EpochSampler

    def __init__(self, dataset: Dataset, *args: Any, most_workers: int | None = None, **kwargs: Any):
        super().__init__(BusyDataset(dataset) if most_workers else dataset, *args, **kwargs)
        self.most_workers = most_workers
        self.delivered = 0
        self._resume: dict[str, int] | None = None
        self._grown: int | None = None  # the workers from the next epoch on

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        skip = resume["batches"] if resume and resume["epoch"] == self.sampler.epoch else 0
        if skip >= len(self):  # saved at the epoch's last batch: the resumed run starts the next epoch
            skip = 0
        self.sampler.skip = skip * int(self.batch_size or 1)
        self.delivered = skip
        if self._grown is not None:
            if self._iterator is not None:  # persistent workers: new ones for this epoch
                self._iterator._shutdown_workers()
                self._iterator = None
            self.num_workers, self._grown = self._grown, None
        if self.most_workers:
            self.dataset.busy(1, 1)  # counted from here: a persistent worker's clock kept the last epoch's
        batches, waited, first, last = super().__iter__(), 0.0, None, len(self)
        while True:
            asked = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                break
            if first is None:  # the first batch waits for the workers to start, not for the step
                first = time.perf_counter()
            else:
                waited += time.perf_counter() - asked
            self.delivered += 1
            if self.delivered == last and self.most_workers and last - skip > MEASURED_BATCHES:
                self._grow(waited, time.perf_counter() - first)  # now: Lightning asks for no batch after the last
            yield batch

    def _grow(self, waited: float, seconds: float) -> None:
        """Run more workers from the next epoch on, when the step waited ``waited`` of this epoch's ``seconds`` for
        batches its workers could not make sooner."""
        share, busy = waited / seconds, self.dataset.busy(self.num_workers, seconds)
        workers = more_workers(self.num_workers, self.most_workers, share, busy)
        if workers == self.num_workers:
            return
        rank_zero_info(
            f"data.num_workers=auto: the training step waited for batches {share:.0%} of epoch {self.sampler.epoch} "
            f"with its {self.num_workers} loader workers busy {min(busy, 1):.0%} of it; {workers} workers from the "
            f"next epoch (at most {self.most_workers} here)"
        )
        self._grown = workers

    def state_dict(self) -> dict[str, int]:
        grown = {"workers": self._grown or self.num_workers} if self.most_workers else {}
        return {"epoch": self.sampler.epoch, "batches": self.delivered, "of": len(self)} | grown

    def one_batch_back(self, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` (:meth:`state_dict`'s) one batch earlier: a checkpoint written inside a step, before its batch
        trained (the non-finite guard's), resumes with that batch."""
        return state | {"batches": max(int(state["batches"]) - 1, 0)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume = {"epoch": int(state["epoch"]), "batches": int(state["batches"])}
        if self.most_workers and "workers" in state:  # what the run had grown to (none before 2026-11-29)
            self.num_workers = max(self.num_workers, min(int(state["workers"]), self.most_workers))


def split_size(val_size: int | float, pool: int) -> int:
    """How many of ``pool`` training images ``data.val_size`` (a count, or a fraction in (0, 1)) holds out."""
    check_val_size(val_size)
    if isinstance(val_size, float):
        held = round(val_size * pool)
        if 0 < held < pool:
            return held
        raise ConfigValueError(
            f"data.val_size={val_size:g} holds out {held} of the {pool} training images available; choose a "
            f"fraction that holds out at least one image and leaves one (or a count, e.g. data.val_size=1)"
        )
    if val_size >= pool:
        raise ConfigValueError(
            f"data.val_size={val_size} is not smaller than the {pool} training images available; "
            f"choose data.val_size < {pool} (0 disables validation)"
        )
    return int(val_size)


def stratified_holdout(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """A boolean mask of ``size`` samples held out, spread over the classes in proportion (seeded)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    # interleave classes: rank each sample within its class, then take the lowest ranks first
    ranks = np.empty(len(labels), dtype=np.float64)
    for label in np.unique(labels):
        members = order[labels[order] == label]
        ranks[members] = (np.arange(len(members)) + rng.random()) / len(members)
    mask = np.zeros(len(labels), dtype=bool)
    mask[np.argsort(ranks, kind="stable")[:size]] = True
    return mask


class ImageDataModule(L.LightningDataModule):
    """Base of all data sets: the loader settings, samplers and loaders, the validation sets, the ``data.subset`` and
    ``train_clean`` masks and the facts a checkpoint records. A family implements :meth:`setup` (filling
    :attr:`splits` with datasets whose keys may be ``(index, seed)``), :meth:`check_augment`,
    :meth:`train_transform` and :attr:`class_names`, and names its :attr:`augment_section`; a data set sets the class
    attributes."""

    name: ClassVar[str]
    augment_section: ClassVar[str]  # the section of recipe.augment this family reads (alternet.data.augment)
    settings: ClassVar[type[DataConfig]] = DataConfig  # the data section's keys: its keyword arguments (data.config)
    num_classes: ClassVar[int]
    default_mean: ClassVar[tuple[float, float, float]]  # the data set's per-channel statistics (0-1 pixels)
    default_std: ClassVar[tuple[float, float, float]]
    ledger: WorkerLedger | None = None  # what each loader worker reads (image files); arrays in memory need none
    IN_MEMORY = False  # arrays in memory (num_workers=auto: fewer workers than for image files)
    reads_files: ClassVar[bool] = True  # False: a data set bundled with a package (data.root is not used)

    def __init__(
        self,
        *,
        root: str = "data",
        image_size: int = 32,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        num_workers: int | str = 0,
        val_size: int | float = 0,
        split_seed: int = 0,
        seed: int = 0,
        augment: StackSection | Mapping[str, Any] | None = None,
        pin_memory: bool = False,
        persistent_workers: bool = True,
        download: bool = False,
        subset: float | None = None,
        subset_repeat: bool = False,
        train_clean_size: int = 0,
    ):
        super().__init__()
        eval_batch_size = batch_size if eval_batch_size is None else eval_batch_size  # null: the batch size
        for key, size in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
            require(f"recipe.{key}", size, lambda v: is_integer(v, 1), "must be an integer >= 1")
        self.auto_workers = num_workers in (None, "auto")
        num_workers = loader_workers(num_workers, key="data.num_workers", in_memory=self.IN_MEMORY)
        self.root = root
        require("data.image_size", image_size, lambda v: is_integer(v, 1), "must be an integer >= 1")
        self.image_size = image_size
        if len(self.default_mean) != 3 or len(self.default_std) != 3:  # a data set's own, as its class declares them
            raise DataError(
                f"{self.name}: default_mean {self.default_mean} and default_std {self.default_std} must be 3 values "
                "each, one per RGB channel (its images are RGB: a grey data set repeats its one value)"
            )
        check_statistics(
            mean=(f"{self.name}: default_mean", self.default_mean) if mean is None else ("data.mean", mean),
            std=(f"{self.name}: default_std", self.default_std) if std is None else ("data.std", std),
        )
        self.mean = tuple(self.default_mean if mean is None else mean)
        self.std = tuple(self.default_std if std is None else std)
        self.batch_size = int(batch_size)
        self.eval_batch_size = int(eval_batch_size)
        self.num_workers = num_workers
        self.val_size = val_size
        self.split_seed = split_seed
        self.seed = seed
        self.augment = stack_section(augment, self.augment_section)  # its family's section of recipe.augment
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self.persistent_workers = persistent_workers and num_workers > 0
        self.download = download
        check_subset(subset, subset_repeat, train_clean_size)  # before any data is read
        self.subset = subset
        self.subset_repeat = subset_repeat
        self._train_pool = 0  # training images before data.subset thins them (set by setup)
        self.train_clean_size = train_clean_size
        self.splits: dict[str, Dataset] = {}
        try:
            self.check_augment()
        except AlternetError:
            raise
        except (ValueError, AssertionError, KeyError) as error:  # a policy the builders refuse (timm asserts)
            raise ConfigValueError(f"recipe.augment.{self.augment_section}: {one_line(error)}") from None

    # to implement (each family) ---------------------------------------------------------------

    def check_augment(self) -> None:
        """Fail on an :attr:`augment` (this family's section of recipe.augment) that this data set's pipeline cannot
        honour, before any work starts."""
        raise NotImplementedError

    def train_transform(self) -> Any:
        """The training split's pipeline, augmenting by :attr:`augment`."""
        raise NotImplementedError

    @property
    def class_names(self) -> list[str]:
        """The class names, in label order."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        """Fill :attr:`splits` (``train``, ``test``; ``val`` and ``train_clean`` when asked for), once."""
        raise NotImplementedError

    # Lightning hooks ----------------------------------------------------------------------

    def train_dataloader(self) -> DataLoader:
        sampler = self._train_sampler()
        return self._loader("train", sampler, self.batch_size, drop_last=self._drop_last(len(sampler)))

    def val_dataloader(self) -> DataLoader | list:
        """One loader per :attr:`validation_sets` entry (the validation split, then the clean training subset)."""
        return [self._loader(s, self._sampler(s, shuffle=False), self.eval_batch_size) for s in self.validation_sets]

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", self._sampler("test", shuffle=False), self.eval_batch_size)

    @property
    def has_validation(self) -> bool:
        return bool(self.val_size)

    def _takes_from_train(self, key: str) -> bool:
        """Whether ``data.val_size`` or ``data.subset`` (``key``) took images from the training split."""
        return True

    @property
    def validation_sets(self) -> list[str]:
        """The splits Lightning's validation loop runs over each epoch, in dataloader order: ``val`` (when there is
        a validation split) and ``train_clean`` (``data.train_clean_size`` training images without augmentation:
        the clean training NLL that tells optimisation from regularisation)."""
        self.setup("fit")
        return [split for split in ("val", "train_clean") if split in self.splits]

    @property
    def runs_validation_loop(self) -> bool:
        return self.has_validation or self.train_clean_size > 0

    def _subset_mask(self, labels: np.ndarray) -> np.ndarray:
        """The ``data.subset`` fraction of the training split, seeded by ``data.split_seed`` and stratified by
        class, so every model of a data-regime sweep sees the same images."""
        if self.subset is None:
            return np.ones(len(labels), dtype=bool)
        kept = max(1, round(self.subset * len(labels)))  # data.subset: a fraction of the training images
        return stratified_holdout(labels, kept, self.split_seed + 1)

    def check_every_class_trains(self, labels: np.ndarray) -> None:
        """Every class keeps a training image after the validation hold-out and ``data.subset``: a class with none
        can never be learnt, and would be scored as if it could (one line before any work)."""
        missing = np.setdiff1d(np.arange(self.num_classes), np.unique(labels))
        if not len(missing):
            return
        names = ", ".join([str(self.class_names[i]) for i in missing[:5]] + (["..."] if len(missing) > 5 else []))
        raise DataError(
            f"{self.name}: {len(missing)} of {self.num_classes} classes have no training image left ({names}) "
            f"after the validation hold-out (data.val_size={self.val_size}) and data.subset={self.subset}: the model "
            "could never learn them; add training images, or lower data.val_size or raise data.subset"
        )

    def _train_clean_mask(self, labels: np.ndarray) -> np.ndarray:
        """A fixed, class-stratified subset of the training split (``data.train_clean_size`` images at most)."""
        return stratified_holdout(labels, min(self.train_clean_size, len(labels)), self.split_seed + 2)

    def check_before_fit(self) -> None:
        """The data set up and checked before the Trainer starts (a split too small, an empty class: refused before
        any of Lightning's output), and a batch the training split can fill: the learning rate follows the recipe's
        batch size (``recipe.lr_scale_batch``), so a larger batch trains at a rate scaled for images that are not
        there (recipe.batch_size=100000000 on 1,257 images: lr 3125, NaN weights, and a run that "finished")."""
        self.setup("fit")
        self.check_batch(len(self.splits["train"]))

    def check_batch(self, images: int) -> None:
        """A batch the training split's ``images`` can fill (:meth:`check_before_fit`)."""
        if self.batch_size > images:
            held = [key for key in ("val_size", "subset") if getattr(self, key) and self._takes_from_train(key)]
            after = " and ".join(f"data.{key}={getattr(self, key)}" for key in held)
            room = "val_size" in held and self.batch_size <= images + len(self.splits.get("val") or ())  # less held
            instead = ", or raise data.subset" if "subset" in held else ", or lower data.val_size" if room else ""
            raise ConfigValueError(
                f"recipe.batch_size={self.batch_size} is larger than the {images} training images"
                f"{f' left after {after}' if held else ''}: the learning rate is scaled for {self.batch_size} images "
                f"a step; choose recipe.batch_size <= {images}{instead}"
            )

    def check_world(self, world: int) -> None:
        """With ``world`` processes (known once the Trainer is): each one's share of the training split fills a
        batch, and every evaluation split gives each one an image. A batch larger than a share trained on fewer
        images than the learning rate was scaled for (and recorded as the global batch); a split smaller than the
        processes failed on every rank in a traceback, after training where it was the test split."""
        if world <= 1:
            return
        images = self.train_images()
        if images is not None and self.batch_size > images // world:
            raise ConfigValueError(
                f"recipe.batch_size={self.batch_size} is larger than the {images // world} training images each of the "
                f"{world} processes gets ({images} in all): the learning rate is scaled for {self.batch_size} images "
                f"a step on each; choose recipe.batch_size <= {images // world}, or fewer processes"
            )
        small = [
            f"{name} ({len(split)})" for name, split in self.splits.items() if name != "train" and len(split) < world
        ]
        if small:
            raise ConfigValueError(
                f"the {', '.join(small)} split{'s' * (len(small) > 1)} hold{'s' * (len(small) == 1)} fewer images than "
                f"the {world} processes, each of which scores its share: give it at least {world} (data.val_size, "
                "data.train_clean_size, a larger test/ folder), or train on fewer processes"
            )

    def train_images(self) -> int | None:
        """How many images the training split holds (None where it is not known before training)."""
        return len(self.splits["train"])

    def train_batches(self) -> int:
        """Batches per epoch on this rank, known without building a loader: the learning-rate schedule needs it
        before a resumed run restores the loader's position (building the loader first would drop it, Lightning
        issue #20550)."""
        self.setup("fit")
        per_rank = len(self._sampler("train", shuffle=True))
        return per_rank // self.batch_size if self._drop_last(per_rank) else -(-per_rank // self.batch_size)

    @property
    def holds_out_of_train(self) -> bool:
        """Validation is a seeded hold-out drawn from a listing of files that may change (an image folder's)."""
        return False

    @property
    def test_is_validation(self) -> bool:
        """The test split is the validation split (an image folder without test/)."""
        return False

    @property
    def skipped_images(self) -> int | None:
        """Unreadable images skipped so far, where they are skipped (``data.skip_corrupt``); None elsewhere."""
        return None

    @contextlib.contextmanager
    def dead_workers_named(self) -> Iterator[None]:
        """Around training, testing or scoring with this module's data: a loader worker that dies is reported by
        the sample it was reading, in one line, instead of torch's ``DataLoader worker (pid N) is killed``."""
        try:
            yield
        except (RuntimeError, TypeError) as error:
            # torch's report arrives by SIGCHLD wherever the main process is: inside inspect (Lightning's self.log
            # reads a signature) it came out as TypeError('unsupported callable') raised from it
            cause = error if isinstance(error, RuntimeError) else error.__cause__
            named = dead_worker_error(cause, self.ledger) if isinstance(cause, RuntimeError) else None
            if named is None:
                raise
            raise named from None

    # helpers ------------------------------------------------------------------------------

    def _drop_last(self, per_rank: int) -> bool:
        return per_rank > self.batch_size

    def _train_sampler(self) -> EpochSampler:
        sampler = self._sampler("train", shuffle=True)
        # Lightning sets the epoch only after creating the first iterator of a resumed run.
        sampler.set_epoch(self.trainer.current_epoch if self.trainer is not None else 0)
        return sampler

    def _sampler(self, split: str, shuffle: bool) -> EpochSampler:
        if split not in self.splits:  # a data module used in Python before its setup (Lightning calls it)
            done = f"it holds {', '.join(self.splits)}" if self.splits else "it has not been set up"
            raise DataError(f"{self.name}: no {split} split to load ({done}): call setup() first, which reads them")
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)
        draws = self._train_pool if split == "train" and self.subset_repeat else None
        return EpochSampler(
            len(self.splits[split]), self.seed, shuffle=shuffle, rank=rank, world_size=world, draws=draws
        )

    def _loader(self, split: str, sampler: EpochSampler, batch_size: int, drop_last: bool = False) -> DataLoader:
        workers, most = self.worker_counts()
        grows = {"most_workers": most} if sampler.shuffle and self.grows_workers else {}  # the training loader
        loader = (ResumableLoader if sampler.shuffle else PlainLoader)(
            self.splits[split],
            batch_size=batch_size,
            sampler=sampler,
            drop_last=drop_last,
            num_workers=workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers,
            worker_init_fn=init_loader_worker,
            **grows,
        )
        return self.on_node(loader)

    def worker_counts(self) -> tuple[int, int]:
        """(the workers a loader of this rank starts with, the most ``auto`` grows to): ``auto`` stays within this
        rank's share of the machine's cores (:func:`node_share`), beside its main process."""
        most = spare_cores(node_share(*self._ranks_on_node()))
        return (min(self.num_workers, most) if self.auto_workers else self.num_workers), most

    def on_node(self, loader: StartsWorkersSafely) -> Any:
        """``loader``, its workers to run on this rank's share of the machine's cores."""
        loader.ranks_on_node = self._ranks_on_node()
        return loader

    def _ranks_on_node(self) -> tuple[int, int]:
        return (self.trainer.local_rank, self.trainer.num_devices) if self.trainer is not None else (0, 1)

    def facts(self) -> DataFacts:
        """What a model trained on this data must know, saved with its checkpoints: the data set's name, class
        count and names, image size and normalisation (the data set's own statistics unless the config overrides
        them)."""
        names = None
        with contextlib.suppress(DataError):  # absent when the files are not here yet (a model built before download)
            names = tuple(str(name) for name in self.class_names)
        mean, std = tuple(float(v) for v in self.mean), tuple(float(v) for v in self.std)
        return DataFacts(self.name, self.num_classes, self.image_size, mean, std, names)

    def describe(self) -> str:
        """The start banner's data line: the data set, its splits, where training reads from and its loader."""
        sizes = ", ".join(f"{k} {self._split_size(k, v)}" for k, v in self.splits.items())
        workers, most = self.worker_counts()
        loader = f"{workers} loader worker{'s' * (workers != 1)}" if workers else "loaded in the training process"
        if self.grows_workers and most > workers:
            loader += f" (auto: up to {most} while the step waits for batches)"
        return f"{self.name}: {self.num_classes} classes, {self.image_size}px ({sizes}){self._read_from()}; {loader}"

    def _split_size(self, name: str, split: Any) -> int:
        """A split's image count (the training images' as :meth:`train_images` counts them: a stream's length is
        its batches' images, the short last batch dropped)."""
        return (self.train_images() or len(split)) if name == "train" else len(split)

    def _read_from(self) -> str:
        """Where training reads from, when not the data set's own files (streamed shards)."""
        return ""

    @property
    def grows_workers(self) -> bool:
        """The training loader grows its workers while the step waits (``data.num_workers=auto``)."""
        return self.auto_workers
