"""Train briefly with 2-process CPU DDP and record, per rank, which training samples it loaded and the host syncs
counted between the starts of consecutive training batches (``alternet.training.syncs``; nothing logs and the ranks
never agree on a signal within the epoch, so every window but the epoch's end should be empty).

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
from alternet.training.syncs import HostSyncs, per_step

from helpers import DDP_CPU, compose_train

out = Path(sys.argv[1])
loaded: list[int] = []
_getitems = ArrayDataset.__getitems__  # what a DataLoader calls with a batch of keys


def recording_getitems(self: ArrayDataset, keys: list[int | tuple[int, int]]):
    loaded.extend(int(key[0]) for key in keys if isinstance(key, tuple))  # training keys carry an augmentation seed
    return _getitems(self, keys)


ArrayDataset.__getitems__ = recording_getitems
quiet = ["trainer.log_every_n_steps=1000", "callbacks.preemption.sync_every_n_steps=1000"]
with HostSyncs() as syncs, per_step(syncs) as steps:
    summary = train(compose_train(*DDP_CPU, *quiet, output_dir=out))
rank = int(os.environ.get("LOCAL_RANK", "0"))
(out / f"rank{rank}.json").write_text(json.dumps({"train_indices": loaded, "test": summary.test, "syncs": steps}))
