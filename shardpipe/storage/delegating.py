"""A backend that hands every call to another: the base of wrapping stores.

:class:`DelegatingStore` forwards each method, property and ability of
:class:`~shardpipe.storage.base.ShardStore` to the backend it wraps
(``inner``), so a wrapper overrides only what it changes: the retry layer
(:class:`~shardpipe.storage.retry.RetryingStore`) retries the calls that touch
storage, the fault injectors of :mod:`shardpipe.testing` fail some of them.
A method added to ``ShardStore`` is forwarded here once, and every wrapper
forwards it (``tests/storage/test_delegating.py`` fails until it is).

Every forwarded call passes through ``_forward`` with the
name of the method, so a wrapper that treats all calls alike (injecting
faults, counting) overrides that one method. Wrappers stay picklable as long
as what they hold is: they travel to Dask workers inside tasks.
"""

from __future__ import annotations

from collections.abc import Buffer, Callable, Iterable, Iterator, Sequence

from shardpipe.storage.base import (
    Changes,
    ObjectVersion,
    ShardStore,
    StoreAbilities,
)
from shardpipe.storage.parts import PartLayout, PartReceipt, PartsHandle


class DelegatingStore(ShardStore):
    """A backend that forwards every call to ``inner``; subclasses override what they change.

    Parameters
    ----------
    inner : ShardStore
        The backend doing the work.
    """

    def __init__(self, inner: ShardStore) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def _forward[T](self, method: str, call: Callable[[], T]) -> T:
        """Make ``call``, the forwarding of the ``ShardStore`` method named ``method``.

        Every method of this class forwards through here; the default just
        calls. A subclass that treats every call alike overrides this alone.
        """
        return call()

    # -- abilities -----------------------------------------------------------
    @property
    def abilities(self) -> StoreAbilities:  # type: ignore[override]
        """The inner backend's abilities."""
        return self.inner.abilities

    @property
    def min_part_size(self) -> int:
        """The inner backend's smallest part."""
        return self.inner.min_part_size

    @property
    def max_parts(self) -> int | None:
        """The inner backend's most parts per object."""
        return self.inner.max_parts

    @property
    def supports_parts(self) -> bool:
        """Whether the inner backend writes objects in parts."""
        return self.inner.supports_parts

    # -- transactions --------------------------------------------------------
    def collecting[R](self, work: Callable[[], R]) -> tuple[R, Changes | None]:
        """See :meth:`~shardpipe.storage.base.ShardStore.collecting`."""
        return self._forward("collecting", lambda: self.inner.collecting(work))

    def merge_changes(self, changes: Changes) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.merge_changes`."""
        self._forward("merge_changes", lambda: self.inner.merge_changes(changes))

    # -- whole objects -------------------------------------------------------
    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.put`."""
        self._forward(
            "put", lambda: self.inner.put(key, buffers, if_absent=if_absent, if_version=if_version)
        )

    def put_streamed(self, key: str, buffers: Iterable[Buffer]) -> int:
        """See :meth:`~shardpipe.storage.base.ShardStore.put_streamed`."""
        return self._forward("put_streamed", lambda: self.inner.put_streamed(key, buffers))

    def joined_body(self, buffers: Sequence[Buffer]) -> Buffer:
        """The inner backend's joined body: no I/O, so nothing to forward (a gate never waits)."""
        return self.inner.joined_body(buffers)

    def make_durable(self, keys: Sequence[str]) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.make_durable`."""
        self._forward("make_durable", lambda: self.inner.make_durable(keys))

    def get(self, key: str) -> bytes | None:
        """See :meth:`~shardpipe.storage.base.ShardStore.get`."""
        return self._forward("get", lambda: self.inner.get(key))

    def get_within(self, key: str, limit: int) -> tuple[int, bytes | None] | None:
        """See :meth:`~shardpipe.storage.base.ShardStore.get_within`."""
        return self._forward("get_within", lambda: self.inner.get_within(key, limit))

    def get_into(self, key: str, out: Buffer) -> bool:
        """See :meth:`~shardpipe.storage.base.ShardStore.get_into`."""
        return self._forward("get_into", lambda: self.inner.get_into(key, out))

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """See :meth:`~shardpipe.storage.base.ShardStore.get_range`."""
        return self._forward("get_range", lambda: self.inner.get_range(key, start, stop))

    def size(self, key: str) -> int | None:
        """See :meth:`~shardpipe.storage.base.ShardStore.size`."""
        return self._forward("size", lambda: self.inner.size(key))

    def version(self, key: str) -> ObjectVersion | None:
        """See :meth:`~shardpipe.storage.base.ShardStore.version`."""
        return self._forward("version", lambda: self.inner.version(key))

    def delete(self, key: str) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.delete`."""
        self._forward("delete", lambda: self.inner.delete(key))

    def delete_many(self, keys: Sequence[str]) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.delete_many`."""
        self._forward("delete_many", lambda: self.inner.delete_many(keys))

    def list(self, prefix: str) -> Iterator[str]:
        """See :meth:`~shardpipe.storage.base.ShardStore.list`."""
        return self._forward("list", lambda: self.inner.list(prefix))

    # -- in-place updates ----------------------------------------------------
    def write_at(self, key: str, offset: int, buffers: Sequence[Buffer]) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.write_at`."""
        self._forward("write_at", lambda: self.inner.write_at(key, offset, buffers))

    def write_ranges(self, key: str, ranges: Sequence[tuple[int, Sequence[Buffer]]]) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.write_ranges`."""
        self._forward("write_ranges", lambda: self.inner.write_ranges(key, ranges))

    def append(self, key: str, buffers: Sequence[Buffer]) -> int:
        """See :meth:`~shardpipe.storage.base.ShardStore.append`."""
        return self._forward("append", lambda: self.inner.append(key, buffers))

    def truncate(self, key: str, size: int) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.truncate`."""
        self._forward("truncate", lambda: self.inner.truncate(key, size))

    # -- parts ---------------------------------------------------------------
    def begin_parts(self, key: str, staging: str, *, any_order: bool = False) -> PartsHandle:
        """See :meth:`~shardpipe.storage.base.ShardStore.begin_parts`."""
        return self._forward(
            "begin_parts", lambda: self.inner.begin_parts(key, staging, any_order=any_order)
        )

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """See :meth:`~shardpipe.storage.base.ShardStore.write_part`."""
        return self._forward("write_part", lambda: self.inner.write_part(handle, number, buffers))

    def copy_part(
        self, handle: PartsHandle, number: int, source: str, start: int, stop: int
    ) -> PartReceipt:
        """See :meth:`~shardpipe.storage.base.ShardStore.copy_part`."""
        return self._forward(
            "copy_part", lambda: self.inner.copy_part(handle, number, source, start, stop)
        )

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
        """See :meth:`~shardpipe.storage.base.ShardStore.finish_parts`."""
        self._forward(
            "finish_parts",
            lambda: self.inner.finish_parts(
                handle, receipts, head, tail, if_absent=if_absent, if_version=if_version
            ),
        )

    def part_layout(self, receipts: Sequence[PartReceipt]) -> PartLayout:
        """See :meth:`~shardpipe.storage.base.ShardStore.part_layout` (no I/O: not forwarded)."""
        return self.inner.part_layout(receipts)

    def abort_parts(self, handle: PartsHandle) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.abort_parts`."""
        self._forward("abort_parts", lambda: self.inner.abort_parts(handle))

    def discard_staging(self, staging: str) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.discard_staging`."""
        self._forward("discard_staging", lambda: self.inner.discard_staging(staging))

    def link(self, source: str, key: str) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.link`."""
        self._forward("link", lambda: self.inner.link(source, key))

    def prune(self, prefix: str) -> None:
        """See :meth:`~shardpipe.storage.base.ShardStore.prune`."""
        self._forward("prune", lambda: self.inner.prune(prefix))

    def cleanup(self, staging: str, shard_prefix: str) -> int:
        """See :meth:`~shardpipe.storage.base.ShardStore.cleanup`."""
        return self._forward("cleanup", lambda: self.inner.cleanup(staging, shard_prefix))
