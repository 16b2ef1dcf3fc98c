"""Compressed Morton codes against the definition, bit by bit, and their inverse."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shardpipe.core.morton import low_bits_box, morton_bit_dims, morton_coords, morton_ids


def _by_definition(coords: tuple[int, ...], grid: tuple[int, ...]) -> int:
    """Bit i of each coordinate in turn, where 2**i is below that dimension's size."""
    out, position, i = 0, 0, 0
    while any((1 << i) < n for n in grid):
        for c, n in zip(coords, grid, strict=True):
            if (1 << i) < n:
                out |= ((c >> i) & 1) << position
                position += 1
        i += 1
    return out


grids = st.tuples(*(st.integers(1, 20) for _ in range(3)))


@given(grids)
def test_ids_follow_the_definition_and_invert(grid: tuple[int, ...]) -> None:
    coords = np.array(list(itertools.product(*(range(n) for n in grid))))
    ids = morton_ids(coords, grid)
    expected = [_by_definition(tuple(int(v) for v in c), grid) for c in coords]
    assert ids.tolist() == expected
    assert len(set(expected)) == len(expected)  # one id per chunk
    assert (morton_coords(ids, grid) == coords).all()


def test_known_ids() -> None:
    # a (3, 2, 2) grid, as tensorstore numbers it: x bit 0, y bit 0, z bit 0, then x bit 1
    assert morton_bit_dims((3, 2, 2)) == (0, 1, 2, 0)
    assert morton_ids(np.array([[2, 0, 0], [1, 1, 1], [2, 1, 1]]), (3, 2, 2)).tolist() == [8, 7, 14]
    assert morton_bit_dims((1, 1, 1)) == ()


@given(grids, st.integers(0, 12))
def test_ids_equal_above_the_low_bits_form_an_aligned_box(
    grid: tuple[int, ...], low_bits: int
) -> None:
    box = low_bits_box(grid, low_bits)
    coords = np.array(list(itertools.product(*(range(n) for n in grid))))
    ids = morton_ids(coords, grid)
    high = ids >> np.uint64(low_bits)
    origin = coords // np.array(box)
    for value in np.unique(high):
        members = origin[high == value]
        assert (members == members[0]).all()  # every chunk of the group in one box
