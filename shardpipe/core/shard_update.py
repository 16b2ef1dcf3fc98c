"""How an update changes the bytes of one existing shard: a pure plan, no I/O.

An update gives some inner chunks of a shard new encodings (or removes them:
a chunk now equal to the fill value). Given the shard's current byte layout
(its size, its index entries and where the index lies) and the new encoded
sizes, :func:`plan_shard_update` decides where every byte goes under one of
three strategies (ZEP 2, "Updating chunks")::

    index at the end                         index at the start
    | c0 | c1 | c2 |idx|                     |idx| c0 | c1 | c2 |

    in_place: c1' fits c1's room
    | c0 |c1'| c2 |idx'|                     |idx'| c0 |c1'| c2 |

    append: c1' (and chunks that do not fit, under in_place) go at the end
    | c0 | -- | c2 |---| c1' |idx'|          |idx'| c0 | -- | c2 | c1' |

    rewrite: a compact new shard
    | c0 | c2 | c1' |idx'|                   |idx'| c0 | c2 | c1' |

* **in place** writes each new chunk over its old bytes when it fits its
  *room* (from its offset to the next used byte); the index is rewritten
  where it lies when nothing grows, else chunks that do not fit are
  appended as below;
* **append** never overwrites a stored chunk: new chunks go after the last
  byte of the object, the index after them (index at the end: the old index
  stays, unused) or over the old one (index at the start);
* **rewrite** builds the shard afresh from the kept chunks and the new ones.

The plan also names the byte ranges of the old object that will be
overwritten (:attr:`ShardUpdate.overwritten`): a writer records them before
it changes anything, so that a crash can be undone. ``"auto"`` picks per
shard by the rule in :func:`choose_strategy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from shardpipe.errors import PlanError

STRATEGIES = ("auto", "in_place", "append", "rewrite")
"""Values of ``write_strategy``."""

DEFAULT_UNUSED_THRESHOLD = 0.5
"""Share of a shard's bytes left unused above which ``"auto"`` rewrites it."""

_EMPTY = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class ShardBytes:
    """The byte layout of a stored shard, as read from its index.

    Parameters
    ----------
    size : int
        Bytes in the object.
    entries : numpy.ndarray
        ``uint64`` ``(n_slots, 2)`` offsets and lengths (both ``2**64 - 1``
        for an empty slot).
    index_range : tuple of int
        ``[start, stop)`` of the encoded index.
    index_at_start : bool
        Whether the index is the first bytes of the object (else the last).
    """

    size: int
    entries: np.ndarray
    index_range: tuple[int, int]
    index_at_start: bool

    def stored(self) -> dict[int, tuple[int, int]]:
        """Stored slots and their ``(offset, nbytes)``."""
        e = self.entries
        mask = ~((e[:, 0] == _EMPTY) & (e[:, 1] == _EMPTY))
        return {int(s): (int(e[s, 0]), int(e[s, 1])) for s in np.flatnonzero(mask)}

    def used_nbytes(self) -> int:
        """Bytes holding stored chunks or the index."""
        chunks = sum(n for _, n in self.stored().values())
        return chunks + self.index_range[1] - self.index_range[0]

    def unused_nbytes(self) -> int:
        """Bytes of the object that no index entry (nor the index) points at."""
        return max(0, self.size - self.used_nbytes())

    def rooms(self) -> dict[int, int]:
        """Per stored slot, bytes from its offset to the next used byte (or the end).

        A slot whose bytes overlap another's gets no room (0): such shards
        are never overwritten in place.
        """
        stored = self.stored()
        starts = sorted([(off, n, slot) for slot, (off, n) in stored.items()])
        starts.append((self.index_range[0], self.index_range[1] - self.index_range[0], -1))
        starts.sort()
        rooms: dict[int, int] = {}
        for i, (off, n, slot) in enumerate(starts):
            if slot < 0:
                continue
            nxt = starts[i + 1][0] if i + 1 < len(starts) else self.size
            rooms[slot] = nxt - off if nxt >= off + n else 0
        return rooms


@dataclass(frozen=True)
class Abilities:
    """What the storage can do for one shard's update (see ``StoreAbilities``).

    Parameters
    ----------
    write_at : bool
        Overwrite bytes at an offset (a file system).
    append : bool
        Add bytes at the end of the object (a file system).
    compose_min : int or None
        The object can be composed server side from ranges of the old one
        (S3 multipart + UploadPartCopy) when every range but the last holds
        at least this many bytes; None when it cannot.
    rewrite_fits : bool
        A rewrite fits the memory budget (it holds the whole old shard).
    in_place_fits : bool
        Writing in place fits the memory budget (it keeps the old bytes of
        every range it overwrites, for its undo record). When not, ``"auto"``
        never goes in place.
    """

    write_at: bool = False
    append: bool = False
    compose_min: int | None = None
    rewrite_fits: bool = True
    in_place_fits: bool = True


@dataclass(frozen=True)
class ShardUpdate:
    """Where every byte of an updated shard goes.

    Attributes
    ----------
    strategy : str
        ``"in_place"``, ``"append"`` or ``"rewrite"``.
    entries : numpy.ndarray
        The new index entries. For a rewrite, chunk offsets follow the order
        of :attr:`layout_order` from the head on.
    in_place : dict of int to int
        New chunks written over old bytes: slot to offset.
    appended : tuple of int
        Slots of new chunks written, in this order, from
        :attr:`append_offset` on.
    append_offset : int
        Offset of the first appended byte (the old size).
    index_offset : int
        Where the new index goes.
    new_size : int
        Bytes in the object afterwards.
    overwritten : tuple of (int, int)
        ``[start, stop)`` ranges of the old object this update overwrites
        (in-place chunks and an index rewritten where it lies).
    layout_order : tuple of int
        For a rewrite: the slots in the order their bytes are laid out.
    """

    strategy: str
    entries: np.ndarray
    in_place: dict[int, int] = field(default_factory=dict)
    appended: tuple[int, ...] = ()
    append_offset: int = 0
    index_offset: int = 0
    new_size: int = 0
    overwritten: tuple[tuple[int, int], ...] = ()
    layout_order: tuple[int, ...] = ()

    def unused_nbytes(self, index_nbytes: int) -> int:
        """Bytes of the updated object no index entry points at."""
        e = self.entries
        mask = ~((e[:, 0] == _EMPTY) & (e[:, 1] == _EMPTY))
        return self.new_size - int(e[mask, 1].sum()) - index_nbytes


def _new_entries(old: np.ndarray, new_sizes: Mapping[int, int | None]) -> np.ndarray:
    entries = old.copy()
    for slot, n in new_sizes.items():
        if n is None:
            entries[slot] = _EMPTY
    return entries


def _fits(old: ShardBytes, new_sizes: Mapping[int, int | None]) -> dict[int, bool]:
    rooms = old.rooms()
    return {
        slot: n is not None and slot in rooms and n <= rooms[slot] for slot, n in new_sizes.items()
    }


def choose_strategy(
    old: ShardBytes,
    new_sizes: Mapping[int, int | None],
    abilities: Abilities,
    *,
    threshold: float = DEFAULT_UNUSED_THRESHOLD,
) -> str:
    """The strategy ``"auto"`` takes for one shard.

    In order:

    1. ``"rewrite"`` when no chunk is kept (the update replaces the shard);
    2. ``"in_place"`` when the storage writes at offsets and every new chunk
       fits its old room (always so for uncompressed chunks): no byte moves
       and the object does not grow;
    3. ``"rewrite"`` when the new chunks are larger than the kept ones
       (most of the shard changes: rewriting costs at most twice as much and
       leaves it compact);
    4. ``"append"`` when the storage can append (or compose the new object
       from the old one) and the unused share of the object stays at most
       ``threshold`` afterwards;
    5. ``"rewrite"`` otherwise.

    A rewrite that does not fit the memory budget is replaced by ``"append"``
    (or ``"in_place"``) where the storage can do them; ``"in_place"`` is never
    taken where it does not fit the budget (``in_place_fits``).
    """
    stored = old.stored()
    kept = sum(n for slot, (_, n) in stored.items() if slot not in new_sizes)
    new_total = sum(n for n in new_sizes.values() if n is not None)
    can_append = abilities.append or _can_compose(old, abilities)
    fits = _fits(old, new_sizes)
    in_place = abilities.write_at and abilities.in_place_fits
    if kept == 0 and abilities.rewrite_fits:
        return "rewrite"
    if in_place and all(fit or new_sizes[slot] is None for slot, fit in fits.items()):
        return "in_place"
    if not abilities.rewrite_fits:
        if can_append:
            return "append"
        if in_place:
            return "in_place"
        return "rewrite"  # the caller refuses it
    if new_total > kept:
        return "rewrite"
    if can_append:
        appended = _grow(old, new_sizes, in_place={})
        index_nbytes = old.index_range[1] - old.index_range[0]
        if appended.unused_nbytes(index_nbytes) <= threshold * appended.new_size:
            return "append"
    return "rewrite"


def _can_compose(old: ShardBytes, abilities: Abilities) -> bool:
    """Whether the kept bytes can be copied server side in ranges the storage accepts."""
    if abilities.compose_min is None:
        return False
    start = old.index_range[1] if old.index_at_start else 0
    stop = old.size if old.index_at_start else old.index_range[0]
    # index at the start: the new head travels with the first bytes of the kept
    # range (read through the client) to make a part of compose_min bytes
    need = 2 * abilities.compose_min if old.index_at_start else abilities.compose_min
    return stop - start >= need


def plan_shard_update(
    old: ShardBytes,
    new_sizes: Mapping[int, int | None],
    strategy: str,
    abilities: Abilities,
    *,
    threshold: float = DEFAULT_UNUSED_THRESHOLD,
) -> ShardUpdate:
    """Plan the update of one stored shard.

    Parameters
    ----------
    old : ShardBytes
        The shard as it is.
    new_sizes : mapping of int to int or None
        Per changed slot, the encoded size of its new chunk (None: the chunk
        is removed).
    strategy : str
        One of :data:`STRATEGIES`.
    abilities : Abilities
        What the storage can do.
    threshold : float
        Unused share above which ``"auto"`` rewrites (see
        :func:`choose_strategy`).

    Raises
    ------
    PlanError
        If ``strategy`` needs an ability the storage lacks.
    """
    if strategy == "auto":
        strategy = choose_strategy(old, new_sizes, abilities, threshold=threshold)
    if strategy == "append" and not abilities.append:
        if abilities.compose_min is None:
            raise PlanError("the storage can neither append to an object nor compose one")
        if not _can_compose(old, abilities):
            strategy = "rewrite"  # the kept range is too small to copy server side
    if strategy == "in_place" and not abilities.write_at:
        raise PlanError("the storage cannot write at an offset of an object")
    if strategy == "rewrite":
        return _rewrite(old, new_sizes)
    if strategy == "append":
        return _grow(old, new_sizes, in_place={})
    if strategy == "in_place":
        fits = _fits(old, new_sizes)
        stored = old.stored()
        in_place = {slot: stored[slot][0] for slot, fit in fits.items() if fit}
        return _grow(old, new_sizes, in_place=in_place)
    raise PlanError(f"unknown write strategy {strategy!r}; choose one of {STRATEGIES}")


def _rewrite(old: ShardBytes, new_sizes: Mapping[int, int | None]) -> ShardUpdate:
    stored = old.stored()
    sizes = {slot: n for slot, (_, n) in stored.items() if slot not in new_sizes}
    sizes.update({slot: n for slot, n in new_sizes.items() if n is not None})
    order = tuple(sorted(sizes))
    index_nbytes = old.index_range[1] - old.index_range[0]
    entries = np.full_like(old.entries, _EMPTY)
    offset = index_nbytes if old.index_at_start else 0
    for slot in order:
        entries[slot] = (offset, sizes[slot])
        offset += sizes[slot]
    index_offset = 0 if old.index_at_start else offset
    return ShardUpdate(
        "rewrite",
        entries,
        index_offset=index_offset,
        new_size=offset + (0 if old.index_at_start else index_nbytes),
        layout_order=order,
    )


def _grow(
    old: ShardBytes, new_sizes: Mapping[int, int | None], *, in_place: dict[int, int]
) -> ShardUpdate:
    entries = _new_entries(old.entries, new_sizes)
    overwritten = []
    for slot, offset in in_place.items():
        n = new_sizes[slot]
        assert n is not None
        entries[slot] = (offset, n)
        overwritten.append((offset, offset + n))
    appended = tuple(
        sorted(slot for slot, n in new_sizes.items() if n is not None and slot not in in_place)
    )
    offset = old.size
    for slot in appended:
        n = new_sizes[slot]
        assert n is not None
        entries[slot] = (offset, n)
        offset += n
    start, stop = old.index_range
    if old.index_at_start or not appended:
        # the index is rewritten where it lies (same size)
        index_offset = start
        overwritten.append((start, stop))
        new_size = offset
    else:
        index_offset = offset
        new_size = offset + stop - start
    return ShardUpdate(
        "in_place" if in_place else "append",
        entries,
        in_place=in_place,
        appended=appended,
        append_offset=old.size,
        index_offset=index_offset,
        new_size=new_size,
        overwritten=tuple(sorted(overwritten)),
    )
