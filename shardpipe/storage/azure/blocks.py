"""Shards written in parts on Azure: staged blocks committed by one block list.

A block blob is made of blocks: ``Put Block`` stages one under a block id
(from any client, in any order), ``Put Block List`` commits a list of
staged ids, in order, as the blob's content, atomically: readers see the
old blob or the new one. Every task's part is one block; ``finish_parts``
stages the head and the tail as two more and commits the list, with the
write's condition (``If-None-Match: *`` or ``If-Match``).

Block ids
---------
Azure wants every block id of a blob to have the same length. Here the id
is base64 of ``<upload><kind><number>``: ``upload`` the 16 hex digits the
write of this shard drew in :func:`begin_parts`, ``kind`` ``h`` (head),
``p`` (a task's part) or ``t`` (tail), ``number`` six digits. A retried
``write_part`` stages the same id again, replacing the block. Another try
of the shard (a resumed write) draws another ``upload``, so a request of an
earlier try that arrives late cannot replace one of its blocks.

What is left behind
-------------------
Uncommitted blocks cannot be deleted one by one. Azure discards every
uncommitted block of a blob when a block list is committed to it (the next
write of the shard), and the rest after seven days. When shardpipe gives a
shard up (``abort_parts``, ``cleanup``) it deletes the blob if it has no
committed content (Azurite then drops its blocks; the service may keep them
until they expire). A blob with committed content is left alone: committing
it again would change its ETag, and after a refused conditional publish it
is another writer's; its blocks go with its next commit.

Parts may also be copied by the service from a range of an existing blob
(``copy_part``, ``Put Block From URL``): an append keeps the old bytes of a
shard without passing them through the client.

To find those blobs, :func:`begin_parts` writes a marker under the write's
staging prefix, ``<staging>/<sha1 of the key>.blocks`` holding the upload
and the key, before any block is staged; ``finish_parts`` and
``abort_parts`` remove it, and ``cleanup`` visits every blob a marker
names.

A ``Put Block List`` whose response was lost may have published the
shard: the commit carries a random token in the blob's metadata, and a
failed commit whose token is on the blob succeeded.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Sequence
from typing import Protocol

from shardpipe.core.keys import checked_key
from shardpipe.errors import StorageError
from shardpipe.storage.base import ObjectVersion
from shardpipe.storage.keys import edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle

MAX_BLOCKS = 50_000
"""Most committed blocks a block blob may have."""
MAX_TASK_PARTS = MAX_BLOCKS - 2
"""Parts a shard may have besides the head and the tail."""
_MARKER_SUFFIX = ".blocks"
_UPLOAD_DIGITS = 16


class BlockRequests(Protocol):
    """An Azure backend as the functions here use it (see :class:`~.store.AzureShardStore`)."""

    def stage_block(self, key: str, block_id: str, body: bytes) -> None:
        """``Put Block``: stage ``body`` as block ``block_id`` of the blob at ``key``."""
        ...

    def commit_blocks(
        self,
        key: str,
        block_ids: Sequence[str],
        token: str,
        *,
        if_absent: bool,
        if_version: ObjectVersion | None,
    ) -> None:
        """``Put Block List``: commit ``block_ids`` at ``key``, ``token`` in its metadata."""
        ...

    def stage_block_copy(self, key: str, block_id: str, source: str, start: int, stop: int) -> None:
        """``Put Block From URL``: stage ``[start, stop)`` of ``source`` as a block of ``key``."""
        ...

    def holds_token(self, key: str, token: str, err: StorageError) -> bool:
        """Whether the blob at ``key`` carries ``token`` (a commit whose answer was lost)."""
        ...

    def discard_uncommitted(self, key: str) -> bool:
        """Discard the uncommitted blocks of ``key`` where possible; whether there were any."""
        ...

    def get(self, key: str) -> bytes | None:
        """The blob at ``key``, or None."""
        ...

    def put(self, key: str, buffers: Sequence[bytes]) -> None:
        """Publish ``buffers`` at ``key``."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        ...


def block_id(upload: str, kind: str, number: int) -> str:
    """The id of a block: base64 of ``<upload><kind><number, six digits>`` (one length for all).

    Parameters
    ----------
    upload : str
        The 16 hex digits of the shard's write (the handle's ``upload``).
    kind : {"h", "p", "t"}
        Head, a task's part, or tail.
    number : int
        The part's number (0 for the head and the tail).

    Returns
    -------
    str
        The id, as ``Put Block`` and ``Put Block List`` take it.

    Examples
    --------
    >>> block_id("0123456789abcdef", "p", 7)
    'MDEyMzQ1Njc4OWFiY2RlZnAwMDAwMDc='
    """
    if len(upload) != _UPLOAD_DIGITS or kind not in ("h", "p", "t") or not 0 <= number < 10**6:
        raise ValueError(f"no block id for upload {upload!r}, kind {kind!r}, number {number}")
    return base64.b64encode(f"{upload}{kind}{number:06d}".encode()).decode()


def marker(staging: str, key: str) -> str:
    """Key of the marker of the shard ``key`` written in parts under ``staging``."""
    return f"{staging}/{hashlib.sha1(key.encode()).hexdigest()}{_MARKER_SUFFIX}"


def begin_parts(store: BlockRequests, key: str, staging: str) -> PartsHandle:
    """Draw the shard's upload and record it under ``staging`` before any block is staged.

    If this write (``staging``) already recorded an upload of ``key`` (Dask
    ran this task again while other tasks had staged blocks), that one is
    kept, so the blocks staged already stay valid.
    """
    recorded, _, found = (store.get(marker(staging, key)) or b"").decode().partition("\n")
    if found == key and len(recorded) == _UPLOAD_DIGITS:
        return PartsHandle(key, recorded, staging)
    upload = uuid.uuid4().hex[:_UPLOAD_DIGITS]
    store.put(marker(staging, key), [f"{upload}\n{key}".encode()])
    return PartsHandle(key, upload, staging)


def _check_number(handle: PartsHandle, number: int) -> None:
    if not 0 <= number < MAX_TASK_PARTS:
        raise ValueError(f"part number {number} of {handle.key!r} not in [0, {MAX_TASK_PARTS})")


def write_part(store: BlockRequests, handle: PartsHandle, number: int, body: bytes) -> PartReceipt:
    """Stage part ``number`` as a block (an empty part stages nothing).

    Returns
    -------
    PartReceipt
        The part's number and size; its ``etag`` is the block id.
    """
    _check_number(handle, number)
    identity = block_id(handle.upload, "p", number)
    if body:
        store.stage_block(handle.key, identity, body)
    return PartReceipt(number, len(body), identity)


def copy_part(
    store: BlockRequests, handle: PartsHandle, number: int, source: str, start: int, stop: int
) -> PartReceipt:
    """Stage bytes ``[start, stop)`` of ``source`` as part ``number``, copied by the service.

    Raises
    ------
    FileNotFoundError
        No blob at ``source``.
    """
    _check_number(handle, number)
    if not 0 <= start < stop:
        raise ValueError(f"invalid byte range [{start}, {stop}) of {source!r}")
    identity = block_id(handle.upload, "p", number)
    store.stage_block_copy(handle.key, identity, source, start, stop)
    return PartReceipt(number, stop - start, identity)


def finish_parts(
    store: BlockRequests,
    handle: PartsHandle,
    receipts: Sequence[PartReceipt],
    head: bytes,
    tail: bytes,
    *,
    if_absent: bool,
    if_version: ObjectVersion | None,
) -> None:
    """Stage the head and the tail, then commit head, parts in order and tail as the blob.

    With no receipts and an empty head and tail nothing is published and
    the parts are discarded. A commit that fails but whose token is on the
    blob afterwards succeeded (its response was lost). Otherwise (a failed
    condition included) the marker stays for ``abort_parts`` or ``cleanup``.
    """
    by_number: dict[int, PartReceipt] = {}
    for receipt in receipts:
        if by_number.setdefault(receipt.number, receipt) != receipt:
            raise ValueError(f"receipt {receipt!r} of {handle.key!r} conflicts with another")
    if not by_number and not head and not tail:
        abort_parts(store, handle)
        return
    ids: list[str] = []
    if head:
        ids.append(block_id(handle.upload, "h", 0))
        store.stage_block(handle.key, ids[-1], head)
    ids += [block_id(handle.upload, "p", n) for n in sorted(by_number) if by_number[n].size]
    if tail:
        ids.append(block_id(handle.upload, "t", 0))
        store.stage_block(handle.key, ids[-1], tail)
    token = uuid.uuid4().hex
    try:
        store.commit_blocks(handle.key, ids, token, if_absent=if_absent, if_version=if_version)
    except StorageError as err:
        if not store.holds_token(handle.key, token, err):
            raise
    store.delete(marker(handle.staging, handle.key))


def abort_parts(store: BlockRequests, handle: PartsHandle) -> None:
    """Discard the shard's uncommitted blocks where possible (see the module); remove its marker."""
    store.discard_uncommitted(handle.key)
    store.delete(marker(handle.staging, handle.key))


def cleanup(store: BlockRequests, markers: Sequence[str]) -> int:
    """Discard the uncommitted blocks of every blob the ``markers`` name; remove the markers.

    Parameters
    ----------
    store : BlockRequests
        The store the writes went to.
    markers : sequence of str
        The keys of the markers under the writes' staging prefix.

    Returns
    -------
    int
        How many leftovers were removed: blobs whose blocks were discarded,
        plus markers.
    """
    removed = 0
    for found in markers:
        _, _, key = (store.get(found) or b"").decode(errors="replace").partition("\n")
        if key:
            checked_key(key, f"the block record {found!r}")
            removed += store.discard_uncommitted(edge_key(key, store))
        store.delete(found)
        removed += 1
    return removed
