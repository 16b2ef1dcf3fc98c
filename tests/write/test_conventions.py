"""zarr's spellings accepted where zarr accepts them (issue 32, item 7).

Codec names and short dicts in ``compressors``/``filters``/``serializer``
(zarr 3.4 itself refuses ``"zstd"``, and dicts without ``configuration``),
``chunks="auto"``/``shards="auto"`` meaning shardpipe's defaults, and
``append_dim`` by dimension name. Every array is read back by zarr-python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.codecs import Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

import shardpipe
from shardpipe.errors import InvalidArgumentError

DATA = np.arange(64 * 48, dtype="uint16").reshape(64, 48)


@pytest.mark.parametrize(
    ("compressors", "expected"),
    [
        ("zstd", (ZstdCodec(level=0, checksum=False),)),
        (["zstd"], (ZstdCodec(level=0, checksum=False),)),
        ({"name": "zstd", "configuration": {"level": 3}}, (ZstdCodec(level=3, checksum=False),)),
        ({"name": "gzip"}, (GzipCodec(level=5),)),
        (("gzip", {"name": "zstd", "configuration": {"level": 1}}), None),
    ],
)
def test_codec_names_and_dicts(tmp_path: Path, compressors: Any, expected: Any) -> None:
    if expected is None:  # a chain of two bytes-to-bytes codecs, both by name
        expected = (GzipCodec(level=5), ZstdCodec(level=1, checksum=False))
    written = shardpipe.to_sharded_zarr(
        DATA, str(tmp_path), shards=(32, 48), chunks=(16, 16), compressors=compressors
    )
    assert tuple(written.compressors) == (*expected, Crc32cCodec())
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path), mode="r")[:], DATA)


def test_filters_and_serializer_by_dict(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(
        DATA,
        str(tmp_path),
        filters={"name": "transpose", "configuration": {"order": [1, 0]}},
        serializer={"name": "bytes"},
        chunk_checksums=False,
    )
    back = zarr.open_array(str(tmp_path), mode="r")
    assert isinstance(back.filters[0], TransposeCodec)
    np.testing.assert_array_equal(back[:], DATA)


@pytest.mark.parametrize(
    ("compressors", "said"),
    [
        ("zstdd", "no installed codec is named 'zstdd'. Did you mean 'zstd'"),
        ({"configuration": {}}, "has no string 'name'"),
        ({"name": "gzip", "configuration": 5}, "is 5, not a dict"),
    ],
)
def test_unknown_codecs_are_refused_by_name(tmp_path: Path, compressors: Any, said: str) -> None:
    with pytest.raises(InvalidArgumentError, match="compressors") as caught:
        shardpipe.to_sharded_zarr(DATA, str(tmp_path / "a"), compressors=compressors)
    assert said in str(caught.value)
    assert not (tmp_path / "a").exists()


def test_auto_means_shardpipes_defaults(tmp_path: Path) -> None:
    default = shardpipe.prepare_write(DATA, str(tmp_path / "d"))
    auto = shardpipe.prepare_write(DATA, str(tmp_path / "a"), chunks="auto", shards="auto")
    assert auto.layout == default.layout
    written = shardpipe.to_sharded_zarr(DATA, str(tmp_path / "a"), chunks="auto", shards="auto")
    assert written.shards == default.layout.shard_shape
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], DATA)
    with pytest.raises(InvalidArgumentError, match="shards"):
        shardpipe.to_sharded_zarr(DATA, str(tmp_path / "b"), shards="automatic")


def test_rechunk_takes_the_same_spellings(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(DATA, str(tmp_path / "s"), shards=(16, 48), chunks=(8, 16))
    shardpipe.rechunk(
        str(tmp_path / "s"), str(tmp_path / "t"), shards="auto", chunks="auto", compressors="gzip"
    )
    back = zarr.open_array(str(tmp_path / "t"), mode="r")
    assert isinstance(back.compressors[0], GzipCodec)
    np.testing.assert_array_equal(back[:], DATA)
    zarr.open_group(str(tmp_path / "g"), mode="w")
    shardpipe.to_sharded_zarr(DATA, str(tmp_path / "g"), path="a", shards=(16, 48))
    shardpipe.rechunk_group(
        str(tmp_path / "g"),
        str(tmp_path / "h"),
        arrays={"a": {"shards": "auto", "chunks": "auto"}},
        compressors={"name": "zstd"},
    )
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "h"), path="a")[:], DATA)


def test_append_dim_by_dimension_name(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(
        DATA, str(tmp_path), shards=(32, 48), chunks=(16, 16), dimension_names=("time", "x")
    )
    shardpipe.to_sharded_zarr(DATA[:16], str(tmp_path), append_dim="time")
    grown = np.concatenate([DATA, DATA[:16]])
    shardpipe.to_sharded_zarr(grown[:, :8], str(tmp_path), append_dim="x")  # not a multiple
    back = zarr.open_array(str(tmp_path), mode="r")
    assert back.shape == (80, 56)
    np.testing.assert_array_equal(back[:], np.concatenate([grown, grown[:, :8]], axis=1))
    with pytest.raises(InvalidArgumentError, match="'y' is not a dimension name") as caught:
        shardpipe.to_sharded_zarr(DATA[:16], str(tmp_path), append_dim="y")
    assert "['time', 'x']" in str(caught.value)
    assert zarr.open_array(str(tmp_path), mode="r").shape == (80, 56)  # nothing changed


def test_append_dim_by_name_without_dimension_names(tmp_path: Path) -> None:
    shardpipe.to_sharded_zarr(DATA, str(tmp_path), shards=(32, 48), chunks=(16, 16))
    with pytest.raises(InvalidArgumentError, match="it has no dimension_names"):
        shardpipe.to_sharded_zarr(DATA[:16], str(tmp_path), append_dim="time")
