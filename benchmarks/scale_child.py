"""The child processes of ``python -m benchmarks scale`` (:mod:`benchmarks.scale`).

``python -m benchmarks.scale_child MODE OPTIONS-JSON``, one mode per process:

* ``plan``: ``shardpipe.prepare_write`` of a lazy source to a local path
  (nothing is written) and ``repr(job)``; prints times, CPU, peak RSS and
  what the job says of itself;
* ``start``: prints ``{"event": "calling", "time": ...}``, then starts
  ``shardpipe.to_sharded_zarr`` of a lazy source to a local path; the parent
  watches the folder and this process's memory, and kills it;
* ``null``: one small warm-up write, then ``to_sharded_zarr`` of a lazy
  source into the counting null store (:mod:`shardpipe.testing.null_store`),
  timed; prints time, CPU, bytes and what the store counted.

Every mode prints one JSON object on its last line of stdout. The source
(:func:`source`) is a ``map_blocks`` array: each block is copied, plane by
plane, out of a small seeded periodic table (a smooth field, a per-plane
offset and 2-bit noise), so a block costs about one ``memcpy``; zstd-1 keeps
about 65 % of its (128, 128, 128) inner chunks (61 planes of 16 KiB between
repeats outrun zstd-1's window). Its values depend on the coordinates only.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.child import process_cpu_seconds, rss

PERIOD = (61, 251, 257)  # the table's period in z, y, x: primes; 61 planes outrun zstd-1's window


@functools.lru_cache(maxsize=2)
def pattern(seed: int, block_yx: tuple[int, int]) -> np.ndarray:
    """The periodic table, extended by one block in y and x so that any window is a slice.

    About 36 MB for (512, 512) blocks; made once per process, never sent in a graph.
    """
    pz, py, px = PERIOD
    rng = np.random.default_rng(seed)
    two_pi = np.float32(2 * np.pi)
    y = np.arange(py, dtype=np.float32)[:, None] / np.float32(py)
    x = np.arange(px, dtype=np.float32)[None, :] / np.float32(px)
    field = np.sin(two_pi * (y + 0.1)) * np.cos(two_pi * (x + 0.3))
    field += 0.5 * np.sin(two_pi * (x + y))
    smooth = ((field + 1.5) * np.float32(15)).astype(np.uint8)  # 0..45
    offset = (np.arange(pz, dtype=np.uint8) * 7 % 40)[:, None, None]
    noise = rng.integers(0, 4, size=PERIOD, dtype=np.uint8)
    base = smooth[None] + offset + noise
    return np.pad(base, ((0, 0), (0, block_yx[0]), (0, block_yx[1])), mode="wrap")


def fill(
    block_id: tuple[int, ...] | None = None,
    array_shape: tuple[int, ...] = (),
    block_shape: tuple[int, ...] = (),
    seed: int = 0,
) -> np.ndarray:
    """One block of the source: the table's window at the block's place, plane by plane."""
    assert block_id is not None
    start = [i * b for i, b in zip(block_id, block_shape, strict=True)]
    shape = tuple(min(b, n - s) for b, n, s in zip(block_shape, array_shape, start, strict=True))
    table = pattern(seed, (block_shape[1], block_shape[2]))
    oy, ox = start[1] % PERIOD[1], start[2] % PERIOD[2]
    out = np.empty(shape, dtype=np.uint8)
    for i in range(shape[0]):
        out[i] = table[(start[0] + i) % PERIOD[0], oy : oy + shape[1], ox : ox + shape[2]]
    return out


def source(shape: tuple[int, ...], blocks: tuple[int, ...], seed: int = 0) -> Any:
    """The lazy ``uint8`` source of ``shape`` in Dask blocks of ``blocks`` (one graph layer)."""
    import dask.array as da

    chunks = tuple(
        (b,) * (n // b) + ((n % b,) if n % b else ()) for n, b in zip(shape, blocks, strict=True)
    )
    return da.map_blocks(
        fill,
        dtype=np.uint8,
        chunks=chunks,
        meta=np.empty((0,) * len(shape), dtype=np.uint8),
        array_shape=tuple(shape),
        block_shape=tuple(blocks),
        seed=seed,
    )


def job_facts(job: Any) -> dict[str, Any]:
    """What the job says of its size and waves, where it says it (that API is changing).

    Wave size: ``job.wave_shards`` or ``job.plan.wave_shards`` if there is
    one, else ``job.wave_schedule()``'s ``max_shards`` (and ``n_waves``),
    with the default wave-task budget and this machine's threads.
    """
    facts: dict[str, Any] = {}
    plan = getattr(job, "plan", None)
    for owner, names in (
        (plan, ("n_shards", "n_multipart_shards", "n_parts", "num_tasks", "nbytes_in")),
        (plan, ("nbytes_out_max", "wave_shards", "n_waves")),
        (job, ("wave_shards", "n_waves", "wave_tasks")),
    ):
        for name in names:
            try:
                value = getattr(owner, name, None)
            except Exception as err:  # a property that cannot answer
                value = f"error: {err!r}"
            if isinstance(value, int | float | str) and facts.get(name) is None:
                facts[name] = value
    try:  # the lead's wave schedule, where the job has one
        schedule = job.wave_schedule()
        facts.setdefault("wave_shards", min(schedule.max_shards, facts.get("n_shards") or 2**62))
        facts.setdefault("n_waves", schedule.n_waves)
    except Exception as err:
        facts.setdefault("wave_schedule", f"unknown: {err!r}")
    return facts


def layout(options: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of the write that the modes share (CRC32C is added by default)."""
    from zarr.codecs import ZstdCodec

    return {
        "shards": tuple(options["shards"]),
        "chunks": tuple(options["chunks"]),
        "max_mem": options["max_mem"],
        "compressors": [ZstdCodec(level=options["zstd_level"])],
    }


def plan(options: dict[str, Any]) -> dict[str, Any]:
    """Plan the write and print the job; time both."""
    import shardpipe

    base = rss()
    src = source(tuple(options["shape"]), tuple(options["blocks"]), options["seed"])
    with tempfile.TemporaryDirectory(dir=options.get("scratch")) as folder:
        cpu, start = process_cpu_seconds(), time.perf_counter()
        job = shardpipe.prepare_write(src, os.path.join(folder, "plan.zarr"), **layout(options))
        planned = time.perf_counter()
        text = repr(job)
        shown = time.perf_counter()
        cpu = process_cpu_seconds() - cpu
        facts = job_facts(job)
    return {
        "plan_s": planned - start,
        "repr_s": shown - planned,
        "cpu_s": cpu,
        "baseline_rss": base,
        "peak_rss": rss("VmHWM"),
        "repr": text,
        "facts": facts,
    }


def start(options: dict[str, Any]) -> dict[str, Any]:
    """Start the write to ``options["path"]``; the parent kills this process."""
    import dask

    import shardpipe

    src = source(tuple(options["shape"]), tuple(options["blocks"]), options["seed"])
    print(json.dumps({"event": "calling", "time": time.time(), "rss": rss()}), flush=True)
    with dask.config.set(scheduler="threads"):
        shardpipe.to_sharded_zarr(src, options["path"], **layout(options))
    return {"event": "finished", "time": time.time(), "peak_rss": rss("VmHWM")}


def null(options: dict[str, Any]) -> dict[str, Any]:
    """Write into the counting null store: a warm-up, then the timed write."""
    import dask

    import shardpipe
    from shardpipe.testing.null_store import NullShardStore, null_target

    shape, blocks = tuple(options["shape"]), tuple(options["blocks"])
    with dask.config.set(scheduler="threads"):
        small = tuple(min(n, 2 * c) for n, c in zip(shape, options["chunks"], strict=True))
        warm = {**layout(options), "shards": small}
        shardpipe.to_sharded_zarr(source(small, small), null_target(), **warm)
        facts = job_facts(
            shardpipe.prepare_write(source(shape, blocks), null_target(), **layout(options))
        )
        target = null_target()
        src = source(shape, blocks, options["seed"])
        cpu, begin = process_cpu_seconds(), time.perf_counter()
        shardpipe.to_sharded_zarr(src, target, **layout(options))
        seconds = time.perf_counter() - begin
        cpu = process_cpu_seconds() - cpu
    store = target.shards
    assert isinstance(store, NullShardStore)
    counts = store.counts
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "nbytes": math.prod(shape),
        "stored_nbytes": counts.nbytes,
        "objects": counts.objects,
        "parts": counts.parts,
        "threads": dask.config.get("num_workers", None) or os.cpu_count(),
        "peak_rss": rss("VmHWM"),
        "facts": facts,
    }


MODES = {"plan": plan, "start": start, "null": null}


def main(argv: list[str] | None = None) -> int:
    """Run one mode with the options given as JSON; print its JSON record."""
    mode, options = (argv if argv is not None else sys.argv[1:])[:2]
    record = MODES[mode](json.loads(options))
    print(json.dumps(record, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
