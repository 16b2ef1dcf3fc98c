"""The pure layout rules of the accessor: per-dimension sizes, per-variable overrides, alignment."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardpipe.dataset.layout import (
    VariableShape,
    check_dim_sizes,
    grid_aligned_chunks,
    variable_layout,
)
from shardpipe.errors import InvalidArgumentError

T2M = VariableShape("t2m", ("time", "lat", "lon"), (1460, 240, 384), 4)

CASES: list[tuple[str, dict[str, int], dict[str, int], dict[str, Any], tuple[Any, Any]]] = [
    # name, shards, chunks, encoding, (shard_shape, chunk_shape)
    (
        "both named",
        {"time": 365},
        {"time": 73, "lat": 60, "lon": 96},
        {},
        ((365, 240, 384), (73, 60, 96)),
    ),
    (
        "chunks span the shard where unnamed",
        {"time": 365},
        {"time": 73},
        {},
        ((365, 240, 384), (73, 240, 384)),
    ),
    (
        "-1 is the whole dimension",
        {"time": 10, "lat": -1},
        {"time": 5},
        {},
        ((10, 240, 384), (5, 240, 384)),
    ),
    (
        "encoding wins",
        {"time": 365},
        {"time": 73},
        {"shards": (20, 24, 32), "chunks": (10, 12, 16)},
        ((20, 24, 32), (10, 12, 16)),
    ),
    (
        "shards from encoding, chunks by name",
        {},
        {"time": 10},
        {"shards": (20, 24, 32)},
        ((20, 24, 32), (10, 24, 32)),
    ),
]


@pytest.mark.parametrize(
    ("shards", "chunks", "encoding", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_variable_layout_table(
    shards: dict[str, int], chunks: dict[str, int], encoding: dict[str, Any], expected: Any
) -> None:
    dims = list(T2M.dims)
    got = variable_layout(
        T2M,
        check_dim_sizes("shards", shards, dims),
        check_dim_sizes("chunks", chunks, dims),
        encoding,
    )
    assert got == expected


def test_unnamed_variables_get_shardpipe_defaults() -> None:
    mask = VariableShape("land", ("lat", "lon"), (240, 384), 1)
    shard_shape, chunk_shape = variable_layout(mask, {"time": 365}, {}, {})
    assert all(s % c == 0 for s, c in zip(shard_shape, chunk_shape, strict=True))
    assert shard_shape == (240, 384)  # the default shard covers a small array whole


def test_shards_not_a_multiple_of_chunks_names_the_variable() -> None:
    with pytest.raises(InvalidArgumentError, match=r"shards: variable 't2m' \(dims"):
        variable_layout(T2M, {"time": 365}, {"time": 10}, {})


@pytest.mark.parametrize(
    ("sizes", "needle"),
    [
        ({"level": 3}, "level"),
        ({"time": 0}, "positive"),
        ({"time": 2.5}, "positive"),
        ({"time": True}, "positive"),
        ((365, 10), "dict"),
    ],
)
def test_bad_dim_sizes(sizes: Any, needle: str) -> None:
    with pytest.raises(InvalidArgumentError, match=needle):
        check_dim_sizes("shards", sizes, ["time", "lat"])


@given(
    st.lists(
        st.tuples(
            st.integers(0, 40), st.integers(1, 9), st.integers(0, 30)
        ),  # length, chunk, start
        min_size=1,
        max_size=3,
    )
)
def test_grid_aligned_chunks_match_brute_force(dims: list[tuple[int, int, int]]) -> None:
    shape = tuple(d[0] for d in dims)
    chunks = grid_aligned_chunks(shape, tuple(d[1] for d in dims), [d[2] for d in dims])
    for (length, chunk, start), sizes in zip(dims, chunks, strict=True):
        assert sum(sizes) == length
        # brute force: element i (at start + i) is in stored chunk (start + i) // chunk;
        # a Dask chunk must hold one stored chunk's elements, all of them that the block has
        owner = [(start + i) // chunk for i in range(length)]
        position = 0
        for size in sizes:
            if length:
                piece = owner[position : position + size]
                assert len(set(piece)) == 1
                assert piece.count(piece[0]) == owner.count(piece[0])
            position += size
