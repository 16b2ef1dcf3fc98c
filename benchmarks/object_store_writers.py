"""The writers of the object-store benchmark, as closures over a case, and their check.

Every writer writes the same sharded Zarr v3 array: the volume's shape and
``uint16``, shards ``case.shards`` of inner chunks ``case.chunks``, inner
codecs bytes (little endian), zstd level 1 and ``crc32c`` (shardpipe's
default chain; every writer is given the same, like with like), index bytes
+ ``crc32c`` at the end, fill value 0. ``case.storage_options`` reach the S3
server (through the shaping proxy, or directly); each factory does the
untimed preparation and returns the timed write and notes.

* ``shardpipe``: :func:`benchmarks.writers.shardpipe_write` (whatever
  ``shardpipe`` is importable), Dask blocks = shards, threaded scheduler
  (or the case's LocalCluster).
* ``tensorstore``: the ``zarr3`` driver on the ``s3`` kvstore, one write per
  shard region, all issued before any is awaited.
* ``zarr``: zarr-python's ``z[...] = volume`` on an ``FsspecStore`` over s3fs.
* ``dask``: ``dask.array.to_zarr`` into the sharded array created by zarr-python.
* ``put``: the shards' encoded bytes (written once, untimed, by shardpipe to a
  local folder) PUT by :data:`PUT_CONNECTIONS` boto3 clients at once: the
  network side of the bound.
* ``local``: shardpipe (no fsync) into a local folder: the CPU side of the bound.
"""

from __future__ import annotations

import os
import queue
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import writers
from benchmarks.cases import Case
from benchmarks.volumes import Volume, grid
from benchmarks.writers import shardpipe_write

PUT_CONNECTIONS = 32
"""Concurrent PUTs (one boto3 client, so one connection, each) of the bound."""
REGION = "us-east-1"


def endpoint(case: Case) -> str:
    """The endpoint URL in the case's storage options."""
    return str((case.storage_options or {})["client_kwargs"]["endpoint_url"])


def codecs() -> list[Any]:
    """zarr-python's inner codecs after ``bytes``: zstd level 1, then ``crc32c``."""
    from zarr.codecs import Crc32cCodec, ZstdCodec

    return [ZstdCodec(level=1), Crc32cCodec()]


def create_array(case: Case, dtype: Any) -> Any:
    """Create the sharded target with zarr-python (replacing what is there)."""
    return writers.create_array(case, dtype, compressors=codecs(), fill_value=0)


def tensorstore_s3(case: Case, volume: np.ndarray) -> tuple[Any, list[str]]:
    """TensorStore ``zarr3`` on its ``s3`` kvstore; credentials from the environment."""
    import tensorstore as ts

    bucket, _, path = case.target.removeprefix("s3://").partition("/")
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
    sharding = {
        "chunk_shape": list(case.chunks),
        "codecs": [little, zstd, {"name": "crc32c"}],
        "index_codecs": [little, {"name": "crc32c"}],
        "index_location": "end",
    }
    spec = {
        "driver": "zarr3",
        "kvstore": {
            "driver": "s3",
            "bucket": bucket,
            "path": path.rstrip("/") + "/",
            "endpoint": endpoint(case),
            "aws_region": REGION,
        },
        "metadata": {
            "shape": list(case.shape),
            "data_type": volume.dtype.name,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(case.shards)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "sharding_indexed", "configuration": sharding}],
        },
    }
    regions = list(grid(case.shape, case.shards))

    def write() -> None:
        array = ts.open(spec, create=True, delete_existing=True).result()
        futures = [array[region].write(volume[region]) for region in regions]
        for future in futures:
            future.result()

    return write, [f"{len(regions)} concurrent per-shard writes, s3_request_concurrency default"]


def zarr_python(case: Case, volume: np.ndarray) -> tuple[Any, list[str]]:
    """zarr-python: create the array on an ``FsspecStore`` over s3fs, then ``z[...] = volume``."""
    import zarr

    def write() -> None:
        create_array(case, volume.dtype)[...] = volume

    return write, [f"async.concurrency {zarr.config.get('async.concurrency')}"]


def dask_to_zarr(case: Case, x: Any) -> tuple[Any, list[str]]:
    """``dask.array.to_zarr`` into the sharded array (rechunked to whole shards by dask)."""
    import dask.array as da

    def write() -> None:
        da.to_zarr(x, create_array(case, x.dtype))

    auto = da.core.normalize_chunks(
        "auto", shape=case.shape, dtype=x.dtype, previous_chunks=case.shards
    )
    blocks = tuple(c[0] for c in auto)
    return write, [f"{x.npartitions} input blocks; to_zarr rechunks to {blocks}"]


def encoded_shards(case: Case, x: Any) -> dict[str, bytes]:
    """Every object of the array as shardpipe writes it (key: bytes), via a local folder."""
    import shardpipe

    folder = Path(os.environ.get("TMPDIR", "/tmp"), f"object-store-put-{os.getpid()}")
    kwargs = {"shards": case.shards, "chunks": case.chunks, "compressors": codecs()[0]}
    try:
        shardpipe.to_sharded_zarr(x, str(folder), storage_options={"fsync": False}, **kwargs)
        return {
            str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def put_shards(case: Case, x: Any) -> tuple[Any, list[str]]:
    """PUT the array's encoded objects with :data:`PUT_CONNECTIONS` boto3 clients at once."""
    import boto3
    from botocore.config import Config

    objects = encoded_shards(case, x)
    bucket, _, prefix = case.target.removeprefix("s3://").partition("/")
    # bodies unhashed in the signature, as shardpipe sends them (each still carries a CRC32)
    config = Config(
        max_pool_connections=1,
        retries={"total_max_attempts": 3},
        s3={"payload_signing_enabled": False},
    )
    clients: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for _ in range(PUT_CONNECTIONS):  # created untimed, one session each (thread safety)
        session = boto3.session.Session()
        clients.put(
            session.client("s3", endpoint_url=endpoint(case), region_name=REGION, config=config)
        )

    def put(item: tuple[str, bytes]) -> None:
        client = clients.get()
        try:
            client.put_object(Bucket=bucket, Key=f"{prefix}/{item[0]}", Body=item[1])
        finally:
            clients.put(client)

    def write() -> None:
        with ThreadPoolExecutor(max_workers=PUT_CONNECTIONS) as pool:
            list(pool.map(put, sorted(objects.items(), key=lambda kv: -len(kv[1]))))

    total = sum(map(len, objects.values()))
    return write, [
        f"{len(objects)} objects, {total / 2**20:.1f} MiB, {PUT_CONNECTIONS} boto3 clients"
    ]


def local_shardpipe(case: Case, x: Any) -> tuple[Any, list[str]]:
    """shardpipe without fsync into the local folder ``case.target`` (the CPU side)."""
    local = Case(**{**case.__dict__, "storage_options": {"fsync": False}})
    write, notes = shardpipe_write(local, x)
    return write, [*notes, "local folder, no fsync"]


def shardpipe_s3(case: Case, x: Any) -> tuple[Any, list[str]]:
    """shardpipe into S3 with the case's storage options."""
    return shardpipe_write(case, x)


WRITERS = {  # name: (factory, whether it takes the Dask array)
    "shardpipe": (shardpipe_s3, True),
    "tensorstore": (tensorstore_s3, False),
    "zarr": (zarr_python, False),
    "dask": (dask_to_zarr, True),
    "put": (put_shards, True),
    "local": (local_shardpipe, True),
}


def check(case: Case, vol: Volume) -> tuple[int, list[str]]:
    """Read the output back with zarr-python (``case.storage_options``: the direct endpoint).

    Checks layout and codecs, one object per shard and every shard's values.
    Returns the bytes stored and the problems found.
    """
    import fsspec
    import zarr

    arr = zarr.open_array(case.target, mode="r", storage_options=case.storage_options)
    got = (arr.metadata.zarr_format, arr.shape, arr.shards, arr.chunks)
    want = (3, case.shape, case.shards, case.chunks)
    problems = [] if got == want else [f"layout {got}, expected {want}"]
    names = [type(c).__name__ for c in arr.compressors]
    if names != ["ZstdCodec", "Crc32cCodec"]:
        problems.append(f"compressors {arr.compressors}")
    fs, path = fsspec.url_to_fs(case.target, **(case.storage_options or {}))
    n_objects = len(fs.find(f"{path}/c"))
    if n_objects != case.n_shards:
        problems.append(f"{n_objects} shard objects, expected {case.n_shards}")
    for region in vol.regions:
        if not np.array_equal(arr[region], vol.values(region)):
            problems.append(f"{[(s.start, s.stop) for s in region]}: values differ")
    return int(fs.du(path)), problems
