"""One seed derivation for every random stream: a run's seed plus the names and counters of one stream.

Streams never collide (the stream name is part of the key) and do not depend on worker counts or scheduling,
so a run is a pure function of its seed and a resumed run replays what an uninterrupted one would have done.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
import torch


def derive_seed(seed: int, *parts: int | str) -> int:
    """A 32-bit seed from ``seed`` and ``parts`` (e.g. ``"augment", epoch, index``), via NumPy's SeedSequence
    (strings enter through their CRC-32)."""
    key = [int(seed), *(zlib.crc32(part.encode()) if isinstance(part, str) else int(part) for part in parts)]
    return int(np.random.SeedSequence(key).generate_state(1)[0])


def seed_generators(seed: int, device: torch.device | None = None) -> None:
    """Fix the global random generators: Python's ``random``, NumPy's and torch's CPU generator (which torchvision's
    and timm's transforms, dropout and mixup draw from), and ``device``'s own when it is an accelerator.

    Not ``torch.manual_seed``: for each backend not yet initialised (CUDA on a CPU run, and the others torch knows)
    it queues a deferred seeding with a formatted stack trace, 0.2 to 2 ms a call on a 2-core CPU (a tenth of a JPEG
    decode, seeding each sample) and a list that grows by three entries per training step."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.default_generator.manual_seed(seed)
    if device is not None and device.type == "cuda":
        torch.cuda.manual_seed(seed)
    elif device is not None and device.type != "cpu":
        torch.manual_seed(seed)
