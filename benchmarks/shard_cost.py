"""Shard tasks against the format-work limit, one-shard writes: ``python -m benchmarks.shard_cost``.

Issue #30 measures shardpipe against the format-work limit
(:mod:`benchmarks.format_limit`) in MB/s; on a machine that other processes
load, wall times say little. Two measurements that other processes disturb
less, in one process on the same data:

``tasks`` (default)
    The suite's noisy ``uint16`` volume (``--shape``, default (256, 1024,
    1024), 512 MiB) written in shards (128, 256, 256) of chunks (64, 64, 64)
    by shardpipe (threaded scheduler, no fsync) and by the format-work
    limit, alternately, ``--reps`` times each, on ``--threads`` threads.
    shardpipe's Dask blocks are ``--blocks``: the suite's ``aligned`` (one
    shard each), ``misaligned`` (100, 100, 100) or ``slabs`` (single
    planes); ``--source views`` (default: ``da.from_array`` of the volume,
    as the suite) or ``computed`` (each block returned by a task of its
    own, at no cost: shards are then gathered from pieces of blocks).
    Each shard task is timed by its own thread's CPU clock
    (``time.thread_time``): shardpipe's ``write_shard`` and the limit's
    per-shard function; shardpipe encodes every chunk on its task's thread
    here (no encoding on idle cores, which would move work off the
    task's clock) unless ``--idle-cores`` lets it, as any write does: then
    the writes' wall times and process CPU are what to read. Reported: the
    minimum, 10th percentile and median per shard, their ratios (limit /
    shardpipe: 1.0 means shardpipe does no more work per shard than the
    format needs), and each write's
    process CPU seconds beside the sum of its shard tasks (the rest is work
    outside the shard tasks: graph, scheduler, metadata, block tasks), and
    the ratios of the writes' wall times and process CPU seconds (limit /
    shardpipe).
``one-shard``
    One shard of that volume (128, 256, 256), 16 MiB, written whole, then
    its first half rewritten as a region update, with chunks encoded on one
    thread (:func:`shardpipe.engine.encoders.task_threads` forced to 1) and
    on the idle cores (the default), alternately, ``--reps`` times each:
    wall times (median and best).
``peak``
    One shardpipe write of the volume in this process (``--blocks``,
    ``--source``, ``--threads``; ``--serial``: every chunk on its task's
    thread): the peak RSS above the RSS before the write, in MiB (Linux:
    ``VmHWM`` of ``/proc/self/status``, reset through ``clear_refs``). Run
    it once per process, alternating the cases: peaks are not additive.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import format_limit
from benchmarks.cases import CHUNKS, SHARDS, Case, block_shape
from benchmarks.volumes import make_volume

MIB = 1 << 20


def _compressors(codec: str) -> Any:
    from zarr.codecs import ZstdCodec

    return [ZstdCodec(level=1)] if codec == "zstd1" else None


def _same(block: np.ndarray) -> np.ndarray:
    """A block as it comes (a task of its own that computes nothing)."""
    return block


def _dask_source(volume: np.ndarray, blocks: str, source: str) -> Any:
    """The volume in Dask blocks ``blocks``: views of it, or each computed by a task."""
    import dask.array as da

    x = da.from_array(volume, chunks=block_shape(blocks, volume.shape))
    return x.map_blocks(_same, dtype=x.dtype) if source == "computed" else x


def _status_mib(field: str) -> float:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def peak_rss(
    shape: tuple[int, ...], codec: str, threads: int, out: Path, *, blocks: str, source: str
) -> dict[str, float]:
    """MiB of peak RSS above the RSS before one write of the noisy volume (Linux only)."""
    import gc

    import dask

    import shardpipe

    x = _dask_source(make_volume(shape, kind="noisy"), blocks, source)
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    before = _status_mib("VmRSS")
    with dask.config.set(scheduler="threads", num_workers=threads):
        shardpipe.to_sharded_zarr(
            x,
            str(out / "peak"),
            shards=SHARDS,
            chunks=CHUNKS,
            compressors=_compressors(codec),
            storage_options={"fsync": False},
        )
    return {"before_mib": before, "peak_above_mib": _status_mib("VmHWM") - before}


def shard_tasks(
    shape: tuple[int, ...],
    codec: str,
    threads: int,
    reps: int,
    out: Path,
    *,
    blocks: str = "aligned",
    source: str = "views",
    idle_cores: bool = False,
) -> dict[str, Any]:
    """Thread CPU seconds of every shard task of shardpipe and of the format-work limit.

    ``idle_cores``: shardpipe's tasks may encode chunks on idle cores, as in
    any write (their thread CPU clocks then miss what other threads encoded).
    """
    import dask

    import shardpipe
    import shardpipe.engine.encoders as encoders
    import shardpipe.engine.graph as graph
    import shardpipe.engine.publish_tasks as tasks

    if not idle_cores:
        # every chunk of a shard encoded on its task's thread, as the limit does, so
        # that the task's thread CPU clock counts all the shard's work
        encoders.task_threads = lambda: 1

    volume = make_volume(shape, kind="noisy")
    x = _dask_source(volume, blocks, source)
    times: dict[str, list[float]] = {"format": [], "shardpipe": []}
    writes: dict[str, list[tuple[float, float, float]]] = {"format": [], "shardpipe": []}

    def timed(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return func(*args, **kwargs)
            finally:
                times[name].append(time.thread_time() - start)

        return run

    # the graph builder's reference to the task function, as it puts it in every graph
    setattr(graph, "write_shard", timed("shardpipe", tasks.write_shard))  # noqa: B010
    writer_call = format_limit.ShardWriter.__call__
    format_limit.ShardWriter.__call__ = timed("format", writer_call)  # type: ignore[method-assign]
    format_limit.THREADS = threads
    case = Case("suite", "format", "format", "noisy", shape, str(out / "format"), codec)
    limit_write, _ = format_limit.format_work(case, volume, durable=False)

    def write_shardpipe() -> None:
        with dask.config.set(scheduler="threads", num_workers=threads):
            shardpipe.to_sharded_zarr(
                x,
                str(out / "shardpipe"),
                shards=SHARDS,
                chunks=CHUNKS,
                compressors=_compressors(codec),
                overwrite=True,
                storage_options={"fsync": False},
            )

    runs = {"format": limit_write, "shardpipe": write_shardpipe}
    for rep in range(reps):
        order = ["format", "shardpipe"] if rep % 2 == 0 else ["shardpipe", "format"]
        for name in order:
            shutil.rmtree(out / name, ignore_errors=True)
            first = len(times[name])
            wall, cpu = time.perf_counter(), time.process_time()
            runs[name]()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            writes[name].append((wall, cpu, sum(times[name][first:])))
    return {"times": times, "writes": writes, "nbytes": volume.nbytes}


def report_tasks(result: dict[str, Any]) -> None:
    """Print the per-shard figures of :func:`shard_tasks`."""
    times, writes, nbytes = result["times"], result["writes"], result["nbytes"]
    stats = {}
    for name in ("format", "shardpipe"):
        ts = sorted(times[name])
        stats[name] = (ts[0], ts[len(ts) // 10], statistics.median(ts))
        walls = sorted(w for w, _, _ in writes[name])
        print(
            f"{name:9s} per shard task, thread CPU ms: min {1000 * ts[0]:.1f}  "
            f"p10 {1000 * stats[name][1]:.1f}  median {1000 * stats[name][2]:.1f}  "
            f"(n={len(ts)});  wall MB/s: best {nbytes / walls[0] / 1e6:.0f}  "
            f"median {nbytes / statistics.median(walls) / 1e6:.0f}"
        )
        cpu = "  ".join(f"{c:.2f}/{t:.2f}" for _, c, t in writes[name])
        print(f"{'':9s} per write, process CPU s / sum of shard tasks s: {cpu}")
    ratios = [f / s for f, s in zip(stats["format"], stats["shardpipe"], strict=True)]
    print(
        "format-work limit / shardpipe, per shard task CPU: "
        f"min {ratios[0]:.3f}  p10 {ratios[1]:.3f}  median {ratios[2]:.3f}"
    )
    wall = {name: sorted(w for w, _, _ in writes[name]) for name in ("format", "shardpipe")}
    print(
        "format-work limit / shardpipe, per write wall time: "
        f"best {wall['format'][0] / wall['shardpipe'][0]:.3f}  "
        f"median {statistics.median(wall['format']) / statistics.median(wall['shardpipe']):.3f}"
    )
    cpu = {name: sorted(c for _, c, _ in writes[name]) for name in ("format", "shardpipe")}
    print(
        "format-work limit / shardpipe, per write process CPU: "
        f"min {cpu['format'][0] / cpu['shardpipe'][0]:.3f}  "
        f"median {statistics.median(cpu['format']) / statistics.median(cpu['shardpipe']):.3f}"
    )


def one_shard(reps: int, codec: str, out: Path) -> dict[str, list[float]]:
    """Wall seconds of a one-shard write and a half-shard update, one thread or idle cores."""
    import dask
    import dask.array as da

    import shardpipe
    import shardpipe.engine.encoders as encoders

    volume = make_volume(SHARDS, kind="noisy")
    x = da.from_array(volume, chunks=volume.shape)
    half = da.from_array(volume[: SHARDS[0] // 2] + 1, chunks=(SHARDS[0] // 2, *SHARDS[1:]))
    region = (slice(0, SHARDS[0] // 2), slice(None), slice(None))
    cores = encoders.task_threads
    results: dict[str, list[float]] = {}
    for rep in range(reps):
        for mode in ("one thread", "idle cores")[:: 1 if rep % 2 == 0 else -1]:
            encoders.task_threads = (lambda: 1) if mode == "one thread" else cores
            path = str(out / mode.replace(" ", "-"))
            with dask.config.set(scheduler="threads"):
                start = time.perf_counter()
                shardpipe.to_sharded_zarr(
                    x,
                    path,
                    shards=SHARDS,
                    chunks=CHUNKS,
                    compressors=_compressors(codec),
                    overwrite=True,
                    storage_options={"fsync": False},
                )
                results.setdefault(f"write, {mode}", []).append(time.perf_counter() - start)
                start = time.perf_counter()
                shardpipe.to_sharded_zarr(
                    half, path, region=region, storage_options={"fsync": False}
                )
                results.setdefault(f"update, {mode}", []).append(time.perf_counter() - start)
    encoders.task_threads = cores
    return results


def report_one_shard(results: dict[str, list[float]]) -> None:
    """Print the wall times of :func:`one_shard` and the speed-ups of the idle cores."""
    for name, seconds in results.items():
        runs = " ".join(f"{1000 * s:.0f}" for s in seconds)
        print(
            f"{name:22s} median {1000 * statistics.median(seconds):6.1f} ms  "
            f"best {1000 * min(seconds):6.1f} ms  ({runs})"
        )
    for kind in ("write", "update"):
        one, idle = results[f"{kind}, one thread"], results[f"{kind}, idle cores"]
        median = statistics.median(one) / statistics.median(idle)
        print(
            f"{kind}: one thread / idle cores: median {median:.2f}x, "
            f"best {min(one) / min(idle):.2f}x"
        )


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m benchmarks.shard_cost [tasks|one-shard|peak] [options]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", choices=["tasks", "one-shard", "peak"], default="tasks")
    parser.add_argument("--serial", action="store_true", help="peak: chunks on task threads")
    parser.add_argument(
        "--idle-cores",
        action="store_true",
        help="tasks: let shardpipe encode chunks on idle cores, as a write does",
    )
    parser.add_argument("--codec", choices=["zstd1", "none"], default="zstd1")
    parser.add_argument("--shape", type=int, nargs=3, default=[256, 1024, 1024])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--blocks", choices=["aligned", "misaligned", "slabs"], default="aligned")
    parser.add_argument("--source", choices=["views", "computed"], default="views")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    Path("benchmarks/out").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="shard-cost-", dir="benchmarks/out") as tmp:
        out = Path(tmp)
        if args.what == "tasks":
            shape = tuple(args.shape)
            print(
                f"volume noisy {shape} uint16, {np.prod(shape) * 2 / MIB:.0f} MiB, {args.codec}, "
                f"blocks {args.blocks} ({args.source})"
            )
            result = shard_tasks(
                shape,
                args.codec,
                args.threads,
                args.reps,
                out,
                blocks=args.blocks,
                source=args.source,
                idle_cores=args.idle_cores,
            )
            report_tasks(result)
            if args.json is not None:
                result["case"] = {k: v for k, v in vars(args).items() if k != "json"}
                args.json.write_text(json.dumps(result, indent=1))
        elif args.what == "peak":
            if args.serial:
                import shardpipe.engine.encoders as encoders

                encoders.task_threads = lambda: 1
            peak = peak_rss(
                tuple(args.shape),
                args.codec,
                args.threads,
                out,
                blocks=args.blocks,
                source=args.source,
            )
            print(
                f"peak {args.blocks} ({args.source}){' serial' if args.serial else ''}: "
                f"+{peak['peak_above_mib']:.1f} MiB above {peak['before_mib']:.0f} MiB"
            )
        else:
            report_one_shard(one_shard(args.reps, args.codec, out))


if __name__ == "__main__":
    main()
