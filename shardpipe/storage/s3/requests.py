"""What the multipart functions need of an S3 backend: its requests, as a protocol.

:mod:`shardpipe.storage.s3.multipart` writes shards in parts through any
object with these members; :class:`shardpipe.storage.s3.store.S3ShardStore`
is one (and imports the multipart module, never the other way round).
"""

from __future__ import annotations

import builtins
from collections.abc import Buffer, Iterator, Sequence
from typing import Any, Protocol

from shardpipe.errors import ConditionFailedError
from shardpipe.storage.base import ObjectVersion


class S3Requests(Protocol):
    """An S3 backend as the multipart functions use it.

    Its attribute ``bucket`` is the bucket's name and ``fs`` the
    ``s3fs.S3FileSystem`` that sends the requests; the methods are those of
    :class:`~shardpipe.storage.s3.store.S3ShardStore`.
    """

    bucket: str
    fs: Any

    @property
    def min_part_size(self) -> int:
        """Bytes every part but the last must hold."""
        ...

    def full_key(self, key: str) -> str:
        """The object key in the bucket of ``key`` (relative to the backend's root)."""
        ...

    def call(self, method: str, key: str, **kwargs: Any) -> dict[str, Any]:
        """Send the S3 request ``method`` about ``key``, retried as the backend retries."""
        ...

    def condition_failed(
        self, method: str, key: str, conditions: dict[str, Any]
    ) -> ConditionFailedError:
        """The error for a refused conditional ``method`` of ``key``."""
        ...

    def get(self, key: str) -> bytes | None:
        """The object at ``key``, or None."""
        ...

    def put(
        self,
        key: str,
        buffers: Sequence[Buffer],
        *,
        if_absent: bool = False,
        if_version: ObjectVersion | None = None,
    ) -> None:
        """Publish the concatenation of ``buffers`` at ``key``."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        ...

    def list(self, prefix: str) -> Iterator[str]:
        """The keys under ``prefix``."""
        ...

    def version(self, key: str) -> ObjectVersion | None:
        """The version (ETag) of the object at ``key``, or None."""
        ...

    def head_object(self, key: str) -> dict[str, Any] | None:
        """The ``HeadObject`` answer for ``key``, or None when absent."""
        ...

    def open_uploads(self, prefix: str) -> builtins.list[tuple[str, str]]:
        """``(key, upload id)`` of every open multipart upload under ``prefix``."""
        ...
