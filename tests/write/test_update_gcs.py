"""Updates on GCS (fake-gcs-server): region writes, appends, verify, info, compact and repair."""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import shardpipe
from shardpipe.storage import uploads
from shardpipe.testing.gcs import gcs_object_names
from tests.support.readers import assert_same
from tests.write.test_gcs_write import read_tensorstore_gcs, read_zarr, staged

pytestmark = pytest.mark.gcs


@pytest.fixture(autouse=True)
def _threads() -> Any:
    """NumPy sources: run in this process (a cluster would get them inside the graph)."""
    with dask.config.set(scheduler="threads"):
        yield


@pytest.mark.parametrize("strategy", ["auto", "rewrite"])
def test_region_append_verify_compact_on_gcs(
    gcs_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, strategy: str
) -> None:
    bucket, options = gcs_bucket
    url = f"gs://{bucket}/small.zarr"
    rng = np.random.default_rng(1)
    data = rng.integers(0, 9, (40, 30, 32), dtype="uint16")
    shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=(13, 11, 16)),
        url,
        shards=(16, 16, 16),
        chunks=(4, 8, 8),
        storage_options=options,
    )
    new = rng.integers(0, 9, (9, 17, 5), dtype="uint16")
    region = np.s_[3:12, 5:22, 20:25]
    report = shardpipe.prepare_write(
        da.from_array(new, chunks=(5, 7, 5)),
        url,
        region=region,
        write_strategy=strategy,
        storage_options=options,
    ).execute()
    data[region] = new
    assert report.strategies == {"rewrite": 2}
    more = rng.integers(0, 9, (6, 30, 32), dtype="uint16")
    shardpipe.to_sharded_zarr(
        more, url, append_dim=0, write_strategy=strategy, storage_options=options
    )
    data = np.concatenate([data, more])
    assert_same(read_zarr(url, options), data)
    assert_same(read_tensorstore_gcs(monkeypatch, bucket, "small.zarr", options), data)
    assert shardpipe.verify(url, storage_options=options).ok
    shardpipe.compact(url, storage_options=options, threshold=0.0)
    assert shardpipe.info(url, storage_options=options).nbytes_unused == 0
    assert shardpipe.repair(url, storage_options=options).ok
    assert_same(read_zarr(url, options), data)
    assert staged(bucket, options) == []
    names = gcs_object_names(options["endpoint_url"], bucket)
    assert not any(".shardpipe/" in name for name in names), names


def test_whole_shards_go_up_in_the_background(gcs_bucket: tuple[str, dict[str, Any]]) -> None:
    """The backend declares ``background_puts``: shard tasks hand their uploads on."""
    bucket, options = gcs_bucket
    held = uploads.process_uploads()
    held.peak_nbytes = held.peak_requests = 0
    source = da.random.default_rng(3).integers(
        0, 250, (32, 512, 512), chunks=(32, 128, 128), dtype="uint8"
    )
    url = f"gs://{bucket}/bg.zarr"
    shardpipe.to_sharded_zarr(
        source, url, shards=(32, 128, 128), chunks=(16, 64, 64), storage_options=options
    )
    assert uploads.process_uploads().peak_requests >= 2
    assert_same(read_zarr(url, options), source.compute())
