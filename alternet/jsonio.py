"""Strict JSON files for metrics and records: plain Python values, NaN/inf as null, atomic writes."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def plain(value: Any) -> Any:
    """JSON-safe, recursively: tensors, arrays and numpy scalars to Python values, NaN/inf to None."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0:
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """Write strictly valid JSON, atomically (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(plain(payload), indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
    return path


def update_json(path: str | Path, updates: Mapping[str, Any]) -> Path:
    """Merge ``updates`` into the top level of a JSON file (created if absent)."""
    path = Path(path)
    current = json.loads(path.read_text()) if path.is_file() else {}
    return write_json(path, {**current, **updates})
