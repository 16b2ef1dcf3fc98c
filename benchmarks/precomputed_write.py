"""A 1 GiB uint8 volume as a sharded precomputed volume: ``python -m benchmarks.precomputed_write``.

The volume: ``uint8`` (1024, 1024, 1024), indexed (x, y, z), a smooth field
with 3 bits of noise, in memory. Chunks (64, 64, 64), ``raw`` encoding; one
sharding spec for every writer: identity hash, ``preshift_bits`` 6,
``minishard_bits`` 3 (a shard is a box of 8 x 8 x 8 chunks, 128 MiB),
``shard_bits`` 3, gzip'd minishard indexes, raw data. Each writer runs in a
fresh process, in turn, ``--reps`` times; time from the call to the last
shard written; peak RSS above the RSS before the call (the volume itself is
not counted). No fsync anywhere (tensorstore and cloud-volume do not fsync
local files; shardpipe runs with ``fsync=False``).

* ``shardpipe``: ``to_neuroglancer_precomputed`` from Dask blocks of
  (300, 300, 300) that straddle the chunks, on the threaded scheduler (the
  Dask array is made before the clock starts: ``da.from_array`` copies a
  NumPy array into its blocks);
* ``tensorstore``: one transaction per shard box, two at a time (the
  machine's two cores);
* ``cloudvolume``: ``vol[box] = data[box]`` per shard box (cloud-volume
  writes a sharded scale a whole shard at a time), one after the other.

``--pyramid`` writes scales (1, 1, 1), (2, 2, 2), (4, 4, 4) (mean):
shardpipe from one graph; tensorstore each scale from ``ts.downsample`` of
the scale it has just written, one transaction per shard again;
cloud-volume each scale from the one before, downsampled in memory with
NumPy (shardpipe's own block mean, so the scales hold the same values;
igneous would downsample with tinybrain, not installed here), then written
a shard box at a time as above. Every pyramid's scales are compared with
shardpipe's mean of the volume.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.child import REPO_ROOT, reset_peak, rss, run_module_child

SHAPE = (1024, 1024, 1024)
SMALL = (256, 256, 256)
CHUNK = (64, 64, 64)
BLOCKS = (300, 300, 300)
SHARDING = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 6,
    "hash": "identity",
    "minishard_bits": 3,
    "shard_bits": 3,
    "minishard_index_encoding": "gzip",
    "data_encoding": "raw",
}
FACTORS = [(1, 1, 1), (2, 2, 2), (4, 4, 4)]
WRITERS = ("shardpipe", "tensorstore", "cloudvolume")


def make_volume(shape: tuple[int, ...]) -> np.ndarray:
    """A smooth field plus 3 bits of noise, ``uint8``, (x, y, z)."""
    x = np.linspace(0, 6, shape[0], dtype=np.float32)[:, None, None]
    y = np.linspace(0, 4, shape[1], dtype=np.float32)[None, :, None]
    z = np.arange(shape[2], dtype=np.float32)[None, None, :]
    field = (np.sin(x) * np.cos(y) * 100 + 120).astype(np.uint8)  # (x, y, 1)
    out = np.random.default_rng(0).integers(0, 8, shape, dtype=np.uint8)
    out += field
    out += (20 * np.sin(z / 50) + 20).astype(np.uint8)
    return out


def _boxes(size: tuple[int, ...]) -> list[tuple[slice, ...]]:
    side = 8 * CHUNK[0]  # 8 x 8 x 8 chunks per shard
    return [
        tuple(slice(o, min(o + side, n)) for o, n in zip(origin, size, strict=True))
        for origin in np.ndindex(*(-(-n // side) for n in size))
        for origin in [tuple(i * side for i in origin)]
    ]


def _ts_write(path: Path, volume: np.ndarray, pyramid: bool) -> None:
    """One transaction per shard box, two at a time; later scales from ``ts.downsample``."""
    import tensorstore as ts

    previous: Any = None
    for scale, factor in enumerate(FACTORS if pyramid else FACTORS[:1]):
        size = [-(-n // f) for n, f in zip(volume.shape, factor, strict=True)]
        spec: dict[str, Any] = {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(path)},
            "scale_metadata": {
                "size": size,
                "resolution": [float(f) for f in factor],
                "encoding": "raw",
                "chunk_size": list(CHUNK),
                "sharding": SHARDING,
            },
            "create": True,
        }
        if scale == 0:
            spec["multiscale_metadata"] = {"type": "image", "data_type": "uint8", "num_channels": 1}
            source: Any = volume[..., None]
        else:
            step = [f // p for f, p in zip(factor, FACTORS[scale - 1], strict=True)]
            source = ts.downsample(previous, [*step, 1], "mean")
        store = ts.open(spec).result()

        def one(box: tuple[slice, ...], store: Any = store, source: Any = source) -> None:
            with ts.Transaction() as txn:
                store.with_transaction(txn)[box].write(source[box]).result()

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(one, _boxes(tuple(size))))
        previous = store


def _cv_write(path: Path, volume: np.ndarray, pyramid: bool) -> None:
    """A shard box at a time; later scales downsampled in memory from the one before."""
    from cloudvolume import CloudVolume

    from shardpipe.core.downsample import downsample_block

    factors = FACTORS if pyramid else FACTORS[:1]
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type="image",
        data_type="uint8",
        encoding="raw",
        resolution=[1, 1, 1],
        voxel_offset=[0, 0, 0],
        chunk_size=list(CHUNK),
        volume_size=list(volume.shape),
    )
    first = info["scales"][0]
    first["sharding"] = SHARDING
    for factor in factors[1:]:
        size = [-(-n // f) for n, f in zip(volume.shape, factor, strict=True)]
        key = "_".join(str(f) for f in factor)
        info["scales"].append({**first, "key": key, "size": size, "resolution": list(factor)})
    CloudVolume(f"file://{path}", info=info, progress=False).commit_info()
    level = volume
    for mip, factor in enumerate(factors):
        if mip:
            step = [f // p for f, p in zip(factor, factors[mip - 1], strict=True)]
            level = downsample_block(level[..., None], step, "mean")[..., 0]
        vol = CloudVolume(f"file://{path}", mip=mip, progress=False, compress=False)
        for box in _boxes(level.shape):
            vol[box] = level[box]


def child(writer: str, where: Path, shape: tuple[int, ...], pyramid: bool) -> dict[str, Any]:
    """Run one write in this process; return its time and peak memory."""
    import dask
    import dask.array as da

    import shardpipe

    dask.config.set(scheduler="threads")
    volume = make_volume(shape)
    # built before the clock starts, as in the other benchmarks: Dask copies a NumPy
    # array into its blocks here (1 GiB), which is the source's cost, not the writer's
    source = da.from_array(volume, chunks=BLOCKS)
    reset_peak()
    base = rss()
    start = time.perf_counter()
    if writer == "shardpipe":
        shardpipe.to_neuroglancer_precomputed(
            source,
            str(where),
            resolution=(1, 1, 1),
            chunk_size=CHUNK,
            sharding=SHARDING,
            scales=FACTORS if pyramid else None,
            storage_options={"fsync": False},
        )
    elif writer == "tensorstore":
        _ts_write(where, volume, pyramid)
    else:
        _cv_write(where, volume, pyramid)
    seconds = time.perf_counter() - start
    peak = rss("VmHWM")
    return {
        "writer": writer,
        "pyramid": pyramid,
        "seconds": seconds,
        "raw_bytes": volume.nbytes,
        "peak_above_base": peak - base,
        **_compared(where, volume, pyramid),
        "verify_ok": bool(shardpipe.verify(str(where)).ok),
    }


def _compared(path: Path, volume: np.ndarray, pyramid: bool) -> dict[str, Any]:
    """Scale 0 (read by tensorstore) against the volume; the others against its block means.

    ``scale_diff`` is the largest difference of a downsampled voxel from
    shardpipe's mean of the scale before (a writer rounding means another
    way differs by 1).
    """
    import tensorstore as ts

    from shardpipe.core.downsample import downsample_block

    expected, same, diff = volume, False, 0
    for mip, factor in enumerate(FACTORS if pyramid else FACTORS[:1]):
        spec = {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(path)},
            "scale_index": mip,
        }
        back = np.asarray(ts.open(spec).result().read().result())[..., 0]
        if mip == 0:
            same = bool(np.array_equal(back, volume))
            continue
        step = [f // p for f, p in zip(factor, FACTORS[mip - 1], strict=True)]
        expected = downsample_block(expected[..., None], step, "mean")[..., 0]
        diff = max(diff, int(np.abs(back.astype(np.int16) - expected).max()))
    return {"same_data": same, "scale_diff": diff}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help=f"volume {SMALL} (a smoke run)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--pyramid", action="store_true", help="also write 3-level pyramids")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    parser.add_argument(
        "--child", nargs=3, metavar=("WRITER", "PATH", "PYRAMID"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    shape = SMALL if args.small else SHAPE
    if args.child:
        writer, where, pyramid = args.child
        print(json.dumps(child(writer, Path(where), shape, pyramid == "1")))
        return 0
    cases = [(w, False) for w in WRITERS]
    if args.pyramid:
        cases += [(w, True) for w in WRITERS]
    results = []
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / "benchmarks") as tmp:
        for rep in range(args.reps):
            for writer, pyramid in cases:
                where = Path(tmp) / f"{writer}-{int(pyramid)}"
                child_args = (writer, str(where), str(int(pyramid)))
                record = run_module_child("benchmarks.precomputed_write", args.small, *child_args)
                record["rep"] = rep
                results.append(record)
                label = f"{writer}{' pyramid' if pyramid else ''}"
                print(
                    f"{label:>20} rep {rep}: {record['seconds']:.2f} s, "
                    f"{record['raw_bytes'] / record['seconds'] / 1e6:.0f} MB/s raw, "
                    f"peak +{record['peak_above_base'] / 2**20:.0f} MiB, same data "
                    f"{record['same_data']} (scales within {record['scale_diff']}), "
                    f"verify {record['verify_ok']}",
                    flush=True,
                )
                shutil.rmtree(where, ignore_errors=True)
    for writer, pyramid in cases:
        mine = [r for r in results if r["writer"] == writer and r["pyramid"] == pyramid]
        ours = [r for r in results if r["writer"] == "shardpipe" and r["pyramid"] == pyramid]
        best, peak = min(r["seconds"] for r in mine), max(r["peak_above_base"] for r in mine)
        ratio = best / min(r["seconds"] for r in ours)
        label = f"{writer}{' pyramid' if pyramid else ''}"
        print(
            f"{label:>20}: best {best:.2f} s ({ratio:.2f}x shardpipe), peak +{peak / 2**20:.0f} MiB"
        )
    if args.out:
        meta = {
            "machine": platform.platform(),
            "python": platform.python_version(),
            "shape": shape,
            "chunk": CHUNK,
            "blocks": BLOCKS,
            "sharding": SHARDING,
        }
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    good = all(r["same_data"] and r["verify_ok"] and r["scale_diff"] <= 1 for r in results)
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
