"""alternet.seeds: one derivation for every random stream, and its vectorised form."""

import numpy as np
import pytest

from alternet.seeds import derive_seed, derive_seeds


@pytest.mark.parametrize("seed", [0, 7, 2**32 - 1])
def test_derive_seeds_equals_derive_seed_key_by_key(seed):
    """NumPy's SeedSequence on arrays: the sampler's epoch of augmentation seeds must be the very seeds the
    per-sample derivation gave (runs and checkpoints made before stay exact)."""
    indices = np.random.default_rng(seed % 97).integers(0, 2**32, 500, dtype=np.uint64)
    indices[:3] = [0, 1, 2**32 - 1]
    for suffix in ((), (1,), (2, 5)):  # pool-size keys, and longer ones (a repeated subset's pass)
        got = derive_seeds(seed, "augment", 3, indices, *suffix)
        want = [derive_seed(seed, "augment", 3, int(index), *suffix) for index in indices]
        assert got.dtype == np.uint32 and got.tolist() == want
    assert int(derive_seeds(seed, "order")) == derive_seed(seed, "order")  # a key shorter than the pool


def test_derive_seeds_refuses_words_numpy_would_split():
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
        derive_seeds(0, "augment", np.array([2**32]))
    with pytest.raises(ValueError, match=r"\[0, 2\*\*32\)"):
        derive_seeds(-1, "augment")
