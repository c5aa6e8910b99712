"""Train briefly with 2-process CPU DDP and record, per rank, which training samples it loaded.

Lightning re-executes this script for rank 1, so both ranks run it; each writes ``rank<N>.json`` into
the output directory given as the only argument. Used by ``tests/training/test_distributed.py``.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers

from alternet.apps.train import train
from alternet.data import ArrayDataset

from helpers import DDP_CPU, compose_train

out = Path(sys.argv[1])
loaded: list[int] = []
_getitem = ArrayDataset.__getitem__


def recording_getitem(self: ArrayDataset, key: int | tuple[int, int]):
    if isinstance(key, tuple):  # training keys carry an augmentation seed
        loaded.append(int(key[0]))
    return _getitem(self, key)


ArrayDataset.__getitem__ = recording_getitem
summary = train(
    compose_train(
        *DDP_CPU,
        output_dir=out,
    )
)
rank = int(os.environ.get("LOCAL_RANK", "0"))
(out / f"rank{rank}.json").write_text(json.dumps({"train_indices": loaded, "test": summary["test"]}))
