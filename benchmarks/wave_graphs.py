"""How fast the client builds a 1 PiB write's wave graphs: ``python -m benchmarks.wave_graphs``.

Issue #30 item 4 asks for >= 20,000 tasks per second on one core. This plans
the 1 PiB ``uint8`` write of ``python -m benchmarks scale`` (shards
(1024,)*3, chunks (128,)*3, Dask blocks (512,)*3, ``max_mem="768MB"``, zstd-1;
nothing is written) and builds its first ``--waves`` wave graphs one after the
other (``shardpipe.engine.graph.build_write_graph``, as a write does), with
``shardpipe.wave-tasks`` at its default or ``--wave-tasks``. Each build is
timed by the wall clock and by the calling thread's CPU clock (the build runs
on that one thread; on a loaded machine the CPU clock is the figure to read).
Reported: shards and graph keys per wave, and keys per CPU second.
"""

from __future__ import annotations

import argparse
import time

import dask

SHAPE = (2**17, 2**17, 2**16)  # 2**50 bytes of uint8: 1 PiB
BLOCKS = (512,) * 3


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m benchmarks.wave_graphs [--wave-tasks N] [--waves N]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wave-tasks", type=int, default=None)
    parser.add_argument("--waves", type=int, default=3)
    args = parser.parse_args(argv)

    from zarr.codecs import ZstdCodec

    import shardpipe
    from benchmarks.scale_child import source
    from shardpipe.engine.graph import build_write_graph

    config = {"shardpipe.wave-tasks": args.wave_tasks} if args.wave_tasks else {}
    with dask.config.set(config):
        start = time.perf_counter()
        job = shardpipe.prepare_write(
            source(SHAPE, BLOCKS),
            "benchmarks/out/wave-graphs-never-written",
            shards=(1024,) * 3,
            chunks=(128,) * 3,
            max_mem="768MB",
            compressors=[ZstdCodec(level=1)],
        )
        print(f"prepare_write {time.perf_counter() - start:.2f} s: {job.plan!r}")
        schedule = job.wave_schedule(2)
        target, key_of = job.write_target("bench"), job.key_of()
        for number in range(args.waves):
            wave = schedule.wave(number)
            wall, cpu = time.perf_counter(), time.thread_time()
            graph = build_write_graph(
                job.source,
                job.plan,
                target,
                key_of,
                f"bench-w{number}",
                in_process=True,
                wave=wave,
                threads=2,
            )
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            keys = len(graph.result.__dask_graph__())
            print(
                f"wave {number}: {wave.n_shards} shards, {keys} graph keys, {wall:.2f} s wall, "
                f"{cpu:.2f} s CPU: {keys / cpu:,.0f} keys per CPU second"
            )


if __name__ == "__main__":
    main()
