"""The publishing tasks Dask runs: write a shard or its parts, stamp indexes, finish.

A shard's publishing task is the only one that writes its key (no locks);
the pieces and encodings it takes come from :mod:`shardpipe.engine.tasks`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, NamedTuple

from shardpipe.codec.chunk_codec import EncodedChunk
from shardpipe.core.grid import Box, Coords
from shardpipe.core.plan import PartPlan
from shardpipe.engine.encoders import encoding_task
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.tasks import EMPTY_SHARD, WriteTarget, encode_part, stored_only
from shardpipe.formats.base import (
    PartManifest,
    ShardFormat,
    encode_stamped,
    lay_out_part,
    stream_shard,
)
from shardpipe.storage.base import ShardStore
from shardpipe.storage.parted_puts import goes_in_parts, held_bytes, put_in_parts
from shardpipe.storage.parts import PartReceipt, PartsHandle
from shardpipe.storage.retry import retries_so_far
from shardpipe.storage.uploads import UploadRun, hand_on


def write_shard(
    target: WriteTarget,
    *sources: Any,
    shard: Coords,
    key: str,
    part: PartPlan,
    block_boxes: tuple[Box, ...] | None,
) -> WriteReport:
    """Encode a whole shard (a single part) and publish it in one atomic write.

    ``sources`` are the blocks holding the shard (with ``block_boxes``) or
    the pieces they made. A shard whose every chunk equals the fill value is
    not written. Chunks are handed to the store as they are encoded
    (:meth:`~shardpipe.storage.base.ShardStore.put_streamed`): on a file
    system the device writes the first chunks while the last are encoded,
    and the shard appears at its key, durable, when the task returns.
    """
    with encoding_task():
        encoded = stored_only(
            encode_part(target, shard, part, sources, block_boxes, scattered=True)
        )
        first = next(encoded, None)
        if first is None:
            return EMPTY_SHARD
        return put_shard(
            target.store,
            key,
            target.shard_format,
            itertools.chain([first], encoded),
            shard=shard,
            uploads=target.uploads,
            staging=target.staging,
        )


def put_shard(
    store: ShardStore,
    key: str,
    shard_format: ShardFormat,
    encoded: Iterable[tuple[int, EncodedChunk]],
    *,
    shard: Coords,
    uploads: UploadRun | None = None,
    staging: str | None = None,
) -> WriteReport:
    """Publish shard ``shard`` at ``key`` in one atomic write, laying chunks out as they come.

    ``encoded`` are ``(slot, bytes)`` pairs in the order the chunks are to
    lie, produced on demand (encoding the next chunk overlaps writing the
    last). Serves every shard format.

    With ``uploads`` (a run handing its uploads on, where the store's puts
    are worth it), the encoded shard goes to this process's uploads
    (:func:`~shardpipe.storage.uploads.hand_on`) and the report carries
    its ticket: the shard is written once the run has settled it. A shard
    of two part sizes or more goes up in parts at once, named under the
    write's ``staging`` prefix (:mod:`~shardpipe.storage.parted_puts`).
    """
    streamed = stream_shard(shard_format, encoded, shard=shard)
    before = retries_so_far()
    ticket = None
    if uploads is None:
        nbytes = store.put_streamed(key, streamed.buffers())
    else:
        buffers = list(streamed.buffers())
        nbytes = sum(memoryview(b).nbytes for b in buffers)
        size = uploads.part_size if staging is not None else None
        in_parts = goes_in_parts(store, nbytes, size)
        if store.abilities.joins_buffers or (in_parts and len(buffers) > 1):  # once: only it waits
            buffers = [store.joined_body(buffers)]
        upload: Callable[[], None]
        if in_parts:
            assert staging is not None and size is not None
            upload = partial(put_in_parts, store, key, buffers[0], staging, size)
            held = held_bytes(nbytes, size)
        else:
            upload, held = partial(store.put, key, buffers), nbytes
        ticket = hand_on(uploads, held, upload)
        if ticket is None:  # the run does not settle uploads in this process
            upload()
    return WriteReport(
        shards=1,
        nbytes=nbytes,
        chunks_stored=streamed.chunks,
        retries=retries_so_far() - before,
        uploads=() if ticket is None else (ticket,),
    )


def begin_shard(target: WriteTarget, *, key: str) -> PartsHandle:
    """Start writing the shard at ``key`` in parts (in any order, where the format allows)."""
    any_order = target.shard_format.chunks_in_any_order
    return target.store.begin_parts(key, target.staging, any_order=any_order)


def write_part(
    target: WriteTarget,
    handle: PartsHandle,
    *sources: Any,
    shard: Coords,
    part: PartPlan,
    block_boxes: tuple[Box, ...] | None,
    is_last: bool = False,
) -> WrittenPart:
    """Encode one part of a shard and write it; report where its chunks lie.

    A part with no stored chunk writes nothing. A part smaller than the
    store's minimum part size is padded with unused bytes, unless it is the
    shard's last bytes (its last part, in a format with nothing after the
    chunks).
    """
    with encoding_task():
        encoded = list(
            stored_only(encode_part(target, shard, part, sources, block_boxes, scattered=True))
        )
    last_bytes = is_last and not target.shard_format.has_tail
    min_size = 0 if last_bytes else target.store.min_part_size
    return put_part(target.store, handle, part.number, encoded, min_size=min_size)


def put_part(
    store: ShardStore,
    handle: PartsHandle,
    number: int,
    encoded: Sequence[tuple[int, EncodedChunk]],
    *,
    min_size: int,
) -> WrittenPart:
    """Write part ``number``: ``encoded`` ``(slot, bytes)`` back to back, padded to ``min_size``.

    A part with no chunk writes nothing. Serves every shard format.
    """
    buffers, manifest = lay_out_part(encoded, min_size=min_size)
    if manifest.size == 0:
        return WrittenPart(manifest, None)
    before = retries_so_far()
    receipt = store.write_part(handle, number, buffers)
    return WrittenPart(manifest, receipt, retries_so_far() - before)


class WrittenPart(NamedTuple):
    """What a part task hands on to the task stamping its shard."""

    manifest: PartManifest
    """Where the part's chunks lie within it."""
    receipt: PartReceipt | None
    """The store's receipt, or None when the part stored nothing."""
    retries: int = 0
    """Storage retries made while writing it."""


def stamp_shard(
    target: WriteTarget, handle: PartsHandle, *parts: WrittenPart, shard: Coords
) -> WriteReport:
    """Write the index of shard ``shard``, made of parts, and publish it atomically."""
    return stamp_parts(target.store, target.shard_format, handle, parts, shard=shard)


def stamp_parts(
    store: ShardStore,
    shard_format: ShardFormat,
    handle: PartsHandle,
    parts: Sequence[WrittenPart],
    *,
    shard: Coords,
) -> WriteReport:
    """Stamp the head and tail of shard ``shard`` around its written ``parts``; publish it.

    Serves every shard format: a shard with no stored chunk is not published
    (its parts are aborted). The parts lie where the store puts them
    (:meth:`~shardpipe.storage.base.ShardStore.part_layout`): by their numbers, or,
    for a format whose chunks may lie in any order, as they were written.
    """
    receipts = [p.receipt for p in parts if p.receipt is not None]
    manifests = [p.manifest for p in parts if p.receipt is not None]
    retries = sum(p.retries for p in parts)
    before = retries_so_far()
    if not receipts:
        store.abort_parts(handle)
        return replace(EMPTY_SHARD, retries=retries + retries_so_far() - before)
    layout = store.part_layout(receipts)
    head, tail = encode_stamped(
        shard_format,
        manifests,
        shard=shard,
        min_part_size=store.min_part_size,
        starts=layout.starts,
        data_nbytes=layout.nbytes,
    )
    store.finish_parts(handle, receipts, head, tail)
    nbytes = len(head) + layout.nbytes + len(tail)
    return WriteReport(
        shards=1,
        nbytes=nbytes,
        chunks_stored=sum(len(m.slots) for m in manifests),
        retries=retries + retries_so_far() - before,
    )


def collecting_changes(
    func: Callable[..., WriteReport], target: WriteTarget | Any, /, *args: Any, **kwargs: Any
) -> WriteReport:
    """Run a publishing task's ``func`` through its store's ``collecting``; keep the changes.

    On a transactional backend (Icechunk) the task writes through its own
    fork of the session, which its report carries back.
    """
    report, changes = target.store.collecting(partial(func, target, *args, **kwargs))
    return report if changes is None else replace(report, changes=changes)


def finish_write(target: WriteTarget, *reports: WriteReport) -> WriteReport:
    """Remove the write's staging area and add up the reports of all publishing tasks."""
    target.store.discard_staging(target.staging)
    return sum(reports, WriteReport())
