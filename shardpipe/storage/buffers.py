"""Buffers of objects: one body out of a shard's buffers, an object's size checked."""

from __future__ import annotations

from collections.abc import Buffer, Sequence


def joined(buffers: Sequence[Buffer]) -> bytes:
    """The concatenation of ``buffers``; one already joined is returned as it is (no copy)."""
    if len(buffers) == 1 and isinstance(buffers[0], bytes):
        return buffers[0]
    return b"".join(memoryview(b).cast("B") for b in buffers)


def check_object_size(key: str, found: int, nbytes: int) -> None:
    """Raise ``ValueError`` unless the object at ``key``, of ``found`` bytes, holds ``nbytes``."""
    if found != nbytes:
        raise ValueError(f"{key!r} holds {found} bytes, not the {nbytes} expected of it")
