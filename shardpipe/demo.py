"""Demo: write a ~1 GiB synthetic volume on a LocalCluster, verify it, print throughput.

Run with ``python -m shardpipe.demo [--out DIR] [--keep] [--small]``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

import dask.array as da
import numpy as np
import zarr
from distributed import Client, LocalCluster, wait
from zarr.codecs import ZstdCodec

from shardpipe.verify import verify
from shardpipe.writer import to_sharded_zarr


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
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="8GiB") as cluster,
        Client(cluster) as client,
    ):
        print(
            f"cluster: {len(cluster.workers)} worker processes, dashboard {client.dashboard_link}"
        )
        volume = synthetic_volume(shape, chunks=(100, 100, 1024)).persist()  # misaligned on purpose
        wait(volume)
        start = time.perf_counter()
        to_sharded_zarr(
            volume,
            out,
            shards=(128, 256, 256),
            chunks=(64, 64, 64),
            compressors=ZstdCodec(level=1),
            overwrite=True,
            progress=True,
        )
        seconds = time.perf_counter() - start
        print(
            f"wrote {nbytes / 1e6:,.0f} MB in {seconds:.1f} s: {nbytes / 1e6 / seconds:,.0f} MB/s"
        )

        report = verify(out)
        print(report)
        array = zarr.open_array(out, mode="r")
        for z in (0, shape[0] // 2, shape[0] - 1):
            expected = volume[z].compute()
            if not np.array_equal(array[z], expected):
                raise SystemExit(f"read-back mismatch in plane z={z}")
        print("read back three planes with zarr-python: identical")
    if not args.keep and not args.out:
        shutil.rmtree(out, ignore_errors=True)
    if not report.ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
