"""Writes into an existing array cast data whose values fit the array's dtype, as zarr does.

An ``int64`` patch of values 0..65535 goes into a ``uint16`` array; a value the
dtype cannot hold is refused naming the parameter, the dtype and the value:
for data in memory before a byte is written, for a Dask array when the block
holding it is computed, before the shard it feeds is written.
"""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import shardpipe
from shardpipe.errors import InvalidArgumentError
from tests.support.readers import assert_same, read_tensorstore, read_zarr

SHAPE = (32, 32)
NO_FSYNC = {"fsync": False}


def _array(path: Path, dtype: str = "uint16") -> np.ndarray:
    data = np.arange(np.prod(SHAPE)).reshape(SHAPE).astype(dtype)
    shardpipe.to_sharded_zarr(
        data, str(path), shards=(16, 16), chunks=(8, 8), storage_options=NO_FSYNC
    )
    return data


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _check(path: Path, expected: np.ndarray) -> None:
    assert_same(read_zarr(str(path)), expected)
    assert_same(read_tensorstore(str(path)), expected)
    assert shardpipe.verify(str(path)).ok


@pytest.mark.parametrize("lazy", [False, True], ids=["numpy", "dask"])
def test_an_int64_patch_that_fits_goes_into_uint16(tmp_path: Path, lazy: bool) -> None:
    path = tmp_path / "a.zarr"
    expected = _array(path)
    patch = np.array([[0, 1, 65535, 40000]] * 3, dtype="int64")
    source = da.from_array(patch, chunks=(2, 2)) if lazy else patch
    shardpipe.to_sharded_zarr(source, str(path), region=(slice(14, 17), slice(12, 16)))
    expected[14:17, 12:16] = patch
    _check(path, expected)


def test_safe_casts_and_narrower_floats_are_taken(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    expected = _array(path, "float32")
    shardpipe.to_sharded_zarr(
        np.full((2, 2), 7, "uint8"), str(path), region=(slice(0, 2), slice(0, 2))
    )
    values = np.array([[0.1, -2.5], [np.nan, np.inf]])  # float64, rounded as numpy does
    shardpipe.to_sharded_zarr(values, str(path), region=(slice(4, 6), slice(4, 6)))
    expected[0:2, 0:2] = 7
    expected[4:6, 4:6] = values.astype("float32")
    _check(path, expected)


@pytest.mark.parametrize("bad", [70000, -1])
def test_a_value_out_of_range_is_refused_before_a_byte_is_written(tmp_path: Path, bad: int) -> None:
    path = tmp_path / "a.zarr"
    _array(path)
    before = _files(path)
    patch = np.array([[1, 2], [bad, 3]], dtype="int64")
    with pytest.raises(InvalidArgumentError, match=rf"int64 value {bad} does not fit") as info:
        shardpipe.to_sharded_zarr(patch, str(path), region=(slice(0, 2), slice(0, 2)))
    assert info.value.parameter == "arr"
    assert "uint16" in str(info.value)
    with pytest.raises(InvalidArgumentError, match=rf"value {bad} does not fit") as info:
        shardpipe.write_regions([((slice(0, 2), slice(0, 2)), patch)], str(path))
    assert info.value.parameter == "updates[0]"
    with shardpipe.RegionBatch(str(path)) as batch:
        with pytest.raises(InvalidArgumentError, match=rf"value {bad} does not fit") as info:
            batch[0:2, 0:2] = patch
        assert info.value.parameter == "batch[region] = value"
    assert _files(path) == before


def test_a_dask_block_out_of_range_fails_before_its_shard_is_written(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    expected = _array(path)
    patch = np.ones((32, 32), dtype="int64")
    patch[20, 20] = 70000  # in shard (1, 1)
    source = da.from_array(patch, chunks=(16, 16))
    with pytest.raises(InvalidArgumentError, match="int64 value 70000 does not fit") as info:
        shardpipe.to_sharded_zarr(source, str(path), region=(slice(0, 32), slice(0, 32)))
    assert info.value.parameter == "arr"
    assert_same(read_zarr(str(path))[16:, 16:], expected[16:, 16:])  # its shard is untouched
    patch[20, 20] = 65535
    shardpipe.to_sharded_zarr(source.clip(0, 65535), str(path), region=(slice(0, 32),) * 2)
    _check(path, patch.astype("uint16"))  # the same write again, clipped, completes it


def test_floats_into_integers_are_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    _array(path)
    with pytest.raises(InvalidArgumentError, match="dtype float64") as info:
        shardpipe.to_sharded_zarr(np.zeros((2, 2)), str(path), region=(slice(0, 2), slice(0, 2)))
    assert info.value.parameter == "arr"


def test_batches_cast_pairs_that_fit(tmp_path: Path) -> None:
    path = tmp_path / "a.zarr"
    expected = _array(path)
    one = np.full((2, 3), 65535, dtype="int32")
    two = np.full((3, 3), True)
    shardpipe.write_regions(
        [((slice(0, 2), slice(0, 3)), one), ((slice(20, 23), slice(5, 8)), two)], str(path)
    )
    expected[0:2, 0:3] = one
    expected[20:23, 5:8] = two
    _check(path, expected)
