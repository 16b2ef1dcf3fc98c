"""Writing 1 GiB into an Icechunk repository: ``python -m benchmarks.icechunk_write``.

The noisy ``uint16`` volume (:func:`benchmarks.volumes.make_volume`, 512 x
1024 x 1024, 1 GiB) in Dask blocks of (100, 300, 300) that straddle the
shards (128, 256, 256) with inner chunks (64, 64, 64), zstd level 1, no
chunk checksum, on Dask's threaded scheduler. Each writer runs in a fresh
process, in turn, ``--reps`` times:

* ``shardpipe-icechunk``: ``prepare_write(src, session).execute(commit=...)`` into
  an Icechunk repository on local storage;
* ``store_dask``: the array created in the session with the same shards,
  chunks and codec, the source rechunked to one Dask block per shard (as
  Icechunk asks: one writer per shard), ``icechunk.dask.store_dask`` into a
  fork, merged and committed;
* ``shardpipe-local``: ``to_sharded_zarr(src, path, storage_options={"fsync":
  False})`` into a plain directory (Icechunk's local storage does not fsync
  either).

Per run: wall time from the call to the commit (or the write's end), and the
process's peak RSS above its RSS before the call (the 1 GiB volume is held in
memory by every writer and is not counted).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.child import REPO_ROOT, reset_peak, rss, run_module_child

SHAPE = (512, 1024, 1024)
SMALL = (128, 512, 512)
BLOCKS = (100, 300, 300)
SHARDS = (128, 256, 256)
CHUNKS = (64, 64, 64)
WRITERS = ("shardpipe-icechunk", "store_dask", "shardpipe-local")


def child(writer: str, where: Path, shape: tuple[int, ...]) -> dict[str, Any]:
    """Run one write in this process; return its time and peak memory."""
    import dask
    import dask.array as da
    import icechunk
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    import shardpipe
    from benchmarks.volumes import fingerprint, make_volume

    icechunk.set_logs_filter("error")
    dask.config.set(scheduler="threads")
    volume = make_volume(shape, kind="noisy")
    source = da.from_array(volume, chunks=BLOCKS)
    codec = ZstdCodec(level=1)
    repo = None
    if writer != "shardpipe-local":
        repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(where)))
    reset_peak()
    base = rss()
    start = time.perf_counter()
    if writer == "shardpipe-icechunk":
        assert repo is not None
        shardpipe.prepare_write(
            source,
            repo.writable_session("main"),
            path="v",
            shards=SHARDS,
            chunks=CHUNKS,
            compressors=[codec],
            chunk_checksums=False,
        ).execute(commit="shardpipe")
    elif writer == "store_dask":
        assert repo is not None
        from icechunk.dask import store_dask

        session = repo.writable_session("main")
        zarr.create_array(
            session.store,
            name="v",
            shape=volume.shape,
            dtype=volume.dtype,
            shards=SHARDS,
            chunks=CHUNKS,
            compressors=[codec],
            fill_value=0,
        )
        fork = session.fork()
        target = zarr.open_array(fork.store, path="v", mode="r+")
        merged = store_dask(sources=[source.rechunk(SHARDS)], targets=[target])
        session.merge(merged)
        session.commit("store_dask")
    else:
        shardpipe.to_sharded_zarr(
            source,
            where,
            shards=SHARDS,
            chunks=CHUNKS,
            compressors=[codec],
            chunk_checksums=False,
            storage_options={"fsync": False},
        )
    seconds = time.perf_counter() - start
    peak = rss("VmHWM")
    if repo is not None:
        back = zarr.open_array(repo.readonly_session("main").store, path="v", mode="r")[...]
    else:
        back = zarr.open_array(str(where), mode="r")[...]
    return {
        "writer": writer,
        "seconds": seconds,
        "raw_bytes": volume.nbytes,
        "peak_above_base": peak - base,
        "same_data": bool(np.array_equal(back, volume)),
        "fingerprint": fingerprint(volume),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help=f"volume {SMALL} (a smoke run)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--child", nargs=2, metavar=("WRITER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = SMALL if args.small else SHAPE
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), shape)))
        return 0
    results = []
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / "benchmarks") as tmp:
        for rep in range(args.reps):
            for writer in WRITERS:
                where = Path(tmp) / writer
                record = run_module_child(
                    "benchmarks.icechunk_write", args.small, writer, str(where)
                )
                record["rep"] = rep
                results.append(record)
                print(
                    f"{writer:>18} rep {rep}: {record['seconds']:.2f} s, "
                    f"{record['raw_bytes'] / record['seconds'] / 1e6:.0f} MB/s raw, "
                    f"peak +{record['peak_above_base'] / 2**20:.0f} MiB, "
                    f"same data {record['same_data']}",
                    flush=True,
                )
                shutil.rmtree(where, ignore_errors=True)
    best = {w: min(r["seconds"] for r in results if r["writer"] == w) for w in WRITERS}
    peak = {w: max(r["peak_above_base"] for r in results if r["writer"] == w) for w in WRITERS}
    ours = best["shardpipe-icechunk"]
    for w in WRITERS:
        print(
            f"{w:>18}: best {best[w]:.2f} s ({best[w] / ours:.2f}x shardpipe-icechunk), "
            f"peak +{peak[w] / 2**20:.0f} MiB"
        )
    if args.out:
        meta = {
            "machine": platform.platform(),
            "python": platform.python_version(),
            "shape": shape,
            "blocks": BLOCKS,
            "shards": SHARDS,
            "chunks": CHUNKS,
        }
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0 if all(r["same_data"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
