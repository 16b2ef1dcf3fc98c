"""Bad input: a clear error naming the parameter, before a single byte is written."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe import ArrayExistsError, InvalidArgumentError, StoreNotWritableError
from tests.support import DRAFT_FIXTURES

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
        ({**GOOD, "compressors": "not-a-codec"}, "compressors", "no installed codec"),
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
    with pytest.raises(InvalidArgumentError, match="which fsspec does not know"):
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
    with pytest.raises(InvalidArgumentError, match=r"da\.shard\.to_zarr") as info:
        shardpipe.to_sharded_zarr(values, str(tmp_path / "x"))
    assert "da.data, with dimension_names=da.dims" in str(info.value)


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


def test_rechunking_onto_its_own_source_names_the_target(tmp_path: Path, data: da.Array) -> None:
    """The refusal names rechunk's parameter and fix (it named ``store`` and suggested
    shardpipe's rechunking to a user rechunking)."""
    source = tmp_path / "vol.zarr"
    shardpipe.to_sharded_zarr(data, str(source), **GOOD)
    before = _tree_digest(tmp_path)
    with pytest.raises(shardpipe.SourceOverlapsTargetError, match="destroy") as info:
        shardpipe.rechunk(str(source), str(source), overwrite=True, **GOOD)
    assert info.value.parameter == "target" and "Rechunk into another path" in str(info.value)
    assert _tree_digest(tmp_path) == before


def test_a_source_read_through_a_wrapping_store_is_its_own_place(
    tmp_path: Path, data: da.Array
) -> None:
    """A zarr WrapperStore (a LoggingStore, or the bounded store a conversion reads its
    source through) is where the store it wraps is."""
    shardpipe.to_sharded_zarr(data, str(tmp_path / "vol.zarr"), **GOOD)
    wrapped = zarr.storage.LoggingStore(zarr.storage.LocalStore(str(tmp_path)))
    source = da.from_zarr(zarr.open_array(wrapped, path="vol.zarr", mode="r"))
    before = _tree_digest(tmp_path)
    with pytest.raises(shardpipe.SourceOverlapsTargetError, match="destroy"):
        shardpipe.to_sharded_zarr(source + 1, str(tmp_path / "vol.zarr"), overwrite=True, **GOOD)
    assert _tree_digest(tmp_path) == before


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


# -- absurd sizes: refused by name, at once (never a traceback, never a long search) ---------

HUGE = 2**70  # beyond int64, what NumPy, Dask and zarr index


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("kwargs", "parameter", "words"),
    [
        ({"shards": (HUGE, 20), "chunks": (10, 10)}, "shards", "2**63 - 1"),
        ({"shards": (20, 20), "chunks": (HUGE, 10)}, "chunks", "2**63 - 1"),
        ({"shards": (HUGE, 20)}, "shards", "2**63 - 1"),
        ({"shards": (2**40, 2**40)}, "shards", "2**63 - 1"),  # 2**80 elements in a shard
        # within int64: the default inner chunk is found at once; the memory model refuses
        ({"shards": (2**58, 30)}, "max_mem", "stamp-shard"),
        ({"shards": (2**61 - 1, 2)}, "max_mem", "stamp-shard"),  # a Mersenne prime
    ],
)
def test_absurd_sizes_are_refused_by_name_at_once(
    tmp_path: Path, data: da.Array, kwargs: dict[str, Any], parameter: str, words: str
) -> None:
    target = tmp_path / "out.zarr"
    for write in (shardpipe.to_sharded_zarr, shardpipe.rechunk):
        with pytest.raises(InvalidArgumentError) as info:
            write(data, str(target), **kwargs)
        assert info.value.parameter == parameter, str(info.value)
        assert words in str(info.value), str(info.value)
        assert not target.exists()


# -- every parameter of every public function, table-driven ----------------------------------
#
# One row per (function, parameter, bad value, words expected in the message). Every row
# runs against the same small tree (a sharded array, a zarr source, a group, a dataset) and
# must raise a ShardpipeError naming the parameter, before anything is written: the tree is
# byte-for-byte the same afterwards and no new target appears.


class Places:
    """Absolute paths of the shared tree: what exists and where new things would go."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.arr = str(root / "arr.zarr")  # a sharded array
        self.src = str(root / "src.zarr")  # an unsharded zarr v3 array
        self.grp = str(root / "grp.zarr")  # a group with one large array
        self.ds = str(root / "ds.zarr")  # a dataset written by ds.shard.to_zarr
        self.draft = str(root / "draft")  # a hierarchy of the storage-transformer draft
        self.new = str(root / "new.zarr")  # never exists
        self.missing = str(root / "missing.zarr")  # never exists
        self.file = str(root / "a-file.txt")  # a file where a folder is expected
        self.vol = str(root / "vol")  # a Neuroglancer precomputed volume
        self.src3 = str(root / "src3.zarr")  # a (x, y, z) uint16 zarr v3 array


def _source() -> da.Array:
    return da.from_array(np.arange(40 * 30, dtype="int16").reshape(40, 30), chunks=(13, 7))


def _dataset() -> Any:
    import xarray as xr

    values = np.arange(40 * 30, dtype="float64").reshape(40, 30)
    return xr.Dataset({"t": (("time", "x"), values)}, coords={"time": np.arange(40)}).chunk(
        {"time": 10}
    )


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Places:
    import dask

    root = tmp_path_factory.mktemp("bad-input")
    with dask.config.set(scheduler="threads"):
        shardpipe.to_sharded_zarr(_source(), str(root / "arr.zarr"), **GOOD)
        source = zarr.create_array(
            str(root / "src.zarr"), shape=(40, 30), chunks=(10, 10), dtype="int16"
        )
        source[...] = np.arange(1200, dtype="int16").reshape(40, 30)
        group = zarr.open_group(str(root / "grp.zarr"), mode="w")
        group.create_array("big", shape=(600, 600), chunks=(100, 100), dtype="float64")[...] = 1.0
        _dataset().shard.to_zarr(str(root / "ds.zarr"), shards={"time": 20}, chunks={"time": 10})
    shutil.copytree(DRAFT_FIXTURES / "hierarchy", root / "draft")
    (root / "a-file.txt").write_text("a file, not a folder")
    shardpipe.to_neuroglancer_precomputed(_volume(), str(root / "vol"), **PRECOMPUTED)
    zarr.create_array(str(root / "src3.zarr"), shape=(20, 20, 20), chunks=(10, 10, 10), dtype="u2")
    return Places(root)


def _volume() -> da.Array:
    return da.from_array(np.arange(20**3, dtype="uint16").reshape(20, 20, 20), chunks=10)


PRECOMPUTED: dict[str, Any] = {"resolution": (1, 1, 1), "chunk_size": (8, 8, 8)}


Call = Any  # Callable[[Places], object]
OPAQUE = object()
NAN, INF = float("nan"), float("inf")
ALL = (slice(None), slice(None))
tz, pw = shardpipe.to_sharded_zarr, shardpipe.prepare_write


def _writes(name: str, f: Any) -> list[tuple[str, str, Any, str, Call]]:
    """Rows shared by to_sharded_zarr and prepare_write (same parameters)."""

    def new(**kwargs: Any) -> Call:
        return lambda p: f(_source(), p.new, **{**GOOD, **kwargs})

    def into(**kwargs: Any) -> Call:
        return lambda p: f(_source(), p.arr, **kwargs)

    return [
        (name, "arr", [1, 2], "dask.array.Array", lambda p: f([1, 2], p.new)),
        (name, "store", "a file", "not a writable directory", lambda p: f(_source(), p.file)),
        (
            name,
            "store",
            "under a file",
            "not a writable directory",
            lambda p: f(_source(), p.file + "/x.zarr"),
        ),
        (name, "fill_value", "5", "'5' cannot be stored as int16: a str", new(fill_value="5")),
        (name, "region", "('0':40, :)", "not an integer", into(region=(slice("0", 40), ALL[1]))),
        (name, "arr", "np.array(1.0)", "0-dimensional", lambda p: f(np.array(1.0), p.new)),
        (name, "store", 5, "got int", lambda p: f(_source(), 5)),
        (name, "store", None, "got NoneType", lambda p: f(_source(), None)),
        (name, "path", 5, "got 5 (int)", new(path=5)),
        (name, "path", ["a"], "got ['a'] (list)", new(path=["a"])),
        (name, "path", "../up", "'../up' has a '.' or '..' part", new(path="../up")),
        (name, "shards", True, "got True", new(shards=True)),
        (name, "shards", 2.0, "got 2.0", new(shards=2.0)),
        (name, "chunks", -1, "zero or negative", new(chunks=-1)),
        (name, "chunks", {"a": 1}, "not an integer", new(chunks={"a": 1})),
        (name, "compressors", 5, "zarr rejects 5", new(compressors=5)),
        (
            name,
            "compressors",
            "zstd9",
            "named 'zstd9'. Did you mean 'zstd'",
            new(compressors="zstd9"),
        ),
        (name, "filters", "x", "no installed codec is named 'x'", new(filters="x")),
        (name, "filters", 3, "zarr rejects", new(filters=3)),
        (name, "serializer", "x", "no installed codec is named 'x'", new(serializer="x")),
        (name, "serializer", 3, "zarr rejects", new(serializer=3)),
        (name, "fill_value", [1, 2], "[1, 2] cannot be stored as int16", new(fill_value=[1, 2])),
        (name, "fill_value", OPAQUE, "cannot be stored as int16", new(fill_value=OPAQUE)),
        (name, "fill_value", np.nan, "nan is not an integer", new(fill_value=np.nan)),
        (name, "index_location", 1, "unknown value 1", new(index_location=1)),
        (name, "index_location", ["end"], "unknown value ['end']", new(index_location=["end"])),
        (name, "dimension_names", (1, 2), "[1, 2] is not 2 names", new(dimension_names=(1, 2))),
        (name, "dimension_names", 5, "got 5", new(dimension_names=5)),
        (name, "attributes", {1: 2}, "key 1 (int) is not a string", new(attributes={1: 2})),
        (name, "attributes", {"a": OPAQUE}, "JSON", new(attributes={"a": OPAQUE})),
        (name, "attributes", {"a": NAN}, "attributes['a'] is nan", new(attributes={"a": NAN})),
        (
            name,
            "attributes",
            {"a": {"b": [1, -INF]}},
            "attributes['a']['b'][1] is -inf",
            new(attributes={"a": {"b": [1, -INF]}}),
        ),
        (
            name,
            "attributes",
            {"a": {2: "x"}},
            "attributes['a']: key 2 (int) is not a string",
            new(attributes={"a": {2: "x"}}),
        ),
        (name, "overwrite", 1, "got 1 (int)", new(overwrite=1)),
        (name, "storage_options", "x", "expected a dict, got str", new(storage_options="x")),
        (name, "storage_options", {"fsync": 1}, "got 1", new(storage_options={"fsync": 1})),
        (name, "write_empty_chunks", "no", "got 'no'", new(write_empty_chunks="no")),
        (name, "max_mem", -5, "positive, got -5", new(max_mem=-5)),
        (name, "max_mem", 2.5e9, "2500000000.0 (float)", new(max_mem=2.5e9)),
        (name, "max_mem", True, "got True", new(max_mem=True)),
        (name, "max_mem", None, "None", new(max_mem=None)),
        (name, "max_mem", [1], "[1]", new(max_mem=[1])),
        (name, "region", "x", "got 'x'", into(region="x")),
        (name, "region", (slice(0, 40),), "1 slice(s)", into(region=(slice(0, 40),))),
        (name, "region", "(0:40, 0:31)", "outside", into(region=(slice(0, 40), slice(0, 31)))),
        (name, "region", "(40:0, :)", "runs backwards", into(region=(slice(40, 0), ALL[1]))),
        (name, "region", "(0.0:40, :)", "not an integer", into(region=(slice(0.0, 40), ALL[1]))),
        (
            name,
            "region",
            "new array",
            "no Zarr v3 array",
            lambda p: f(_source(), p.new, region=ALL),
        ),
        (name, "region", "and append_dim", "both", into(region=ALL, append_dim=0)),
        (name, "overwrite", "and region", "contradicts region", into(region=ALL, overwrite=True)),
        (name, "append_dim", "0", "'0' is not a dimension name", into(append_dim="0")),
        (name, "append_dim", 2, "2 is not an axis", into(append_dim=2)),
        (name, "append_dim", True, "True is not an axis", into(append_dim=True)),
        (name, "append_dim", 0.0, "0.0 is not an axis", into(append_dim=0.0)),
        (name, "write_strategy", "fast", "'fast'", into(region=ALL, write_strategy="fast")),
        (name, "write_strategy", None, "unknown value None", new(write_strategy=None)),
        (name, "write_strategy", "rewrite", "shards that exist", new(write_strategy="rewrite")),
        (name, "chunk_checksums", "no", "got 'no'", new(chunk_checksums="no")),
        (name, "resume", "yes", "got 'yes'", new(resume="yes")),
        (name, "resume", 1, "got 1", new(resume=1)),
        (
            name,
            "resume",
            "and overwrite",
            "overwrite=True deletes",
            new(resume=True, overwrite=True),
        ),
    ]


def _rechunks(name: str, f: Any) -> list[tuple[str, str, Any, str, Call]]:
    def new(**kwargs: Any) -> Call:
        return lambda p: f(p.src, p.new, **kwargs)

    return [
        (name, "source", 5, "got int", lambda p: f(5, p.new)),
        (name, "source", "a file", "cannot open a Zarr array", lambda p: f(p.file, p.new)),
        (name, "target", "a file", "not a writable directory", lambda p: f(p.src, p.file)),
        (
            name,
            "target",
            "under a file",
            "not a writable directory",
            lambda p: f(p.src, p.file + "/x.zarr"),
        ),
        (name, "temp_store", "a file", "exists", lambda p: f(p.src, p.new, temp_store=p.file)),
        (name, "shards", ("20", 10), "holds '20' (str)", new(shards=("20", 10))),
        (name, "chunks", "10", "got '10'", new(chunks="10")),
        (name, "chunks", (10, 2**70), "2**63 - 1", new(chunks=(10, 2**70))),
        (name, "fill_value", "5", "'5' cannot be stored as int16: a str", new(fill_value="5")),
        (name, "overwrite", "True", "got 'True'", new(overwrite="True")),
        (name, "index_location", 1, "unknown value 1", new(index_location=1)),
        (name, "dimension_names", ["y", 1], "is not 2 names", new(dimension_names=["y", 1])),
        (name, "max_mem", "32", "max_mem=32", new(max_mem="32")),
        (name, "source", "missing", "cannot open a Zarr array", lambda p: f(p.missing, p.new)),
        (name, "source", "numpy", "got ndarray", lambda p: f(np.zeros(4), p.new)),
        (name, "target", 5, "got int", lambda p: f(p.src, 5)),
        (name, "target", None, "got NoneType", lambda p: f(p.src, None)),
        (name, "target", "existing", "already exists", lambda p: f(p.src, p.arr)),
        (name, "path", 5, "got 5 (int)", new(path=5)),
        (name, "shards", "big", "got 'big'", new(shards="big")),
        (name, "shards", (20,), "1 dimensions", new(shards=(20,))),
        (name, "chunks", (0, 10), "zero or negative", new(chunks=(0, 10))),
        (name, "chunks", (20.0, 10), "not an integer", new(chunks=(20.0, 10))),
        (name, "max_mem", "lots", "'lots'", new(max_mem="lots")),
        (name, "max_mem", 0, "positive, got 0", new(max_mem=0)),
        (name, "compressors", 5, "zarr rejects 5", new(compressors=5)),
        (name, "filters", 3, "zarr rejects", new(filters=3)),
        (name, "chunk_checksums", "no", "got 'no'", new(chunk_checksums="no")),
        (name, "fill_value", 70000, "70000 is not an integer", new(fill_value=70000)),
        (name, "fill_value", "abc", "'abc' cannot be stored", new(fill_value="abc")),
        (name, "index_location", "middle", "'middle'", new(index_location="middle")),
        (name, "dimension_names", ("y",), "['y'] is not 2 names", new(dimension_names=("y",))),
        (name, "dimension_names", "yx", "got 'yx'", new(dimension_names="yx")),
        (name, "attributes", {"a": OPAQUE}, "JSON", new(attributes={"a": OPAQUE})),
        (name, "attributes", "x", "got 'x' (str)", new(attributes="x")),
        (name, "attributes", {"a": NAN}, "attributes['a'] is nan", new(attributes={"a": NAN})),
        (name, "attributes", [INF], "got [inf] (list)", new(attributes=[INF])),
        (name, "storage_options", "x", "got str", new(storage_options="x")),
        (name, "storage_options", {"anon": True}, "['anon']", new(storage_options={"anon": True})),
        (name, "source_storage_options", "x", "got 'x'", new(source_storage_options="x")),
        (
            name,
            "source_storage_options",
            {"anon": 1},
            "['anon']",
            new(source_storage_options={"anon": 1}),
        ),
        (name, "overwrite", "yes", "got 'yes'", new(overwrite="yes")),
        (name, "resume", "yes", "got 'yes'", new(resume="yes")),
        (name, "resume", "and overwrite", "Pick one", new(resume=True, overwrite=True)),
        (name, "temp_store", 5, "got 5 (int)", new(temp_store=5)),
        (name, "temp_store", "the target", "overlaps", lambda p: f(p.src, p.new, temp_store=p.new)),
        (name, "temp_store", "the source", "overlaps", lambda p: f(p.src, p.new, temp_store=p.src)),
        (name, "temp_store", "existing", "exists", lambda p: f(p.src, p.new, temp_store=p.arr)),
        (name, "target", "the source", "destroy", lambda p: f(p.src, p.src, overwrite=True)),
    ]


def _groups(name: str, f: Any) -> list[tuple[str, str, Any, str, Call]]:
    def new(**kwargs: Any) -> Call:
        return lambda p: f(p.grp, p.new, **kwargs)

    return [
        (name, "source", 5, "cannot open a Zarr group", lambda p: f(5, p.new)),
        (name, "source", "a file", "cannot open a Zarr group", lambda p: f(p.file, p.new)),
        (name, "source", "an array", "cannot open a Zarr group", lambda p: f(p.src, p.new)),
        (name, "target", "a file", "not a writable directory", lambda p: f(p.grp, p.file)),
        (name, "shards", ("100", 100), "holds '100' (str)", new(shards=("100", 100))),
        (name, "chunks", "10", "got '10'", new(chunks="10")),
        (
            name,
            "arrays",
            {"big": {"shards": ("100", 100)}},
            "holds '100' (str)",
            new(arrays={"big": {"shards": ("100", 100)}}),
        ),
        (name, "max_mem", [1], "[1]", new(max_mem=[1])),
        (name, "overwrite", "True", "got 'True'", new(overwrite="True")),
        (name, "chunk_checksums", 1, "got 1 (int)", new(chunk_checksums=1)),
        (name, "source", "missing", "cannot open a Zarr group", lambda p: f(p.missing, p.new)),
        (name, "target", 5, "got int", lambda p: f(p.grp, 5)),
        (name, "target", "existing", "exists", lambda p: f(p.grp, p.arr)),
        (name, "shards", "big", "got 'big'", new(shards="big")),
        (name, "shards", (100.0, 100), "not an integer", new(shards=(100.0, 100))),
        (name, "chunks", 7, "got 7 (int)", new(chunks=7)),
        (name, "chunks", (0, 10), "zero or negative", new(chunks=(0, 10))),
        (name, "arrays", "x", "got 'x'", new(arrays="x")),
        (name, "arrays", {"nope": {}}, "['nope']", new(arrays={"nope": {}})),
        (name, "arrays", {"big": {"shard": 1}}, "['shard']", new(arrays={"big": {"shard": 1}})),
        (name, "arrays", {"big": "x"}, "'x' is not a dict", new(arrays={"big": "x"})),
        (name, "arrays", {"big": {"chunks": "x"}}, "got 'x'", new(arrays={"big": {"chunks": "x"}})),
        (name, "max_mem", "lots", "'lots'", new(max_mem="lots")),
        (name, "compressors", 5, "zarr rejects 5", new(compressors=5)),
        (name, "chunk_checksums", "no", "got 'no'", new(chunk_checksums="no")),
        (name, "index_location", "middle", "'middle'", new(index_location="middle")),
        (name, "storage_options", "x", "got str", new(storage_options="x")),
        (name, "source_storage_options", "x", "got 'x'", new(source_storage_options="x")),
        (name, "overwrite", "yes", "got 'yes'", new(overwrite="yes")),
        (name, "resume", "yes", "got 'yes'", new(resume="yes")),
        (name, "resume", "and overwrite", "Pick one", new(resume=True, overwrite=True)),
    ]


def _maintenance() -> list[tuple[str, str, Any, str, Call]]:
    rows: list[tuple[str, str, Any, str, Call]] = []
    for name in ("verify", "info", "repair", "compact", "cleanup"):
        f = getattr(shardpipe, name)
        nothere = (name, "store" if name == "cleanup" else "path")
        rows += [
            (name, "store", 5, "got int", lambda p, f=f: f(5)),
            (name, "store", "missing", "no", lambda p, f=f: f(p.missing)),
            (name, "path", 5, "got 5 (int)", lambda p, f=f: f(p.arr, 5)),
            (name, "path", "..", "'..' has a '.' or '..' part", lambda p, f=f: f(p.arr, "..")),
            # cleanup names the store, with the path, in its own words
            (*nothere, "nope", "'nope'", lambda p, f=f: f(p.arr, "nope")),
            (name, "storage_options", "x", "got str", lambda p, f=f: f(p.arr, storage_options="x")),
            (
                name,
                "storage_options",
                {"anon": 1},
                "['anon']",
                lambda p, f=f: f(p.arr, storage_options={"anon": 1}),
            ),
        ]
    for name in ("verify", "info", "repair", "compact", "cleanup"):  # issue 39
        f = getattr(shardpipe, name)
        rows += [
            (name, "store", "a file", "is a file", lambda p, f=f: f(p.file)),
            (name, "store", "under a file", "lies under the file", lambda p, f=f: f(p.file + "/a")),
        ]
    for name in ("verify", "info", "compact"):
        f = getattr(shardpipe, name)
        for bad, words in (
            (0, "got 0 (int)"),
            (-1, "got -1"),
            ("4", "got '4' (str)"),
            (2.5, "got 2.5 (float)"),
            (True, "got True (bool)"),
            (None, "got None"),
        ):
            rows.append(
                (name, "workers", bad, words, lambda p, f=f, bad=bad: f(p.arr, workers=bad))
            )
    rows += [
        ("verify", "complete", 1, "got 1 (int)", lambda p: shardpipe.verify(p.arr, complete=1)),
        (
            "verify",
            "complete",
            "yes",
            "got 'yes'",
            lambda p: shardpipe.verify(p.arr, complete="yes"),
        ),
        ("verify", "progress", "no", "got 'no'", lambda p: shardpipe.verify(p.arr, progress="no")),
        ("info", "progress", "no", "got 'no'", lambda p: shardpipe.info(p.arr, progress="no")),
        ("repair", "progress", "no", "got 'no'", lambda p: shardpipe.repair(p.arr, progress="no")),
        (
            "compact",
            "progress",
            "no",
            "got 'no'",
            lambda p: shardpipe.compact(p.arr, progress="no"),
        ),
        ("repair", "force", "yes", "got 'yes'", lambda p: shardpipe.repair(p.arr, force="yes")),
        ("repair", "force", 1, "got 1 (int)", lambda p: shardpipe.repair(p.arr, force=1)),
    ]
    for bad in (2.0, -0.1, 1, "0.1", True, None, float("nan")):
        number = isinstance(bad, (int, float)) and not isinstance(bad, bool)
        rows.append(
            (
                "compact",
                "threshold",
                bad,
                f"{bad!r} is not in [0, 1)" if number else f"{bad!r} is not a number",
                lambda p, bad=bad: shardpipe.compact(p.arr, threshold=bad),
            )
        )
    return rows


def _batches() -> list[tuple[str, str, Any, str, Call]]:
    """``write_regions`` and ``RegionBatch`` on a file where the array should be (issue 39)."""
    pairs = [((slice(0, 2), slice(0, 2)), np.ones((2, 2), "int16"))]
    rows: list[tuple[str, str, Any, str, Call]] = []
    for name, call in (
        ("write_regions", lambda where: shardpipe.write_regions(pairs, where)),
        ("RegionBatch", lambda where: shardpipe.RegionBatch(where)),
    ):
        rows += [
            (name, "store", "a file", "is a file", lambda p, c=call: c(p.file)),
            (
                name,
                "store",
                "under a file",
                "lies under the file",
                lambda p, c=call: c(p.file + "/a"),
            ),
        ]
    return rows


def _datasets() -> list[tuple[str, str, Any, str, Call]]:
    from shardpipe.dataset import repair_dataset, to_zarr

    def new(**kwargs: Any) -> Call:
        return lambda p: _dataset().shard.to_zarr(p.new, **kwargs)

    def into(**kwargs: Any) -> Call:
        return lambda p: _dataset().shard.to_zarr(p.ds, **kwargs)

    od, rd = shardpipe.open_dataset, repair_dataset
    return [
        ("open_dataset", "store", 5, "got 5 (int)", lambda p: od(5)),
        ("open_dataset", "store", "missing", "no Zarr group", lambda p: od(p.missing)),
        ("open_dataset", "group", 5, "got 5 (int)", lambda p: od(p.ds, group=5)),
        ("open_dataset", "group", "nope", "group 'nope'", lambda p: od(p.ds, group="nope")),
        # an array where a group is expected: pointed to open_array (issue 39)
        ("open_dataset", "store", "an array", "open_array(", lambda p: od(p.arr)),
        ("open_dataset", "store", "an array", "open_array(", lambda p: od(p.src)),
        ("open_dataset", "chunks", {}, "one Dask chunk per shard", lambda p: od(p.ds, chunks={})),
        ("repair_dataset", "store", 5, "got int", lambda p: rd(5)),
        ("repair_dataset", "store", "missing", "no Zarr array or group", lambda p: rd(p.missing)),
        ("repair_dataset", "group", 5, "got 5 (int)", lambda p: rd(p.ds, group=5)),
        ("repair_dataset", "group", "nope", "'nope'", lambda p: rd(p.ds, group="nope")),
        (
            "repair_dataset",
            "storage_options",
            "x",
            "got str",
            lambda p: rd(p.ds, storage_options="x"),
        ),
        ("repair_dataset", "force", "yes", "got 'yes'", lambda p: rd(p.ds, force="yes")),
        ("repair_dataset", "progress", "yes", "got 'yes'", lambda p: rd(p.ds, progress="yes")),
        ("to_zarr", "obj", "numpy", "got ndarray", lambda p: to_zarr(np.zeros(3), p.new)),
        ("to_zarr", "store", 5, "got int", lambda p: _dataset().shard.to_zarr(5)),
        (
            "to_zarr",
            "store",
            "a file",
            "not a writable directory",
            lambda p: to_zarr(_ds(), p.file),
        ),
        (
            "to_zarr",
            "store",
            "under a file",
            "not a writable directory",
            lambda p: to_zarr(_dataset(), p.file + "/x.zarr"),
        ),
        ("to_zarr", "obj", "a Variable", "got Variable", lambda p: to_zarr(_var(), p.new)),
        ("to_zarr", "append_dim", 5, "5 is not a dimension", into(append_dim=5)),
        ("to_zarr", "region", {"time": "0:5"}, "'0:5'", into(region={"time": "0:5"})),
        (
            "to_zarr",
            "region",
            {"time": slice("0", 5)},
            "integer bounds",
            into(region={"time": slice("0", 5)}),
        ),
        ("to_zarr", "consolidated", 1, "got 1 (int)", new(consolidated=1)),
        ("to_zarr", "write_strategy", 1, "unknown value 1", new(write_strategy=1)),
        ("to_zarr", "chunk_checksums", "True", "got 'True'", new(chunk_checksums="True")),
        ("to_zarr", "max_mem", -1, "positive, got -1", new(max_mem=-1)),
        ("to_zarr", "max_mem", 2.5e9, "2500000000.0 (float)", new(max_mem=2.5e9)),
        (
            "to_zarr",
            "encoding",
            {"t": {"dtype": 5}},
            "variable 't'",
            new(encoding={"t": {"dtype": 5}}),
        ),
        ("to_zarr", "store", None, "got NoneType", lambda p: _dataset().shard.to_zarr(None)),
        ("to_zarr", "shards", "x", "got 'x'", new(shards="x")),
        ("to_zarr", "shards", {"time": 0}, "size 0", new(shards={"time": 0})),
        ("to_zarr", "shards", {"time": 2.0}, "size 2.0", new(shards={"time": 2.0})),
        ("to_zarr", "shards", {"nope": 2}, "['nope']", new(shards={"nope": 2})),
        ("to_zarr", "chunks", {"time": -2}, "size -2", new(chunks={"time": -2})),
        ("to_zarr", "chunks", {"time": True}, "size True", new(chunks={"time": True})),
        (
            "to_zarr",
            "shards",
            "not chunks' multiple",
            "(7, 30)",
            new(shards={"time": 20}, chunks={"time": 7}),
        ),
        ("to_zarr", "encoding", "x", "got 'x'", new(encoding="x")),
        ("to_zarr", "encoding", {"nope": {}}, "['nope']", new(encoding={"nope": {}})),
        ("to_zarr", "encoding", {"t": "x"}, "got 'x' (str)", new(encoding={"t": "x"})),
        (
            "to_zarr",
            "encoding",
            {"t": {"bogus": 1}},
            "['bogus']",
            new(encoding={"t": {"bogus": 1}}),
        ),
        (
            "to_zarr",
            "encoding",
            {"t": {"dtype": "nope"}},
            "'nope' is not a NumPy dtype",
            new(encoding={"t": {"dtype": "nope"}}),
        ),
        # what comes from encoding= is named encoding, with the variable and the key
        *[
            ("to_zarr", "encoding", {"t": bad}, words, new(encoding={"t": bad}, **more))
            for bad, words, more in ENCODING_ROWS
        ],
        ("to_zarr", "shards", {"time": "32"}, "size '32'", new(shards={"time": "32"})),
        ("to_zarr", "chunks", {"time": "5"}, "size '5'", new(chunks={"time": "5"})),
        ("to_zarr", "shards", {"time": 2**70}, "2**63 - 1", new(shards={"time": 2**70})),
        (
            "to_zarr",
            "encoding",
            {"time": {"shards": "x"}},
            "variable 'time'",
            new(encoding={"time": {"shards": "x"}}),
        ),
        (
            "to_zarr",
            "encoding",
            {"time": {"units": "parsecs since 2000"}},
            "variable 'time'",
            new(encoding={"time": {"units": "parsecs since 2000"}}),
        ),
        ("to_zarr", "mode", "x", "unknown value 'x'", new(mode="x")),
        ("to_zarr", "mode", 1, "unknown value 1", new(mode=1)),
        ("to_zarr", "mode", "w- (exists)", "already exists", into()),
        (
            "to_zarr",
            "mode",
            "w with append_dim",
            "cannot append",
            into(append_dim="time", mode="w"),
        ),
        ("to_zarr", "append_dim", "nope", "'nope' is not a dimension", into(append_dim="nope")),
        ("to_zarr", "region", "x", "got 'x'", into(region="x")),
        ("to_zarr", "region", {"time": 5}, "5 for dimension 'time'", into(region={"time": 5})),
        ("to_zarr", "region", {"nope": "0:1"}, "['nope']", into(region={"nope": slice(0, 1)})),
        (
            "to_zarr",
            "region",
            "and append_dim",
            "both",
            into(region={"time": slice(0, 40)}, append_dim="time"),
        ),
        ("to_zarr", "group", 5, "got 5 (int)", new(group=5)),
        ("to_zarr", "group", "a/../b", "'..' part", new(group="a/../b")),
        ("to_zarr", "consolidated", "yes", "got 'yes'", new(consolidated="yes")),
        ("to_zarr", "write_strategy", "fast", "'fast'", new(write_strategy="fast")),
        ("to_zarr", "chunk_checksums", "no", "got 'no'", new(chunk_checksums="no")),
        ("to_zarr", "max_mem", "lots", "'lots'", new(max_mem="lots")),
        ("to_zarr", "storage_options", "x", "got str", new(storage_options="x")),
        (
            "to_zarr",
            "storage_options",
            {"anon": True},
            "['anon']",
            new(storage_options={"anon": True}),
        ),
        ("to_zarr", "compute", "no", "got 'no'", new(compute="no")),
        ("to_zarr", "progress", "no", "got 'no'", new(progress="no")),
        ("to_zarr", "commit", "on a path", "not an Icechunk session", new(commit="message")),
        ("to_zarr", "rebase", "without commit", "without commit", new(rebase=True)),
        (
            "to_zarr",
            "progress",
            "without compute",
            "compute=False",
            new(progress=True, compute=False),
        ),
    ]


def _precomputed() -> list[tuple[str, str, Any, str, Call]]:
    f, name = shardpipe.to_neuroglancer_precomputed, "to_neuroglancer_precomputed"
    spec = {
        "@type": "neuroglancer_uint64_sharded_v1",
        "preshift_bits": 0,
        "hash": "identity",
        "minishard_bits": 1,
        "shard_bits": 1,
    }

    def new(**kwargs: Any) -> Call:
        return lambda p: f(_volume(), p.new, **{**PRECOMPUTED, **kwargs})

    huge = da.zeros((1024, 1024, 1024), dtype="uint16", chunks=512)
    return [
        (name, "arr", [1, 2], "got list", lambda p: f([1, 2], p.new, **PRECOMPUTED)),
        (name, "arr", "2-D", "2 dimensions", lambda p: f(_source(), p.new, **PRECOMPUTED)),
        (
            name,
            "arr",
            "int64",
            "dtype int64",
            lambda p: f(_volume().astype("int64"), p.new, **PRECOMPUTED),
        ),
        (name, "store", 5, "got int", lambda p: f(_volume(), 5, **PRECOMPUTED)),
        (name, "store", "a file", "is a file", lambda p: f(_volume(), p.file, **PRECOMPUTED)),
        (
            name,
            "store",
            "under a file",
            "lies under the file",
            lambda p: f(_volume(), p.file + "/vol", **PRECOMPUTED),
        ),
        (name, "store", "existing", "already exists", lambda p: f(_volume(), p.vol, **PRECOMPUTED)),
        (name, "resolution", ("8", 8, 8), "'8' (str)", new(resolution=("8", 8, 8))),
        (name, "resolution", "888", "'8' (str)", new(resolution="888")),
        (name, "resolution", (True, 8, 8), "True (bool)", new(resolution=(True, 8, 8))),
        (
            name,
            "resolution",
            "numpy strings",
            "(str_)",
            new(resolution=np.array(["8", "8", "8"])),
        ),
        (name, "resolution", (0, 8, 8), "positive", new(resolution=(0, 8, 8))),
        (name, "resolution", (np.nan, 8, 8), "positive", new(resolution=(np.nan, 8, 8))),
        (name, "resolution", (8, 8), "three", new(resolution=(8, 8))),
        (name, "chunk_size", ("8", 8, 8), "three integers", new(chunk_size=("8", 8, 8))),
        (name, "chunk_size", (8.0, 8, 8), "three integers", new(chunk_size=(8.0, 8, 8))),
        (name, "chunk_size", (0, 8, 8), "below 1", new(chunk_size=(0, 8, 8))),
        (
            name,
            "chunk_size",
            (1024, 1024, 1024),
            "268,435,456",
            lambda p: f(huge, p.new, resolution=(1, 1, 1), chunk_size=(1024,) * 3, max_mem="9GiB"),
        ),
        (name, "voxel_offset", ("0", 0, 0), "three integers", new(voxel_offset=("0", 0, 0))),
        (name, "voxel_offset", (0.5, 0, 0), "three integers", new(voxel_offset=(0.5, 0, 0))),
        (name, "volume_type", "mesh", "'mesh'", new(volume_type="mesh")),
        (name, "volume_type", 5, "5 is not one of", new(volume_type=5)),
        (name, "encoding", "png", "'png'", new(encoding="png")),
        (name, "encoding", "jpeg", "uint8 images", new(encoding="jpeg")),
        (name, "sharding", "yes", "got 'yes'", new(sharding="yes")),
        (
            name,
            "sharding",
            "preshift_bits '1'",
            "got '1'",
            new(sharding={**spec, "preshift_bits": "1"}),
        ),
        (name, "sharding", [spec, spec], "2 specs for 1 scales", new(sharding=[spec, spec])),
        (name, "sharding", [5], "got 5", new(sharding=[5])),
        (name, "scales", 5, "got 5", new(scales=5)),
        (name, "scales", [("1", "1", "1")], "integer factors", new(scales=[("1", "1", "1")])),
        (name, "scales", [(2, 2, 2)], "does not start with", new(scales=[(2, 2, 2)])),
        (
            name,
            "scales",
            [(1, 1, 1), (3, 3, 3), (2, 2, 2)],
            "not a larger multiple",
            new(scales=[(1, 1, 1), (3, 3, 3), (2, 2, 2)]),
        ),
        (name, "downsample", "median", "'median'", new(downsample="median")),
        (name, "downsample", 5, "5 is not one of", new(downsample=5)),
        (name, "overwrite", "yes", "got 'yes'", new(overwrite="yes")),
        (name, "storage_options", "x", "got str", new(storage_options="x")),
        (name, "storage_options", {"anon": True}, "['anon']", new(storage_options={"anon": True})),
        (name, "max_mem", "lots", "'lots'", new(max_mem="lots")),
        (name, "max_mem", 0, "positive, got 0", new(max_mem=0)),
        (name, "max_mem", True, "got True", new(max_mem=True)),
        (name, "max_mem", 1000, "more than max_mem=1,000", new(max_mem=1000)),
        (name, "compute", "no", "got 'no'", new(compute="no")),
        (name, "progress", "no", "got 'no'", new(progress="no")),
        (name, "progress", "without compute", "compute=False", new(progress=True, compute=False)),
    ]


ENCODING_ROWS: list[tuple[dict[str, Any], str, dict[str, Any]]] = [
    # (the encoding of variable "t", words, other arguments)
    ({"shards": "x"}, "encoding['t']['shards']: expected a tuple", {}),
    ({"shards": ("20", 30)}, "encoding['t']['shards']: ('20', 30) holds '20'", {}),
    ({"chunks": (7.0, 30)}, "encoding['t']['chunks']: (7.0, 30) holds 7.0", {}),
    ({"shards": (20, 30), "chunks": (7, 30)}, "encoding['t']: shards (20, 30)", {}),
    ({"chunks": (7, 30)}, "encoding['t']['chunks']", {"shards": {"time": 20}}),
    ({"compressors": 5}, "encoding['t']['compressors']: zarr rejects 5", {}),
    ({"filters": 3}, "variable 't'", {}),
    ({"serializer": 3}, "variable 't'", {}),
    ({"fill_value": "x"}, "variable 't'", {}),
    ({"_FillValue": "x"}, "variable 't'", {}),
    ({"missing_value": "x"}, "variable 't'", {}),
    ({"dtype": "int16", "scale_factor": "x"}, "variable 't'", {}),
    ({"dtype": "int16", "_FillValue": 70000}, "variable 't'", {}),
    ({"add_offset": [1, 2]}, "variable 't'", {}),
    ({"units": 5}, "variable 't'", {}),
    ({"calendar": "x", "units": "days since 2000-01-01"}, "variable 't'", {}),
    ({"_Unsigned": "x", "dtype": "int16"}, "variable 't'", {}),
    ({"coordinates": 5}, "variable 't'", {}),
    ({"chunk_key_encoding": "x"}, "variable 't'", {}),
    ({"write_empty_chunks": "x"}, "variable 't'", {}),
]


def _ds() -> Any:
    return _dataset()


def _var() -> Any:
    import xarray as xr

    return xr.Variable(("x",), np.zeros(3))


def _migrations() -> list[tuple[str, str, Any, str, Call]]:
    m = shardpipe.migrate
    return [
        # in place, a Zarr v3 hierarchy is one migrated already (nothing to do); copied, refused
        (
            "migrate",
            "source",
            "a v3 array",
            "no hierarchy of the sharding",
            lambda p: m(p.arr, p.new),
        ),
        ("migrate", "source", "missing", "no hierarchy of the sharding", lambda p: m(p.missing)),
        ("migrate", "source", "a file", "is not a folder", lambda p: m(f"{p.arr}/zarr.json")),
        ("migrate", "source", "under a file", "is a file", lambda p: m(f"{p.arr}/zarr.json/x")),
        ("migrate", "source", 5, "got int", lambda p: m(5)),
        ("migrate", "target", "an array", "is not empty", lambda p: m(p.draft, p.arr)),
        (
            "migrate",
            "target",
            "a file",
            "is not a folder",
            lambda p: m(p.draft, f"{p.arr}/zarr.json"),
        ),
        ("migrate", "target", 5, "got int", lambda p: m(p.draft, 5)),
        ("migrate", "add_crc32c", "yes", "got 'yes'", lambda p: m(p.draft, add_crc32c="yes")),
        ("migrate", "dry_run", 1, "got 1", lambda p: m(p.draft, p.new, dry_run=1)),
        ("migrate", "zlib_as_gzip", "y", "got 'y'", lambda p: m(p.draft, zlib_as_gzip="y")),
        ("migrate", "workers", 0, "got 0", lambda p: m(p.draft, p.new, workers=0)),
        ("migrate", "workers", "8", "got '8'", lambda p: m(p.draft, p.new, workers="8")),
        ("migrate", "progress", "y", "got 'y'", lambda p: m(p.draft, p.new, progress="y")),
        (
            "migrate",
            "storage_options",
            {"fsync": 1},
            "got 1",
            lambda p: m(p.draft, p.new, storage_options={"fsync": 1}),
        ),
        (
            "migrate",
            "target_storage_options",
            {"fsync": True},
            "without a target",
            lambda p: m(p.draft, target_storage_options={"fsync": True}),
        ),
        (
            "migrate",
            "target_storage_options",
            {"fsync": 1},
            "got 1",
            lambda p: m(p.draft, p.new, target_storage_options={"fsync": 1}),
        ),
        (
            "migrate",
            "target_storage_options",
            {"anon": True},
            "['anon']",
            lambda p: m(p.draft, p.new, target_storage_options={"anon": True}),
        ),
    ]


ROWS: list[tuple[str, str, Any, str, Call]] = [
    *_writes("to_sharded_zarr", tz),
    (
        "to_sharded_zarr",
        "progress",
        "yes",
        "got 'yes'",
        lambda p: tz(_source(), p.new, progress="yes", **GOOD),
    ),
    (
        "to_sharded_zarr",
        "compute",
        0,
        "got 0 (int)",
        lambda p: tz(_source(), p.new, compute=0, **GOOD),
    ),
    (
        "to_sharded_zarr",
        "commit",
        "on a path",
        "not an Icechunk session",
        lambda p: tz(_source(), p.new, commit="message", **GOOD),
    ),
    (
        "to_sharded_zarr",
        "commit",
        "",
        "expected a commit message",
        lambda p: tz(_source(), p.new, commit="", **GOOD),
    ),
    (
        "to_sharded_zarr",
        "rebase",
        "yes",
        "got 'yes'",
        lambda p: tz(_source(), p.new, rebase="yes", **GOOD),
    ),
    (
        "to_sharded_zarr",
        "rebase",
        "without commit",
        "without commit",
        lambda p: tz(_source(), p.new, rebase=True, **GOOD),
    ),
    *_writes("prepare_write", pw),
    (
        "prepare_write",
        "part_limit",
        "x",
        "got 'x' (str)",
        lambda p: pw(_source(), p.new, part_limit="x", **GOOD),
    ),
    (
        "prepare_write",
        "part_limit",
        0,
        "got 0 (int)",
        lambda p: pw(_source(), p.new, part_limit=0, **GOOD),
    ),
    (
        "prepare_write",
        "part_limit",
        -1,
        "got -1",
        lambda p: pw(_source(), p.new, part_limit=-1, **GOOD),
    ),
    (
        "prepare_write",
        "source_identity",
        "x",
        "got 'x' (str)",
        lambda p: pw(_source(), p.new, source_identity="x", **GOOD),
    ),
    (
        "prepare_write",
        "source_identity",
        {"a": NAN},
        "source_identity['a'] is nan",
        lambda p: pw(_source(), p.new, source_identity={"a": NAN}, **GOOD),
    ),
    (
        "prepare_write",
        "source_identity",
        {"a": OPAQUE},
        "JSON",
        lambda p: pw(_source(), p.new, source_identity={"a": OPAQUE}, **GOOD),
    ),
    (
        "ShardedWrite.execute",
        "progress",
        "yes",
        "got 'yes'",
        lambda p: pw(_source(), p.new, **GOOD).execute(progress="yes"),
    ),
    *_rechunks("rechunk", shardpipe.rechunk),
    (
        "rechunk",
        "compute",
        "no",
        "got 'no'",
        lambda p: shardpipe.rechunk(p.src, p.new, compute="no"),
    ),
    (
        "rechunk",
        "progress",
        "no",
        "got 'no'",
        lambda p: shardpipe.rechunk(p.src, p.new, progress="no"),
    ),
    (
        "rechunk",
        "progress",
        "without compute",
        "compute=False",
        lambda p: shardpipe.rechunk(p.src, p.new, progress=True, compute=False),
    ),
    (
        "rechunk",
        "commit",
        "on a path",
        "not an Icechunk session",
        lambda p: shardpipe.rechunk(p.src, p.new, commit="message"),
    ),
    (
        "rechunk",
        "rebase",
        "without commit",
        "without commit",
        lambda p: shardpipe.rechunk(p.src, p.new, rebase=True),
    ),
    *_rechunks("plan_rechunk", shardpipe.plan_rechunk),
    (
        "RechunkJob.execute",
        "progress",
        "yes",
        "got 'yes'",
        lambda p: shardpipe.plan_rechunk(p.src, p.new).execute(progress="yes"),
    ),
    *_groups("rechunk_group", shardpipe.rechunk_group),
    (
        "rechunk_group",
        "progress",
        "yes",
        "got 'yes'",
        lambda p: shardpipe.rechunk_group(p.grp, p.new, progress="yes"),
    ),
    (
        "rechunk_group",
        "commit",
        "on a path",
        "not an Icechunk session",
        lambda p: shardpipe.rechunk_group(p.grp, p.new, commit="message"),
    ),
    (
        "rechunk_group",
        "rebase",
        "without commit",
        "without commit",
        lambda p: shardpipe.rechunk_group(p.grp, p.new, rebase=True),
    ),
    *_groups("plan_group_rechunk", shardpipe.plan_group_rechunk),
    *_maintenance(),
    *_batches(),
    *_datasets(),
    *_migrations(),
    *_precomputed(),
]


@pytest.mark.parametrize(
    ("function", "parameter", "value", "words", "call"),
    ROWS,
    ids=[f"{r[0]}-{r[1]}-{i}" for i, r in enumerate(ROWS)],
)
def test_every_parameter_refuses_bad_values(
    places: Places, function: str, parameter: str, value: Any, words: str, call: Call
) -> None:
    import dask

    before = _tree_digest(places.root)
    try:
        with dask.config.set(scheduler="threads"), pytest.raises(shardpipe.ShardpipeError) as info:
            call(places)
        message = str(info.value)
        named = getattr(info.value, "parameter", message.split(":", 1)[0])
        assert parameter in named, f"{function}: names {named!r}, not {parameter!r}: {message}"
        assert words in message, f"{function}({parameter}={value!r}): {message}"
        assert _tree_digest(places.root) == before, f"{function}({parameter}={value!r}) wrote"
        assert not Path(places.new).exists() and not Path(places.missing).exists()
    finally:  # a row that wrote fails alone: the next rows find the tree as it was
        for made in (places.new, places.missing):
            shutil.rmtree(made, ignore_errors=True)


# -- URLs with one slash (or none), unknown schemes: refused by every front door -------------
#
# "s3:/bucket/x" is no URL to fsspec: taken as a local path, it wrote a folder "s3:" in
# the working directory. Every place that turns a string into a store refuses it, naming
# its own parameter, and nothing appears in the working directory.

MALFORMED = ["s3:/bucket/x", "s3:bucket/x", "gs:/bucket/x", "file:/tmp/x", "nosuch://bucket/x"]


def _precomputed(p: Places, store: Any) -> Any:
    volume = da.zeros((16, 16, 16), chunks=8, dtype="uint8")
    return shardpipe.to_neuroglancer_precomputed(
        volume, store, resolution=(8, 8, 8), chunk_size=(8, 8, 8)
    )


URL_ROWS: list[tuple[str, str, Any]] = [
    ("to_sharded_zarr", "store", lambda p, u: tz(_source(), u, **GOOD)),
    ("prepare_write", "store", lambda p, u: pw(_source(), u, **GOOD)),
    ("rechunk", "source", lambda p, u: shardpipe.rechunk(u, p.new)),
    ("rechunk", "target", lambda p, u: shardpipe.rechunk(p.src, u)),
    ("rechunk", "temp_store", lambda p, u: shardpipe.rechunk(p.src, p.new, temp_store=u)),
    ("plan_rechunk", "source", lambda p, u: shardpipe.plan_rechunk(u, p.new)),
    ("plan_rechunk", "target", lambda p, u: shardpipe.plan_rechunk(p.src, u)),
    ("rechunk_group", "source", lambda p, u: shardpipe.rechunk_group(u, p.new)),
    ("rechunk_group", "target", lambda p, u: shardpipe.rechunk_group(p.grp, u)),
    ("verify", "store", lambda p, u: shardpipe.verify(u)),
    ("info", "store", lambda p, u: shardpipe.info(u)),
    ("repair", "store", lambda p, u: shardpipe.repair(u)),
    ("compact", "store", lambda p, u: shardpipe.compact(u)),
    ("cleanup", "store", lambda p, u: shardpipe.cleanup(u)),
    ("migrate", "source", lambda p, u: shardpipe.migrate(u)),
    ("migrate", "target", lambda p, u: shardpipe.migrate(p.draft, u)),
    ("to_neuroglancer_precomputed", "store", _precomputed),
    ("to_zarr", "store", lambda p, u: _dataset().shard.to_zarr(u, shards={"time": 20})),
    ("open_dataset", "store", lambda p, u: shardpipe.open_dataset(u)),
    ("repair_dataset", "store", lambda p, u: shardpipe.dataset.repair_dataset(u)),
]


@pytest.mark.parametrize("url", MALFORMED)
@pytest.mark.parametrize(
    ("function", "parameter", "call"), URL_ROWS, ids=[f"{r[0]}-{r[1]}" for r in URL_ROWS]
)
def test_malformed_urls_are_refused_by_every_front_door(
    places: Places,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    function: str,
    parameter: str,
    call: Call,
    url: str,
) -> None:
    import dask

    monkeypatch.chdir(tmp_path)
    before = _tree_digest(places.root)
    with dask.config.set(scheduler="threads"), pytest.raises(InvalidArgumentError) as info:
        call(places, url)
    message = str(info.value)
    assert info.value.parameter == parameter, f"{function}: {message}"
    assert repr(url) in message, message
    assert list(tmp_path.iterdir()) == [], f"{function}({url!r}) wrote a local folder"
    assert _tree_digest(places.root) == before
    assert not Path(places.new).exists()


def test_a_path_object_made_from_a_url_is_refused(tmp_path: Path, data: da.Array) -> None:
    # Path("s3://bucket/x") is Path("s3:/bucket/x"): a URL lost its second slash
    with pytest.raises(InvalidArgumentError, match="s3://bucket/x") as info:
        shardpipe.to_sharded_zarr(data, Path("s3://bucket/x"), **GOOD)
    assert info.value.parameter == "store"


def test_a_local_folder_with_a_colon_is_written_when_the_path_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: da.Array
) -> None:
    monkeypatch.chdir(tmp_path)
    shardpipe.to_sharded_zarr(data, "./run:1/out.zarr", **GOOD)
    shardpipe.to_sharded_zarr(data, str(tmp_path / "run:2" / "out.zarr"), **GOOD)
    for name in ("run:1", "run:2"):
        back = zarr.open_array(str(tmp_path / name / "out.zarr"))[...]
        np.testing.assert_array_equal(back, data.compute())


# -- attributes that JSON cannot hold: refused wherever attributes come in ------------------
#
# json.dumps writes nan as NaN, which is not JSON: a zarr.json holding it is refused by
# strict readers. Attributes given, carried over from a source or taken from a dataset
# are checked before anything is written, naming where the value sits.


def _v2_source(where: Path, attrs: dict[str, Any]) -> str:
    source = zarr.create_array(
        str(where), shape=(40, 30), chunks=(10, 30), dtype="int16", zarr_format=2
    )
    source[...] = 1
    source.attrs.update(attrs)
    return str(where)


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_a_source_whose_attributes_json_cannot_hold_is_refused(
    tmp_path: Path, value: float
) -> None:
    source = _v2_source(tmp_path / "src.zarr", {"ok": 1, "bad": {"list": [0, value]}})
    target = tmp_path / "out.zarr"
    for rechunk in (shardpipe.rechunk, shardpipe.plan_rechunk):
        with pytest.raises(InvalidArgumentError) as info:
            rechunk(source, str(target))
        assert info.value.parameter == "source", str(info.value)
        assert f"attributes['bad']['list'][1] is {value}" in str(info.value)
        assert "attributes=" in info.value.fix
        assert not target.exists()
    # given attributes replace the source's: the rechunk goes ahead, valid JSON written
    shardpipe.rechunk(source, str(target), attributes={"ok": 2})
    assert json.loads((target / "zarr.json").read_text())["attributes"] == {"ok": 2}


@pytest.mark.parametrize("where", ["root", "group", "array", "small array"])
def test_a_group_whose_attributes_json_cannot_hold_is_refused(tmp_path: Path, where: str) -> None:
    source = zarr.open_group(str(tmp_path / "src.zarr"), mode="w", zarr_format=2)
    inner = source.create_group("g")
    big = inner.create_array("big", shape=(600, 600), chunks=(100, 100), dtype="float64")
    big[...] = 1.0
    small = source.create_array("small", shape=(4,), chunks=(4,), dtype="int8")
    node = {"root": source, "group": inner, "array": big, "small array": small}[where]
    node.attrs["bad"] = NAN
    target = tmp_path / "out.zarr"
    for rechunk in (shardpipe.rechunk_group, shardpipe.plan_group_rechunk):
        with pytest.raises(InvalidArgumentError) as info:
            rechunk(str(tmp_path / "src.zarr"), str(target))
        assert info.value.parameter == "source", str(info.value)
        assert "['bad'] is nan" in str(info.value), str(info.value)
        assert not target.exists()


@pytest.mark.parametrize("where", ["dataset", "variable", "coordinate"])
def test_a_dataset_whose_attributes_json_cannot_hold_is_refused(tmp_path: Path, where: str) -> None:
    ds = _dataset()
    holder = {"dataset": ds, "variable": ds["t"], "coordinate": ds["time"]}[where]
    holder.attrs["bad"] = [INF]
    target = tmp_path / "ds.zarr"
    with pytest.raises(InvalidArgumentError) as info:
        ds.shard.to_zarr(str(target), shards={"time": 20})
    assert info.value.parameter == "obj", str(info.value)
    assert "attrs['bad'][0] is inf" in str(info.value), str(info.value)
    assert not target.exists()


# -- the command line: exit status 2, one line on stderr, nothing written ----------------------

CLI_ROWS: list[tuple[str, Any, str]] = [
    # (what, argv from Places, words on the last line of stderr)
    ("plan --shards", lambda p: ["plan", p.new, "--shape", "40,30", "--shards", "x"], "--shards"),
    (
        "plan --shards 0",
        lambda p: ["plan", p.new, "--shape", "40,30", "--shards", "0,20"],
        "shards",
    ),
    (
        "plan --shards rank",
        lambda p: ["plan", p.new, "--shape", "40,30", "--shards", "20"],
        "shards",
    ),
    (
        "plan --chunks",
        lambda p: ["plan", p.new, "--shape", "40,30", "--shards", "20,20", "--chunks", "7,7"],
        "multiple",
    ),
    (
        "plan --max-mem",
        lambda p: ["plan", p.new, "--shape", "40,30", "--max-mem", "lots"],
        "--max-mem",
    ),
    (
        "plan --max-mem 0",
        lambda p: ["plan", p.new, "--shape", "40,30", "--max-mem", "0"],
        "--max-mem",
    ),
    (
        "plan --index-location",
        lambda p: ["plan", p.new, "--shape", "4", "--index-location", "mid"],
        "--index-location",
    ),
    (
        "plan --dtype",
        lambda p: ["plan", p.new, "--shape", "40,30", "--dtype", "nope"],
        "dtype: 'nope'",
    ),
    (
        "plan --dtype object",
        lambda p: ["plan", p.new, "--shape", "40,30", "--dtype", "object"],
        "dtype",
    ),
    ("plan --blocks", lambda p: ["plan", p.new, "--shape", "40,30", "--blocks", "0,5"], "blocks"),
    # sizes beyond int64, or more Dask blocks than a plan can hold: refused by name
    (
        "plan --shape huge",
        lambda p: ["plan", p.new, "--shape", "99999999999999999999,1,1"],
        "shape: (99999999999999999999, 1, 1)",
    ),
    (
        "plan --shape bytes",
        lambda p: ["plan", p.new, "--shape", "4611686018427387904,1,1", "--dtype", "uint64"],
        "shape: ",
    ),
    (
        "plan --shape blocks",
        lambda p: ["plan", p.new, "--shape", "999999999999999999,1,1"],
        "blocks",
    ),
    (
        "plan --blocks many",
        lambda p: ["plan", p.new, "--shape", "1000000000000,1,1", "--blocks", "1,1,1"],
        "blocks",
    ),
    (
        "plan --shards huge",
        lambda p: ["plan", p.new, "--shape", "40,30", "--shards", "99999999999999999999,30"],
        "shards",
    ),
    (
        "rechunk --chunks huge",
        lambda p: ["rechunk", p.src, p.new, "--chunks", "99999999999999999999,10"],
        "chunks",
    ),
    (
        "plan --compressor",
        lambda p: ["plan", p.new, "--shape", "4", "--compressor", "lz4"],
        "--compressor",
    ),
    (
        "plan --compressor level",
        lambda p: ["plan", p.new, "--shape", "4", "--compressor", "zstd:99"],
        "--compressor",
    ),
    (
        "plan --storage-option",
        lambda p: ["plan", p.new, "--shape", "4", "--storage-option", "fsync"],
        "NAME=VALUE",
    ),
    (
        "plan --storage-option fsync",
        lambda p: ["plan", p.new, "--shape", "4", "--storage-option", "fsync=1"],
        "'fsync'",
    ),
    (
        "plan --storage-option local",
        lambda p: ["plan", p.new, "--shape", "4", "--storage-option", "anon=true"],
        "['anon']",
    ),
    ("plan --source", lambda p: ["plan", p.new, "--source", p.missing], "source"),
    ("plan --path", lambda p: ["plan", p.new, "--shape", "4", "--path", "../x"], "path"),
    ("plan existing", lambda p: ["plan", p.arr, "--shape", "40,30"], "overwrite"),
    ("verify missing", lambda p: ["verify", p.missing], "no Zarr array or group"),
    ("verify --path", lambda p: ["verify", p.arr, "--path", "nope"], "'nope'"),
    ("info missing", lambda p: ["info", p.missing], "no Zarr array or group"),
    ("repair missing", lambda p: ["repair", p.missing], "no Zarr array or group"),
    ("compact --threshold", lambda p: ["compact", p.arr, "--threshold", "2.0"], "threshold"),
    ("compact --threshold x", lambda p: ["compact", p.arr, "--threshold", "x"], "--threshold"),
    ("cleanup missing", lambda p: ["cleanup", p.missing], "nothing to clean up"),
    ("migrate missing", lambda p: ["migrate", p.missing], "no hierarchy of the sharding"),
    ("migrate a file", lambda p: ["migrate", f"{p.arr}/zarr.json"], "SOURCE"),
    ("migrate into a file", lambda p: ["migrate", p.draft, f"{p.arr}/zarr.json"], "TARGET"),
    (
        "migrate --copy-concurrency",
        lambda p: ["migrate", p.draft, p.new, "--copy-concurrency", "0"],
        "--copy-concurrency",
    ),
    ("rechunk --shards", lambda p: ["rechunk", p.src, p.new, "--shards", "x"], "--shards"),
    ("rechunk --commit", lambda p: ["rechunk", p.src, p.new, "--commit", "m"], "--icechunk"),
    # into a repository that does not exist yet: refused before it is created
    (
        "rechunk --icechunk --shards",
        lambda p: ["rechunk", p.src, p.new, "--icechunk", "--shards", "3"],
        "shards",
    ),
    (
        "rechunk --icechunk --workers",
        lambda p: ["rechunk", p.src, p.new, "--icechunk", "--workers", "0"],
        "workers",
    ),
    (
        "rechunk --recursive --icechunk",
        lambda p: ["rechunk", p.grp, p.new, "--recursive", "--icechunk", "--chunks", "0,10"],
        "zero or negative",
    ),
    ("write-dataset --rebase", lambda p: ["write-dataset", p.ds, p.new, "--rebase"], "--icechunk"),
    (
        "write-dataset --icechunk --shards",
        lambda p: ["write-dataset", p.ds, p.new, "--icechunk", "--shards", "nope=5"],
        "nope",
    ),
    (
        "write-dataset --icechunk --append-dim",
        lambda p: ["write-dataset", p.ds, p.new, "--icechunk", "--append-dim", "nope"],
        "--append-dim",
    ),
    (
        "verify --icechunk",
        lambda p: ["verify", p.missing, "--icechunk"],
        "no Icechunk repository",
    ),
    ("rechunk --max-mem", lambda p: ["rechunk", p.src, p.new, "--max-mem", "lots"], "--max-mem"),
    (
        "rechunk --index-location",
        lambda p: ["rechunk", p.src, p.new, "--index-location", "m"],
        "--index-location",
    ),
    ("rechunk --workers 0", lambda p: ["rechunk", p.src, p.new, "--workers", "0"], "--workers"),
    ("rechunk --workers -2", lambda p: ["rechunk", p.src, p.new, "--workers", "-2"], "--workers"),
    ("rechunk --workers x", lambda p: ["rechunk", p.src, p.new, "--workers", "x"], "--workers"),
    ("rechunk source", lambda p: ["rechunk", p.missing, p.new], "source"),
    ("rechunk one-slash source", lambda p: ["rechunk", "s3:/b/x", p.new], "SOURCE: 's3:/b/x'"),
    ("rechunk a file", lambda p: ["rechunk", p.file, p.new], "source"),
    (
        "rechunk --shards numeric",
        lambda p: ["rechunk", p.src, p.new, "--shards", "2e1,10"],
        "--shards",
    ),
    ("rechunk one-slash target", lambda p: ["rechunk", p.src, "s3:/b/x"], "TARGET: 's3:/b/x'"),
    ("plan one-slash --source", lambda p: ["plan", p.new, "--source", "s3:/b/x"], "SOURCE"),
    (
        "write-dataset one-slash source",
        lambda p: ["write-dataset", "s3:/b/x", p.new],
        "SOURCE: 's3:/b/x'",
    ),
    ("verify one-slash", lambda p: ["verify", "s3:/b/x"], "STORE: 's3:/b/x'"),
    ("rechunk existing", lambda p: ["rechunk", p.src, p.arr], "--overwrite"),
    (
        "rechunk --resume --overwrite",
        lambda p: ["rechunk", p.src, p.new, "--resume", "--overwrite"],
        "resume",
    ),
    (
        "rechunk --config alone",
        lambda p: ["rechunk", p.src, p.new, "--config", "x.json"],
        "--recursive",
    ),
    (
        "rechunk --config missing",
        lambda p: ["rechunk", p.grp, p.new, "--recursive", "--config", p.missing],
        "--config",
    ),
    (
        "rechunk --temp-store",
        lambda p: ["rechunk", p.src, p.new, "--temp-store", p.src],
        "--temp-store",
    ),
    (
        "rechunk --source-storage-option",
        lambda p: ["rechunk", p.src, p.new, "--source-storage-option", "anon=true"],
        "Leave --source-storage-option out",
    ),
    (
        "write-dataset --shards",
        lambda p: ["write-dataset", p.ds, p.new, "--shards", "time"],
        "--shards",
    ),
    (
        "write-dataset --shards dim",
        lambda p: ["write-dataset", p.ds, p.new, "--shards", "nope=5"],
        "['nope']",
    ),
    ("write-dataset --mode", lambda p: ["write-dataset", p.ds, p.new, "--mode", "x"], "--mode"),
    (
        "write-dataset --write-strategy",
        lambda p: ["write-dataset", p.ds, p.new, "--write-strategy", "fast"],
        "--write-strategy",
    ),
    (
        "write-dataset --max-mem",
        lambda p: ["write-dataset", p.ds, p.new, "--max-mem", "lots"],
        "--max-mem",
    ),
    (
        "write-dataset --append-dim",
        lambda p: ["write-dataset", p.ds, p.new, "--append-dim", "nope"],
        "--append-dim",
    ),
    ("write-dataset source", lambda p: ["write-dataset", p.missing, p.new], "source"),
    (
        "write-dataset --source-group",
        lambda p: ["write-dataset", p.ds, p.new, "--source-group", "nope"],
        "--source-group",
    ),
    ("repair-dataset missing", lambda p: ["repair-dataset", p.missing], "no Zarr array or group"),
    *(
        (f"write-precomputed {what}", lambda p, extra=extra: _write_precomputed(p, extra), words)
        for what, extra, words in [
            ("a file", {"target": "file"}, "is a file"),
            ("existing", {"target": "vol"}, "overwrite"),
            ("source", {"source": "missing"}, "source"),
            ("--resolution x", {"--resolution": "8,x,8"}, "--resolution"),
            ("--resolution 2", {"--resolution": "8,8"}, "resolution"),
            ("--resolution 0", {"--resolution": "0,8,8"}, "resolution"),
            ("--chunk-size", {"--chunk-size": "0,8,8"}, "chunk_size"),
            ("--chunk-size x", {"--chunk-size": "8.5,8,8"}, "--chunk-size"),
            ("--voxel-offset", {"--voxel-offset": "a,0,0"}, "--voxel-offset"),
            ("--scales", {"--scales": "1,1"}, "scales"),
            ("--scales x", {"--scales": "1,1,x"}, "--scales"),
            ("--encoding", {"--encoding": "png"}, "encoding"),
            ("--volume-type", {"--volume-type": "mesh"}, "--volume-type"),
            ("--downsample", {"--downsample": "median"}, "--downsample"),
            ("--sharding", {"--sharding": "{"}, "--sharding"),
            ("--sharding spec", {"--sharding": '{"@type": "x"}'}, "sharding"),
            ("--max-mem", {"--max-mem": "lots"}, "--max-mem"),
            ("--storage-option", {"--storage-option": "anon=true"}, "['anon']"),
        ]
    ),
    ("repair-dataset --group", lambda p: ["repair-dataset", p.ds, "--group", "nope"], "group"),
]


def _write_precomputed(p: Places, extra: dict[str, str]) -> list[str]:
    """``write-precomputed`` argv: good values, then ``extra`` (flags, or source/target)."""
    flags = {"--resolution": "1,1,1", "--chunk-size": "8,8,8"}
    flags.update((k, v) for k, v in extra.items() if k.startswith("--"))
    places = {"file": p.file, "vol": p.vol, "missing": p.missing}
    source = places.get(extra.get("source", ""), p.src3)
    target = places.get(extra.get("target", ""), p.new)
    return ["write-precomputed", source, target, *(x for kv in flags.items() for x in kv)]


@pytest.mark.parametrize(("what", "argv", "words"), CLI_ROWS, ids=[r[0] for r in CLI_ROWS])
def test_cli_bad_arguments_exit_2_with_one_line(
    places: Places, capsys: pytest.CaptureFixture[str], what: str, argv: Any, words: str
) -> None:
    import dask

    from shardpipe.cli.exit_statuses import BAD_INPUT
    from shardpipe.cli.parser import main

    before = _tree_digest(places.root)
    with dask.config.set(scheduler="threads"):
        try:
            status = main(argv(places))
        except SystemExit as exit_:  # argparse: usage, then one line naming the option
            status = exit_.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == BAD_INPUT, f"{what}: exit {status}: {err}"
    assert "Traceback" not in err, err
    assert lines and lines[-1].startswith("shardpipe") and words in lines[-1], err
    if not lines[0].startswith("usage:"):
        assert len(lines) == 1, err
    assert _tree_digest(places.root) == before
    assert not Path(places.new).exists() and not Path(places.missing).exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (lambda p: ["rechunk", p.src, p.file], "target: cannot write under"),
        (lambda p: ["rechunk", p.grp, p.file, "--recursive"], "target: cannot write under"),
        (lambda p: ["write-dataset", p.ds, p.file], "store: cannot write under"),
        (lambda p: ["plan", p.file, "--shape", "40,30"], "store: cannot write under"),
    ],
)
def test_cli_target_that_is_a_file_exits_3_with_one_line(
    places: Places, capsys: pytest.CaptureFixture[str], argv: Any, words: str
) -> None:
    """A file where the target folder goes: not writable there (status 3), named, one line."""
    import dask

    from shardpipe.cli.exit_statuses import NO_ACCESS
    from shardpipe.cli.parser import main

    before = _tree_digest(places.root)
    with dask.config.set(scheduler="threads"):
        status = main(argv(places))
    err = capsys.readouterr().err.strip().splitlines()
    assert status == NO_ACCESS, err
    assert len(err) == 1 and words in err[0], err
    assert _tree_digest(places.root) == before


def test_rows_cover_every_parameter() -> None:
    """Each parameter of each public function has a row (the table above is the record)."""
    import inspect

    from shardpipe.dataset import repair_dataset, to_zarr

    functions = {
        "to_sharded_zarr": shardpipe.to_sharded_zarr,
        "prepare_write": shardpipe.prepare_write,
        "rechunk": shardpipe.rechunk,
        "plan_rechunk": shardpipe.plan_rechunk,
        "plan_group_rechunk": shardpipe.plan_group_rechunk,
        "verify": shardpipe.verify,
        "info": shardpipe.info,
        "repair": shardpipe.repair,
        "compact": shardpipe.compact,
        "cleanup": shardpipe.cleanup,
        "migrate": shardpipe.migrate,
        "open_dataset": shardpipe.open_dataset,
        "repair_dataset": repair_dataset,
        "to_zarr": to_zarr,
        "to_neuroglancer_precomputed": shardpipe.to_neuroglancer_precomputed,
    }
    covered = {(r[0], r[1]) for r in ROWS}
    missing = [
        (name, parameter)
        for name, function in functions.items()
        for parameter, spec in inspect.signature(function).parameters.items()
        if spec.kind is not inspect.Parameter.VAR_KEYWORD and (name, parameter) not in covered
    ]
    assert not missing, missing
