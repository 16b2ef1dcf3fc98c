"""Shards of four times ``max_mem`` on GCS: 32 MiB in four 8 MiB shards, each in parts (slow).

The size proves nothing more at 512 MiB than at 32 MiB;
``python -m benchmarks large-shard`` measures large shards.

Run by hand: ``pytest -m slow tests/write/test_gcs_large.py -s`` prints the
seconds, the requests (counted by a faithful
:class:`~shardpipe.testing.fault_proxy.FaultProxy` in front of the
emulator) and the parts per shard.
"""

from __future__ import annotations

import time
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.testing.fault_proxy import FaultProxy
from shardpipe.testing.gcs import gcs_storage_options_for
from tests.write.test_gcs_write import staged

pytestmark = [pytest.mark.gcs, pytest.mark.slow]

MiB = 2**20
SHAPE = (128, 512, 512)
"""32 MiB of uint8."""
SHARDS = (32, 512, 512)
"""8 MiB shards: four times MAX_MEM."""
MAX_MEM = 2 * MiB


def test_32_mib_with_shards_of_four_times_max_mem(
    gcs_bucket: tuple[str, dict[str, Any]], gcs_fault_proxy: FaultProxy
) -> None:
    bucket, direct = gcs_bucket
    source = da.random.default_rng(41).integers(0, 250, SHAPE, chunks=(8, 256, 256), dtype="uint8")
    url = f"gs://{bucket}/large.zarr"
    with dask.config.set(scheduler="threads"):
        job = shardpipe.prepare_write(
            source,
            url,
            shards=SHARDS,
            chunks=(32, 64, 64),
            compressors=None,
            max_mem=MAX_MEM,
            storage_options=gcs_storage_options_for(gcs_fault_proxy.url),
        )
        assert job.plan.n_multipart_shards == 4, job.plan
        started = time.monotonic()
        report = job.execute()
        seconds = time.monotonic() - started
    counts = gcs_fault_proxy.counts
    print(
        f"\n32 MiB to gs:// on fake-gcs-server: {seconds:.1f} s, {counts.requests} requests, "
        f"{job.plan.n_parts} parts in {job.plan.n_multipart_shards} shards, {report}"
    )
    stored = zarr.open_array(url, mode="r", storage_options=direct)
    np.testing.assert_array_equal(stored[...], source.compute())
    assert shardpipe.verify(url, storage_options=direct).ok
    assert staged(bucket, direct) == []
