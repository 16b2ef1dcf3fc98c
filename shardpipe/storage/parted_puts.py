"""Large objects in parts sent at once: one connection's bandwidth no longer bounds a shard.

An object store serves each connection at tens of MB/s, so one ``PUT`` of
a 512 MiB shard takes tens of seconds however many shards are in flight
beside it. A shard handed to the uploads (:mod:`shardpipe.storage.uploads`)
that is at least two part sizes long, on a store that writes parts, goes
up as parts instead: :data:`PARTS_AT_ONCE` at a time, published together
by one ``finish_parts`` (S3: a multipart upload, which appears at its key
in one step, like a single ``PUT``).

The part size is ``shardpipe.uploads.part-size`` in Dask's config
(:data:`DEFAULT_PART_SIZE`), read where the write is planned. Each part in
flight is a copy of its bytes (the clients send ``bytes``), so a shard in
parts holds up to ``PARTS_AT_ONCE`` part sizes beside itself: the uploads
count them in the write's byte budget (:func:`held_bytes`).

A failure aborts the upload; a kill leaves it open, named under the
write's staging prefix, where ``cleanup`` (and a resumed write) finds and
aborts it.
"""

from __future__ import annotations

from collections.abc import Buffer
from concurrent.futures import ThreadPoolExecutor

import dask.config

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.base import ShardStore
from shardpipe.storage.parts import PartReceipt

DEFAULT_PART_SIZE = 16 << 20
"""Bytes per part of a shard sent in parts (``shardpipe.uploads.part-size``)."""

PARTS_AT_ONCE = 4
"""Parts of one shard in flight at once."""

_MIN_PART_SIZE = 5 << 20  # S3's smallest part: below it no store takes parts
_MAX_PART_SIZE = 1 << 30


def part_size() -> int:
    """Bytes per part: ``shardpipe.uploads.part-size`` or :data:`DEFAULT_PART_SIZE`.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        If the setting is not an integer from 5 MiB to 1 GiB.
    """
    value = dask.config.get("shardpipe.uploads.part-size", DEFAULT_PART_SIZE)
    whole = isinstance(value, int) and not isinstance(value, bool)
    if whole and _MIN_PART_SIZE <= value <= _MAX_PART_SIZE:
        return int(value)
    raise InvalidArgumentError(
        "shardpipe.uploads.part-size",
        f"{value!r} (Dask config) is not a number of bytes from 5 MiB to 1 GiB",
        f"set an integer such as dask.config.set({{'shardpipe.uploads.part-size': "
        f"{DEFAULT_PART_SIZE}}})",
    )


def goes_in_parts(store: ShardStore, nbytes: int, size: int | None) -> bool:
    """Whether a shard of ``nbytes`` goes up in parts of ``size`` on ``store``.

    It does when ``size`` is set, the store writes parts in storage (not in
    memory) of at least that size, and the shard is at least two parts long.
    """
    abilities = store.abilities
    return (
        size is not None
        and abilities.parts
        and not abilities.parts_in_memory
        and abilities.min_part_size <= size
        and nbytes >= 2 * size
    )


def held_bytes(nbytes: int, size: int | None) -> int:
    """Bytes a shard of ``nbytes`` holds while it goes up: itself, plus its parts in flight."""
    if size is None:
        return nbytes
    return nbytes + min(PARTS_AT_ONCE, -(-nbytes // size)) * size


def put_in_parts(store: ShardStore, key: str, body: Buffer, staging: str, size: int) -> None:
    """Publish ``body`` at ``key`` as parts of ``size`` bytes, :data:`PARTS_AT_ONCE` at a time.

    Parameters
    ----------
    store : ShardStore
        A store that writes parts.
    key : str
        Where the object goes.
    body : bytes-like
        Its bytes.
    staging : str
        The write's staging prefix (where the store names the upload, for
        ``cleanup``).
    size : int
        Bytes per part (the last part takes the rest).

    Raises
    ------
    Exception
        What the store raised; the upload is aborted first.
    """
    view = memoryview(body).cast("B")
    starts = range(0, view.nbytes, size)
    handle = store.begin_parts(key, staging)
    try:

        def send(number: int) -> PartReceipt:
            start = starts[number]
            return store.write_part(handle, number, [bytes(view[start : start + size])])

        with ThreadPoolExecutor(PARTS_AT_ONCE, thread_name_prefix="shardpipe-part") as pool:
            receipts = list(pool.map(send, range(len(starts))))
        store.finish_parts(handle, receipts, b"", b"")
    except BaseException as err:
        try:
            store.abort_parts(handle)
        except Exception as abort_error:  # the first error is the one raised; cleanup aborts it
            err.add_note(f"aborting the upload of {key!r} failed too: {abort_error}")
        raise
