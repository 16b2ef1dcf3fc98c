"""Job markers and undo records: how writers learn they are not alone, and how crashes are undone.

Everything lives in one folder beside the array's ``zarr.json``::

    <array>/.shardpipe/job.json                 the job marker
    <array>/.shardpipe/undo/<job>/<sha1 of key>  one undo record per shard being changed
    <array>/.shardpipe/staging/<token>/...       parts of shards written in parts

**Job marker.** A job (a write, an update, a compaction, a repair) creates
``job.json`` with create-only semantics (``O_EXCL`` / ``If-None-Match: *``)
before it changes anything, re-reads it before every shard it publishes and
removes it at the end. A second job, an overwrite or a cleanup that finds it
stops with :class:`~shardpipe.errors.JobConflictError` naming the job. A
marker left by a process of this machine that no longer runs is *stale*: the
next job repairs what it left and takes over.

**Undo records.** An update that changes a shard in place (positioned writes
or appends, which no file system makes atomic) first records, durably, the
shard's size and the old bytes of every range it will overwrite. Rolling the
record back (:func:`roll_back`) restores exactly the old shard: the old bytes
go back and the object is cut to its old size. The record is removed once the
shard is complete (and durable), so a record found later marks a shard whose
update may be torn.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from shardpipe.errors import ConditionFailedError, JobConflictError, ShardFormatError
from shardpipe.storage.base import ShardStore

JOB_DIR = ".shardpipe"
"""Folder (key prefix) beside an array's ``zarr.json`` for shardpipe's own records."""

_ACTIVE: set[str] = set()
"""Ids of the jobs this process is running (a marker of ours not among them is stale)."""


@dataclass(frozen=True)
class JobKeys:
    """Keys of one array's shardpipe records.

    Parameters
    ----------
    array : str
        Key prefix of the array (``""`` at the store root, else ``"path/"``).
    """

    array: str

    @property
    def marker(self) -> str:
        """Key of the job marker."""
        return f"{self.array}{JOB_DIR}/job.json"

    @property
    def undo(self) -> str:
        """Key prefix of undo records."""
        return f"{self.array}{JOB_DIR}/undo/"

    @property
    def staging(self) -> str:
        """Key prefix of staging areas."""
        return f"{self.array}{JOB_DIR}/staging"

    @property
    def shards(self) -> str:
        """Key prefix of the array's shards."""
        return f"{self.array}c"

    def undo_key(self, job: str, shard_key: str) -> str:
        """Key of the undo record of ``shard_key`` in job ``job``."""
        return f"{self.undo}{job}/{hashlib.sha1(shard_key.encode()).hexdigest()}"


@dataclass(frozen=True)
class JobMarker:
    """What a running job records about itself.

    Parameters
    ----------
    job : str
        Unique id of the job.
    action : str
        What it does (``"write"``, ``"update"``, ``"compact"``, ``"repair"``).
    host : str
        Host name of the process that created the marker.
    pid : int
        Its process id.
    started : float
        Unix time it started.
    """

    job: str
    action: str
    host: str
    pid: int
    started: float

    @classmethod
    def new(cls, action: str) -> JobMarker:
        """A marker for a new job of this process."""
        return cls(uuid.uuid4().hex, action, socket.gethostname(), os.getpid(), time.time())

    def describe(self) -> str:
        """One line naming the job for error messages."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"job {self.job} ({self.action}, pid {self.pid} on {self.host}, started {when})"

    def is_stale(self) -> bool:
        """Whether the job certainly no longer runs (its process on this host is gone)."""
        if self.host != socket.gethostname():
            return False
        if self.pid == os.getpid():
            return self.job not in _ACTIVE
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def read_marker(store: ShardStore, keys: JobKeys) -> JobMarker | None:
    """Return the array's job marker, or None when no job holds it."""
    data = store.get(keys.marker)
    if data is None:
        return None
    try:
        return JobMarker(**json.loads(data))
    except (ValueError, TypeError) as err:
        raise JobConflictError(
            f"the job marker {keys.marker!r} is unreadable ({err}); if no shardpipe job is "
            f"running on this array, delete it and run `shardpipe repair`"
        ) from err


def conflict(other: JobMarker, keys: JobKeys, doing: str) -> JobConflictError:
    """The error for finding ``other`` holding the array while ``doing``."""
    return JobConflictError(
        f"cannot {doing}: {other.describe()} is working on this array (marker "
        f"{keys.marker!r}). Wait for it to finish; if it is no longer running, run "
        f"`shardpipe repair <array> --force` (or shardpipe.repair(..., force=True)) to undo "
        f"what it left unfinished and remove its marker",
        asdict(other),
    )


def acquire(store: ShardStore, keys: JobKeys, action: str) -> JobMarker:
    """Create this job's marker; repair after a stale job first.

    Raises
    ------
    JobConflictError
        If another job that may still run holds the array.
    """
    marker = JobMarker.new(action)
    body = json.dumps(asdict(marker)).encode()
    for _ in range(2):
        try:
            if not store.abilities.create_only and store.get(keys.marker) is not None:
                raise ConditionFailedError(keys.marker)
            store.put(keys.marker, [body], if_absent=True)
        except ConditionFailedError:
            other = read_marker(store, keys)
            if other is None:
                continue  # it just went away
            if not other.is_stale():
                raise conflict(other, keys, action) from None
            recover(store, keys, other)
            continue
        _ACTIVE.add(marker.job)
        return marker
    other = read_marker(store, keys)
    raise conflict(other or marker, keys, action)


def check_held(store: ShardStore, keys: JobKeys, marker: JobMarker) -> None:
    """Raise :class:`JobConflictError` unless ``marker`` still holds the array."""
    current = read_marker(store, keys)
    if current is None or current.job != marker.job:
        other = "no job" if current is None else current.describe()
        raise JobConflictError(
            f"{marker.describe()} lost its marker {keys.marker!r} (now: {other}); another "
            "job, a cleanup or a repair took the array over. Nothing more was published; "
            "check the array with `shardpipe verify` before writing it again",
            asdict(current) if current else None,
        )


def release(store: ShardStore, keys: JobKeys, marker: JobMarker) -> None:
    """Remove the job's marker (if it is still ours)."""
    _ACTIVE.discard(marker.job)
    current = read_marker(store, keys)
    if current is not None and current.job == marker.job:
        store.delete(keys.marker)


# -- undo records ------------------------------------------------------------
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
        header = json.dumps(
            {"key": self.key, "size": self.size, "ranges": [[o, len(b)] for o, b in self.ranges]}
        ).encode()
        return b"".join([_HEADER.pack(len(header)), header, *(b for _, b in self.ranges)])

    @classmethod
    def decode(cls, data: bytes) -> UndoRecord:
        """Inverse of :meth:`encode`."""
        try:
            (n,) = _HEADER.unpack_from(data)
            header = json.loads(data[_HEADER.size : _HEADER.size + n])
            pos = _HEADER.size + n
            ranges = []
            for offset, length in header["ranges"]:
                ranges.append((int(offset), bytes(data[pos : pos + length])))
                pos += length
            if pos != len(data):
                raise ValueError(f"{len(data) - pos} bytes left over")
            return cls(str(header["key"]), int(header["size"]), tuple(ranges))
        except (ValueError, KeyError, TypeError, struct.error) as err:
            raise ShardFormatError(f"undo record unreadable: {err}") from err


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
            yield key, UndoRecord.decode(data)
        except ShardFormatError:
            store.delete(key)


def recover(store: ShardStore, keys: JobKeys, stale: JobMarker | None) -> int:
    """Roll back every shard left mid-update, remove leftovers and the stale marker.

    Returns the number of shards rolled back.
    """
    rolled = 0
    for record_key, record in undo_records(store, keys):
        rolled += roll_back(store, record)
        store.delete(record_key)
    store.cleanup(keys.staging, keys.shards)
    if stale is not None:
        current = read_marker(store, keys)
        if current is not None and current.job == stale.job:
            store.delete(keys.marker)
    return rolled


@contextlib.contextmanager
def holding(store: ShardStore, keys: JobKeys, action: str) -> Iterator[JobMarker]:
    """Hold the array's marker for the duration of a ``with`` block."""
    marker = acquire(store, keys, action)
    try:
        yield marker
    finally:
        release(store, keys, marker)
