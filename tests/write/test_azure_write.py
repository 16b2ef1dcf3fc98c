"""Writes to ``az://`` on Azurite, read back with zarr-python on adlfs.

Shards larger than ``max_mem`` are written as blocks staged by several
tasks and committed by one block list; the shard index goes at the start by
default (Azure serves no suffix ranges). Also: ``verify``, a region update,
an append, two writers on one path, a kill -9 then ``resume=True``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from azure.storage.blob import BlobServiceClient

import shardpipe
from shardpipe.errors import JobConflictError
from shardpipe.testing.azure import ACCOUNT, storage_options_for
from shardpipe.testing.fault_proxy import FaultProxy
from tests.support import azure_kill_child
from tests.support.fork_server import ForkServer

pytestmark = pytest.mark.azure


def _read(url: str, options: dict[str, Any]) -> np.ndarray:
    return np.asarray(zarr.open_array(url, mode="r", storage_options=options)[...])


def _index_location(url: str, options: dict[str, Any]) -> str:
    array = zarr.open_array(url, mode="r", storage_options=options)
    location = array.metadata.codecs[0].index_location  # type: ignore[union-attr]
    return str(getattr(location, "value", location))


def leftovers(container: str, options: dict[str, Any]) -> list[str]:
    """Markers under staging prefixes, and blobs holding uncommitted blocks."""
    service = BlobServiceClient.from_connection_string(options["connection_string"])
    client = service.get_container_client(container)
    found = []
    for blob in client.list_blobs(include=["uncommittedblobs"]):
        if "/.shardpipe/staging" in blob.name:
            found.append(blob.name)
        elif client.get_blob_client(blob.name).get_block_list("uncommitted")[1]:
            found.append(f"uncommitted blocks of {blob.name}")
    return found


def test_volume_in_parts_reads_back_with_zarr(azure_container: tuple[str, dict[str, Any]]) -> None:
    """(128, 128, 256) uint16 in two (128, 128, 128) shards of 4 MiB under max_mem=8MB."""
    container, options = azure_container
    source = da.random.default_rng(1).integers(
        0, 60000, (128, 128, 256), chunks=(32, 128, 128), dtype="uint16"
    )
    url = f"az://{container}/volume.zarr"
    job = shardpipe.prepare_write(
        source, url, shards=(128, 128, 128), max_mem="8MB", storage_options=options
    )
    assert job.plan.max_parts_per_shard > 1  # parts from several tasks
    with dask.config.set(scheduler="threads", num_workers=2):
        job.execute()
    np.testing.assert_array_equal(_read(url, options), source.compute())
    assert _index_location(url, options) == "start"
    assert shardpipe.verify(url, storage_options=options).ok
    assert leftovers(container, options) == []


def test_explicit_index_at_the_end_is_written_as_asked(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    container, options = azure_container
    data = np.arange(32 * 64 * 64, dtype="uint16").reshape(32, 64, 64)
    url = f"abfs://{container}/end.zarr"
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=16),
        url,
        shards=(32, 32, 32),
        chunks=(16, 16, 16),
        index_location="end",
        storage_options=options,
    )
    assert _index_location(url, options) == "end"
    array = zarr.open_array(url, mode="r", storage_options=options)
    # a whole shard is read in one piece; one inner chunk needs the index first, which
    # zarr-python on adlfs asks for as a suffix range: adlfs sends "bytes=-N-"
    np.testing.assert_array_equal(array[...], data)
    with pytest.raises(ValueError, match="Content-Range"):
        array[0, 0, 0]
    assert shardpipe.verify(url, storage_options=options).ok


def test_region_update_and_append(azure_container: tuple[str, dict[str, Any]]) -> None:
    container, options = azure_container
    data = np.random.default_rng(2).integers(0, 1000, (64, 64, 64), dtype="uint16")
    url = f"az://{container}/grow.zarr"
    kwargs: dict[str, Any] = dict(storage_options=options)
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=32), url, shards=(32, 32, 32), chunks=(16, 16, 16), **kwargs
    )
    patch = np.full((20, 30, 40), 7, dtype="uint16")
    shardpipe.to_sharded_zarr(
        da.from_array(patch), url, region=(slice(5, 25), slice(10, 40), slice(0, 40)), **kwargs
    )
    data[5:25, 10:40, 0:40] = 7
    more = np.random.default_rng(3).integers(0, 1000, (32, 64, 64), dtype="uint16")
    shardpipe.to_sharded_zarr(da.from_array(more, chunks=32), url, append_dim=0, **kwargs)
    np.testing.assert_array_equal(_read(url, options), np.concatenate([data, more]))
    report = shardpipe.verify(url, **kwargs)
    assert report.ok, str(report)
    assert leftovers(container, options) == []


def _slow(block: np.ndarray) -> np.ndarray:
    time.sleep(0.2)
    return block


def test_two_writers_on_one_path_one_conflict(azure_container: tuple[str, dict[str, Any]]) -> None:
    container, options = azure_container
    url = f"az://{container}/both.zarr"
    source = da.random.default_rng(4).integers(0, 9, (32, 64, 64), chunks=16, dtype="uint8")
    slow = source.map_blocks(_slow, dtype=source.dtype)
    outcomes: list[BaseException | None] = []

    def write() -> None:
        try:
            shardpipe.to_sharded_zarr(
                slow, url, shards=(16, 64, 64), overwrite=True, storage_options=options
            )
        except Exception as err:
            outcomes.append(err)
        else:
            outcomes.append(None)

    with dask.config.set(scheduler="threads", num_workers=2):
        threads = [threading.Thread(target=write) for _ in range(2)]
        for thread in threads:
            thread.start()
            time.sleep(0.3)
        for thread in threads:
            thread.join(120)
    errors = [e for e in outcomes if e is not None]
    assert len(outcomes) == 2 and len(errors) == 1, outcomes
    assert isinstance(errors[0], JobConflictError), repr(errors[0])
    np.testing.assert_array_equal(_read(url, options), source.compute())


def test_kill_mid_write_then_resume(
    azure_container: tuple[str, dict[str, Any]],
    azurite_server: str,
    tmp_path: Path,
    fork_server: ForkServer,
) -> None:
    container, options = azure_container
    url = f"az://{container}/killed.zarr"
    progress = tmp_path / "progress"
    child = fork_server.start(
        "tests.support.azure_kill_child", [url, azurite_server, str(progress)]
    )
    try:
        deadline = time.monotonic() + 120
        # wait until some blocks are staged (a marker under the staging prefix)
        while time.monotonic() < deadline and child.poll() is None:
            if any("/.shardpipe/staging" in name for name in leftovers(container, options)):
                break
            time.sleep(0.05)
        assert child.poll() is None, child.stderr() or "the child ended before it was killed"
        time.sleep(0.5)
        child.kill()  # SIGKILL
    finally:
        child.kill()
        child.wait(30)
    assert leftovers(container, options) != []
    source = azure_kill_child.source()
    with dask.config.set(scheduler="threads", num_workers=2):
        report = shardpipe.prepare_write(
            source,
            url,
            resume=True,
            storage_options=options,
            **azure_kill_child.KWARGS,  # type: ignore[arg-type]
        ).execute()
    assert report.shards_written + report.shards_skipped == 2
    np.testing.assert_array_equal(_read(url, options), source.compute())
    assert shardpipe.verify(url, storage_options=options).ok
    shardpipe.cleanup(url, storage_options=options)
    assert leftovers(container, options) == []


@pytest.mark.slow
def test_32_mib_with_shards_four_times_max_mem(
    azure_container: tuple[str, dict[str, Any]], azure_fault_proxy: FaultProxy
) -> None:
    """32 MiB of uint8 in four 8 MiB shards under max_mem=2MiB, each staged as blocks by
    several tasks; timed, requests counted. (The size proves nothing more at 512 MiB:
    ``python -m benchmarks large-shard`` measures large shards.)"""
    container, direct = azure_container
    source = da.random.default_rng(5).integers(
        0, 250, (128, 512, 512), chunks=(8, 256, 256), dtype="uint8"
    )
    url = f"az://{container}/big.zarr"
    through_proxy = storage_options_for(f"{azure_fault_proxy.url}/{ACCOUNT}")  # counts only
    started = time.monotonic()
    with dask.config.set(scheduler="threads", num_workers=2):
        job = shardpipe.prepare_write(
            source,
            url,
            shards=(32, 512, 512),
            chunks=(32, 64, 64),
            max_mem=2 * 2**20,
            storage_options=through_proxy,
        )
        assert job.plan.n_multipart_shards == 4, job.plan
        report = job.execute()
    seconds = time.monotonic() - started
    print(
        f"\n32 MiB to Azurite: {seconds:.1f} s, {32 / seconds:.0f} MiB/s, "
        f"{azure_fault_proxy.counts.requests} requests, {report.shards} shards"
    )
    array = zarr.open_array(url, mode="r", storage_options=direct)
    np.testing.assert_array_equal(array[...], source.compute())
    assert shardpipe.verify(url, storage_options=direct).ok
    assert leftovers(container, direct) == []


def _failing(block: np.ndarray, block_info: Any = None) -> np.ndarray:
    if block_info is not None and block_info[None]["chunk-location"] == (1, 1, 1):
        time.sleep(0.5)  # let the other parts of the shard be staged first
        raise RuntimeError("simulated worker failure")
    return block


def test_failure_midway_leaves_nothing_partial(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    container, options = azure_container
    generated = da.random.default_rng(6).integers(
        0, 250, (32, 512, 512), chunks=(16, 256, 256), dtype="uint8"
    )
    url = f"az://{container}/failed.zarr"
    job = shardpipe.prepare_write(
        generated.map_blocks(_failing, dtype=generated.dtype),
        url,
        shards=(32, 512, 512),
        chunks=(16, 64, 64),
        max_mem="8MB",
        storage_options=options,
    )
    assert job.plan.max_parts_per_shard > 1
    with dask.config.set(scheduler="threads"), pytest.raises(RuntimeError, match="simulated"):
        job.execute()
    assert leftovers(container, options) == []
    assert zarr.open_array(url, mode="r", storage_options=options).nchunks_initialized == 0


def test_whole_shards_go_up_in_the_background(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    """Sixteen 512 KiB shards under the threaded scheduler: several puts in flight at once."""
    from shardpipe.storage import uploads

    container, options = azure_container
    held = uploads.process_uploads()
    held.peak_nbytes = held.peak_requests = 0
    source = da.random.default_rng(8).integers(
        0, 250, (32, 512, 512), chunks=(32, 128, 128), dtype="uint8"
    )
    url = f"az://{container}/background.zarr"
    with dask.config.set(scheduler="threads", num_workers=2):
        report = shardpipe.prepare_write(
            source, url, shards=(32, 128, 128), chunks=(16, 64, 64), storage_options=options
        ).execute()
    assert report.shards == 16
    assert uploads.process_uploads().peak_requests >= 2
    np.testing.assert_array_equal(_read(url, options), source.compute())


def test_compact_and_repair(azure_container: tuple[str, dict[str, Any]]) -> None:
    container, options = azure_container
    data = np.random.default_rng(10).integers(0, 1000, (32, 64, 64), dtype="uint16")
    url = f"az://{container}/kept.zarr"
    kwargs: dict[str, Any] = dict(storage_options=options)
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=32), url, shards=(32, 64, 64), chunks=(16, 32, 32), **kwargs
    )
    patch = np.zeros((16, 32, 32), dtype="uint16")
    shardpipe.to_sharded_zarr(
        da.from_array(patch), url, region=(slice(0, 16), slice(0, 32), slice(0, 32)), **kwargs
    )
    data[:16, :32, :32] = 0
    shardpipe.compact(url, threshold=0.0, **kwargs)
    repaired = shardpipe.repair(url, **kwargs)
    assert repaired.ok, str(repaired)
    np.testing.assert_array_equal(_read(url, options), data)
    assert shardpipe.verify(url, **kwargs).ok
    assert leftovers(container, options) == []


@pytest.mark.parametrize("index_location", ["start", "end"])
def test_small_region_update_is_composed_by_the_service(
    azure_container: tuple[str, dict[str, Any]], index_location: str
) -> None:
    """The kept bytes of a 12 MiB shard are copied server side (Put Block From URL)."""
    container, options = azure_container
    rng = np.random.default_rng(11)
    data = rng.integers(0, 255, (256, 256, 192), dtype="uint8")
    url = f"az://{container}/composed.zarr"
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(128, 256, 192)),
        url,
        shards=(256, 256, 192),
        chunks=(32, 32, 32),
        compressors=None,
        index_location=index_location,
        storage_options=options,
    )
    region = np.s_[40:90, 100:130, 7:33]
    new = rng.integers(0, 255, data[region].shape, dtype="uint8")
    report = shardpipe.prepare_write(
        da.from_array(new), url, region=region, storage_options=options
    ).execute()
    data[region] = new
    assert report.strategies == {"append": 1}, report
    assert report.nbytes < 2 << 20, report  # the new chunks and the index, not 12 MiB
    np.testing.assert_array_equal(_read(url, options), data)
    assert shardpipe.verify(url, storage_options=options).ok
    assert leftovers(container, options) == []


def test_a_large_whole_shard_goes_up_as_blocks_sent_at_once(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    """A shard handed to the uploads that is two part sizes or more goes up in parts.

    (:mod:`shardpipe.storage.parted_puts`: here 16 MiB shards in blocks of
    5 MiB, committed by one block list.)
    """
    container, options = azure_container
    source = da.random.default_rng(13).integers(0, 256, (32, 512, 1024), chunks=(32, 512, 512))
    source = source.astype("uint8")
    url = f"az://{container}/large.zarr"
    with dask.config.set({"shardpipe.uploads.part-size": 5 << 20}, scheduler="threads"):
        job = shardpipe.prepare_write(
            source, url, shards=(32, 512, 512), chunks=(32, 128, 128), storage_options=options
        )
        assert "in parts of 5.0 MiB" in repr(job)
        report = job.execute()
    assert report.shards_written == 2
    np.testing.assert_array_equal(_read(url, options), source.compute())
    assert leftovers(container, options) == []
    assert shardpipe.verify(url, storage_options=options).ok


def test_the_command_line_puts_the_index_where_the_library_does(
    tmp_path: Any, azure_container: tuple[str, dict[str, Any]]
) -> None:
    """`shardpipe rechunk` into Azure without --index-location: at the start, as in Python
    (zarr-python cannot read part of a shard whose index is at the end there)."""
    from shardpipe.cli.parser import main

    container, options = azure_container
    source = zarr.create_array(tmp_path / "src.zarr", shape=(64, 64), chunks=(16, 64), dtype="u2")
    source[...] = np.arange(64 * 64, dtype="u2").reshape(64, 64)
    url = f"az://{container}/cli.zarr"
    flags = [f for k, v in options.items() for f in ("--storage-option", f"{k}={v}")]
    assert main(["rechunk", str(tmp_path / "src.zarr"), url, "--shards", "32,32", *flags]) == 0
    assert _index_location(url, options) == "start"
    part = zarr.open_array(url, mode="r", storage_options=options)[3:9, 5:40]
    np.testing.assert_array_equal(part, source[3:9, 5:40])
