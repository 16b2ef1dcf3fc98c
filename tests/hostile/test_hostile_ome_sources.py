"""Hostile OME-Zarr 0.4 sources: refused by name, quickly, before anything is written.

Every source of :data:`tests.hostile.ome_sources.CASES` is converted, with
its chunks copied and with ``reencode=True``: the conversion must end in a
``ShardpipeError`` that names the document and the value, within a few
seconds (the refusal is a check of documents), and the target must stay
empty (no group ``zarr.json``, no job record). The valid image beside them
converts, so that the cases fail for their change alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import InvalidArgumentError, ShardpipeError
from tests.hostile.ome_sources import CASES, IMAGE, MASK, build, documents

MOST_SECONDS = 3.0
"""Each refusal takes well under a second; the bound leaves room for a loaded machine."""


def test_the_valid_source_converts(tmp_path: Path) -> None:
    build(tmp_path / "v04", documents())
    shardpipe.convert_ome_zarr(str(tmp_path / "v04"), str(tmp_path / "v05"))
    group = zarr.open_group(str(tmp_path / "v05"), mode="r")
    np.testing.assert_array_equal(group["0"][...], IMAGE)
    np.testing.assert_array_equal(group["1"][...], IMAGE[::2, ::2])
    np.testing.assert_array_equal(group["labels/mask/0"][...], MASK)


DECODED_OR_CARRIED = {
    "order F": ("F", numcodecs.Zstd(level=1), None),
    "lz4": ("C", numcodecs.LZ4(), None),
    "bz2 after delta": ("C", numcodecs.BZ2(), [numcodecs.Delta(dtype="<u2")]),
    "blosc bit-shuffled": ("C", numcodecs.Blosc(cname="zstd", shuffle=2), None),
    "zlib level -1": ("C", numcodecs.Zlib(level=-1), None),
    "uncompressed": ("C", None, None),
}


@pytest.mark.parametrize("reencode", [False, True], ids=["auto", "reencoded"])
@pytest.mark.parametrize("kind", list(DECODED_OR_CARRIED))
def test_valid_sources_of_other_kinds_still_convert(
    tmp_path: Path, kind: str, reencode: bool
) -> None:
    """The checks and bounded reads refuse none of these (random data: incompressible chunks)."""
    order, compressor, filters = DECODED_OR_CARRIED[kind]
    group = zarr.open_group(str(tmp_path / "v04"), mode="w", zarr_format=2)
    group.attrs.update(documents()[".zattrs"])
    data = np.random.default_rng(3).integers(0, 65535, (16, 16), dtype="<u2")
    levels: list[Any] = [data, data[::2, ::2]]
    for level, array in enumerate(levels):
        group.create_array(
            str(level), data=array, chunks=(8, 8), compressors=compressor, filters=filters,
            order=order,
        )  # fmt: skip
    shardpipe.convert_ome_zarr(str(tmp_path / "v04"), str(tmp_path / "v05"), reencode=reencode)
    converted = zarr.open_group(str(tmp_path / "v05"), mode="r")
    for level, array in enumerate(levels):
        np.testing.assert_array_equal(converted[str(level)][...], array)
    assert shardpipe.verify(str(tmp_path / "v05"), complete=True).ok


@pytest.mark.parametrize("reencode", [False, True], ids=["carried", "reencoded"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_source_is_refused_before_anything_is_written(
    tmp_path: Path, name: str, reencode: bool
) -> None:
    case = CASES[name]
    docs = documents()
    case.change(docs)
    build(tmp_path / "v04", docs)
    target = tmp_path / "v05"
    start = time.perf_counter()
    with pytest.raises(ShardpipeError) as caught:
        shardpipe.convert_ome_zarr(str(tmp_path / "v04"), str(target), reencode=reencode)
    seconds = time.perf_counter() - start
    message = str(caught.value)
    assert isinstance(caught.value, InvalidArgumentError), f"{type(caught.value)}: {message}"
    assert caught.value.parameter == "source", message
    for part in case.names:
        assert part in message, f"{part!r} not in {message!r}"
    assert seconds < MOST_SECONDS, f"{seconds:.1f} s: {message}"
    written = sorted(p.relative_to(target).as_posix() for p in target.rglob("*"))
    assert not written, written
