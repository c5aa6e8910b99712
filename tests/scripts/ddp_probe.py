"""Train briefly with 2-process CPU DDP, three times in the same two processes (one DDP start-up for all): first from
arrays (digits), recording per rank which training samples it loaded and the host syncs counted between the starts
of consecutive training batches (``bench.syncs``; nothing logs and the ranks never agree on a signal
within the epoch, so every window but the epoch's end should be empty); then from LitData shards of an image folder,
recording which images each rank streamed and the batches per epoch its schedule was built for; then that run
resumed for a second epoch in a new process group (as a relaunch resumes it), recording the same.

``ddp_probe.py OUT FOLDER SHARDS``. Lightning re-executes this script for rank 1 at the first fit, so both ranks run
it; the later fits find the processes launched (``LOCAL_RANK`` set) and reuse them. Each rank writes
``arrays/rank<N>.json``, ``shards/rank<N>.json`` and ``shards/resumed<N>.json`` into OUT (for
``tests/training/test_distributed.py``).
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the root: bench


import torch.distributed
from litdata import StreamingDataset

from alternet.apps.train import train
from alternet.data import ArrayDataset
from alternet.data.files.folder import ImageFolderDataModule
from alternet.data.files.shards import StreamingImages
from bench.syncs import HostSyncs, per_step

from helpers import DDP_CPU, compose_train

out, folder, shards = (Path(arg) for arg in sys.argv[1:])
rank = int(os.environ.get("LOCAL_RANK", "0"))
loaded: list[int] = []
_getitems = ArrayDataset.__getitems__  # what a DataLoader calls with a batch of keys


def recording_getitems(self: ArrayDataset, keys: list[int | tuple[int, int]]):
    loaded.extend(int(key[0]) for key in keys if isinstance(key, tuple))  # training keys carry an augmentation seed
    return _getitems(self, keys)


ArrayDataset.__getitems__ = recording_getitems
quiet = ["trainer.log_every_n_steps=1000", "callbacks.preemption.sync_every_n_steps=1000"]
with HostSyncs() as syncs, per_step(syncs) as steps:
    summary = train(compose_train(*DDP_CPU, *quiet, output_dir=out / "arrays"))
(out / "arrays" / f"rank{rank}.json").write_text(
    json.dumps({"train_indices": loaded, "test": summary.test, "syncs": steps})
)

streamed: list[str] = []
_getitem = StreamingImages.__getitem__


def recording_getitem(self: StreamingImages, index):
    streamed.append(StreamingDataset.__getitem__(self, index)["name"])
    return _getitem(self, index)


StreamingImages.__getitem__ = recording_getitem
scheduled: list[int] = []  # the batches per epoch the learning-rate schedule was built for
_train_batches = ImageFolderDataModule.train_batches


def recording_train_batches(self: ImageFolderDataModule) -> int:
    scheduled.append(_train_batches(self))
    return scheduled[-1]


ImageFolderDataModule.train_batches = recording_train_batches
shards_run = [
    *DDP_CPU,
    "recipe.epochs=2",
    "recipe.warmup_epochs=0",
    "recipe.batch_size=4",
    "data=imagefolder",
    f"data.root={folder}",
    f"data.train_shards={shards}",
    "data.image_size=16",
    "data.num_workers=0",
]
summary = train(compose_train(*shards_run, output_dir=out / "shards"))
(out / "shards" / f"rank{rank}.json").write_text(
    json.dumps({"streamed": streamed, "scheduled": scheduled, "test": summary.test})
)

# the same run resumed for its second epoch (the processes' third fit), as a relaunch resumes it: before the process
# group starts (the checks of a resume count the batches of this rank first)
torch.distributed.destroy_process_group()
os.environ["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)  # a new group: not the old one's closing sockets
streamed.clear(), scheduled.clear()
train(compose_train(*shards_run, "trainer.max_epochs=2", "ckpt_path=last", output_dir=out / "shards"))
(out / "shards" / f"resumed{rank}.json").write_text(json.dumps({"streamed": streamed, "scheduled": scheduled}))
