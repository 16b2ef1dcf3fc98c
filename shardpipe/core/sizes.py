"""Byte sizes and the default shapes of shards and inner chunks.

Defaults, when the caller leaves ``chunks`` or ``shards`` out:

* inner chunks hold about 1 MiB (``DEFAULT_CHUNK_NBYTES``), as near a cube
  as the array allows, with power-of-two sides;
* shards hold about 256 MiB (``DEFAULT_SHARD_NBYTES``), again as near a
  cube of inner chunks as the array allows, never larger than needed to
  cover the array, and always a whole number of inner chunks;
* a given ``shards`` gets the largest near-1-MiB inner chunk that divides it.
"""

from __future__ import annotations

import math
import re

from shardpipe.core.grid import Shape, ceildiv, divisors_up_to

DEFAULT_CHUNK_NBYTES = 1 << 20
DEFAULT_SHARD_NBYTES = 256 << 20

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_bytes(value: int | str) -> int:
    """Parse a byte count such as ``2_000_000``, ``"256MB"`` or ``"1.5 GiB"``.

    Raises
    ------
    ValueError
        If ``value`` is not a positive size.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a byte size, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot read {value!r} as a byte size")
        n = round(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if n <= 0:
        raise ValueError(f"a byte size must be positive, got {value!r}")
    return n


def _balanced_counts(extent: Shape, budget: int) -> Shape:
    """Split ``budget`` elements over dimensions as evenly as ``extent`` allows.

    Each count is a power of two, except where it is clipped to the extent.
    """
    counts = [1] * len(extent)
    remaining = max(budget, 1)
    order = sorted(range(len(extent)), key=lambda d: extent[d])
    for k, d in enumerate(order):
        left = len(order) - k
        side = max(1, int(round(remaining ** (1.0 / left), 9)))
        side = 1 << (side.bit_length() - 1)  # round down to a power of two
        counts[d] = min(extent[d], side) if extent[d] > 0 else 1
        remaining = max(1, remaining // counts[d])
    return tuple(counts)


def default_chunk_shape(shape: Shape, itemsize: int, target: int = DEFAULT_CHUNK_NBYTES) -> Shape:
    """Return an inner chunk shape of about ``target`` bytes for ``shape``."""
    return _balanced_counts(shape, max(1, target // itemsize))


def default_shard_shape(
    shape: Shape, chunk_shape: Shape, itemsize: int, target: int = DEFAULT_SHARD_NBYTES
) -> Shape:
    """Return a shard shape of about ``target`` bytes made of whole inner chunks."""
    grid = tuple(ceildiv(max(n, 1), c) for n, c in zip(shape, chunk_shape, strict=True))
    per_chunk = math.prod(chunk_shape) * itemsize
    counts = _balanced_counts(grid, max(1, target // per_chunk))
    return tuple(c * k for c, k in zip(chunk_shape, counts, strict=True))


def default_chunk_shape_within(
    shard_shape: Shape, itemsize: int, target: int = DEFAULT_CHUNK_NBYTES
) -> Shape:
    """Return an inner chunk shape of about ``target`` bytes that divides ``shard_shape``.

    Along each dimension, of the divisors of the shard size up to twice the
    wanted side, the one nearest to it by ratio is taken: a prime shard side
    near the wanted size is kept whole rather than cut into one-element
    chunks.
    """
    wanted = default_chunk_shape(shard_shape, itemsize, target)
    return tuple(_nearest_divisor(s, w) for s, w in zip(shard_shape, wanted, strict=True))


def _nearest_divisor(n: int, wanted: int) -> int:
    candidates = divisors_up_to(n, 2 * wanted)
    return min(candidates, key=lambda d: abs(math.log(d / wanted)))


def shard_multiple_block(shape: Shape, unit: Shape, itemsize: int, budget: int | None) -> Shape:
    """A read block of whole ``unit`` s (shards) for an array of ``shape``, within ``budget``.

    ``budget=None``: one unit (clipped to the array). Otherwise the block
    grows by whole units along the last axis, then the one before, and so
    on, while its bytes stay within ``budget``; units that pass ``budget``
    on their own are refused by the caller (the block is one unit then).
    Each extent is computed, not counted up unit by unit: a grid of 2**62
    shards costs what a grid of 2 does.
    """
    block = [min(u, n) for u, n in zip(unit, shape, strict=True)]
    if budget is None:
        return tuple(block)
    for axis in reversed(range(len(shape))):
        if block[axis] >= shape[axis]:
            continue
        rest = math.prod(block[:axis] + block[axis + 1 :]) * itemsize
        widest = budget // rest if rest else shape[axis]  # the widest extent within budget
        if widest >= shape[axis]:
            block[axis] = shape[axis]
        elif widest > block[axis]:
            block[axis] += (widest - block[axis]) // unit[axis] * unit[axis]
    return tuple(block)
