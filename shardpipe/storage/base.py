"""The interface between shardpipe's writers and a storage backend.

A backend publishes shard objects under keys (``"<array path>/c/0/1/2"``)
relative to its root. Two ways exist:

* ``put``: the whole shard at once, atomically (temporary file + rename on a
  file system, one PUT on an object store);
* parts: ``begin_parts`` once per shard, ``write_part`` from any number of
  tasks in parallel, then ``finish_parts`` from a single task, which writes
  a head and a tail (the index) around the parts and makes the shard appear
  at its key in one atomic step; ``abort_parts`` or ``cleanup`` undo it.

Backends are picklable: they travel to Dask workers inside tasks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Buffer, Iterator, Sequence
from dataclasses import dataclass


class StorageError(OSError):
    """A storage operation failed after the backend's retries."""


class PartsNotSupportedError(NotImplementedError):
    """The backend cannot write a shard in parts."""


@dataclass(frozen=True)
class PartsHandle:
    """Identifies one shard being written in parts.

    Parameters
    ----------
    key : str
        The shard's key.
    upload : str
        Backend-specific id of the parts (a staging folder on a file system,
        a multipart upload id on an object store).
    staging : str
        The write's staging prefix.
    """

    key: str
    upload: str
    staging: str


@dataclass(frozen=True)
class PartReceipt:
    """What ``write_part`` hands on to ``finish_parts``.

    Parameters
    ----------
    number : int
        Position of the part in the shard, from 0.
    size : int
        Bytes written.
    etag : str or None
        Object-store entity tag of the uploaded part.
    """

    number: int
    size: int
    etag: str | None = None


class ShardStore(ABC):
    """A place to publish shard objects.

    Attributes
    ----------
    min_part_size : int
        Smallest size of a part other than the last one (5 MiB on S3).
    max_parts : int or None
        Most parts one shard may have, head and tail included.
    supports_parts : bool
        Whether the ``*_parts`` methods are implemented.
    """

    min_part_size: int = 0
    max_parts: int | None = None
    supports_parts: bool = False

    # -- whole objects -------------------------------------------------------
    @abstractmethod
    def put(self, key: str, buffers: Sequence[Buffer]) -> None:
        """Publish the concatenation of ``buffers`` at ``key`` atomically."""

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent."""

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
    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Iterate over the keys that start with ``prefix``."""

    # -- parts ---------------------------------------------------------------
    def head_size(self, index_nbytes: int) -> int:
        """Bytes reserved before the first part when the index goes first."""
        return index_nbytes

    def begin_parts(self, key: str, staging: str) -> PartsHandle:
        """Start writing ``key`` in parts; ``staging`` is a key prefix for scratch data."""
        raise PartsNotSupportedError(
            f"{type(self).__name__} cannot write a shard in parts; raise max_mem so every "
            "shard fits one task, or write to a local path or S3"
        )

    def write_part(
        self, handle: PartsHandle, number: int, buffers: Sequence[Buffer]
    ) -> PartReceipt:
        """Write part ``number`` (from 0) of the shard; safe to repeat."""
        raise PartsNotSupportedError(type(self).__name__)

    def finish_parts(
        self, handle: PartsHandle, receipts: Sequence[PartReceipt], head: bytes, tail: bytes
    ) -> None:
        """Publish ``head + parts in order + tail`` at the shard's key atomically."""
        raise PartsNotSupportedError(type(self).__name__)

    def abort_parts(self, handle: PartsHandle) -> None:
        """Discard whatever was written for ``handle``."""
        raise PartsNotSupportedError(type(self).__name__)

    def discard_staging(self, staging: str) -> None:
        """Remove the (by now empty) staging area of a write that succeeded."""
        return None

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
        return 0
