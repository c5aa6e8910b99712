"""Where things are: the repository, its configs, the real CIFAR-100 files."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "alternet" / "conf"
SHARED_DATA = Path(os.environ.get("ALTERNET_TEST_DATA", ROOT.parent / "shared" / "data"))
