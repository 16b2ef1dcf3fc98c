"""How fast the client builds a 1 PiB write's wave graphs: ``python -m benchmarks.wave_graphs``.

Issue #30 item 4 asks for >= 20,000 tasks per second on one core. This plans
the 1 PiB ``uint8`` write of ``python -m benchmarks scale`` (shards
(1024,)*3, chunks (128,)*3, Dask blocks (512,)*3, ``max_mem="768MB"``, zstd-1;
nothing is written) and builds its first ``--waves`` wave graphs one after the
other (``shardpipe.engine.graph.build_write_graph``, as a write does), with
``shardpipe.wave-tasks`` at its default or ``--wave-tasks`` (a wave holds an
eighth of it), keeping the last two graphs alive as a streamed write keeps
two waves on the scheduler. Each build is timed by the wall clock and by the
calling thread's CPU clock (the build runs on that one thread; on a loaded
machine the CPU clock is the figure to read); so is the whole loop, which
also counts what the garbage collector does between builds. Each graph is
then pickled (``pickle.dumps`` of its tasks, as ``distributed`` sends a graph
to the scheduler), timed apart: the client's other cost per task.

Reported: shards and graph keys per wave, keys per CPU second, and how many
workers the client keeps fed at that rate, each writing ``--worker-mbps``
(450) MB/s of raw data: a worker takes ``tasks per shard`` x ``MB/s`` /
``MB per shard`` tasks a second. ``--json PATH`` also writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from pathlib import Path
from typing import Any

import dask

SHAPE = (2**17, 2**17, 2**16)  # 2**50 bytes of uint8: 1 PiB
BLOCKS = (512,) * 3


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m benchmarks.wave_graphs [--wave-tasks N] [--waves N] ...``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wave-tasks", type=int, default=None)
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--worker-mbps", type=float, default=450.0)
    parser.add_argument("--no-pickle", action="store_true", help="skip timing the pickling")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    from zarr.codecs import ZstdCodec

    import shardpipe
    from benchmarks.scale_child import source
    from shardpipe.engine.graph import build_write_graph

    config = {"shardpipe.wave-tasks": args.wave_tasks} if args.wave_tasks else {}
    waves: list[dict[str, Any]] = []
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
        in_flight: list[Any] = []
        loop_wall, loop_cpu = time.perf_counter(), time.thread_time()
        pickle_cpu = 0.0
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
            row: dict[str, Any] = {
                "wave": number,
                "shards": wave.n_shards,
                "keys": keys,
                "wall_s": wall,
                "cpu_s": cpu,
                "keys_per_cpu_s": keys / cpu,
            }
            if not args.no_pickle:
                before = time.thread_time()
                row["pickle_bytes"] = len(pickle.dumps(dict(graph.result.__dask_graph__()), 5))
                row["pickle_cpu_s"] = time.thread_time() - before
                pickle_cpu += row["pickle_cpu_s"]
            waves.append(row)
            in_flight = [*in_flight, graph][-2:]
            pickled = (
                f", pickled in {row['pickle_cpu_s']:.2f} CPU s ({row['pickle_bytes'] / 1e6:.1f} MB)"
                if "pickle_cpu_s" in row
                else ""
            )
            print(
                f"wave {number}: {wave.n_shards} shards, {keys} graph keys, {wall:.2f} s wall, "
                f"{cpu:.2f} s CPU: {keys / cpu:,.0f} keys per CPU second{pickled}"
            )
        loop_wall = time.perf_counter() - loop_wall
        loop_cpu = time.thread_time() - loop_cpu - pickle_cpu
    summary = _summary(job.plan, waves, loop_cpu, args.worker_mbps)
    print(
        f"whole loop, builds and what runs between them (pickling not counted): "
        f"{loop_cpu:.2f} CPU s, {summary['keys_per_cpu_s_loop']:,.0f} keys per CPU second"
    )
    print(
        f"a worker at {args.worker_mbps:.0f} MB/s takes {summary['worker_tasks_per_s']:.2f} "
        f"tasks/s ({summary['tasks_per_shard']:.0f} per shard of "
        f"{summary['shard_mb']:,.0f} MB): building alone feeds "
        f"{summary['workers_fed_building']:,.0f} workers"
        + (
            f", building and pickling {summary['workers_fed_building_and_pickling']:,.0f}"
            if "workers_fed_building_and_pickling" in summary
            else ""
        )
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "load_average": os.getloadavg(),
            "plan": repr(job.plan),
            "waves": waves,
            "loop_wall_s": loop_wall,
            "loop_cpu_s": loop_cpu,
            **summary,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")


def _summary(
    plan: Any, waves: list[dict[str, Any]], loop_cpu: float, worker_mbps: float
) -> dict[str, float]:
    """Keys per CPU second over all waves, and the workers that rate feeds."""
    keys = sum(w["keys"] for w in waves)
    build_cpu = sum(w["cpu_s"] for w in waves)
    shard_mb = plan.nbytes_in / plan.n_shards / 1e6
    tasks_per_shard = plan.num_tasks / plan.n_shards
    worker_tasks = worker_mbps / shard_mb * tasks_per_shard
    out = {
        "keys_per_cpu_s": keys / build_cpu,
        "keys_per_cpu_s_loop": keys / loop_cpu,
        "shard_mb": shard_mb,
        "tasks_per_shard": tasks_per_shard,
        "worker_tasks_per_s": worker_tasks,
        "workers_fed_building": keys / build_cpu / worker_tasks,
    }
    if all("pickle_cpu_s" in w for w in waves):
        pickled = keys / (build_cpu + sum(w["pickle_cpu_s"] for w in waves))
        out["keys_per_cpu_s_building_and_pickling"] = pickled
        out["workers_fed_building_and_pickling"] = pickled / worker_tasks
    return out


if __name__ == "__main__":
    main()
