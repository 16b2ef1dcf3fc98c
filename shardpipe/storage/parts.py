"""The values of an object written in parts, and where its parts lie in it.

An object written in parts (:meth:`~shardpipe.storage.base.ShardStore.begin_parts`)
is ``head + parts + tail``. Object stores lay the parts out in the order of
their numbers. A caller that finds its bytes through an index of offsets (a
Zarr shard: its index says where each chunk lies) may let them lie in any
order (``begin_parts(..., any_order=True)``): a backend that can then *places*
each part as it is written, and the object is assembled without copying them
again (a file system: the parts written by one process go one after the other
into one staging file, which becomes the object).
:meth:`~shardpipe.storage.base.ShardStore.part_layout` says where each part
lies, from the receipts, for the caller that writes the index and for the
backend that assembles the object alike (both in the process that finishes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PartsHandle:
    """Identifies one object being written in parts.

    Parameters
    ----------
    key : str
        The object's key.
    upload : str
        Backend-specific id of the parts (a staging folder on a file system,
        a multipart upload id on an object store).
    staging : str
        The write's staging prefix.
    any_order : bool
        The caller lays the object out with :func:`lay_out_parts`, so parts
        may lie in any order: a backend may place them as they are written.
    """

    key: str
    upload: str
    staging: str
    any_order: bool = False


@dataclass(frozen=True)
class PartReceipt:
    """What ``write_part`` or ``copy_part`` hands on to ``finish_parts``.

    Parameters
    ----------
    number : int
        Position of the part in the object, from 0.
    size : int
        Bytes in the part.
    etag : str or None
        Object-store entity tag of the uploaded part.
    payload : bytes or None
        The part's bytes, where the backend keeps parts in memory
        (``abilities.parts_in_memory``).
    place : str or None
        Where the backend placed the part (a staging file's name), for a
        handle with ``any_order``; None: the part lies by its number.
    offset : int
        Where the part starts in its place.
    """

    number: int
    size: int
    etag: str | None = None
    payload: bytes | None = None
    place: str | None = None
    offset: int = 0


@dataclass(frozen=True)
class PartLayout:
    """Where the parts of an object lie between its head and its tail.

    Attributes
    ----------
    starts : tuple of int
        Start of each part, counted from the end of the head, in the order
        of the receipts given to :func:`lay_out_parts`.
    spans : tuple of (str or None, int)
        The places in the order they follow one another, each with the bytes
        of it that the object takes (from its start). One ``(None, n)`` when
        the parts lie by their numbers.
    nbytes : int
        Bytes between the head and the tail (a place may hold bytes no part
        claims: an earlier try of a part written again).
    """

    starts: tuple[int, ...]
    spans: tuple[tuple[str | None, int], ...]
    nbytes: int


def lay_out_parts(receipts: Sequence[PartReceipt], *, first: str | None = None) -> PartLayout:
    """Where the parts of ``receipts`` lie in an object made of them.

    Parts without a place lie by their numbers, back to back. Placed parts
    lie where they were placed: the places follow one another, ``first``
    (when it holds any) before the others and the others in the order of the
    smallest part number each holds, each taking its bytes up to the end of
    the last part placed in it.

    Raises
    ------
    ValueError
        If some receipts have a place and others not, or two have one number.
    """
    numbers = [r.number for r in receipts]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"parts numbered twice among {sorted(numbers)}")
    placed = [r.place is not None for r in receipts]
    if any(placed) and not all(placed):
        raise ValueError("some parts were placed by the backend and others not")
    if not all(placed) or not receipts:
        starts: dict[int, int] = {}
        position = 0
        for receipt in sorted(receipts, key=lambda r: r.number):
            starts[receipt.number] = position
            position += receipt.size
        return PartLayout(tuple(starts[n] for n in numbers), ((None, position),), position)
    ends: dict[str, int] = {}
    lowest: dict[str, int] = {}
    for receipt in receipts:
        place = str(receipt.place)
        ends[place] = max(ends.get(place, 0), receipt.offset + receipt.size)
        lowest[place] = min(lowest.get(place, receipt.number), receipt.number)
    order = sorted(ends, key=lambda place: (place != first, lowest[place]))
    base: dict[str, int] = {}
    position = 0
    for place in order:
        base[place] = position
        position += ends[place]
    return PartLayout(
        tuple(base[str(r.place)] + r.offset for r in receipts),
        tuple((place, ends[place]) for place in order),
        position,
    )
