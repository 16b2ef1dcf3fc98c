"""Reading S3 objects: whole, or a range of their bytes (a part of the S3 backend).

:class:`S3ObjectReads` is mixed into
:class:`~shardpipe.storage.s3.store.S3ShardStore`; reads go through the
backend's s3fs file system and its faults are classified as the backend's.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import fsspec.asyn

from shardpipe.errors import StorageError
from shardpipe.storage.keys import edge_key
from shardpipe.storage.s3 import faults

WHOLE_GET_PIECE = 8 * 2**20
"""Bytes of an object one GET of :meth:`S3ObjectReads.get` asks for (8 MiB)."""

READ_ATTEMPTS = 3
"""Reads of a long object :meth:`S3ObjectReads.get_within` starts before it gives up on
an object replaced while each was under way."""


class S3ObjectReads:
    """``get`` and ``get_range`` of the S3 backend."""

    fs: Any
    bucket: str
    reached: bool

    if TYPE_CHECKING:  # what the backend it is mixed into has

        def full_key(self, key: str) -> str: ...

        def size(self, key: str) -> int | None: ...

        def _fault(self, operation: str, key: str, err: BaseException) -> StorageError: ...

    def _reading[T](self, key: str, read: Callable[[], T]) -> T:
        """Make ``read``, a GET of ``key``: a shardpipe error if it fails.

        ``FileNotFoundError`` when no object is there (a missing bucket is a
        fault of the store's configuration instead).
        """
        try:
            result = read()
        except FileNotFoundError as err:
            if faults.error_code(err) != "NoSuchBucket":
                path = f"s3://{self.bucket}/{self.full_key(key)}"
                raise FileNotFoundError(f"no S3 object {path}: {err}") from err
            raise self._fault("GET", key, err) from err
        except Exception as err:
            raise self._fault("GET", key, err) from err
        self.reached = True
        return result

    def _cat(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        path = f"{self.bucket}/{self.full_key(key)}"
        data: bytes = self._reading(key, lambda: self.fs.cat_file(path, start=start, end=end))
        return data

    def _first_piece(self, key: str, nbytes: int) -> tuple[int, bytes, str | None] | None:
        """One GET of the first ``nbytes`` (at least 1) of ``key``: the object's size, them,
        and its ETag (the version the rest of a long object is read from).

        The size comes from the answer's ``Content-Range``; None when absent.
        """
        full = self.full_key(key)  # an unsafe key is refused here, not taken for a fault

        async def fetch() -> tuple[dict[str, Any], bytes]:
            return await self._ranged_get(full, 0, nbytes, {})

        try:
            response, data = self._reading(key, lambda: fsspec.asyn.sync(self.fs.loop, fetch))
        except FileNotFoundError:
            return None
        except StorageError as err:
            if err.__cause__ is not None and faults.error_code(err.__cause__) == "InvalidRange":
                return 0, b"", None  # an empty object has no first byte to range over
            raise
        etag = response.get("ETag")
        total = str(response.get("ContentRange") or "").rpartition("/")[2]
        if total.isdigit():
            return int(total), data, etag
        if not response.get("ContentRange"):  # the whole object: the range was not applied
            return len(data), data, etag
        size = self.size(key)  # a size the answer left unknown ("*")
        return None if size is None else (size, data, etag)

    async def _ranged_get(
        self, full: str, start: int, stop: int, condition: dict[str, str]
    ) -> tuple[dict[str, Any], bytes]:
        """One GET of ``[start, stop)`` of the object at the full key ``full`` (``condition``:
        ``{"IfMatch": etag}`` or nothing): the answer's fields and the bytes."""
        response: dict[str, Any] = await self.fs._call_s3(
            "get_object",
            Bucket=self.bucket,
            Key=full,
            Range=f"bytes={start}-{stop - 1}",
            **condition,
        )
        body = response["Body"]
        try:
            data: bytes = await body.read()
            return response, data
        finally:
            body.close()

    def _rest(self, key: str, starts: range, size: int, etag: str | None) -> list[bytes] | None:
        """The pieces of ``key`` from each of ``starts`` on, all GETs at once, each of the
        version ``etag`` (``If-Match``); None if the object was replaced or removed since."""
        full = self.full_key(key)
        condition = {} if etag is None else {"IfMatch": etag}

        async def piece(start: int) -> bytes:
            stop = min(start + WHOLE_GET_PIECE, size)
            return (await self._ranged_get(full, start, stop, condition))[1]

        async def fetch() -> list[bytes]:
            tasks = [asyncio.ensure_future(piece(start)) for start in starts]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:  # the other pieces are not waited for: stop their GETs
                for task in tasks:
                    task.cancel()
                raise

        try:
            pieces: list[bytes] = self._reading(key, lambda: fsspec.asyn.sync(self.fs.loop, fetch))
        except FileNotFoundError:
            return None
        except StorageError as err:
            cause = err.__cause__
            if cause is not None and faults.error_code(cause) in faults.CONDITION_CODES:
                return None
            raise
        return pieces

    def get_within(self, key: str, limit: int) -> tuple[int, bytes | None] | None:
        """The size of the object at ``key`` and, up to ``limit`` bytes, its bytes.

        One GET of the first :data:`WHOLE_GET_PIECE` bytes (or ``limit``, if
        fewer) answers both for a small object (documents, markers, records,
        most shards): s3fs's own whole-object read asks the object's size
        first. A longer object within ``limit`` follows in ranged GETs of that
        size at once, each only of the version the first GET read (``If-Match``
        its ETag): an object replaced meanwhile is read again from its start,
        never pieced together from two versions, up to :data:`READ_ATTEMPTS`
        times.

        Raises
        ------
        StorageError
            If the object was replaced during each of the attempts.
        """
        for _ in range(READ_ATTEMPTS):
            first = self._first_piece(key, max(1, min(limit, WHOLE_GET_PIECE)))
            if first is None:
                return None
            size, data, etag = first
            if size > limit:
                return size, None
            if len(data) >= size:
                return size, data
            rest = self._rest(key, range(len(data), size, WHOLE_GET_PIECE), size, etag)
            if rest is not None:
                return size, b"".join([data, *rest])
        raise StorageError(
            f"reading {key!r} from S3: the object was replaced while it was read, "
            f"{READ_ATTEMPTS} times in a row; read it again once its writer is done"
        )

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent (:meth:`get_within`)."""
        got = self.get_within(key, sys.maxsize)
        return None if got is None else got[1]

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key`` with one ranged GET."""
        edge_key(key, self)
        if not 0 <= start <= stop:
            raise ValueError(f"invalid byte range [{start}, {stop}) of {key!r}")
        # an empty Range header would be ignored by S3 and return the whole object
        return b"" if start == stop else self._cat(key, start, stop)
