"""OME-Zarr 0.5 pyramids from Dask: ``python -m benchmarks.ome_zarr``.

The smooth ``uint16`` volume (:func:`benchmarks.volumes.make_volume`, 512 x
1024 x 2048, 2 GiB) in Dask blocks of (100, 300, 300) that do not line up
with the shards (128, 256, 256) of inner chunks (64, 128, 128), written as
an OME-Zarr 0.5 image with a 4-level pyramid (factors 2, 4 and 8 along z, y
and x, by block means), zarr's default codec (zstd), on Dask's threaded
scheduler. Each writer runs in a fresh process, in turn:

* ``shardpipe``: ``to_ome_zarr`` (every level in one pass, one task per
  shard; no inner-chunk checksum, no fsync, as the others), ``max_mem``
  at its default (1 GiB), and ``shardpipe-256MiB`` with ``max_mem="256MiB"``;
* ``ngff-zarr``: ``to_ngff_image`` + ``to_multiscales`` (``dask_bin_shrink``,
  block means) + ``to_ngff_zarr(version="0.5", chunks_per_shard=(2, 2, 2))``;
* ``ngff-zarr-tensorstore``: the same with ``use_tensorstore=True``;
* ``ome-zarr-py``: ``write_image`` (``local_mean``) into a Zarr v3 group with
  ``storage_options={"chunks": ..., "shards": ...}``.

Per writer: wall time from the call to its return, the process's peak RSS
above its RSS before the call (the volume, held in memory by every writer,
is not counted), the files and bytes it wrote, the level shapes, and whether
level 0 reads back (zarr-python) equal to the volume. A writer that fails is
reported with its error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.child import REPO_ROOT, reset_peak, rss

SHAPE = (512, 1024, 2048)
SMALL = (128, 256, 512)
BLOCKS = (100, 300, 300)
SHARDS = (128, 256, 256)
CHUNKS = (64, 128, 128)
FACTORS = (2, 4, 8)
WRITERS = ("shardpipe", "shardpipe-256MiB", "ngff-zarr", "ngff-zarr-tensorstore", "ome-zarr-py")


def _write(writer: str, source: Any, where: Path) -> None:
    if writer.startswith("shardpipe"):
        import shardpipe

        shardpipe.to_ome_zarr(
            source,
            where,
            "zyx",
            scale_factors=list(FACTORS),
            method="mean",
            shards=SHARDS,
            chunks=CHUNKS,
            chunk_checksums=False,
            storage_options={"fsync": False},
            max_mem="256MiB" if writer.endswith("256MiB") else "1GiB",
        )
    elif writer.startswith("ngff-zarr"):
        import ngff_zarr

        image = ngff_zarr.to_ngff_image(source, dims=["z", "y", "x"])
        multiscales = ngff_zarr.to_multiscales(
            image,
            scale_factors=list(FACTORS),
            method=ngff_zarr.Methods.DASK_BIN_SHRINK,
            chunks=CHUNKS,
        )
        ngff_zarr.to_ngff_zarr(
            str(where),
            multiscales,
            version="0.5",
            chunks_per_shard=tuple(s // c for s, c in zip(SHARDS, CHUNKS, strict=True)),
            use_tensorstore=writer.endswith("tensorstore"),
        )
    elif writer == "ome-zarr-py":
        import zarr
        from ome_zarr.scale import Methods
        from ome_zarr.writer import write_image

        group = zarr.open_group(str(where), mode="w", zarr_format=3)
        write_image(
            source,
            group,
            axes="zyx",
            scale_factors=[{"z": f, "y": f, "x": f} for f in FACTORS],
            method=Methods.LOCAL_MEAN,
            storage_options={"chunks": CHUNKS, "shards": SHARDS},
        )
    else:
        raise ValueError(writer)


def _files(where: Path) -> tuple[int, int]:
    files = [p for p in where.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def child(writer: str, where: Path, shape: tuple[int, ...]) -> dict[str, Any]:
    """Run one write in this process; return its time, peak memory and output."""
    import dask
    import dask.array as da
    import numpy as np
    import zarr

    from benchmarks.volumes import make_volume

    dask.config.set(scheduler="threads")
    volume = make_volume(shape, kind="smooth")
    source = da.from_array(volume, chunks=BLOCKS)
    reset_peak()
    base = rss()
    start = time.perf_counter()
    _write(writer, source, where)
    seconds = time.perf_counter() - start
    peak = rss("VmHWM")
    group = zarr.open_group(str(where), mode="r")
    paths = [d["path"] for d in group.attrs["ome"]["multiscales"][0]["datasets"]]
    levels = [group[p] for p in paths]
    files, nbytes = _files(where)
    return {
        "writer": writer,
        "seconds": seconds,
        "raw_bytes": volume.nbytes,
        "peak_above_base": peak - base,
        "files": files,
        "bytes": nbytes,
        "levels": [list(level.shape) for level in levels],
        "shards": [list(level.shards or ()) for level in levels],
        "level0_equal": bool(np.array_equal(levels[0][...], volume)),
    }


def _run(writer: str, where: Path, small: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.ome_zarr", "--child", writer, str(where)]
    done = subprocess.run(
        command + (["--small"] if small else []),
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"writer": writer, "failed": last}
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help=f"volume {SMALL} (a smoke run)")
    parser.add_argument("--writers", nargs="*", default=list(WRITERS), choices=WRITERS)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument("--child", nargs=2, metavar=("WRITER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = SMALL if args.small else SHAPE
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), shape)))
        return 0
    results = []
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / "benchmarks") as tmp:
        for writer in args.writers:
            where = Path(tmp) / f"{writer}.ome.zarr"
            record = _run(writer, where, args.small)
            results.append(record)
            if "failed" in record:
                print(f"{writer:>22}: failed: {record['failed']}", flush=True)
            else:
                print(
                    f"{writer:>22}: {record['seconds']:.1f} s, "
                    f"{record['raw_bytes'] / record['seconds'] / 1e6:.0f} MB/s of level 0, "
                    f"peak +{record['peak_above_base'] / 2**20:.0f} MiB, "
                    f"{record['files']} files, {record['bytes'] / 2**20:.1f} MiB, "
                    f"levels {record['levels']}, level 0 equal {record['level0_equal']}",
                    flush=True,
                )
            shutil.rmtree(where, ignore_errors=True)
    done = {r["writer"]: r for r in results if "failed" not in r}
    if "shardpipe" in done:
        ours = done["shardpipe"]
        for writer, r in done.items():
            print(
                f"{writer:>22}: {r['seconds'] / ours['seconds']:.2f}x shardpipe's time, "
                f"peak {r['peak_above_base'] / max(ours['peak_above_base'], 1):.2f}x"
            )
    if args.out:
        meta = {
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "shape": shape,
            "blocks": BLOCKS,
            "shards": SHARDS,
            "chunks": CHUNKS,
            "factors": FACTORS,
        }
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0 if all(r.get("level0_equal") for r in done.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
