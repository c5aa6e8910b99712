"""One seed derivation for every random stream: a run's seed plus the names and counters of one stream.

Streams never collide (the stream name is part of the key) and do not depend on worker counts or scheduling,
so a run is a pure function of its seed and a resumed run replays what an uninterrupted one would have done.
"""

from __future__ import annotations

import zlib

import numpy as np


def derive_seed(seed: int, *parts: int | str) -> int:
    """A 32-bit seed from ``seed`` and ``parts`` (e.g. ``"augment", epoch, index``), via NumPy's SeedSequence
    (strings enter through their CRC-32)."""
    key = [int(seed), *(zlib.crc32(part.encode()) if isinstance(part, str) else int(part) for part in parts)]
    return int(np.random.SeedSequence(key).generate_state(1)[0])
