"""Write the golden arrays of the sharding storage-transformer draft (run once, by hand).

The arrays in ``hierarchy/``, ``edge/``, ``root0d/`` and ``unsupported/``
beside this script were written by zarr-python 2.18.3 through its
experimental v3 API (``zarr._storage.v3_storage_transformers.ShardingStorageTransformer``);
no tool in the test environment can write them, so they are kept in the
repository with the data they hold (``expected.npz`` and ``edge.npz``, by
array path; ``root0d`` holds 42).

To write them again::

    python3.11 -m venv /tmp/zarr2 && /tmp/zarr2/bin/pip install "zarr==2.18.3" \\
        "numcodecs<0.16" "numpy<2"
    ZARR_V3_EXPERIMENTAL_API=1 ZARR_V3_SHARDING=1 /tmp/zarr2/bin/python \\
        tests/legacy_fixtures/make_fixtures.py
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr
from zarr._storage.v3 import DirectoryStoreV3
from zarr._storage.v3_storage_transformers import ShardingStorageTransformer

HERE = Path(__file__).parent
warnings.simplefilter("ignore", FutureWarning)


def sharded(per_shard: tuple[int, ...]) -> list[ShardingStorageTransformer]:
    return [ShardingStorageTransformer("indexed", chunks_per_shard=per_shard)]


def create(group: Any, row: tuple[Any, ...]) -> Any:
    """The draft array of a table row: path, dtype, shape, chunks, chunks per shard,
    separator, order, compressor, fill value."""
    path, dtype, shape, chunks, per_shard, sep, order, compressor, fill = row
    return group.create(
        path,
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        compressor=compressor,
        order=order,
        fill_value=fill,
        dimension_separator=sep,
        storage_transformers=sharded(per_shard),
    )


def values(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    return rng.integers(0, 100, shape).astype(dtype)


def main() -> None:
    out = HERE / "hierarchy"
    shutil.rmtree(out, ignore_errors=True)
    store = DirectoryStoreV3(str(out))
    root = zarr.group(store=store, zarr_version=3)
    root.attrs["title"] = "legacy fixtures"
    a = root.create_group("a")
    a.attrs["level"] = 1
    a.create_group("b")
    expected: dict[str, np.ndarray] = {}
    arrays = [
        # path, dtype, shape, chunks, per shard, separator, order, compressor, fill
        (
            "a/blosc_i4",
            "<i4",
            (9, 11),
            (2, 3),
            (2, 3),
            "/",
            "C",
            numcodecs.Blosc("zstd", 3, numcodecs.Blosc.SHUFFLE),
            7,
        ),
        ("a/zlib_u2", "<u2", (10, 7), (3, 2), (2, 2), ".", "C", numcodecs.Zlib(1), 0),
        ("a/none_f4", "<f4", (6, 5), (2, 2), (2, 1), "/", "C", None, float("nan")),
        ("a/b/gzip_u1", "|u1", (17,), (4,), (3,), "/", "C", numcodecs.GZip(5), 3),
        ("a/b/zstd_big_f8", ">f8", (5, 6), (2, 2), (2, 2), ".", "C", numcodecs.Zstd(3), 0.5),
        ("a/b/forder_i8", "<i8", (7, 9), (3, 4), (2, 2), "/", "F", None, -1),
        (
            "flags",
            "|b1",
            (12, 12),
            (4, 4),
            (2, 2),
            "/",
            "C",
            numcodecs.Blosc("lz4", 5, numcodecs.Blosc.BITSHUFFLE),
            False,
        ),
        (
            "volume",
            "<u2",
            (10, 9, 8),
            (3, 3, 3),
            (2, 2, 2),
            "/",
            "C",
            numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE),
            0,
        ),
    ]
    for seed, row in enumerate(arrays):
        path, dtype, shape = row[:3]
        data = values(shape, dtype, seed)
        create(root, row)[...] = data
        expected[path] = data
    scalar = root.create(
        "scalar",
        shape=(),
        chunks=(),
        dtype="<f8",
        fill_value=0.0,
        compressor=None,
        storage_transformers=sharded(()),
    )
    scalar[...] = 2.5
    expected["scalar"] = np.array(2.5)
    # some chunks never written (empty index entries), a shard absent, partial edge shards
    sparse = root.create(
        "a/sparse",
        shape=(13, 10),
        chunks=(2, 2),
        dtype="<i4",
        fill_value=-5,
        compressor=numcodecs.Zlib(3),
        storage_transformers=sharded((3, 2)),
    )
    data = np.full((13, 10), -5, dtype="<i4")
    data[0:2, 0:2] = 1
    data[5:8, 3:5] = 2
    data[12, 9] = 3
    sparse[0:2, 0:2] = data[0:2, 0:2]
    sparse[5:8, 3:5] = data[5:8, 3:5]
    sparse[12, 9] = 3
    expected["a/sparse"] = data
    np.savez(HERE / "expected.npz", **{k.replace("/", "__"): v for k, v in expected.items()})

    bad = HERE / "unsupported"
    shutil.rmtree(bad, ignore_errors=True)
    bad_store = DirectoryStoreV3(str(bad))
    group = zarr.group(store=bad_store, zarr_version=3)
    filtered = group.create(
        "filtered",
        shape=(8,),
        chunks=(2,),
        dtype="<i4",
        filters=[numcodecs.Delta("<i4")],
        storage_transformers=sharded((2,)),
    )
    filtered[...] = np.arange(8)
    edge()


def edge() -> None:
    """Complex numbers (a dtype extension in the draft), blosc's autoshuffle, Fortran order
    in one dimension, chunks never written; and a hierarchy whose root is a 0-d array."""
    out = HERE / "edge"
    shutil.rmtree(out, ignore_errors=True)
    root = zarr.group(store=DirectoryStoreV3(str(out)), zarr_version=3)
    rng = np.random.default_rng(15)
    expected: dict[str, np.ndarray] = {}
    arrays = [
        # path, dtype, shape, chunks, per shard, separator, order, compressor, fill
        ("c8_big", ">c8", (5,), (2,), (2,), "/", "C", None, 1 + 2j),
        ("c16_zlib", "<c16", (4, 3), (2, 2), (1, 2), "/", "C", numcodecs.Zlib(2), 0j),
        ("u1_autoshuffle", "|u1", (30,), (4,), (2,), "/", "C", numcodecs.Blosc("lz4", 5, -1), 0),
        (
            "i2_autoshuffle_big",
            ">i2",
            (7, 5),
            (2, 2),
            (2, 2),
            "/",
            "C",
            numcodecs.Blosc("lz4", 5, -1),
            -2,
        ),
        ("f1d_forder", "<f8", (11,), (3,), (2,), "/", "F", None, float("inf")),
    ]
    for row in arrays:
        path, dtype, shape = row[:3]
        fill = row[-1]
        array = create(root, row)
        if np.dtype(dtype).kind == "c":
            data = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
        elif np.dtype(dtype).kind == "f":
            data = np.full(shape, fill, dtype)
            data[:2] = rng.standard_normal(2)  # the later chunks never written
        else:
            data = rng.integers(0, 100, shape).astype(dtype)
        array[...] = data
        expected[path] = data
    np.savez(HERE / "edge.npz", **expected)
    out = HERE / "root0d"
    shutil.rmtree(out, ignore_errors=True)
    scalar = zarr.create(
        shape=(),
        chunks=(),
        dtype=">i8",
        compressor=numcodecs.Zstd(1),
        fill_value=1,
        store=DirectoryStoreV3(str(out)),
        path="",
        zarr_version=3,
        storage_transformers=sharded(()),
    )
    scalar[...] = 42


if __name__ == "__main__":
    main()
