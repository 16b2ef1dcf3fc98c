"""Shards of the sharding storage-transformer draft (2022), without any I/O.

Before the ``sharding_indexed`` codec (ZEP 2) settled, zarr-python 2.x
(behind its experimental v3 flags) wrote sharded arrays with a *storage
transformer*: metadata under ``meta/root/``, shards under ``data/root/``.
Their bytes are the codec's layout with the index at the end and no
checksum::

    | chunk | ... | chunk | index: 16 bytes per slot, little-endian uint64 pairs |

so :class:`LegacyShardingFormat` is
:class:`~shardpipe.formats.zarr_sharding.ZarrShardingFormat` with
``index_location="end"`` and ``checksum=False``; only the keys differ. A
shard key of the draft's core spec is ``c`` followed directly by the
coordinates joined by the separator: ``c0/1/2`` or ``c0.1.2`` (the codec's
"default" encoding writes ``c/0/1/2``); zarr-python 2.x names the one
shard of a zero-dimensional array ``c0``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardpipe.core.grid import Coords, Shape
from shardpipe.formats.zarr_sharding import ZarrShardingFormat


@dataclass(frozen=True)
class LegacyShardingFormat(ZarrShardingFormat):
    """The shards of one draft array: index at the end, no checksum, keys ``c0/1``.

    Build it with :func:`legacy_format`.
    """

    def key(self, shard: Coords) -> str:
        """``c`` and the coordinates joined by the separator (``c0/1``; ``c0`` for ``()``)."""
        return "c" + (self.key_separator.join(map(str, shard)) if shard else "0")

    def coords(self, key: str, grid: Shape | None = None) -> Coords | None:
        """The shard ``key`` names (the inverse of :meth:`key`), or None."""
        if not self.chunks_per_shard:
            return () if key == "c0" else None
        if not key.startswith("c") or key.startswith("c" + self.key_separator):
            return None
        return super().coords("c" + self.key_separator + key[1:], grid)

    @property
    def key_head(self) -> str:
        """What every shard key starts with: ``c``."""
        return "c"


def legacy_format(chunks_per_shard: Shape, separator: str) -> LegacyShardingFormat:
    """The format of a draft array's shards (``chunks_per_shard``, key ``separator``)."""
    return LegacyShardingFormat(
        tuple(chunks_per_shard),
        index_location="end",
        checksum=False,
        key_prefix="c",
        key_separator=separator,
    )
