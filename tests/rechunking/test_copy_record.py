"""The record of a two-pass rechunk's copy: which copies a resumed rechunk may take up."""

from __future__ import annotations

import pytest

from shardpipe.errors import InvalidArgumentError
from shardpipe.rechunking.copy_record import check_same_copy, copy_identity

SOURCE = {"path": "src.zarr", "shape": [730, 256, 512]}


def _record(chunks: tuple[int, ...], source: dict[str, object] = SOURCE) -> dict[str, object]:
    return copy_identity(source, chunks) | {"store": "scratch.zarr"}


def test_the_same_copy_is_taken_up() -> None:
    check_same_copy(_record((64, 128, 128)), copy_identity(SOURCE, (64, 128, 128)), None)


def test_a_copy_in_other_chunks_may_come_from_another_version() -> None:
    """The copy's chunks are what a plan chose: a copy left by an earlier shardpipe, whose
    planner chose others, is refused with that said (the user did run the same call)."""
    with pytest.raises(InvalidArgumentError) as caught:
        check_same_copy(_record((64, 64, 64)), copy_identity(SOURCE, (64, 128, 128)), None)
    message = str(caught.value)
    assert "made by another rechunk (or another version of shardpipe)" in message
    assert "chunks (recorded [64, 64, 64], this rechunk [64, 128, 128]) differ" in message
    assert "with the same shardpipe" in message and "overwrite=True" in message


def test_a_copy_of_another_source_is_refused_without_naming_versions() -> None:
    other = SOURCE | {"path": "other.zarr"}
    with pytest.raises(InvalidArgumentError, match=r"another rechunk: its source .* differs") as e:
        check_same_copy(_record((64, 128, 128), other), copy_identity(SOURCE, (64, 128, 128)), None)
    assert "version" not in str(e.value)
