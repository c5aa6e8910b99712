"""Train briefly with 2-process CPU DDP from LitData shards and record, per rank, which images it streamed.

``ddp_shards_probe.py OUT FOLDER SHARDS``. Lightning re-executes this script for rank 1, so both ranks run it; each
writes ``rank<N>.json`` into OUT. Used by ``tests/data/test_imagefolder.py``.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers

from litdata import StreamingDataset

from alternet.apps.train import train
from alternet.data.files.folder import ImageFolderDataModule
from alternet.data.files.shards import StreamingImages

from helpers import DDP_CPU, compose_train

out, folder, shards = sys.argv[1:]
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
summary = train(
    compose_train(
        *DDP_CPU,
        "recipe.epochs=1",
        "recipe.warmup_epochs=0",
        "recipe.batch_size=4",
        "data=imagefolder",
        f"data.root={folder}",
        f"data.train_shards={shards}",
        "data.image_size=16",
        "data.num_workers=0",
        output_dir=out,
    )
)
rank = int(os.environ.get("LOCAL_RANK", "0"))
(Path(out) / f"rank{rank}.json").write_text(
    json.dumps({"streamed": streamed, "scheduled": scheduled, "test": summary.test})
)
