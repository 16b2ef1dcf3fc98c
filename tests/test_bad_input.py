"""Bad input: a clear error naming the parameter, before a single byte is written."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe import ArrayExistsError, InvalidArgumentError, StoreNotWritableError

GOOD: dict[str, Any] = {"shards": (20, 20), "chunks": (10, 10)}


def _tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` with a hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def data() -> da.Array:
    return da.from_array(np.arange(40 * 30, dtype="int16").reshape(40, 30), chunks=(13, 7))


@pytest.mark.parametrize(
    ("kwargs", "parameter", "words"),
    [
        ({"shards": (20, 20), "chunks": (8, 10)}, "shards", "multiple"),
        ({"shards": (20,), "chunks": (10, 10)}, "shards", "dimensions"),
        ({"shards": (20, 20), "chunks": (10, 10, 10)}, "chunks", "dimensions"),
        ({"shards": (0, 20), "chunks": (10, 10)}, "shards", "zero or negative"),
        ({"shards": (20, 20), "chunks": (-10, 10)}, "chunks", "zero or negative"),
        ({"shards": "big", "chunks": (10, 10)}, "shards", "tuple"),
        ({**GOOD, "index_location": "middle"}, "index_location", "'start' or 'end'"),
        ({**GOOD, "fill_value": 70000}, "fill_value", "int16"),
        ({**GOOD, "fill_value": 1.5}, "fill_value", "integer"),
        ({**GOOD, "fill_value": "abc"}, "fill_value", "int16"),
        ({**GOOD, "max_mem": "lots"}, "max_mem", "byte size"),
        ({**GOOD, "max_mem": 100}, "max_mem", "max_mem"),
        ({**GOOD, "compressors": "not-a-codec"}, "compressors", "zarr"),
        # shapes take whole numbers only: nothing is rounded or coerced
        ({"shards": (20.5, 20), "chunks": (10, 10)}, "shards", "not an integer"),
        ({"shards": (np.float64(20.0), 20), "chunks": (10, 10)}, "shards", "not an integer"),
        ({"shards": (20, 20), "chunks": (True, 10)}, "chunks", "not an integer"),
        ({"shards": ("20", 20), "chunks": (10, 10)}, "shards", "not an integer"),
        ({"shards": (20, 20), "chunks": 10.0}, "chunks", "tuple of 2 integers"),
        # booleans take booleans only
        ({**GOOD, "overwrite": "False"}, "overwrite", "True or False"),
        ({**GOOD, "write_empty_chunks": 1}, "write_empty_chunks", "True or False"),
        ({**GOOD, "compute": "yes"}, "compute", "True or False"),
        ({**GOOD, "progress": None}, "progress", "True or False"),
        ({**GOOD, "storage_options": {"fsync": "no"}}, "storage_options", "'fsync'"),
        ({**GOOD, "storage_options": ["fsync"]}, "storage_options", "dict"),
        ({**GOOD, "storage_options": {"anon": True}}, "storage_options", "local path"),
        # each error names its own parameter
        ({**GOOD, "dimension_names": ["y"]}, "dimension_names", "2 names"),
        ({**GOOD, "dimension_names": "yx"}, "dimension_names", "sequence"),
        ({**GOOD, "attributes": {"when": object()}}, "attributes", "JSON"),
        ({**GOOD, "attributes": ["a"]}, "attributes", "dict"),
        ({**GOOD, "progress": True, "compute": False}, "progress", "prepare_write"),
    ],
)
def test_bad_argument_is_named_and_nothing_is_written(
    tmp_path: Path, data: da.Array, kwargs: dict[str, Any], parameter: str, words: str
) -> None:
    target = tmp_path / "out.zarr"
    with pytest.raises(InvalidArgumentError) as info:
        shardpipe.to_sharded_zarr(data, str(target), **kwargs)
    message = str(info.value)
    assert parameter in info.value.parameter
    assert words in message, message
    assert not target.exists()


def test_object_dtype_is_refused(tmp_path: Path) -> None:
    objects = da.from_array(np.array(["a", 1, None], dtype=object), chunks=2)
    with pytest.raises(InvalidArgumentError, match="arr: dtype object is not supported"):
        shardpipe.to_sharded_zarr(objects, str(tmp_path / "x"), shards=(2,), chunks=(1,))
    assert not (tmp_path / "x").exists()


def test_zero_dimensional_and_non_arrays_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="0-dimensional"):
        shardpipe.to_sharded_zarr(da.from_array(np.float32(1)), str(tmp_path / "x"))
    with pytest.raises(InvalidArgumentError, match=r"dask\.array\.Array or numpy\.ndarray"):
        shardpipe.to_sharded_zarr([1, 2, 3], str(tmp_path / "x"))
    assert not (tmp_path / "x").exists()


def test_existing_array_is_kept_without_overwrite(tmp_path: Path, data: da.Array) -> None:
    target = tmp_path / "out.zarr"
    shardpipe.to_sharded_zarr(data, str(target), **GOOD)
    before = _tree_digest(target)
    with pytest.raises(ArrayExistsError, match="overwrite=True"):
        shardpipe.to_sharded_zarr(data * 2, str(target), **GOOD)
    # a failed argument check on an existing array touches nothing either
    with pytest.raises(InvalidArgumentError):
        shardpipe.to_sharded_zarr(
            data * 2, str(target), overwrite=True, shards=(20, 20), chunks=(3, 10)
        )
    assert _tree_digest(target) == before
    np.testing.assert_array_equal(zarr.open_array(str(target))[...], data.compute())
    shardpipe.to_sharded_zarr(data * 2, str(target), overwrite=True, **GOOD)
    np.testing.assert_array_equal(zarr.open_array(str(target))[...], 2 * data.compute())


def test_existing_group_is_kept_without_overwrite(tmp_path: Path, data: da.Array) -> None:
    zarr.open_group(str(tmp_path), mode="w").attrs["keep"] = "me"
    with pytest.raises(ArrayExistsError):
        shardpipe.to_sharded_zarr(data, str(tmp_path), **GOOD)
    assert zarr.open_group(str(tmp_path)).attrs["keep"] == "me"


def test_path_under_a_file_is_refused(tmp_path: Path, data: da.Array) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"not a directory")
    with pytest.raises(StoreNotWritableError, match="not a writable directory"):
        shardpipe.to_sharded_zarr(data, str(blocker / "out.zarr"), **GOOD)
    assert blocker.read_bytes() == b"not a directory"


def test_read_only_store_is_refused(tmp_path: Path, data: da.Array) -> None:
    store = zarr.storage.LocalStore(str(tmp_path), read_only=True)
    with pytest.raises(StoreNotWritableError, match="read-only"):
        shardpipe.to_sharded_zarr(data, store, **GOOD)
    assert list(tmp_path.iterdir()) == []


def test_unknown_store_kind_is_refused(data: da.Array) -> None:
    # an InvalidArgumentError (a ValueError) naming "store", no longer a bare TypeError
    with pytest.raises(InvalidArgumentError, match="store: expected a local path") as info:
        shardpipe.to_sharded_zarr(data, 42, **GOOD)
    assert info.value.parameter == "store"
    with pytest.raises(InvalidArgumentError, match="store: cannot open"):
        shardpipe.to_sharded_zarr(data, "nosuchprotocol://x/y", **GOOD)


def test_unknown_chunk_sizes_name_arr_and_the_fix(tmp_path: Path, data: da.Array) -> None:
    flat = data.ravel()
    masked = flat[flat > 5]  # boolean indexing: chunk sizes become unknown
    with pytest.raises(InvalidArgumentError, match=r"compute_chunk_sizes\(\)") as info:
        shardpipe.to_sharded_zarr(masked, str(tmp_path / "x"))
    assert info.value.parameter == "arr"
    assert not (tmp_path / "x").exists()


def test_xarray_input_suggests_its_data(tmp_path: Path) -> None:
    import xarray as xr

    values = xr.DataArray(np.zeros((4, 4)), dims=("y", "x"))
    with pytest.raises(InvalidArgumentError, match=r"data_array\.data") as info:
        shardpipe.to_sharded_zarr(values, str(tmp_path / "x"))
    assert "dimension_names=data_array.dims" in str(info.value)


@pytest.mark.parametrize("where", ["same", "inside", "parent"])
def test_writing_onto_its_own_source_is_refused(tmp_path: Path, data: da.Array, where: str) -> None:
    source = tmp_path / "vol.zarr"
    shardpipe.to_sharded_zarr(data, str(source), **GOOD)
    before = _tree_digest(tmp_path)
    target = {"same": source, "inside": source / "sub", "parent": tmp_path}[where]
    reread = da.from_zarr(str(source)) + 1  # the zarr array is deep in the graph
    with pytest.raises(shardpipe.SourceOverlapsTargetError, match="destroy") as info:
        shardpipe.to_sharded_zarr(reread, str(target), overwrite=True, **GOOD)
    assert info.value.parameter == "store"
    assert _tree_digest(tmp_path) == before
    np.testing.assert_array_equal(zarr.open_array(str(source))[...], data.compute())


def test_sibling_of_the_source_is_fine(tmp_path: Path, data: da.Array) -> None:
    shardpipe.to_sharded_zarr(data, str(tmp_path / "vol.zarr"), **GOOD)
    source = da.from_zarr(str(tmp_path / "vol.zarr"))
    shardpipe.to_sharded_zarr(source, str(tmp_path / "vol.zarr2"), **GOOD)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "vol.zarr2"))[...], data.compute())


def test_memory_budget_error_names_task_excess_and_fix(tmp_path: Path) -> None:
    blocks = da.zeros((64, 64), chunks=(64, 64), dtype="float64")  # one 32 KiB block
    with pytest.raises(shardpipe.MemoryBudgetError) as info:
        shardpipe.to_sharded_zarr(
            blocks, str(tmp_path / "x"), shards=(64, 64), chunks=(8, 8), max_mem=30_000
        )
    message = str(info.value)
    assert info.value.parameter == "max_mem"
    assert "write-shard" in message and "more than max_mem=30,000" in message
    assert "rechunk the source" in message
    assert not (tmp_path / "x").exists()
