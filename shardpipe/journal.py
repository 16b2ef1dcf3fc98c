"""Job markers and undo records: how writers learn they are not alone, and how crashes are undone.

Everything lives in one folder beside the array's ``zarr.json``::

    <array>/.shardpipe/job.json                  the job marker
    <array>/.shardpipe/claims/<sha1 of job id>    a claim on a stale marker (while taken over)
    <array>/.shardpipe/undo/<job>/<sha1 of key>   one undo record per shard being changed
    <array>/.shardpipe/staging/<token>/...        parts of shards written in parts

**Job marker.** A job (a write, an update, a compaction, a repair, a
cleanup) holds the array while it works: it creates ``job.json``
create-only (``O_EXCL``/``link`` / ``If-None-Match: *``) before it changes
anything, re-reads it before every shard it publishes
(:func:`check_held`) and removes it at the end. A second job that finds it
stops with :class:`~shardpipe.errors.JobConflictError` naming the job. A
marker left by a process of this machine that no longer runs is *stale*:
the next job takes it over in one atomic step and only then, holding the
array, rolls back what the dead job left (:mod:`shardpipe.array_lock`
says how; a job never recovers anything while it does not hold the array).

**Undo records.** An update that changes a shard in place (positioned writes
or appends, which no file system makes atomic) first records, durably, the
shard's size and the old bytes of every range it will overwrite. Rolling the
record back (:func:`roll_back`) restores exactly the old shard: the old bytes
go back and the object is cut to its old size. The record is removed once the
shard is complete (and durable), so a record found later marks a shard whose
update may be torn. The task that fails while writing a shard rolls it back
at once (:mod:`shardpipe.updating`); a record stays only when the job was
killed or that rollback failed too, and then whichever job next holds the
array rolls it back (:func:`recover`) before it changes anything.

**What a crash or a race can leave**, and who removes it: a killed job
leaves its marker, its undo records, staging data and temporary files; the
next job takes the marker over and removes them. A job stalled for any
time at any step (:mod:`shardpipe.journal_stalls` makes tests stall it)
either still holds the array when it goes on, or finds that it does not
and stops with :class:`~shardpipe.errors.JobConflictError`; it never
rolls back, deletes or overwrites what a live job wrote. The temporary
files of a live process are never removed by another job's cleanup (their
names say which process writes them: :mod:`shardpipe.storage.local.store`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from shardpipe.errors import JobConflictError, MetadataError
from shardpipe.journal_stalls import step
from shardpipe.storage.base import ObjectVersion, ShardStore

JOB_DIR = ".shardpipe"
"""Folder (key prefix) beside an array's ``zarr.json`` for shardpipe's own records."""

NO_STAGING = "none"
"""A staging area no write uses: cleaning it up removes only temporary files."""

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
    def claims(self) -> str:
        """Key prefix of the claims on stale markers (see :mod:`shardpipe.array_lock`)."""
        return f"{self.array}{JOB_DIR}/claims/"

    def claim_key(self, job: str) -> str:
        """Key of the claim on the marker (or claim) of job ``job``."""
        return f"{self.claims}{hashlib.sha1(job.encode()).hexdigest()}"

    @property
    def staging(self) -> str:
        """Key prefix of staging areas."""
        return f"{self.array}{JOB_DIR}/staging"

    @property
    def shards(self) -> str:
        """Key prefix of the array's shards."""
        return f"{self.array}c"

    @property
    def done(self) -> str:
        """Key prefix of the records of shards an update has finished."""
        return f"{self.array}{JOB_DIR}/done/"

    def done_key(self, update: str, shard_key: str) -> str:
        """Key of the record that update ``update`` finished ``shard_key``."""
        return f"{self.done}{update}/{hashlib.sha1(shard_key.encode()).hexdigest()}"

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

    def encode(self) -> bytes:
        """The marker as stored (a JSON object)."""
        return json.dumps(asdict(self)).encode()

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


_MARKER_FIELDS: dict[str, type | tuple[type, ...]] = {
    "job": str,
    "action": str,
    "host": str,
    "pid": int,
    "started": (int, float),
}


def _marker_of(document: Any, key: str) -> JobMarker:
    """The marker a decoded ``job.json`` describes, every field checked.

    Raises
    ------
    MetadataError
        Naming ``key`` and the field that is missing, extra or wrong.
    """
    if not isinstance(document, dict):
        raise MetadataError(f"{key!r} holds a JSON {type(document).__name__}, not an object")
    if set(document) != set(_MARKER_FIELDS):
        raise MetadataError(
            f"{key!r} has the fields {sorted(map(str, document))}, not {sorted(_MARKER_FIELDS)}"
        )
    for name, kind in _MARKER_FIELDS.items():
        value = document[name]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise MetadataError(f"{key!r}: {name!r} has the wrong type ({value!r:.100})")
    if not 0 < document["pid"] < 2**31:
        raise MetadataError(f"{key!r}: 'pid' {document['pid']} is not a process id")
    if not (math.isfinite(document["started"]) and 0 <= document["started"] < 2**35):
        raise MetadataError(f"{key!r}: 'started' {document['started']} is not a Unix time")
    return JobMarker(**document)


def started(job: str) -> None:
    """Count job ``job`` among those this process runs (before its marker exists)."""
    _ACTIVE.add(job)


def ended(job: str) -> None:
    """No longer count job ``job`` among those this process runs (its marker is gone)."""
    _ACTIVE.discard(job)


def _decoded(data: bytes, key: str) -> JobMarker:
    try:
        return _marker_of(json.loads(data), key)
    except (ValueError, TypeError, RecursionError) as err:
        raise JobConflictError(
            f"the job marker {key!r} is unreadable ({err}); if no shardpipe job is "
            f"running on this array, delete it and run `shardpipe repair`"
        ) from err


def read_marker(store: ShardStore, keys: JobKeys) -> JobMarker | None:
    """Return the array's job marker, or None when no job holds it.

    Raises
    ------
    JobConflictError
        If a marker is there but unreadable (its cause, a
        :class:`~shardpipe.errors.MetadataError`, names the field).
    """
    data = store.get(keys.marker)
    return None if data is None else _decoded(data, keys.marker)


def read_marker_at(store: ShardStore, key: str) -> tuple[JobMarker, ObjectVersion] | None:
    """Return the marker (or claim) at ``key`` and the version of exactly those bytes.

    The version is read before and after the bytes until both agree (a
    marker is only ever replaced whole, never changed in place), so that a
    conditional replace against it replaces what was read.

    Raises
    ------
    JobConflictError
        If the object is unreadable, or keeps changing while it is read.
    """
    for _ in range(8):
        before = store.version(key)
        if before is None:
            return None
        data = store.get(key)
        if data is not None and store.version(key) == before:
            return _decoded(data, key), before
    raise JobConflictError(
        f"the job marker {key!r} kept changing while it was read: other jobs are taking "
        "the array; try again"
    )


def conflict(other: JobMarker, keys: JobKeys, doing: str) -> JobConflictError:
    """The error for finding ``other`` holding the array while ``doing``."""
    return JobConflictError(
        f"cannot {doing}: {other.describe()} is working on this array (marker "
        f"{keys.marker!r}). Wait for it to finish; if it is no longer running, run "
        f"`shardpipe repair <array> --force` (or shardpipe.repair(..., force=True)) to undo "
        f"what it left unfinished and remove its marker",
        asdict(other),
    )


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
            be the SHA-1 of the shard's key, as :meth:`JobKeys.undo_key` makes it).
        array : str, optional
            Key prefix of the array: the shard must be a key under it (not
            ``zarr.json``, nothing under ``.shardpipe/``, no ``..`` component).

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
    store: ShardStore, keys: JobKeys, holder: JobMarker, *, leftovers: bool = True
) -> list[str]:
    """Roll back every shard left mid-update; with ``leftovers``, remove what dead jobs left.

    Only the job that holds the array (``holder``) may call this: every
    undo record then belongs to a job that no longer runs (or to the
    holder itself, after its own failure). Temporary files of processes
    that no longer run are removed beside the marker and records (a job
    killed while it put its marker leaves one even when it left no marker);
    with ``leftovers``, staging data, such temporary files anywhere in the
    array (which lists all its shards) and the claims of dead jobs go too.

    Returns
    -------
    list of str
        The keys of the shards rolled back.

    Raises
    ------
    JobConflictError
        If ``holder`` does not hold the array (nothing is touched then).
    """
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
        store.cleanup(f"{keys.staging}/{NO_STAGING}", keys.marker)
    else:
        store.cleanup(keys.staging, keys.shards)
        for claim in list(store.list(keys.claims)):
            data = store.get(claim)
            try:
                stale = data is None or _decoded(data, claim).is_stale()
            except JobConflictError:  # unreadable: no job can hold it
                stale = True
            if stale:  # a live claimant deletes its own claim
                store.delete(claim)
    return rolled
