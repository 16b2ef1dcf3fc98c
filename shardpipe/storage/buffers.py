"""One body out of a shard's buffers, for stores that send an object in one request."""

from __future__ import annotations

from collections.abc import Buffer, Sequence


def joined(buffers: Sequence[Buffer]) -> bytes:
    """The concatenation of ``buffers``; one already joined is returned as it is (no copy)."""
    if len(buffers) == 1 and isinstance(buffers[0], bytes):
        return buffers[0]
    return b"".join(memoryview(b).cast("B") for b in buffers)
