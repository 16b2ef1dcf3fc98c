"""Undo records: the old bytes of a shard changed in place, and rolling them back.

An update that changes a shard in place (positioned writes or appends, which
no file system makes atomic) first records, durably, the shard's size and
the old bytes of every range it will overwrite (:class:`UndoRecord`).
:func:`roll_back` restores exactly the old shard; :func:`recover`, run by the
job that holds the array, rolls back every record a dead job left, and
:func:`undo_failed` every record of its own failed run.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shardpipe.errors import JobConflictError, MetadataError
from shardpipe.journal.markers import JobKeys, JobMarker, check_held, decoded_marker
from shardpipe.journal.stalls import step
from shardpipe.storage.base import ShardStore
from shardpipe.storage.keys import JOB_DIR, NO_STAGING

_HEADER = struct.Struct("<I")


@dataclass(frozen=True)
class UndoRecord:
    """How to bring one shard back to the state before an in-place update.

    Parameters
    ----------
    key : str
        The shard.
    size : int
        Its size before the update.
    ranges : tuple of (int, bytes)
        Offsets and old bytes of every range the update overwrites.
    """

    key: str
    size: int
    ranges: tuple[tuple[int, bytes], ...] = ()

    def encode(self) -> bytes:
        """Serialise: a length-prefixed JSON header, then the old bytes."""
        return b"".join(self.buffers())

    def buffers(self) -> list[bytes]:
        """:meth:`encode`'s bytes as buffers to write one after the other (no joined copy)."""
        header = json.dumps(
            {"key": self.key, "size": self.size, "ranges": [[o, len(b)] for o, b in self.ranges]}
        ).encode()
        return [_HEADER.pack(len(header)) + header, *(b for _, b in self.ranges)]

    @classmethod
    def decode(cls, data: bytes, key: str = "", array: str | None = None) -> UndoRecord:
        """Inverse of :meth:`encode`, every field checked before it is used.

        Parameters
        ----------
        data : bytes
            The stored record.
        key : str
            Its key (named in errors; with ``array``, its last component must
            be the SHA-1 of the shard's key, as :meth:`~shardpipe.journal.markers.JobKeys.undo_key`
            makes it).
        array : str, optional
            Key prefix of the array: the shard must be a key under it (not
            ``zarr.json``, nothing under :data:`~shardpipe.storage.keys.JOB_DIR`, no
            ``..`` component).

        Raises
        ------
        MetadataError
            Naming the record and what is wrong.
        """
        what = f"undo record {key!r}" if key else "undo record"
        if len(data) < _HEADER.size:
            raise MetadataError(f"{what}: {len(data)} byte(s), too short for its header")
        (n,) = _HEADER.unpack_from(data)
        pos = _HEADER.size + n
        if pos > len(data):
            raise MetadataError(f"{what}: a {n}-byte header in {len(data)} bytes")
        try:
            header = json.loads(bytes(data[_HEADER.size : pos]))
        except (ValueError, RecursionError) as err:
            raise MetadataError(f"{what}: the header is not JSON ({err})") from err
        if not isinstance(header, dict) or set(header) != {"key", "size", "ranges"}:
            raise MetadataError(f"{what}: the header is not an object of key, size and ranges")
        shard, size, ranges = header["key"], header["size"], header["ranges"]
        if not isinstance(shard, str) or not shard or _unencodable(shard):
            raise MetadataError(f"{what}: 'key' {shard!r:.100} is not a key")
        if not _is_count(size):
            raise MetadataError(f"{what}: 'size' {size!r:.100} is not a size")
        if not isinstance(ranges, list) or not all(
            isinstance(r, list) and len(r) == 2 and all(map(_is_count, r)) for r in ranges
        ):
            raise MetadataError(f"{what}: 'ranges' is not a list of [offset, nbytes] pairs")
        old = []
        for offset, length in ranges:
            if offset + length > size:
                raise MetadataError(
                    f"{what}: range [{offset}, {offset + length}) lies past the old size {size}"
                )
            if pos + length > len(data):
                raise MetadataError(f"{what}: the old bytes of its ranges are cut short")
            old.append((offset, bytes(data[pos : pos + length])))
            pos += length
        if pos != len(data):
            raise MetadataError(f"{what}: {len(data) - pos} byte(s) left over")
        if array is not None:
            _check_shard_key(shard, array, key, what)
        return cls(shard, size, tuple(old))


def _unencodable(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_shard_key(shard: str, array: str, record_key: str, what: str) -> None:
    """Refuse an undo record that would write anywhere but a shard of the array."""
    relative = shard[len(array) :] if shard.startswith(array) else ""
    parts = relative.split("/")
    if (
        not relative
        or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts)
        or parts[0] == JOB_DIR
        or relative == "zarr.json"
    ):
        raise MetadataError(f"{what}: {shard!r:.200} is not the key of a shard of {array!r}")
    if record_key and record_key.rpartition("/")[2] != hashlib.sha1(shard.encode()).hexdigest():
        raise MetadataError(f"{what}: its name is not the SHA-1 of its shard's key {shard!r}")


def roll_back(store: ShardStore, record: UndoRecord) -> bool:
    """Restore the shard of ``record`` to its state before the update; idempotent.

    Returns whether the shard was there to restore.
    """
    size = store.size(record.key)
    if size is None:
        return False
    if record.ranges:
        store.write_ranges(record.key, [(offset, [old]) for offset, old in record.ranges])
    if size > record.size:
        store.truncate(record.key, record.size)
    return True


def undo_records(store: ShardStore, keys: JobKeys) -> Iterator[tuple[str, UndoRecord]]:
    """Iterate over ``(record key, record)`` of every undo record left beside the array.

    A record that cannot be decoded was never completely written (records
    appear atomically), so the update it would describe never began: it is
    skipped and removed.
    """
    for key in list(store.list(keys.undo)):
        data = store.get(key)
        if data is None:
            continue
        try:
            yield key, UndoRecord.decode(data, key, keys.array)
        except MetadataError:  # never completely written, or not a record of this array
            store.delete(key)


def recover(
    store: ShardStore,
    keys: JobKeys,
    holder: JobMarker,
    *,
    leftovers: bool = True,
    checked: bool = False,
) -> list[str]:
    """Roll back every shard left mid-update; with ``leftovers``, remove what dead jobs left.

    Only the job that holds the array (``holder``) may call this: every
    undo record then belongs to a job that no longer runs (or to the
    holder itself, after its own failure). Temporary files of processes
    that no longer run are removed beside the marker and records (a job
    killed while it put its marker leaves one even when it left no marker);
    with ``leftovers``, staging data, such temporary files anywhere in the
    array (which lists all its shards) and the claims of dead jobs go too.

    ``checked``: the caller knows ``holder`` holds the array (it created the
    marker itself, with a create-only put, an instant ago), so it is not read
    again.

    Returns
    -------
    list of str
        The keys of the shards rolled back.

    Raises
    ------
    JobConflictError
        If ``holder`` does not hold the array (nothing is touched then).
    """
    if not checked:
        check_held(store, keys, holder)
    rolled = []
    for record_key, record in undo_records(store, keys):
        step("recover.rollback")
        if roll_back(store, record):
            rolled.append(record.key)
        step("recover.forget")
        store.delete(record_key)
    step("recover.cleanup")
    if not leftovers:  # only the records' folder: no staging area is named here
        if store.abilities.leaves_temporaries:  # else nothing to look for (one listing saved)
            store.cleanup(f"{keys.staging}/{NO_STAGING}", keys.marker)
    else:
        store.cleanup(keys.staging, keys.shards)
        for claim in [k for k in store.list(keys.claims) if keys.is_claim(k)]:
            data = store.get(claim)
            try:
                stale = data is None or decoded_marker(data, claim).is_stale()
            except JobConflictError:  # unreadable: no job can hold it
                stale = True
            if stale:  # a live claimant deletes its own claim
                store.delete(claim)
    return rolled


def undo_failed(
    store: ShardStore,
    keys: JobKeys,
    err: BaseException,
    marker: JobMarker,
    what_now: str | None,
) -> None:
    """After a failed run: roll back shards left mid-update (:func:`recover`), say so on ``err``.

    Runs while the job still holds the array (``marker``): no other job
    writes it meanwhile. ``what_now`` (what is left and what to do: the
    job's :meth:`~shardpipe.write.modes.WriteMode.what_now`) is added to the
    error's notes, once per error (jobs run together share it); so are the
    shards rolled back, or the failure of the rollback.
    """
    if what_now is not None and what_now not in getattr(err, "__notes__", ()):
        err.add_note(what_now)
    try:
        rolled = recover(store, keys, marker)
        if rolled:
            named = ", ".join(map(repr, rolled[:8])) + (" ..." if len(rolled) > 8 else "")
            err.add_note(
                f"shardpipe: {len(rolled)} shard(s) left mid-update were rolled back "
                f"to their old bytes: {named}"
            )
    except Exception as cleanup_err:
        err.add_note(
            f"shardpipe: undoing the failed write failed too ({cleanup_err!r}); "
            f"run `shardpipe repair` on the array"
        )
