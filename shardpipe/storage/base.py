"""The interface between shardpipe's writers and a storage backend.

A backend stores objects under keys (``"<array path>/c/0/1/2"``) relative to
its root. It knows nothing of shard formats: it moves bytes. Shards are
published in one of two ways:

* ``put``: the whole object at once, atomically (temporary file + rename on
  a file system, one PUT on an object store);
* parts: ``begin_parts`` once per object, ``write_part`` (or ``copy_part``,
  which takes a byte range of an existing object without passing it through
  the caller) from any number of tasks in parallel, then ``finish_parts``
  from a single task, which writes a head and a tail around the parts and
  makes the object appear at its key in one atomic step; ``abort_parts`` or
  ``cleanup`` undo it.

Updates of existing objects need more, and each backend declares what it can
do in :class:`StoreAbilities`: conditional publishes (create-only, and
replace-if-unchanged against an :data:`ObjectVersion` read earlier), writes
at an offset, appends, and range copies. A method whose ability is missing
raises :class:`~shardpipe.errors.AbilityNotSupportedError`.

Backends are picklable: they travel to Dask workers inside tasks. Every method
that takes a key or a key prefix refuses one that could lead outside the store
(``..``, an absolute path, a NUL...; see :mod:`shardpipe.storage.keys`) with
:class:`~shardpipe.errors.UnsafeKeyError` before any I/O; the defaults here
check too, and :class:`shardpipe.testing.backends.ShardStoreTests` holds every
backend to it.

A *transactional* backend (an Icechunk session) stages every write in a
change set that belongs to the task making it: each publishing task runs
through :meth:`ShardStore.collecting`, which hands back its :class:`Changes`;
the graph merges them on the way back and the client applies the sum with
:meth:`ShardStore.merge_changes`. Nothing is visible until the user commits.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Buffer, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, Self

from shardpipe import advice
from shardpipe.errors import AbilityNotSupportedError, PartsNotSupportedError
from shardpipe.storage.buffers import check_object_size, joined
from shardpipe.storage.keys import edge_key
from shardpipe.storage.parts import PartLayout, PartReceipt, PartsHandle, lay_out_parts

ObjectVersion = str
"""An opaque token that changes whenever the object at a key changes.

The ETag on S3; ``"<inode>:<size>:<mtime_ns>"`` on a file system (the backend
stamps the modification time itself, moving forward on every write, since the
kernel's clock may tick coarsely and inode numbers are reused); a SHA-256 of
the bytes for other zarr stores. Only compared for equality.
"""


@dataclass(frozen=True)
class StoreAbilities:
    """What a backend can do beyond whole-object ``put``/``get``.

    Attributes
    ----------
    parts : bool
        ``begin_parts`` / ``write_part`` / ``finish_parts`` / ``abort_parts``.
    copy_range : bool
        ``copy_part``: a byte range of an existing object becomes a part
        without passing through the caller (S3 ``UploadPartCopy``,
        ``copy_file_range`` on a file system).
    create_only : bool
        ``put(..., if_absent=True)`` is enforced by the storage itself (no
        window in which two writers can both succeed).
    replace_if_unchanged : bool
        ``put(..., if_version=v)`` is enforced by the storage itself. Where it
        is False the check is made just before publishing, which narrows a
        race but cannot close it.
    write_at : bool
        ``write_at``: overwrite bytes at an offset of an existing object.
    append : bool
        ``append`` and ``truncate``: add bytes at the end of an existing
        object, cut it back.
    joins_buffers : bool
        ``put`` and ``write_part`` copy the buffers they are given into one
        object before sending it (the memory model counts that copy).
    streams : bool
        ``put_streamed`` writes each buffer as it is produced, so that the
        storage works while the caller produces the next (a file system);
        otherwise it collects them and calls ``put``.
    min_part_size : int
        Smallest size of a part other than the last one (5 MiB on S3).
    max_parts : int or None
        Most parts one object may have, besides the head and the tail.
    transactional : bool
        Writes are staged in per-task change sets (:meth:`ShardStore.collecting`)
        that must be merged back (:meth:`ShardStore.merge_changes`) to take effect.
    parts_in_memory : bool
        Parts are not staged in storage: ``write_part`` hands its bytes on in
        its receipt, and ``finish_parts`` joins the whole object in memory.
    hard_links : bool
        ``link`` gives a key the bytes of another without copying them (a
        hard link on a file system).
    background_puts : bool
        Whole-object puts are worth running in the background of the
        process while tasks encode (:mod:`shardpipe.storage.uploads`): each
        request waits out a round trip and one connection's bandwidth (an
        object store), where a file system writes as fast as it is fed.
    reads_at_once : bool
        Reads of many small objects are worth making at once (a task carrying
        the chunks of a shard reads them so): each request waits out a round
        trip (an object store), where a file system answers at once and
        threads only contend for the interpreter.
    leaves_temporaries : bool
        A ``put`` writes a temporary object beside its key first (a file
        renamed into place), which a killed process leaves behind: ``cleanup``
        looks for them. An object store's put leaves nothing.
    suffix_ranges : bool
        Readers can fetch the last bytes of an object without knowing its
        size (an HTTP suffix range, ``bytes=-N``). Azure Blob Storage cannot,
        so new arrays written there get their shard index at the start.
    ranges_past_the_end : bool
        A range read that ends past an object's end returns the bytes there
        are (files, HTTP object stores, zarr's stores). Icechunk 2.3 refuses
        it, though its documentation says otherwise.
    """

    parts: bool = False
    copy_range: bool = False
    create_only: bool = False
    replace_if_unchanged: bool = False
    write_at: bool = False
    append: bool = False
    joins_buffers: bool = False
    streams: bool = False
    min_part_size: int = 0
    max_parts: int | None = None
    transactional: bool = False
    parts_in_memory: bool = False
    hard_links: bool = False
    background_puts: bool = False
    reads_at_once: bool = False
    leaves_temporaries: bool = False
    suffix_ranges: bool = True
    ranges_past_the_end: bool = True


class Changes(Protocol):
    """What tasks wrote into a transactional backend, to be merged back and applied."""

    def merged(self, other: Self) -> Self:
        """Return the changes of both (may reuse ``self``; ``other`` is consumed)."""
        ...


class ShardStore(ABC):
    """A place to publish shard objects.

    Attributes
    ----------
    abilities : StoreAbilities
        What this backend can do beyond whole-object writes and reads.
    """

    abilities: StoreAbilities = StoreAbilities()

    @property
    def min_part_size(self) -> int:
        """Smallest size of a part other than the last one."""
        return self.abilities.min_part_size

    @property
    def max_parts(self) -> int | None:
        """Most parts one object may have (besides head and tail), or None."""
        return self.abilities.max_parts

    @property
    def supports_parts(self) -> bool:
        """Whether the ``*_parts`` methods are implemented."""
        return self.abilities.parts

    # -- transactions --------------------------------------------------------
    def collecting[R](self, work: Callable[[], R]) -> tuple[R, Changes | None]:
        """Run ``work`` (a publishing task's body); return its result and the changes it made.

        A backend that is not ``transactional`` writes through at once and
        returns ``None`` as the changes.
        """
        return work(), None

    def merge_changes(self, changes: Changes) -> None:
        """Apply the merged changes of a write's tasks (transactional backends, in the client)."""
        raise AbilityNotSupportedError(f"{type(self).__name__} is not transactional")

    # -- whole objects -------------------------------------------------------
    @abstractmethod
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` atomically.

        Parameters
        ----------
        key : str
            Where.
        buffers : sequence of bytes-like
            The object's bytes, in order.
        if_absent : bool
            Only if nothing is at ``key``.
        if_version : ObjectVersion, optional
            Only if the object at ``key`` still has this version (at most one
            of ``if_absent`` and ``if_version``; both is a ``ValueError``).

        Raises
        ------
        shardpipe.errors.ConditionFailedError
            If a condition does not hold; nothing was changed.
        """

    def put_streamed(self, key: str, buffers: Iterable[Buffer]) -> int:
        """Publish the concatenation of ``buffers`` at ``key`` atomically; return its size.

        ``buffers`` may be produced lazily (a generator that encodes the
        next inner chunk when asked): a backend that ``streams`` writes each
        one as it comes; this default collects them and calls :meth:`put`.
        The object appears only once every buffer is written (and is
        durable, on a durable backend), exactly as with :meth:`put`. An
        exception raised while producing a buffer publishes nothing.
        """
        held = list(buffers)
        self.put(key, held)
        return sum(memoryview(b).nbytes for b in held)

    def joined_body(self, buffers: Sequence[Buffer]) -> Buffer:
        """``buffers`` joined into the one object a :meth:`put` of them sends (no I/O).

        For a backend that ``joins_buffers``: a caller that joins them itself
        (a shard's task, so that the upload has nothing left to copy) asks for
        the object this way, and :meth:`put` sends it as it is. The default is
        :func:`~shardpipe.storage.buffers.joined`.
        """
        return joined(buffers)

    def make_durable(self, keys: Sequence[str]) -> None:
        """Make objects written by someone else (zarr's own store) as durable as ``put`` would.

        Absent keys are skipped. The default does nothing: a backend whose
        writes are durable once they succeed (an object store) has nothing to
        add; a file system calls ``fsync`` on each file and its folder.
        """
        for key in keys:
            edge_key(key, self)

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""

    def get_within(self, key: str, limit: int) -> tuple[int, bytes | None] | None:
        """The size of the object at ``key`` and, when it is at most ``limit`` bytes, its bytes.

        ``None`` when absent; ``(size, None)`` when larger than ``limit``. A
        reader that reads small objects whole and large ones by ranges (a
        shard's check) asks this way, and an object store answers both with
        one request. This default asks the size, then reads one byte more:
        an object replaced by a larger one meanwhile shows so, and is asked
        again (never a prefix of it taken for the object). Where a range may
        not end past the object (``ranges_past_the_end`` False: Icechunk), and
        for an empty object, it reads the object whole, in one ``get``.
        """
        size = self.size(key)
        if size is None or size > limit:
            return None if size is None else (size, None)
        try:
            if size and self.abilities.ranges_past_the_end:
                ranged = self.get_range(key, 0, size + 1)
                if len(ranged) <= size:
                    return len(ranged), ranged
                size = self.size(key)  # grown since its size was asked: ask again
                if size is None or size > limit:
                    return None if size is None else (size, None)
            data = self.get(key)
        except FileNotFoundError:
            return None
        if data is None:
            return None
        return (len(data), None) if len(data) > limit else (len(data), data)

    def get_into(self, key: str, out: Buffer) -> bool:
        """Read ``key`` into ``out`` (writable, its size, else ``ValueError``); False if absent."""
        data = self.get(key)
        if data is not None:
            check_object_size(key, len(data), memoryview(out).nbytes)
            memoryview(out).cast("B")[:] = data
        return data is not None

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key``."""
        data = self.get(key)
        if data is None:
            raise FileNotFoundError(key)
        return data[start:stop]

    @abstractmethod
    def size(self, key: str) -> int | None:
        """Return the size of the object at ``key``, or ``None`` when absent."""

    @abstractmethod
    def version(self, key: str) -> ObjectVersion | None:
        """Return the current version of the object at ``key``, or ``None`` when absent."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""

    def delete_many(self, keys: Sequence[str]) -> None:
        """Remove every one of ``keys`` that is present.

        Not atomic: after a failure some may be gone. Every key is checked
        before any is removed. Object stores remove many in one request or
        many requests at once (S3's ``DeleteObjects`` takes 1,000 keys);
        this default removes them one by one.
        """
        for key in keys:
            edge_key(key, self)
        for key in keys:
            self.delete(key)

    @abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix``, sorted as strings.

        Backends stream the listing where they can (an object store's pages,
        a file system's folders one at a time): the caller may stop early.
        The order lets a listing that failed carry on after the last key it
        gave (:class:`~shardpipe.storage.retry.RetryingStore`).
        """

    # -- in-place updates ----------------------------------------------------
    def write_at(self, key: str, offset: int, buffers: Sequence[Buffer]) -> None:
        """Overwrite the object at ``key`` from byte ``offset`` (not atomic).

        The object must exist and ``offset`` must not lie past its end; it may
        grow. Durable when this returns (if the backend is durable).
        """
        raise AbilityNotSupportedError(f"{type(self).__name__} cannot write at an offset")

    def write_ranges(self, key: str, ranges: Sequence[tuple[int, Sequence[Buffer]]]) -> None:
        """Write each ``(offset, buffers)`` of ``ranges`` in order (not atomic; needs ``write_at``).

        Durable when this returns (if the backend is durable); a backend may
        make that one ``fsync`` for all the ranges.
        """
        for offset, buffers in ranges:
            self.write_at(key, offset, buffers)

    def append(self, key: str, buffers: Sequence[Buffer]) -> int:
        """Append to the existing object at ``key``; return its new size (not atomic)."""
        raise AbilityNotSupportedError(f"{type(self).__name__} cannot append to an object")

    def truncate(self, key: str, size: int) -> None:
        """Cut the object at ``key`` down to ``size`` bytes (backends that can ``append``)."""
        raise AbilityNotSupportedError(f"{type(self).__name__} cannot truncate an object")

    # -- parts ---------------------------------------------------------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """Start writing ``key`` in parts; ``staging`` is a key prefix for scratch data.

        With ``any_order`` the caller lays the object out with
        :func:`~shardpipe.storage.parts.lay_out_parts`, so the backend may
        place parts in the order they are written.
        """
        raise PartsNotSupportedError(
            f"{type(self).__name__} cannot write a shard in parts; raise "
            f"{advice.name('max_mem')} so every "
            "shard fits one task, or write to a local path or S3"
        )

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Write part ``number`` (from 0) of the object; safe to repeat."""
        raise PartsNotSupportedError(type(self).__name__)

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """Make bytes ``[start, stop)`` of the object at ``source`` part ``number``.

        The bytes do not pass through the caller. ``source`` may be the key
        being written (an append composes the new object from the old one).
        A missing ``source`` raises ``FileNotFoundError``.
        """
        raise AbilityNotSupportedError(f"{type(self).__name__} cannot copy byte ranges")

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
        """Publish ``head + parts + tail`` at the object's key atomically.

        The parts lie as :meth:`part_layout` says: by their numbers, unless
        the backend placed them.

        The conditions are those of :meth:`put`. With no receipts and an empty
        head and tail nothing is published and the parts are discarded. After
        a failure (a failed condition included) call :meth:`abort_parts`: some
        stores (S3 after a 409) do not take a second completion of the upload.
        """
        raise PartsNotSupportedError(type(self).__name__)

    def part_layout(self, receipts: Sequence[PartReceipt]) -> PartLayout:
        """Where the parts of ``receipts`` will lie when this process finishes their object.

        The default is :func:`~shardpipe.storage.parts.lay_out_parts`; a
        backend that places parts puts those it can publish as they lie first.
        """
        return lay_out_parts(receipts)

    def abort_parts(self, handle: PartsHandle) -> None:
        """Discard whatever was written for ``handle``."""
        raise PartsNotSupportedError(type(self).__name__)

    def discard_staging(self, staging: str) -> None:
        """Remove the (by now empty) staging area of a write that succeeded."""
        edge_key(staging, self, prefix=True)

    def link(self, source: str, key: str) -> None:
        """Publish at ``key`` the bytes of the object at ``source``, atomically.

        Without the ``hard_links`` ability this is a copy through memory
        (``get``, then ``put``); a file system makes a hard link instead. A
        missing ``source`` raises ``FileNotFoundError``.
        """
        data = self.get(source)
        if data is None:
            raise FileNotFoundError(source)
        self.put(key, [data])

    def prune(self, prefix: str) -> None:
        """Remove the empty folders under ``prefix`` (and it, when empty).

        The default does nothing: an object store has no folders.
        """
        edge_key(prefix, self, prefix=True)

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """Remove every leftover of the write whose staging prefix is ``staging``.

        Parameters
        ----------
        staging : str
            The staging prefix the write used.
        shard_prefix : str
            Key prefix of the array's shards (``"<array path>/c"``).

        Returns
        -------
        int
            How many leftovers were removed.
        """
        edge_key(staging, self, prefix=True)
        edge_key(shard_prefix, self, prefix=True)
        return 0
