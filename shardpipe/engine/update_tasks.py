"""The task that updates one existing shard: merge, encode, then change its bytes safely.

One ``update-shard`` task owns each shard a region write or an append
touches. It reads the shard's index (and its version), merges the source
into the partly covered inner chunks (untouched chunks are never decoded),
encodes the touched chunks, plans where their bytes go
(:func:`~shardpipe.core.shard_update.plan_shard_update`) and applies the plan
in one of three ways, each conditional on the shard not having changed since
it was read:

* **put** (a rewrite, or a new shard): the whole object in one atomic write,
  ``if_version`` / ``if_absent``. Readers see the old shard or the new one;
  a kill leaves the old one.
* **compose** (an append on S3): a multipart upload to the same key that
  copies the kept bytes server side (``UploadPartCopy``) and adds the new
  chunks and index, completed ``If-Match`` the old ETag. Atomic like a put.
* **positioned writes** (in place, or an append, on a file system): first an
  undo record (old size, old bytes of every range to overwrite) is written
  durably; then the new chunks, then the index (at the end: the final
  bytes); then the record is removed. A reader may see a torn index while
  the index bytes are written (the CRC32C catches it). If the writes fail
  part way (a full disk, an I/O error), the task puts the old bytes back
  from the record before the error goes on, and says so in a note; if that
  fails too, the note names the shard left for :func:`shardpipe.repair`. A
  kill leaves a record that the next job on the array, or
  :func:`shardpipe.repair`, rolls back.
"""

from __future__ import annotations

from collections.abc import Buffer, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from shardpipe import advice
from shardpipe.core.grid import Box, Coords
from shardpipe.core.plan import PartPlan
from shardpipe.core.region import ShardCoverage
from shardpipe.core.shard_update import Abilities, ShardBytes, ShardUpdate, plan_shard_update
from shardpipe.engine.encoders import encoding_task
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.tasks import WriteTarget, encode_part, stored_only
from shardpipe.errors import ChunkDecodeError, ConditionFailedError, PlanError, ShardConflictError
from shardpipe.formats.base import ShardFormat, ShardIndex, assemble_shard, read_checked_index
from shardpipe.journal.markers import JobKeys, JobMarker, check_held
from shardpipe.journal.stalls import step
from shardpipe.journal.undo import UndoRecord, roll_back
from shardpipe.storage.base import ObjectVersion, ShardStore
from shardpipe.storage.retry import retries_so_far


@dataclass(frozen=True)
class UpdateTarget:
    """What an ``update-shard`` task needs besides the array's write target.

    The array's write target is a :class:`~shardpipe.engine.tasks.WriteTarget`.

    Parameters
    ----------
    write : WriteTarget
        Store, layout, codec, shard format, staging prefix.
    strategy : str
        ``"auto"``, ``"in_place"``, ``"append"`` or ``"rewrite"``.
    threshold : float
        Unused share above which ``"auto"`` rewrites a shard.
    rewrite_fits : bool
        Whether holding a whole old shard fits the memory budget.
    keys : JobKeys
        Where the job marker and undo records live.
    marker : JobMarker
        The job's marker (re-checked before each shard is changed).
    update : str
        The update's identity: once a shard is finished (and durable), a
        record of it is saved under ``keys.done_key(update, key)``.
    in_place_fits : bool
        Whether keeping the old bytes overwritten in place fits the budget.
    """

    write: WriteTarget
    strategy: str
    threshold: float
    rewrite_fits: bool
    keys: JobKeys
    marker: JobMarker
    update: str = ""
    in_place_fits: bool = True

    @property
    def store(self) -> ShardStore:
        """Where shards live."""
        return self.write.store

    def abilities(self) -> Abilities:
        """The storage's abilities, as the shard-update planner needs them."""
        a = self.store.abilities
        compose = a.min_part_size if a.parts and a.copy_range and not a.append else None
        return Abilities(
            write_at=a.write_at,
            append=a.append and a.write_at,
            compose_min=compose,
            rewrite_fits=self.rewrite_fits,
            in_place_fits=self.in_place_fits,
        )


@dataclass
class StoredShard:
    """A shard as read at the start of its update.

    Parameters
    ----------
    key : str
        Its key.
    shard : tuple of int
        Its coordinates in the shard grid.
    version : ObjectVersion
        Its version when its index was read.
    layout : ShardBytes
        Its size, index entries and index range.
    store : ShardStore
        Where it lives.
    """

    key: str
    shard: Coords
    version: ObjectVersion
    layout: ShardBytes
    store: ShardStore

    @cached_property
    def stored(self) -> dict[int, tuple[int, int]]:
        """Stored slots and their ``(offset, nbytes)``."""
        return self.layout.stored()

    def read(self, slot: int) -> bytes:
        """The encoded bytes of slot ``slot``."""
        offset, nbytes = self.stored[slot]
        return self.store.get_range(self.key, offset, offset + nbytes)


class OldShardChunks:
    """Decodes the old content of partly covered chunks on demand (see ``OldChunks``)."""

    def __init__(
        self, target: WriteTarget, shard: StoredShard | None, partial: frozenset[Coords]
    ) -> None:
        self._target = target
        self._shard = shard
        self.partial = partial

    def chunk(self, local: Coords) -> np.ndarray | None:
        slot = self._target.shard_format.slot(local)
        if self._shard is None or slot not in self._shard.stored:
            return None
        try:
            return self._target.codec.decode(self._shard.read(slot))
        except ChunkDecodeError as err:  # name the chunk: the codec knows only its bytes
            raise ChunkDecodeError(
                f"shard {self._shard.key!r}, inner chunk {tuple(local)} (slot {slot}): {err}"
            ) from err


def read_shard(
    store: ShardStore, shard_format: ShardFormat, key: str, *, shard: Coords
) -> StoredShard | None:
    """Read the version and index of shard ``shard`` at ``key`` (None when absent)."""
    version = store.version(key)
    if version is None:
        return None
    size = store.size(key)
    if size is None:
        raise _conflict([key], "it was deleted while being read")
    index, where = read_checked_index(  # every entry checked: chunks are sliced by them
        shard_format, lambda start, stop: store.get_range(key, start, stop), size, key, shard=shard
    )
    at_start = shard_format.head_nbytes() > 0
    return StoredShard(key, shard, version, ShardBytes(size, index.entries, where, at_start), store)


def _conflict(keys: list[str], why: str) -> ShardConflictError:
    return ShardConflictError(
        f"shard {keys[0]!r} changed while this job updated it ({why}); it was left as the "
        "other writer made it. Check what else writes this array, then rerun the update "
        "for this region",
        keys,
    )


def update_shard(
    target: UpdateTarget,
    *sources: Any,
    shard: Coords,
    key: str,
    part: PartPlan,
    block_boxes: tuple[Box, ...] | None,
    coverage: ShardCoverage,
) -> WriteReport:
    """Update the shard at ``key`` with the region's data (one task per shard).

    Raises
    ------
    shardpipe.errors.ShardConflictError
        If the shard changed (or appeared) since this task read it.
    shardpipe.errors.JobConflictError
        If this job no longer holds the array's marker.
    """
    before = retries_so_far()
    with encoding_task():
        report = _update_shard(target, sources, shard, key, part, block_boxes, coverage)
    if target.update:
        try:
            target.store.put(target.keys.done_key(target.update, key), [b""])
        except BaseException as err:
            err.add_note(
                f"shardpipe: shard {key!r} was updated completely; only the record that it is "
                "finished was not saved (a resumed update writes it again)"
            )
            raise
    return replace(report, retries=retries_so_far() - before)


def _update_shard(
    target: UpdateTarget,
    sources: tuple[Any, ...],
    shard: Coords,
    key: str,
    part: PartPlan,
    block_boxes: tuple[Box, ...] | None,
    coverage: ShardCoverage,
) -> WriteReport:
    write = target.write
    old = read_shard(write.store, write.shard_format, key, shard=shard)
    partial = frozenset(coverage.partial_chunks())
    encoded = encode_part(
        write, shard, part, sources, block_boxes, OldShardChunks(write, old, partial)
    )
    return apply_chunks(target, key, shard, old, encoded)


def apply_chunks(
    target: UpdateTarget,
    key: str,
    shard: Coords,
    old: StoredShard | None,
    encoded: Iterable[tuple[int, Buffer | None]],
) -> WriteReport:
    """Change the shard at ``key`` (read as ``old``) so that its slots hold ``encoded``.

    ``encoded`` gives the new bytes of every touched slot (None: the fill
    value, not stored). The strategy is planned here and applied with the
    crash-safety steps of the module's docstring: a put if the shard is
    new, else a rewrite, positioned writes behind an undo record, or a
    server-side compose, each conditional on the shard being unchanged.
    """
    write = target.write
    if old is None:
        return _write_new(target, key, shard, list(stored_only(encoded)))
    new = {slot: data for slot, data in encoded if data is not None or slot in old.stored}
    if not new:
        return WriteReport(shards=1, strategies={"unchanged": 1})
    sizes = {slot: (None if d is None else memoryview(d).nbytes) for slot, d in new.items()}
    try:
        plan = plan_shard_update(
            old.layout, sizes, target.strategy, target.abilities(), threshold=target.threshold
        )
    except PlanError as err:
        raise PlanError(f"shard {key!r}: {err}") from err
    keeps = any(slot not in new for slot in plan.layout_order)
    if keeps and not target.rewrite_fits:  # prepare_write refuses plans that need this
        raise PlanError(
            f"shard {key!r} must be rewritten (the store cannot compose it: too few kept "
            "bytes for its part size) but a rewrite holds the whole shard, more than "
            f"max_mem allows; raise {advice.name('max_mem')}"
        )
    check_held(target.store, target.keys, target.marker)
    stored = int(ShardIndex(plan.entries).stored().sum())
    if plan.strategy == "rewrite":
        nbytes = rewrite_shard(write.shard_format, old, plan, new)
    elif target.abilities().append:
        nbytes = _positioned(target, old, plan, new)
    else:
        nbytes = _compose(target, old, plan, new)
    return WriteReport(shards=1, nbytes=nbytes, chunks_stored=stored, strategies={plan.strategy: 1})


def _write_new(
    target: UpdateTarget, key: str, shard: Coords, encoded: list[tuple[int, Buffer]]
) -> WriteReport:
    """A shard that did not exist: publish it create-only."""
    if not encoded:
        return WriteReport(shards=1, shards_empty=1, strategies={"unchanged": 1})
    buffers = assemble_shard(target.write.shard_format, encoded, shard=shard)
    check_held(target.store, target.keys, target.marker)
    try:
        target.store.put(key, buffers, if_absent=True)
    except ConditionFailedError as err:
        raise _conflict([key], "another writer created it") from err
    nbytes = sum(memoryview(b).nbytes for b in buffers)
    return WriteReport(shards=1, nbytes=nbytes, chunks_stored=len(encoded), strategies={"new": 1})


def _index_bytes(shard_format: ShardFormat, plan: ShardUpdate, shard: Coords) -> bytes:
    """The encoded index of an updated shard (a format whose one index is its head or tail)."""
    head_nbytes = shard_format.head_nbytes()
    data_stop = plan.index_offset if shard_format.has_tail else plan.new_size
    head, tail = shard_format.encode_index(
        ShardIndex(plan.entries),
        shard=shard,
        head_nbytes=head_nbytes,
        data_nbytes=data_stop - head_nbytes,
    )
    assert not (head and tail), "an index both before and after the chunks is not updated in place"
    return head or tail


def rewrite_shard(
    shard_format: ShardFormat,
    old: StoredShard,
    plan: ShardUpdate,
    new: Mapping[int, Buffer | None],
) -> int:
    """Publish a compact new shard in one atomic put, if the old one is unchanged.

    Kept chunks are copied as they are (never decoded). Returns the bytes written.
    """
    store = old.store
    whole = store.get(old.key) if any(s not in new for s in plan.layout_order) else b""
    if whole is None:
        raise _conflict([old.key], "it was deleted")
    view = memoryview(whole)
    chunks: list[Buffer] = []
    for slot in plan.layout_order:
        data = new.get(slot)
        if data is None:
            offset, nbytes = old.stored[slot]
            data = view[offset : offset + nbytes]
        chunks.append(data)
    index = _index_bytes(shard_format, plan, old.shard)
    buffers = [index, *chunks] if old.layout.index_at_start else [*chunks, index]
    try:
        store.put(old.key, buffers, if_version=old.version)
    except ConditionFailedError as err:
        raise _conflict([old.key], "its version changed") from err
    return plan.new_size


def _positioned(
    target: UpdateTarget, old: StoredShard, plan: ShardUpdate, new: dict[int, Buffer | None]
) -> int:
    """In place / append on a file system: undo record first, index last, record removed."""
    store, key = target.store, old.key
    record = UndoRecord(
        key,
        old.layout.size,
        tuple((start, store.get_range(key, start, stop)) for start, stop in plan.overwritten),
    )
    record_key = target.keys.undo_key(target.marker.job, key)
    store.put(record_key, record.buffers())  # the old bytes as they are: no joined copy
    if store.version(key) != old.version:
        store.delete(record_key)
        raise _conflict([key], "its version changed before the first byte was written")
    ranges: list[tuple[int, list[Buffer]]] = []
    for slot, offset in sorted(plan.in_place.items(), key=lambda item: item[1]):
        data = new[slot]
        assert data is not None
        ranges.append((offset, [data]))
    appended = [new[slot] for slot in plan.appended]
    if appended:
        ranges.append((plan.append_offset, [d for d in appended if d is not None]))
    index = _index_bytes(target.write.shard_format, plan, old.shard)
    ranges.append((plan.index_offset, [index]))
    step("update.recorded")
    try:
        store.write_ranges(key, ranges)
    except BaseException as err:
        _roll_back_now(store, record, record_key, err)
        raise
    step("update.written")
    store.delete(record_key)
    return sum(memoryview(b).nbytes for _, bufs in ranges for b in bufs)


def _roll_back_now(
    store: ShardStore, record: UndoRecord, record_key: str, err: BaseException
) -> None:
    """A positioned write of ``record.key`` failed part way: put its old bytes back at once.

    The shard may be torn (a full disk stops an append in the middle of its
    chunks, and the bytes at its end are then no index). It is restored from
    the record, in memory here, before ``err`` goes on, so that readers see
    the old shard again; ``err`` gets a note saying so. If that fails too,
    the record stays for ``repair`` (or the next job on the array) and the
    note names the shard and the record.
    """
    try:
        roll_back(store, record)
        store.delete(record_key)
    except Exception as undo_err:
        err.add_note(
            f"shardpipe: shard {record.key!r} could not be rolled back ({undo_err!r}) and may "
            f"be torn; its undo record {record_key!r} is kept: run `shardpipe repair` on the "
            "array (every other shard reads as before)"
        )
    else:
        err.add_note(
            f"shardpipe: shard {record.key!r} was rolled back to its old bytes (nothing of "
            "this update is in it)"
        )


def _compose(
    target: UpdateTarget, old: StoredShard, plan: ShardUpdate, new: dict[int, Buffer | None]
) -> int:
    """Append on an object store: copy the kept bytes server side, add chunks and index."""
    store, key = target.store, old.key
    index = _index_bytes(target.write.shard_format, plan, old.shard)
    appended = [d for d in (new[slot] for slot in plan.appended) if d is not None]
    size = old.layout.size
    handle = store.begin_parts(key, target.write.staging)
    try:
        if old.layout.index_at_start:  # the new index + the first kept bytes
            index_stop = old.layout.index_range[1]
            lead = max(0, store.min_part_size - len(index))  # parts of any size: none read
            head = index + store.get_range(key, index_stop, index_stop + lead)
            receipts = [store.copy_part(handle, 0, key, index_stop + lead, size)]
            tail: list[Buffer] = appended
        else:
            head = b""
            kept = size if plan.appended else old.layout.index_range[0]
            receipts = [store.copy_part(handle, 0, key, 0, kept)]
            tail = [*appended, index]
        if tail:
            receipts.append(store.write_part(handle, 1, tail))
        store.finish_parts(handle, receipts, head, b"", if_version=old.version)
    except ConditionFailedError as err:
        store.abort_parts(handle)
        raise _conflict([key], "its version changed") from err
    except BaseException:
        store.abort_parts(handle)
        raise
    return len(head) + sum(memoryview(b).nbytes for b in tail)
