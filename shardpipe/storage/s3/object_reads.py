"""Reading S3 objects: whole, or a range of their bytes (a part of the S3 backend).

:class:`S3ObjectReads` is mixed into
:class:`~shardpipe.storage.s3.store.S3ShardStore`; reads go through the
backend's s3fs file system and its faults are classified as the backend's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardpipe.errors import StorageError
from shardpipe.storage.keys import edge_key
from shardpipe.storage.s3 import faults

WHOLE_GET_PIECE = 8 * 2**20
"""Bytes of an object one GET of :meth:`S3ObjectReads.get` asks for (8 MiB)."""


class S3ObjectReads:
    """``get`` and ``get_range`` of the S3 backend."""

    fs: Any
    bucket: str
    reached: bool

    if TYPE_CHECKING:  # what the backend it is mixed into has

        def full_key(self, key: str) -> str: ...

        def size(self, key: str) -> int | None: ...

        def _fault(self, operation: str, key: str, err: BaseException) -> StorageError: ...

    def _cat(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        path = f"{self.bucket}/{self.full_key(key)}"
        try:
            data: bytes = self.fs.cat_file(path, start=start, end=end)
        except FileNotFoundError as err:
            if faults.error_code(err) != "NoSuchBucket":
                raise FileNotFoundError(f"no S3 object s3://{path}: {err}") from err
            raise self._fault("GET", key, err) from err
        except Exception as err:
            raise self._fault("GET", key, err) from err
        self.reached = True
        return data

    def get(self, key: str) -> bytes | None:
        """Return the bytes at ``key``, or ``None`` when absent.

        One GET of the first :data:`WHOLE_GET_PIECE` bytes: all of a small
        object (documents, markers, records) in one request (s3fs's own
        whole-object read asks the object's size first). A longer object's
        rest follows in ranged GETs of that size at once.
        """
        try:
            first = self._cat(key, 0, WHOLE_GET_PIECE)
        except FileNotFoundError:
            return None
        except StorageError as err:
            if err.__cause__ is not None and faults.error_code(err.__cause__) == "InvalidRange":
                return b""  # an empty object has no first byte to range over
            raise
        if len(first) < WHOLE_GET_PIECE:
            return first
        size = self.size(key)
        if size is None:
            return None
        starts = range(WHOLE_GET_PIECE, size, WHOLE_GET_PIECE)
        path = f"{self.bucket}/{self.full_key(key)}"
        try:
            ends = [min(start + WHOLE_GET_PIECE, size) for start in starts]
            rest = self.fs.cat_ranges([path] * len(starts), list(starts), ends, on_error="raise")
        except Exception as err:
            raise self._fault("GET", key, err) from err
        return b"".join([first, *rest])

    def get_range(self, key: str, start: int, stop: int) -> bytes:
        """Return ``[start, stop)`` of the object at ``key`` with one ranged GET."""
        edge_key(key, self)
        if not 0 <= start <= stop:
            raise ValueError(f"invalid byte range [{start}, {stop}) of {key!r}")
        # an empty Range header would be ignored by S3 and return the whole object
        return b"" if start == stop else self._cat(key, start, stop)
