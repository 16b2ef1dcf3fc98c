"""Job markers: which job holds an array, and whether it still runs.

The marker (:data:`~shardpipe.storage.keys.JOB_MARKER` under the array) names the job
holding the array (see the package's documentation, :mod:`shardpipe.journal`, for the
whole layout and what a crash or a race can leave). This module reads and checks
markers; :mod:`shardpipe.journal.array_lock` takes and releases them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from shardpipe.errors import JobConflictError, MetadataError
from shardpipe.storage.base import ObjectVersion, ShardStore
from shardpipe.storage.keys import CLAIMS_DIR, DONE_DIR, JOB_MARKER, STAGING_DIR, UNDO_DIR

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
        return f"{self.array}{JOB_MARKER}"

    @property
    def undo(self) -> str:
        """Key prefix of undo records."""
        return f"{self.array}{UNDO_DIR}/"

    @property
    def claims(self) -> str:
        """Key prefix of the claims on stale markers (see :mod:`shardpipe.journal.array_lock`)."""
        return f"{self.array}{CLAIMS_DIR}/"

    def claim_key(self, job: str) -> str:
        """Key of the claim on the marker (or claim) of job ``job``."""
        return f"{self.claims}{hashlib.sha1(job.encode()).hexdigest()}"

    def is_claim(self, key: str) -> bool:
        """Whether ``key`` is named as a claim (a file system lists other files there too:
        the temporary file of a claim being written, which is its writer's)."""
        name = key.removeprefix(self.claims)
        return len(name) == 40 and name != key and all(c in "0123456789abcdef" for c in name)

    @property
    def staging(self) -> str:
        """Key prefix of staging areas."""
        return f"{self.array}{STAGING_DIR}"

    @property
    def shards(self) -> str:
        """Key prefix of the array's shards."""
        return f"{self.array}c"

    @property
    def done(self) -> str:
        """Key prefix of the records of shards an update has finished."""
        return f"{self.array}{DONE_DIR}/"

    def done_key(self, update: str, shard_key: str) -> str:
        """Key of the record that update ``update`` finished ``shard_key``."""
        return f"{self.done}{update}/{hashlib.sha1(shard_key.encode()).hexdigest()}"

    def undo_key(self, job: str, shard_key: str) -> str:
        """Key of the undo record of ``shard_key`` in job ``job``."""
        return f"{self.undo}{job}/{hashlib.sha1(shard_key.encode()).hexdigest()}"


PID_CLOCK_SLACK = 2.0
"""Seconds a process's start time (whole seconds since boot, in Linux's ``/proc``) may read
later than the marker its job made."""


def process_started(pid: int) -> float | None:
    """The Unix time process ``pid`` started, from Linux's ``/proc``; None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith(b"btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # the 22nd field: starttime
    except (OSError, ValueError, IndexError, StopIteration):
        return None


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

    def is_running_here(self) -> bool:
        """Whether a process of the job's pid runs on this host (the job's, as far as can be
        told: a process that started after the marker was made is another one given the
        same pid; one of the same pid in another PID namespace cannot be told apart).
        """
        if self.host != socket.gethostname():
            return False
        if self.pid == os.getpid():
            return self.job in _ACTIVE
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # alive, another user's
        began = process_started(self.pid)
        return began is None or began <= self.started + PID_CLOCK_SLACK

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
    """The marker a decoded marker document describes, every field checked.

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


def decoded_marker(data: bytes, key: str) -> JobMarker:
    """The marker (or claim) in ``data``, read at ``key``; JobConflictError if unreadable."""
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
    return None if data is None else decoded_marker(data, keys.marker)


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
            return decoded_marker(data, key), before
    raise JobConflictError(
        f"the job marker {key!r} kept changing while it was read: other jobs are taking "
        "the array; try again"
    )


def conflict(other: JobMarker, keys: JobKeys, doing: str) -> JobConflictError:
    """The error for finding ``other`` holding the array while ``doing``."""
    if other.is_running_here():
        return JobConflictError(
            f"cannot {doing}: {other.describe()} is working on this array (marker "
            f"{keys.marker!r}), and a process of its pid runs on this machine. Wait for the "
            f"job to finish; if that process is not the job (the job ran in a container, or "
            f"its pid was given to another process) and the job no longer runs, run "
            f"`shardpipe repair <array> --force` (or shardpipe.repair(..., force=True))",
            asdict(other),
        )
    return JobConflictError(
        f"cannot {doing}: {other.describe()} is working on this array (marker "
        f"{keys.marker!r}). Wait for it to finish; if it is no longer running, run "
        f"`shardpipe repair <array> --force` (or shardpipe.repair(..., force=True)) to undo "
        f"what it left unfinished and remove its marker",
        asdict(other),
    )


def check_held(store: ShardStore, keys: JobKeys, marker: JobMarker) -> None:
    """Raise :class:`~shardpipe.errors.JobConflictError` unless ``marker`` still holds the array."""
    current = read_marker(store, keys)
    if current is None or current.job != marker.job:
        other = "no job" if current is None else current.describe()
        raise JobConflictError(
            f"{marker.describe()} lost its marker {keys.marker!r} (now: {other}); another "
            "job, a cleanup or a repair took the array over. Nothing more was published; "
            "check the array with `shardpipe verify` before writing it again",
            asdict(current) if current else None,
        )
