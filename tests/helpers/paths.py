"""Where things are: the repository, its configs, the real CIFAR-100 files; and what a folder holds (a fingerprint)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
SHARED_DATA = Path(os.environ.get("ALTERNET_TEST_DATA", ROOT.parent / "shared" / "data"))


def fingerprint(root: Path) -> dict[str, str]:
    """Each file under ``root`` by its SHA-256: a folder before and after a command, to tell that nothing changed."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
