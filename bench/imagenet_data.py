"""ImageNet-style train pipeline throughput, per loader worker: the library's image-folder and shards paths side by
side with timm's ``create_loader`` on the same folder, in one run; the cost split of one sample; and the memory of
holding ImageNet's 1.28 M-entry file list.

* Data: a synthesized class folder of ``--images`` 500x375 JPEGs (quality 90, smooth multi-scale noise plus grain,
  ~90 KB each, so decoding costs what a real photo of that size costs) in ``--classes`` class folders, and LitData
  shards of it (``alternet.data.files.shards.write_shards``). With ``--root DIR`` both are written once and reused by
  later runs; without it they live in a temporary directory removed at exit.
* Loaders (the paper's ImageNet train pipeline: RandomResizedCrop 224 at random interpolation, flip, RandAugment
  ``rand-m9-n2-mstd0.5``, no colour jitter, normalise on the CPU, RandomErasing 0.25 per-pixel):

  - ``ours, folder``: ``build_datamodule(data=imagefolder, recipe=imagenet).train_dataloader()`` (its
    ``EpochSampler`` keys with per-sample augmentation seeds, ``DecodingDataset``, ``ResumableLoader``);
  - ``ours, shards``: the same data module with ``data.train_shards`` (``StreamingImages`` + LitData's loader);
  - ``ours, folder, data.loader=dali``: the same data module's DALI loader on DALI's CPU backend, ``data.num_workers``
    threads (with the ``alternet[dali]`` extra installed; no per-sample row: DALI runs whole batches);
  - ``timm``: ``timm.data.ImageDataset(train/)`` + ``timm.data.create_loader(..., is_training=True,
    use_prefetcher=False)`` with the same augmentation arguments (``use_prefetcher=False``: timm then normalises
    and erases on the CPU in the workers, as ours does, instead of on the GPU).

  Each loader runs one epoch with 1 and with 2 workers (``persistent_workers=False`` for all); the first
  2 x workers batches (worker start-up) are not timed, nor the last ``workers`` (the epoch's drain); rounds are
  interleaved (ours, shards, timm, ours, ...) and the median per configuration is reported. Beside them, each
  pipeline's dataset read one sample at a time in the main process (a worker's ceiling, no batching or transfer),
  plus, as a diagnostic, our folder dataset read with plain index keys (no per-sample seeding).
* Cost split: one process, one core: decoding (``alternet.data.files.images.decode_rgb`` of the file) against each step
  of the train transform on the decoded image, and the per-sample seeding.
* Memory: 1,281,167 synthesized ImageNet-like relative paths (``n01440764/n01440764_10026.JPEG``, 1000 classes) as
  a :class:`alternet.data.files.images.FileList` against torchvision's / timm's list of ``(absolute path str, int)``
  tuples, each in a fresh process: VmRSS growth once built (temporaries deleted), peak (VmHWM) growth, and the
  copy-on-write growth of a forked worker that reads every entry (Private_Dirty of the child).

Timing goes through ``bench/harness.py`` (header first, rows recorded to ``bench/results`` unless ``--no-record``):
the one-process per-sample reads are cases of its ``interleave``; the loader epochs keep their own clock, started
after the workers' start-up batches inside each epoch (a whole-call timing would include the start-up), in the same
interleaved order; the cost split times the steps inside one sample's pipeline, each feeding the next, so it is
not a repeated callable either; the memory probes run in child processes.

    python -m bench.imagenet_data [--images 2000] [--root DIR] [--rounds 3] [--batch-size 64] [--no-record]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # before albumentations is imported

import numpy as np
import PIL
import torch
from omegaconf import OmegaConf
from PIL import Image

from .harness import add_harness_arguments, begin, finish, interleave, row, summarise, summary_row

CONF = Path(__file__).resolve().parents[1] / "conf"
HEIGHT, WIDTH = 375, 500  # ImageNet's typical photo
LARGE = (900, 1200)  # --large-share of the images at this (height, width): the larger photos of ImageNet's mix
SYNTH_FILE = "synthesized.json"
IMAGENET_TRAIN = 1_281_167


# data ---------------------------------------------------------------------------------------------------------


def _photo(rng: np.random.Generator, grain: np.ndarray, height: int = HEIGHT, width: int = WIDTH) -> Image.Image:
    """A ``width`` x ``height`` RGB image with structure at several scales and per-pixel grain (a photo-like JPEG
    size); ``grain`` at least twice each side."""
    layers = []
    for cells in (6, 24, 80):
        small = rng.integers(0, 256, (cells * 3 // 4 + 1, cells, 3), dtype=np.uint8)
        layers.append(np.asarray(Image.fromarray(small).resize((width, height), Image.BICUBIC), np.int16))
    y, x = rng.integers(0, height), rng.integers(0, width)
    image = (2 * layers[0] + layers[1] + layers[2]) // 4 + grain[y : y + height, x : x + width]
    return Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))


def synthesize(root: Path, images: int, classes: int, seed: int = 0, large_share: float = 0.0) -> dict[str, Any]:
    """``root/train/<class>/*.JPEG`` (``images`` in all; every ``1 / large_share``-th one at :data:`LARGE`, the
    others 500x375) and ``root/val/<class>/`` (one each); reused when ``root`` already holds the same synthesis."""
    spec = {"images": images, "classes": classes, "size": [WIDTH, HEIGHT], "quality": 90, "seed": seed}
    spec |= {"large": list(LARGE), "large_share": large_share} if large_share else {}
    marker = root / SYNTH_FILE
    if marker.is_file() and json.loads(marker.read_text()).get("spec") == spec:
        return json.loads(marker.read_text()) | {"reused": True}
    for sub in ("train", "val"):
        shutil.rmtree(root / sub, ignore_errors=True)
    shutil.rmtree(root.with_name(f"{root.name}-shards"), ignore_errors=True)  # shards of the synthesis before
    rng = np.random.default_rng(seed)
    grain = rng.normal(0, 14, (2 * LARGE[0], 2 * LARGE[1], 3)).astype(np.int16)
    every = round(1 / large_share) if large_share else 0
    start, total = time.perf_counter(), 0
    for c in range(classes):
        name = f"n{1440764 + 7919 * c:08d}"
        for split, count in (("train", len(range(c, images, classes))), ("val", 1)):
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                path = folder / f"{name}_{i:05d}.JPEG"
                size = LARGE if every and split == "train" and i % every == every - 1 else (HEIGHT, WIDTH)
                _photo(rng, grain, *size).save(path, format="JPEG", quality=90)
                total += path.stat().st_size if split == "train" else 0
    info = {"spec": spec, "mean_kb": total / images / 1e3, "seconds": time.perf_counter() - start}
    marker.write_text(json.dumps(info))
    return info


def shards_of(root: Path, chunk_bytes: str) -> Path:
    """LitData shards of ``root/train`` (written once per chunk size)."""
    from alternet.data.files.shards import write_shards

    out = root.with_name(f"{root.name}-shards") / chunk_bytes  # beside the data set: write_shards refuses inside
    if not (out / "index.json").is_file():
        shutil.rmtree(out, ignore_errors=True)
        write_shards(root, out, seed=0, chunk_bytes=chunk_bytes, num_workers=2)
    return out


# loaders --------------------------------------------------------------------------------------------------------


def packaged(group: str, name: str) -> dict[str, Any]:
    """A packaged config as its ``defaults: [_base, _self_]`` composes it (the defaults list itself left out)."""
    merged = OmegaConf.merge(OmegaConf.load(CONF / group / "_base.yaml"), OmegaConf.load(CONF / group / f"{name}.yaml"))
    merged.pop("defaults", None)
    return OmegaConf.to_container(merged)


def recipe() -> dict[str, Any]:
    return packaged("recipe", "imagenet")


def our_module(
    root: Path, workers: int, batch_size: int, shards: Path | None, decode: str = "exact", loader: str = "torch"
) -> Any:
    from alternet.data import build_datamodule, data_config

    data = packaged("data", "imagefolder")
    data |= {
        "root": str(root),
        "num_workers": workers,
        "pin_memory": False,
        "val_size": 0,
        "train_shards": str(shards) if shards else None,
        "decode": decode,
        "loader": loader,
    }
    module = build_datamodule(data_config(data), batch_size=batch_size, augment=recipe()["augment"], seed=0)
    module.persistent_workers = False  # each timed epoch starts its workers, as timm's loader does
    module.setup("fit")
    return module


def timm_loader(root: Path, workers: int, batch_size: int) -> torch.utils.data.DataLoader:
    """timm's own train loader with the recipe's augmentation (timm's create_loader arguments)."""
    from timm.data import ImageDataset, create_loader

    augment = recipe()["augment"]["files"]
    crop = augment["random_resized_crop"]
    return create_loader(
        ImageDataset(str(root / "train")),
        input_size=(3, 224, 224),
        batch_size=batch_size,
        is_training=True,
        no_aug=False,
        scale=tuple(crop["scale"]),
        ratio=tuple(crop["ratio"]),
        hflip=0.5,
        color_jitter=None,
        auto_augment=augment["randaugment"],
        interpolation=augment["interpolation"],
        re_prob=augment["random_erasing"],
        re_mode="pixel",
        re_count=1,
        num_workers=workers,
        use_prefetcher=False,
        pin_memory=False,
        persistent_workers=False,
        device=torch.device("cpu"),
    )


def loader_rate(loader: Iterable, workers: int) -> float:
    """Images per second over one epoch, leaving out start-up (2 x workers batches) and drain (workers batches)."""
    batches = len(loader)  # type: ignore[arg-type]
    warm, timed = 2 * workers, batches - 3 * workers
    if timed < 5:
        raise SystemExit(f"only {batches} batches per epoch: use more --images or a smaller --batch-size")
    iterator = iter(loader)
    for _ in range(warm):
        next(iterator)
    start, count = time.perf_counter(), 0
    for _ in range(timed):
        count += len(next(iterator)[0])
    elapsed = time.perf_counter() - start
    del iterator  # shuts the workers down
    return count / elapsed


def per_sample_pass(get: Callable[[int], Any], count: int) -> Callable[[], None]:
    """One process, one image at a time: a worker's ceiling (no batching or inter-process transfer). The first
    sample is read once up front."""
    get(0)

    def run() -> None:
        for i in range(1, count + 1):
            get(i)

    return run


UNSEEDED = "ours, folder, index keys (no per-sample seeding)"
FAST = "ours, folder, data.decode=fast"
DALI = "ours, folder, data.loader=dali (DALI's CPU backend, a thread per worker)"


def per_sample_getters(root: Path, shards: Path, batch_size: int) -> dict[str, Callable[[int], Any]]:
    """One sample at a time from each pipeline's dataset; the folder and timm read the same images."""
    from alternet.seeds import derive_seed

    folder = our_module(root, 0, batch_size, None).splits["train"]
    order = np.random.default_rng(1).permutation(len(folder))
    streaming_data = our_module(root, 0, batch_size, shards).splits["train"]
    streaming = iter(streaming_data)
    timm_data = timm_loader(root, 0, batch_size).dataset

    def next_record(_: int) -> Any:
        nonlocal streaming
        try:
            return next(streaming)
        except StopIteration:
            streaming = iter(streaming_data)
            return next(streaming)

    fast = our_module(root, 0, batch_size, None, decode="fast").splits["train"]
    return {
        "ours, folder": lambda i: folder[(int(order[i % len(order)]), derive_seed(0, "augment", 0, i))],
        FAST: lambda i: fast[(int(order[i % len(order)]), derive_seed(0, "augment", 0, i))],
        "ours, shards": next_record,
        "timm": lambda i: timm_data[int(order[i % len(order)])],
        UNSEEDED: lambda i: folder[int(order[i % len(order)])],
    }


# cost split -------------------------------------------------------------------------------------------------------


def cost_split(root: Path, count: int) -> list[tuple[str, float]]:
    """ms per image of decoding, seeding and each train-transform step, one process."""
    from alternet.data.files.images import decode_rgb
    from alternet.seeds import derive_seed, seed_generators

    module = our_module(root, 0, 64, None)
    files, transform = module.splits["train"].items, module.splits["train"].transform  # a FileList: (path, label, name)
    steps = list(transform.transforms)
    decode, derive, seed = "decode: decode_rgb (open, read, decode, RGB)", "seed: derive_seed", "seed: seed_generators"
    times = {decode: 0.0, derive: 0.0, seed: 0.0} | {f"augment: {type(step).__name__}": 0.0 for step in steps}
    torch_seed = 0.0  # part of seed_generators, timed again on its own
    decode_rgb(files[0][0])
    clock = time.perf_counter
    for i in range(count):
        t0 = clock()
        image = decode_rgb(files[i % len(files)][0])
        t1 = clock()
        sample_seed = derive_seed(0, "augment", 0, i)
        t2 = clock()
        seed_generators(sample_seed)
        t3 = clock()
        torch.manual_seed(sample_seed)
        torch_seed += clock() - t3
        times[decode] += t1 - t0
        times[derive] += t2 - t1
        times[seed] += t3 - t2
        for step in steps:
            t0 = clock()
            image = step(image)
            times[f"augment: {type(step).__name__}"] += clock() - t0
    return [(name, 1e3 * total / count) for name, total in times.items()] + [
        ("(of seed_generators: the torch generator alone)", 1e3 * torch_seed / count)
    ]


# memory ---------------------------------------------------------------------------------------------------------


def _status_kb(field: str, pid: str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _private_dirty_kb() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Private_Dirty:"):
            return int(line.split()[1])
    raise KeyError("Private_Dirty")


def _imagenet_names(rng: np.random.Generator) -> Iterable[tuple[str, str]]:
    """(wnid, file name) of 1,281,167 ImageNet-like training images in 1000 classes."""
    wnids = sorted({f"n{n:08d}" for n in rng.choice(np.arange(1_000_000, 15_000_000), 1000, replace=False)})
    numbers = rng.integers(1, 60_000, IMAGENET_TRAIN)
    for c, chunk in enumerate(np.array_split(numbers, 1000)):
        wnid = wnids[c]
        for number in chunk.tolist():
            yield wnid, f"{wnid}_{number}.JPEG"


def memory_probe(kind: str) -> dict[str, Any]:
    """Run in a fresh process: build the list, then measure (kB)."""
    from alternet.data.files.images import FileList

    gc.collect()
    base_rss, base_hwm = _status_kb("VmRSS"), _status_kb("VmHWM")
    rng = np.random.default_rng(0)
    if kind == "filelist":
        paths, labels, label = [], [], -1
        previous = None
        for wnid, name in _imagenet_names(rng):
            label += wnid != previous
            previous = wnid
            paths.append(f"{wnid}/{name}")
            labels.append(label)
        held: Any = FileList(Path("/data/imagenet/train"), np.array(paths, dtype=np.bytes_), np.array(labels, np.int64))
        del paths, labels
        nbytes = held.paths.nbytes + held.labels.nbytes

        def touch() -> None:
            for i in range(len(held)):
                _ = held.paths[i], held.labels[i]
    else:  # torchvision ImageFolder / timm ReaderImageFolder: samples [(absolute path, class index)] and targets
        class_to_idx: dict[str, int] = {}
        samples = []
        for wnid, name in _imagenet_names(rng):
            index = class_to_idx.setdefault(wnid, len(class_to_idx))
            samples.append((os.path.join("/data/imagenet/train", wnid, name), index))
        held = (samples, [s[1] for s in samples])
        nbytes = None

        def touch() -> None:
            for _path, _label in held[0]:
                pass

    gc.collect()
    rss, hwm = _status_kb("VmRSS"), _status_kb("VmHWM")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a loader worker reading every entry once
        before = _private_dirty_kb()
        touch()
        os.write(write, str(_private_dirty_kb() - before).encode())
        os._exit(0)
    os.close(write)
    cow = int(os.read(read, 64).decode())
    os.waitpid(pid, 0)
    return {
        "entries": IMAGENET_TRAIN,
        "nbytes": nbytes,
        "rss_kb": rss - base_rss,
        "peak_kb": hwm - base_hwm,
        "cow_kb": cow,
    }


def probe_in_fresh_process(kind: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", __spec__.name, "--memory-probe", kind], check=True, capture_output=True, text=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


# main -----------------------------------------------------------------------------------------------------------


def mb(kb: float) -> str:
    return f"{kb / 1024:,.0f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=2000, help="synthesized training images")
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument(
        "--large-share", type=float, default=0.0, help="the share of training images at 1200x900 (e.g. 0.25)"
    )
    parser.add_argument("--root", type=Path, help="where to synthesize (kept and reused); default: a temporary dir")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--chunk-bytes", default="16MB", help="LitData chunk size of the shards")
    parser.add_argument("--per-sample", type=int, default=300, help="images for the one-process measurements")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-probe", choices=["filelist", "pylist"], help=argparse.SUPPRESS)
    add_harness_arguments(
        parser, rounds=3, warmup=0, threads=1, round_help="interleaved rounds; the median is reported"
    )
    args = parser.parse_args()
    if args.memory_probe:
        print(json.dumps(memory_probe(args.memory_probe)))
        return

    import litdata
    import timm

    began = time.perf_counter()
    temporary = None if args.root else tempfile.TemporaryDirectory(prefix="alternet-imagenet-bench-")
    root = (args.root or Path(temporary.name) / "data").expanduser().resolve()  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    facts = begin(args, "imagenet_data", data_root=root)
    info = synthesize(root, args.images, args.classes, large_share=args.large_share)
    start = time.perf_counter()
    shards = shards_of(root, args.chunk_bytes)
    shard_seconds = time.perf_counter() - start
    print(
        f"{args.images} synthesized {WIDTH}x{HEIGHT} JPEGs ({args.large_share:.0%} at {LARGE[1]}x{LARGE[0]}; q90, "
        f"mean {info['mean_kb']:.0f} KB) in {args.classes} "
        f"classes under {root} ({'reused, ' if info.get('reused') else ''}synthesized in {info['seconds']:.0f} s; "
        f"shards of {args.chunk_bytes} chunks ready "
        f"in {shard_seconds:.0f} s); batch {args.batch_size}; torch {torch.__version__}, timm {timm.__version__}, "
        f"litdata {litdata.__version__}, Pillow {PIL.__version__}, {os.cpu_count()} CPUs\n"
    )

    pipelines = {
        "ours, folder": lambda w: our_module(root, w, args.batch_size, None).train_dataloader(),
        "ours, shards": lambda w: our_module(root, w, args.batch_size, shards).train_dataloader(),
        FAST: lambda w: our_module(root, w, args.batch_size, None, decode="fast").train_dataloader(),
        "timm": lambda w: timm_loader(root, w, args.batch_size),
    }
    if importlib.util.find_spec("nvidia") and importlib.util.find_spec("nvidia.dali"):  # the alternet[dali] extra
        pipelines[DALI] = lambda w: our_module(root, w, args.batch_size, None, loader="dali").train_dataloader()
    rates: dict[tuple[str, int], list[float]] = {}
    for round_ in range(args.rounds):
        for workers in args.workers:
            for name, make in pipelines.items():
                rates.setdefault((name, workers), []).append(loader_rate(make(workers), workers))
                print(
                    f"round {round_ + 1}: {name}, {workers} worker(s): {rates[(name, workers)][-1]:.0f} img/s",
                    file=sys.stderr,
                    flush=True,
                )
    getters = per_sample_getters(root, shards, args.batch_size)
    passes = {name: per_sample_pass(get, args.per_sample) for name, get in getters.items()}
    singles = {
        name: [args.per_sample / seconds for seconds in timed]
        for name, timed in interleave(passes, args.rounds, args.warmup).items()
    }
    single = {name: summarise(values).median for name, values in singles.items()}

    rate = {key: summarise(values).median for key, values in rates.items()}
    header = "| pipeline | 1 process, per sample | " + " | ".join(
        f"{w} worker{'s' * (w > 1)}: total / per worker | per worker vs timm" for w in args.workers
    )
    print(
        "Train loader, images/s (median of",
        args.rounds,
        "interleaved rounds; all runs:",
        {f"{k[0]} {k[1]}w": [round(v) for v in vs] for k, vs in rates.items()}
        | {f"{k} 1 process": [round(v) for v in vs] for k, vs in singles.items()},
        ")\n",
    )
    print(header + " |")
    print("|" + "---|" * (2 + 2 * len(args.workers)))
    for name in pipelines:
        cells = [f"{single[name]:,.0f} ({single[name] / single['timm']:.2f}x)" if name in single else "-"]
        for w in args.workers:
            total = rate[(name, w)]
            cells += [f"{total:,.0f} / {total / w:,.0f}", f"{total / rate[('timm', w)]:.2f}x"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(
        f"| {UNSEEDED} | {single[UNSEEDED]:,.0f} ({single[UNSEEDED] / single['timm']:.2f}x) |"
        + " - |" * (2 * len(args.workers))
    )
    ratios = [f"{single[FAST] / single['ours, folder']:.2f}x one process"]
    ratios += [f"{rate[(FAST, w)] / rate[('ours, folder', w)]:.2f}x with {w} worker(s)" for w in args.workers]
    print(f"\ndata.decode=fast against exact, per worker: {', '.join(ratios)}")
    if DALI in pipelines:
        ratios = [f"{rate[(DALI, w)] / rate[('ours, folder', w)]:.2f}x with {w} thread(s)" for w in args.workers]
        print(f"data.loader=dali (CPU backend) against exact, per worker: {', '.join(ratios)}")
    data = f"{args.images} synthesized {WIDTH}x{HEIGHT} JPEGs ({args.large_share:.0%} {LARGE[1]}x{LARGE[0]}), batch "
    data += str(args.batch_size)
    measured = {f"{name}, DataLoader {workers} worker(s)": values for (name, workers), values in rates.items()}
    measured |= {f"{name}, one process per sample": values for name, values in singles.items()}
    rows = []
    for case, values in measured.items():
        notes = f"{data}; " + ("start-up and drain not timed" if "DataLoader" in case else f"{args.per_sample} samples")
        rows.append(summary_row(f"imagenet train {case}", "throughput median", values, "img/s", notes=notes))

    split = cost_split(root, args.per_sample)
    whole = sum(ms for name, ms in split if not name.startswith("("))
    print(f"\nCost split, one process, ms per image (mean of {args.per_sample}):\n")
    print("| step | ms / image | share |\n|---|---|---|")
    for name, ms in split:
        print(f"| {name} | {ms:.2f} | {100 * ms / whole:.0f}% |")
    for group in ("decode", "seed", "augment"):
        ms = sum(ms for name, ms in split if name.startswith(group + ":"))
        print(f"| **{group}, all** | {ms:.2f} | {100 * ms / whole:.0f}% |")
    print(f"| **total** | {whole:.2f} | 100% |")
    notes = f"mean of {args.per_sample} images, one process"
    rows += [row(f"imagenet train cost split {name}", "per image", ms, "ms", notes=notes) for name, ms in split]

    if not args.skip_memory:
        print(f"\nMemory of the {IMAGENET_TRAIN:,}-entry ImageNet train file list, each in a fresh process:\n")
        print(
            "| held as | array bytes | RSS growth | peak RSS growth while building | forked worker's copy-on-write "
            "after reading every entry |\n|---|---|---|---|---|"
        )
        for kind, label in (
            ("filelist", "FileList (ours): relative paths as one `S` bytes array + int64 labels"),
            ("pylist", "list of (absolute str, int) + targets (torchvision ImageFolder, timm ImageDataset)"),
        ):
            result = probe_in_fresh_process(kind)
            nbytes = f"{result['nbytes'] / 2**20:,.1f} MB" if result["nbytes"] else "-"
            print(f"| {label} | {nbytes} | {mb(result['rss_kb'])} | {mb(result['peak_kb'])} | {mb(result['cow_kb'])} |")
            case = f"imagenet file list of {IMAGENET_TRAIN} entries as {kind}"
            rows += [
                row(case, "RSS growth", result["rss_kb"] / 1024, "MB", notes="fresh process"),
                row(case, "peak RSS growth while building", result["peak_kb"] / 1024, "MB", notes="fresh process"),
                row(
                    case,
                    "forked worker copy-on-write",
                    result["cow_kb"] / 1024,
                    "MB",
                    notes="after reading every entry",
                ),
            ]
    print(f"\nwall time of this run: {time.perf_counter() - began:.0f} s")
    finish(args, "imagenet_data", rows, facts)
    if temporary is not None:
        temporary.cleanup()


if __name__ == "__main__":
    main()
