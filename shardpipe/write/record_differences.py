"""What differs between the identity a job recorded and a new job's, in words.

``resume=True`` refuses an array another job wrote
(:func:`~shardpipe.write.resume.check_same_job`) and says what differs: the
top-level keys of two ``zarr.json`` documents, and within the sharding codec
its settings by name, with both values.
"""

from __future__ import annotations

import json
from typing import Any

SHARDING_FIELDS = {
    "chunk_shape": "inner chunk shape",
    "codecs": "inner chunks' codecs",
    "index_codecs": "index codecs",
    "index_location": "index location",
}
"""What the keys of the sharding codec's configuration are called in a message."""


def differences(saved: Any, ours: dict[str, Any]) -> list[str]:
    """What differs between two ``zarr.json`` documents: top-level keys, and within
    ``codecs`` the sharding codec's settings with both values (an inner chunk shape
    changed is named as such, not as "codecs")."""
    if not isinstance(saved, dict):
        return ["the whole document"]
    keys = sorted(k for k in set(saved) | set(ours) if saved.get(k) != ours.get(k))
    return [
        field
        for k in keys
        for field in (_sharding_fields(saved, ours) if k == "codecs" else None) or [k]
    ]


def _sharding_fields(saved: dict[str, Any], ours: dict[str, Any]) -> list[str] | None:
    """The sharding settings that differ, each with its two values; None unless both
    documents' codecs are one ``sharding_indexed`` codec."""
    configurations = []
    for document in (saved, ours):
        codecs = document.get("codecs")
        if not (isinstance(codecs, list) and len(codecs) == 1 and isinstance(codecs[0], dict)):
            return None
        if codecs[0].get("name") != "sharding_indexed":
            return None
        configurations.append(codecs[0].get("configuration") or {})
    old, new = configurations
    return [
        _difference(SHARDING_FIELDS.get(k, k), old.get(k), new.get(k))
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    ] or None


def _difference(what: str, old: Any, new: Any) -> str:
    """``what`` with both its values; of two codec lists as long, only the codecs that differ."""
    codecs = isinstance(old, list) and isinstance(new, list) and len(old) == len(new)
    if codecs and all(isinstance(codec, dict) for codec in [*old, *new]):
        return "; ".join(
            f"{what} [{i}]: recorded {brief(a, 80)}, this write {brief(b, 80)}"
            for i, (a, b) in enumerate(zip(old, new, strict=True))
            if a != b
        )
    return f"{what}: recorded {brief(old, 80)}, this write {brief(new, 80)}"


def brief(value: Any, limit: int = 120) -> str:
    """``value`` as JSON, cut to ``limit`` characters for an error message."""
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
