"""Demo: write a ~1 GiB synthetic volume on a LocalCluster and on threads, verify, print MB/s.

Run with ``python -m shardpipe.cli.demo [--out DIR] [--keep] [--small]``.

The same misaligned Dask blocks are written twice: on a ``LocalCluster`` of
two single-threaded worker processes (as a batch job on a cluster would) and
on Dask's threaded scheduler in this process (as in a notebook, and as in
the performance table of ``docs/guides/performance.md``). On a 2-core machine the cluster is the
slower of the two: bits of inner chunks that straddle block edges are
pickled and sent between the worker processes, and every task goes through
the distributed scheduler, while the threaded scheduler passes blocks by
reference. Both figures are printed.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr
from distributed import Client, LocalCluster, wait
from zarr.codecs import ZstdCodec

from shardpipe.maintenance.verification import verify
from shardpipe.write.prepare import prepare_write


def synthetic_volume(shape: tuple[int, int, int], chunks: tuple[int, int, int]) -> da.Array:
    """A smooth uint16 volume with a little noise, computed block by block."""

    def block(
        block_info: dict[object, dict[str, list[tuple[int, int]]]] | None = None,
    ) -> np.ndarray:
        assert block_info is not None
        (z0, z1), (y0, y1), (x0, x1) = block_info[None]["array-location"]
        z, y, x = np.ogrid[z0:z1, y0:y1, x0:x1]
        smooth = np.sin(z / 37.0) + np.cos(y / 53.0) * np.sin(x / 71.0)
        rng = np.random.default_rng(z0 * 1_000_003 + y0 * 1009 + x0)
        noise = rng.normal(0.0, 0.02, (z1 - z0, y1 - y0, x1 - x0))
        values: np.ndarray = ((smooth + noise + 2.0) * 10_000).astype("uint16")
        return values

    blocks = da.core.normalize_chunks(chunks, shape)
    volume: da.Array = da.map_blocks(
        block, dtype="uint16", chunks=blocks, meta=np.empty((0, 0, 0), "uint16")
    )
    return volume


def main(argv: list[str] | None = None) -> None:
    """Run the demo."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="where to write (default: a temporary folder, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the written array")
    parser.add_argument("--small", action="store_true", help="a 64 MiB volume instead of 1 GiB")
    args = parser.parse_args(argv)

    shape = (64, 512, 1024) if args.small else (512, 1024, 1024)
    out = args.out or tempfile.mkdtemp(prefix="shardpipe-demo-")
    nbytes = int(np.prod(shape)) * 2
    print(f"shardpipe demo: {shape} uint16 = {nbytes / 2**30:.2f} GiB -> {out}")
    options: dict[str, Any] = dict(
        shards=(128, 256, 256), chunks=(64, 64, 64), compressors=ZstdCodec(level=1)
    )
    blocks = (100, 100, 1024)  # misaligned with the shards on purpose
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="8GiB") as cluster,
        Client(cluster) as client,
    ):
        print(
            f"cluster: {len(cluster.workers)} worker processes, dashboard {client.dashboard_link}"
        )
        volume = synthetic_volume(shape, chunks=blocks).persist()
        wait(volume)
        job = prepare_write(volume, f"{out}/cluster.zarr", overwrite=True, **options)
        print(job)
        cluster_report = job.execute(progress=True)
        expected = {z: volume[z].compute() for z in (0, shape[0] // 2, shape[0] - 1)}

    local = da.from_array(synthetic_volume(shape, chunks=blocks).compute(), chunks=blocks)
    with dask.config.set(scheduler="threads"):
        local_report = prepare_write(
            local, f"{out}/threads.zarr", overwrite=True, **options
        ).execute(progress=True)

    ok = True
    for name, report in [("cluster", cluster_report), ("threads", local_report)]:
        check = verify(f"{out}/{name}.zarr")
        array = zarr.open_array(f"{out}/{name}.zarr", mode="r")
        same = all(np.array_equal(array[z], plane) for z, plane in expected.items())
        ok = ok and check.ok and same
        print(
            f"{name}: {report}; verify {'OK' if check.ok else 'FAILED'}; "
            f"three planes read back with zarr-python {'identical' if same else 'DIFFER'}"
        )
    mbps = {
        n: nbytes / 1e6 / r.seconds
        for n, r in [("cluster", cluster_report), ("threads", local_report)]
    }
    print(
        f"\nLocalCluster (2 processes x 1 thread): {mbps['cluster']:,.0f} MB/s; "
        f"threaded scheduler: {mbps['threads']:,.0f} MB/s (raw array bytes per second).\n"
        "The throughput table of docs/guides/performance.md is measured on threads. On few "
        "cores the cluster is slower: straddling bits of misaligned blocks travel between "
        "processes and every task passes through the distributed scheduler."
    )
    if not args.keep and not args.out:
        shutil.rmtree(out, ignore_errors=True)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
