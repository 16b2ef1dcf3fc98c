"""Compressed Morton codes: the chunk ids of Neuroglancer's precomputed format.

A chunk at grid coordinates ``(x, y, z)`` of a grid of ``(nx, ny, nz)``
chunks gets the id made by interleaving the bits of its coordinates: for
bit ``i = 0, 1, ...`` and for each dimension in turn (x, y, z), if
``2**i < n`` for that dimension, bit ``i`` of its coordinate becomes the
next bit of the id. Dimensions that have run out of bits are skipped
("compressed"), so the ids of a grid are dense where the grid is a power of
two along every dimension.

Everything here is pure (NumPy in, NumPy out) and vectorised over chunks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def morton_bit_dims(grid: Sequence[int]) -> tuple[int, ...]:
    """For each bit of the id, from the lowest, the dimension it is taken from.

    Parameters
    ----------
    grid : sequence of int
        Chunks per dimension (each at least 1).
    """
    out: list[int] = []
    bit = 0
    while any((1 << bit) < n for n in grid):
        out.extend(d for d, n in enumerate(grid) if (1 << bit) < n)
        bit += 1
    return tuple(out)


def morton_ids(coords: np.ndarray, grid: Sequence[int]) -> np.ndarray:
    """Compressed Morton codes of chunk coordinates.

    Parameters
    ----------
    coords : numpy.ndarray
        Integer array of shape ``(n, ndim)``: one row of grid coordinates per chunk.
    grid : sequence of int
        Chunks per dimension.

    Returns
    -------
    numpy.ndarray
        ``uint64`` ids, one per row.
    """
    coords = np.asarray(coords, dtype=np.uint64).reshape(-1, len(grid))
    ids = np.zeros(len(coords), dtype=np.uint64)
    seen = [0] * len(grid)  # bits of each dimension used so far
    for out_bit, dim in enumerate(morton_bit_dims(grid)):
        bit = (coords[:, dim] >> np.uint64(seen[dim])) & np.uint64(1)
        ids |= bit << np.uint64(out_bit)
        seen[dim] += 1
    return ids


def morton_coords(ids: np.ndarray, grid: Sequence[int]) -> np.ndarray:
    """Chunk coordinates of compressed Morton codes (the inverse of :func:`morton_ids`)."""
    ids = np.asarray(ids, dtype=np.uint64).reshape(-1)
    coords = np.zeros((len(ids), len(grid)), dtype=np.uint64)
    seen = [0] * len(grid)
    for out_bit, dim in enumerate(morton_bit_dims(grid)):
        bit = (ids >> np.uint64(out_bit)) & np.uint64(1)
        coords[:, dim] |= bit << np.uint64(seen[dim])
        seen[dim] += 1
    return coords.astype(np.int64)


def low_bits_box(grid: Sequence[int], low_bits: int) -> tuple[int, ...]:
    """Chunks per dimension of the box that the lowest ``low_bits`` bits of an id span.

    Ids equal above their ``low_bits`` lowest bits form an aligned box of
    this shape (clipped at the grid's end): the shard of an identity-hashed
    precomputed volume when ``low_bits = preshift_bits + minishard_bits``.
    """
    box = [1] * len(grid)
    for dim in morton_bit_dims(grid)[:low_bits]:
        box[dim] *= 2
    return tuple(box)
