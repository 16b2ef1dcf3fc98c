"""The shards present in an array, from a listing of its shard keys: never a walk of its grid.

A grid may hold far more shards than are stored (a sparse array, an array
being written, a ``zarr.json`` declaring a shape of ``2**40`` along each
axis), so the commands that look at shards (``verify``, ``info``,
``compact``, a resumed write) list the keys under the array's shard prefix
(:func:`shard_prefix`) and read each back into shard coordinates with the
shard format (:meth:`~shardpipe.formats.zarr_sharding.ZarrShardingFormat.coords`).
The shards absent are counted, ``n_shards - present``, never enumerated.

Each listed key is a :class:`Listed`: a shard of the grid, a temporary file a write left
beside the shard it was to become (a name ending in
:data:`~shardpipe.storage.keys.TEMPORARY_SUFFIX` on a file system, which ``cleanup``
removes), or a key that is no shard of the grid (another naming, a position past the
grid's end, a stray file): ``verify`` reports the last kind as a problem, the others
skip it.

Work on the listed shards runs in :mod:`shardpipe.engine.shard_sweep`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from shardpipe.core.grid import Coords, Shape
from shardpipe.formats.zarr_sharding import ZarrShardingFormat
from shardpipe.storage.keys import JOB_DIR, TEMPORARY_SUFFIX
from shardpipe.storage.resolve import ResolvedStore

LIST_BATCH = 1024
"""Listed keys taken at a time before they are handed out as tasks."""


class Listed(NamedTuple):
    """One key listed under an array's shard prefix.

    Attributes
    ----------
    key : str
        The store key.
    coords : tuple of int or None
        The shard's grid coordinates; None when the key is no shard of the grid.
    temporary : bool
        A temporary file an unfinished write left (``coords`` is None).
    beyond : bool
        The key names a shard position past the grid's end along some axis
        (``coords`` is None): a shard an append wrote before it stopped.
    """

    key: str
    coords: Coords | None
    temporary: bool = False
    beyond: bool = False


def shard_prefix(target: ResolvedStore, shard_format: ZarrShardingFormat) -> str:
    """The key prefix under which every shard of the array at ``target`` lies.

    ``<array>/c/`` or ``<array>/c.`` for the "default" chunk key encoding;
    the array's own prefix for "v2" (whose keys ``0.1.2`` lie beside
    ``zarr.json``); the one key ``<array>/c`` of a 0-dimensional array.
    """
    if not shard_format.chunks_per_shard:
        return target.key(shard_format.key(()))
    head = shard_format.key_head
    return target.key("") if head is None else target.key(head)


_UNBOUNDED = (1 << 62,) * 64  # a grid no shard position lies outside of


def list_shards(
    target: ResolvedStore, shard_format: ZarrShardingFormat, grid: Shape
) -> Iterator[Listed]:
    """Every key under the shard prefix of the array at ``target``, as the listing streams it.

    With the "v2" key encoding the prefix is the array's folder: its
    ``zarr.json`` and shardpipe's records (:data:`~shardpipe.storage.keys.JOB_DIR`) are left out.
    """
    base = target.key("")
    prefix = shard_prefix(target, shard_format)
    for key in target.shards.list(prefix):
        relative = key[len(base) :]
        if shard_format.key_prefix is None and (
            relative == "zarr.json" or relative.startswith(f"{JOB_DIR}/")
        ):
            continue
        coords = shard_format.coords(relative, grid)
        if coords is not None:
            yield Listed(key, coords)
        elif key.endswith(TEMPORARY_SUFFIX):
            yield Listed(key, None, temporary=True)
        else:
            beyond = shard_format.coords(relative, _UNBOUNDED[: len(grid)]) is not None
            yield Listed(key, None, beyond=beyond)
