"""A shard backend that keeps no shard bytes, only counts them: scale runs and dry runs.

:class:`NullShardStore` takes every shard object a write publishes (whole, or
in parts), adds its size to thread-safe counters and forgets it. Metadata
(``zarr.json``, v2 ``.zarray``/``.zattrs``/``.zgroup``, and shardpipe's own
records under :data:`~shardpipe.storage.keys.JOB_DIR`) is kept in a zarr store, so that a write's
checks, job records and ``resume`` logic behave as on real storage. To write
into it, give :func:`~shardpipe.to_sharded_zarr` the target made by
:func:`null_target`::

    from shardpipe.testing.null_store import null_target

    target = null_target()
    shardpipe.to_sharded_zarr(arr, target, shards=..., chunks=...)
    print(target.shards.counts)  # NullCounts(objects=..., nbytes=..., ...)

(``ResolvedStore(zarr.storage.MemoryStore(), NullShardStore(), "")`` works
too for a new array; :func:`null_target` also lets shardpipe read the
``zarr.json`` that zarr wrote, which region writes and ``resume`` need.)

From a reader's view the shards vanish: ``get``, ``size`` and ``version`` of
a shard key answer "absent" and ``list`` does not show it. The array reads
back as its fill value, and :func:`~shardpipe.verify` finds no shards.

Counts are per process: copies of the store unpickled in the same process
(Dask's threads and synchronous schedulers, or a ``LocalCluster`` with
``processes=False``) share one set of counters; a copy in another process
(a distributed worker) counts on its own.
"""

from __future__ import annotations

import builtins
import dataclasses
import threading
import uuid
import weakref
from collections.abc import Buffer, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store

from shardpipe.errors import ConditionFailedError
from shardpipe.storage.base import (
    ObjectVersion,
    ShardStore,
    StoreAbilities,
)
from shardpipe.storage.keys import JOB_DIR, edge_key
from shardpipe.storage.parts import PartReceipt, PartsHandle
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.zarr_store import ZarrShardStore

__all__ = ["NullCounts", "NullShardStore", "is_metadata_key", "keep_every_key", "null_target"]

METADATA_NAMES = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})


def is_metadata_key(key: str) -> bool:
    """Whether ``key`` is metadata (kept by default): a zarr document or a shardpipe record."""
    parts = key.split("/")
    return parts[-1] in METADATA_NAMES or JOB_DIR in parts


def keep_every_key(key: str) -> bool:
    """Keep everything: the store then is a plain in-memory store (tests of its logic)."""
    return True


@dataclass(frozen=True)
class NullCounts:
    """What a :class:`NullShardStore` was given, so far.

    Attributes
    ----------
    objects : int
        Objects published at keys that are not kept (shards).
    nbytes : int
        Bytes of those objects (head, parts and tail of objects written in parts).
    parts : int
        ``write_part`` calls (a retried part counts again).
    part_nbytes : int
        Bytes given to ``write_part``.
    aborted : int
        Objects begun in parts and then aborted or cleaned up (a write
        aborts the shards in parts that turned out to hold only fill value).
    """

    objects: int = 0
    nbytes: int = 0
    parts: int = 0
    part_nbytes: int = 0
    aborted: int = 0


@dataclass
class _Upload:
    key: str
    staging: str
    parts: dict[int, bytes | int] = field(default_factory=dict)  # bytes if kept, else size


class _State:
    """Counters, open uploads and kept objects, shared by a store's copies in one process."""

    def __init__(self, kept: ZarrShardStore) -> None:
        self.lock = threading.Lock()
        self.kept = kept
        self.counts = NullCounts()
        self.uploads: dict[str, _Upload] = {}

    def add(self, **increments: int) -> None:
        with self.lock:
            now = self.counts
            added = {k: getattr(now, k) + n for k, n in increments.items()}
            self.counts = dataclasses.replace(now, **added)


_STATES: weakref.WeakValueDictionary[str, _State] = weakref.WeakValueDictionary()
_STATES_LOCK = threading.Lock()


def _state(ident: str, kept: ZarrShardStore) -> _State:
    with _STATES_LOCK:
        state = _STATES.get(ident)
        if state is None:
            state = _STATES[ident] = _State(kept)
        return state


def _nbytes(buffers: Iterable[Buffer]) -> int:
    return sum(memoryview(b).nbytes for b in buffers)


class NullShardStore(ShardStore):
    """Counts the shard objects published to it and keeps none of their bytes.

    Parameters
    ----------
    metadata : zarr.abc.store.Store, optional
        Where kept keys go (a fresh ``MemoryStore`` by default). Pass the
        ``zarr_store`` of the same :class:`~shardpipe.storage.resolve.ResolvedStore`
        so that shardpipe sees the metadata zarr writes (:func:`null_target`).
    keep : callable, optional
        Which keys are kept (default :func:`is_metadata_key`); the others
        are counted and dropped. Must be picklable (a module-level function).

    Notes
    -----
    Declared abilities: parts (no minimum size, no maximum count) and
    streamed puts, nothing else. Conditional puts are checked but not
    enforced atomically (``create_only`` and ``replace_if_unchanged`` are
    False): a dropped object is never there, so a create-only put of a shard
    always succeeds and a replace-if-unchanged one always fails. Range
    copies, in-place writes and appends are refused (there are no bytes to
    copy or change), so updates of existing arrays cannot be simulated.
    """

    abilities = StoreAbilities(parts=True, streams=True)

    def __init__(
        self, metadata: Store | None = None, *, keep: Callable[[str], bool] = is_metadata_key
    ) -> None:
        self.keep = keep
        self._id = uuid.uuid4().hex
        kept = ZarrShardStore(metadata if metadata is not None else zarr.storage.MemoryStore())
        self._state = _state(self._id, kept)

    def __getstate__(self) -> dict[str, Any]:
        return {"id": self._id, "keep": self.keep, "kept": self._state.kept}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._id = state["id"]
        self.keep = state["keep"]
        self._state = _state(self._id, state["kept"])

    def __repr__(self) -> str:
        return f"NullShardStore({self.counts})"

    @property
    def counts(self) -> NullCounts:
        """The counters now (shared by this store's copies in this process)."""
        with self._state.lock:
            return self._state.counts

    @property
    def kept(self) -> ZarrShardStore:
        """The backend holding the kept keys."""
        return self._state.kept

    # -- whole objects -------------------------------------------------------
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Keep the object at ``key`` or count it; conditions as if nothing were there."""
        if self.keep(edge_key(key, self)):
            self.kept.put(key, buffers, if_absent=if_absent, if_version=if_version)
            return
        self._check_dropped(key, if_absent, if_version)
        self._state.add(objects=1, nbytes=_nbytes(buffers))

    def _check_dropped(self, key: str, if_absent: bool, if_version: ObjectVersion | None) -> None:
        if if_absent and if_version is not None:
            raise ValueError("if_absent and if_version exclude each other")
        if if_version is not None:
            raise ConditionFailedError(
                f"{key!r} in a null store: expected version {if_version}, found no object "
                "(shard objects are not kept); nothing was written"
            )

    def put_streamed(self, key: str, buffers: Iterable[Buffer]) -> int:
        """Count each buffer as it is produced (kept keys: collect, then keep)."""
        if self.keep(edge_key(key, self)):
            return super().put_streamed(key, buffers)
        total = 0
        for buffer in buffers:  # an exception here counts nothing
            total += memoryview(buffer).nbytes
        self._state.add(objects=1, nbytes=total)
        return total

    def get(self, key: str) -> bytes | None:
        """Return a kept object's bytes; ``None`` for shards (never kept)."""
        return self.kept.get(key) if self.keep(edge_key(key, self)) else None

    def size(self, key: str) -> int | None:
        """Return a kept object's size; ``None`` for shards."""
        return self.kept.size(key) if self.keep(edge_key(key, self)) else None

    def version(self, key: str) -> ObjectVersion | None:
        """Return a kept object's version (SHA-256 of its bytes); ``None`` for shards."""
        return self.kept.version(key) if self.keep(edge_key(key, self)) else None

    def delete(self, key: str) -> None:
        """Remove a kept ``key`` if present (shards are never there)."""
        if self.keep(edge_key(key, self)):
            self.kept.delete(key)

    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the kept keys that start with ``prefix``, sorted as strings."""
        return self.kept.list(prefix)

    # -- parts ---------------------------------------------------------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Start an object in parts (kept keys hold their parts' bytes, others their sizes).

        Parts lie by their numbers, whatever ``any_order`` says.
        """
        edge_key(staging, self, prefix=True)
        handle = PartsHandle(edge_key(key, self), uuid.uuid4().hex, staging)
        with self._state.lock:
            self._state.uploads[handle.upload] = _Upload(key, staging)
        return handle

    def _upload(self, handle: PartsHandle) -> _Upload:
        upload = self._state.uploads.get(handle.upload)
        if upload is None:
            raise FileNotFoundError(f"no open upload {handle.upload} of {handle.key!r}")
        return upload

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Count part ``number`` of the object (hold its bytes if the key is kept)."""
        kept = self.keep(edge_key(handle.key, self))
        data: bytes | int = b"".join(buffers) if kept else _nbytes(buffers)
        size = len(data) if isinstance(data, bytes) else data
        with self._state.lock:
            self._upload(handle).parts[number] = data
        self._state.add(parts=1, part_nbytes=size)
        return PartReceipt(number, size)

    def finish_parts(
        self,
        handle: PartsHandle,
        receipts: Sequence[PartReceipt],
        head: bytes,
        tail: bytes,
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish ``head + parts + tail``: kept, or counted as one object."""
        edge_key(handle.key, self)
        with self._state.lock:
            upload = self._upload(handle)
            held = dict(upload.parts)
        chosen = []
        for receipt in sorted(receipts, key=lambda r: r.number):
            part = held.get(receipt.number)
            size = len(part) if isinstance(part, bytes) else part
            if part is None or size != receipt.size:
                raise ValueError(
                    f"part {receipt.number} of {handle.key!r} was not written with "
                    f"{receipt.size} bytes"
                )
            chosen.append(part)
        if not chosen and not head and not tail:
            self._discard(handle)
            return
        if self.keep(handle.key):
            body = [head, *(p for p in chosen if isinstance(p, bytes)), tail]
            self.kept.put(handle.key, body, if_absent=if_absent, if_version=if_version)
        else:
            self._check_dropped(handle.key, if_absent, if_version)
            sizes = sum(p if isinstance(p, int) else len(p) for p in chosen)
            self._state.add(objects=1, nbytes=len(head) + sizes + len(tail))
        self._discard(handle)

    def _discard(self, handle: PartsHandle) -> bool:
        with self._state.lock:
            return self._state.uploads.pop(handle.upload, None) is not None

    def abort_parts(self, handle: PartsHandle) -> None:
        """Forget what was written for ``handle`` (twice is fine)."""
        edge_key(handle.key, self)
        if self._discard(handle):
            self._state.add(aborted=1)

    def open_uploads(self) -> builtins.list[str]:
        """Keys of the objects begun in parts and neither finished nor aborted, sorted."""
        with self._state.lock:
            return sorted(u.key for u in self._state.uploads.values())

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Abort the open uploads of the write whose staging prefix is ``staging``."""
        edge_key(staging, self, prefix=True)
        edge_key(shard_prefix, self, prefix=True)
        with self._state.lock:
            mine = [i for i, u in self._state.uploads.items() if u.staging == staging]
            for upload in mine:
                del self._state.uploads[upload]
        self._state.add(aborted=len(mine))
        return len(mine)


def null_target(path: str = "") -> ResolvedStore:
    """A write target whose shards go to a :class:`NullShardStore` and metadata to memory.

    Pass it as the ``store`` of :func:`~shardpipe.to_sharded_zarr` (or
    :func:`~shardpipe.prepare_write`); read the counts from
    ``target.shards.counts`` afterwards.
    """
    memory = zarr.storage.MemoryStore()
    return ResolvedStore(memory, NullShardStore(memory), path)
