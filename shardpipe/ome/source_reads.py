"""Reads of an OME-Zarr 0.4 source that stop at the size its metadata implies.

A source's files are untrusted: a chunk of a few KiB by its ``.zarray`` may
be stored as gigabytes (a sparse file costs its maker nothing). Every read
of a conversion is bounded before it is made:

* :func:`read_at_most` (documents, and the chunks a conversion copies as
  they are): the object's size and bytes within the bound
  (:meth:`~shardpipe.storage.base.ShardStore.get_within`: one request on an
  object store, the size first on a file system), refused by key when it is
  larger than the bound, with no byte past the bound read;
* the levels that are decoded and written again are read as a rechunk reads
  its source (:func:`~shardpipe.stored.bounded_reads.bounded_array`): read
  and decoded within the bounds their metadata implies.
"""

from __future__ import annotations

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.base import ShardStore

__all__ = ["DOCUMENT", "MAX_DOCUMENT_NBYTES", "read_at_most", "too_large"]

MAX_DOCUMENT_NBYTES = 16 << 20
"""Most bytes a ``.zattrs``, ``.zarray`` or ``.zgroup`` of a source may hold."""

DOCUMENT = "a metadata document may hold"
"""How :func:`too_large` ends for a document."""


def too_large(key: str, size: int | None, bound: int, what: str) -> InvalidArgumentError:
    """The error for the object at ``key``: more than ``bound`` bytes, which ``what`` may hold.

    ``size`` is its size, if known; ``what`` ends the sentence "more than
    the N bytes ..." (``"a metadata document may hold"``).
    """
    held = f"holds {size:,} bytes" if size is not None else "holds"
    return InvalidArgumentError(
        "source",
        f"{key!r} {held}, more than the {bound:,} bytes {what}; no more than that was read",
        "Repair or remove that file of the source (it is damaged, or was not written by a "
        "Zarr v2 writer), then convert again",
    )


def read_at_most(store: ShardStore, key: str, bound: int, what: str) -> bytes | None:
    """The bytes at ``key`` (None when absent), refused when more than ``bound``.

    ``what`` ends the message "more than the N bytes ..." (``"a chunk of
    shape (8, 8) of uint16 can take through its codecs"``). No byte past
    ``bound`` is read (:meth:`~shardpipe.storage.base.ShardStore.get_within`:
    on a file system the size first, on S3 one GET of at most ``bound`` bytes
    whose answer gives the size).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``source`` and ``key``, when the object is larger than ``bound``.
    """
    found = store.get_within(key, bound)
    if found is None:
        return None
    size, data = found
    if data is None:
        raise too_large(key, size, bound, what)
    return data
