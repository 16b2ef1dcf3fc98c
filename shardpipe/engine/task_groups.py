"""Several shards per task on ``distributed``, where each task has a fixed cost.

On a ``distributed`` cluster every task costs the scheduler and the worker
running it some event-loop time: measured on a LocalCluster of two
single-threaded worker processes on two cores, about 4-5 ms of CPU time per
task (scheduler, client and worker together), against about 45 ms for
writing an 8 MiB shard of zstd-1. On a small machine that time is taken from
the workers. Once every block is computed inside the task writing its shard
(:mod:`shardpipe.engine.fusion`), consecutive shards' tasks can run as one: the
group task runs them one after the other, so it holds no more memory than
the largest of them, and reports their sum.

Only tasks with no input of their own are grouped (their dependencies are
shared by other tasks: the write's target, a source array's data), so
grouping never moves data. Groups stay small enough to keep the cluster
busy: at least :data:`MIN_TASKS_PER_THREAD` tasks per worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from shardpipe.engine.reports import WriteReport
from shardpipe.internals.dask_task_spec import GraphNode, Task, TaskRef

TASK_BYTES = 16 * 2**20
"""Raw bytes a task should write at least, where shards are smaller."""

MIN_TASKS_PER_THREAD = 8
"""Tasks per worker thread below which shards are not grouped further."""


def shards_per_task(shard_nbytes: int, n_shards: int, threads: int | None) -> int:
    """How many shards of ``shard_nbytes`` raw bytes one task should write.

    Parameters
    ----------
    shard_nbytes : int
        Raw bytes of a shard (the source's bytes it holds, on average).
    n_shards : int
        Shards the write has.
    threads : int or None
        Worker threads of the cluster; None (unknown): one shard per task.
    """
    if threads is None or threads < 1 or shard_nbytes <= 0:
        return 1
    by_size = TASK_BYTES // shard_nbytes
    by_balance = n_shards // (MIN_TASKS_PER_THREAD * threads)
    return max(1, min(by_size, by_balance))


def group_publishing(
    result: Delayed, publishing: Sequence[Delayed], per_task: int, token: str
) -> tuple[Delayed, list[Delayed]] | None:
    """Run ``per_task`` consecutive publishing tasks as one, where they need nothing of their own.

    Returns the write's result and its new publishing tasks (each computes
    to the sum of its shards' reports), or None when nothing was grouped.
    The group of tasks named ``write-shard-<token>`` is named
    ``write-shards-<token>``.
    """
    if per_task < 2:
        return None
    hlg = result.__dask_graph__()
    if not isinstance(hlg, HighLevelGraph) or len(hlg.layers) != 1:
        return None  # not a graph fusion made
    ((name, layer),) = hlg.layers.items()
    dsk: dict[Any, Any] = dict(layer)
    dependents: dict[Any, int] = {}
    for node in dsk.values():
        if not isinstance(node, GraphNode):  # a persisted block's future: no dependencies
            continue
        for dep in node.dependencies:
            dependents[dep] = dependents.get(dep, 0) + 1
    runs = _runs(
        [p.key for p in publishing],
        lambda key: (
            isinstance(dsk[key], Task)
            and all(dependents.get(dep, 0) > 1 for dep in dsk[key].dependencies)
        ),
        per_task,
    )
    if all(len(run) == 1 for run in runs):
        return None
    keys = []
    for number, run in enumerate(runs):
        if len(run) == 1:
            keys.append(run[0])
            continue
        key = (f"{_prefix(run[0], token)}s-{token}", number)
        nodes = [dsk.pop(k) for k in run]
        deps = tuple(sorted(set().union(*(n.dependencies for n in nodes)), key=str))
        dsk[key] = Task(
            key,
            partial(run_group, nodes, deps),
            *(TaskRef(dep) for dep in deps),
            _data_producer=any(n.data_producer for n in nodes),
        )
        keys.append(key)
    # the result adds up the reports: of the groups now, in place of their shards'
    done = dsk[result.key]
    before = {p.key for p in publishing}
    args = [a for a in done.args if not (isinstance(a, TaskRef) and a.key in before)]
    dsk[result.key] = Task(result.key, done.func, *args, *(TaskRef(k) for k in keys))
    graph = HighLevelGraph({name: MaterializedLayer(dsk, layer.annotations)}, {name: set()})
    return Delayed(result.key, graph, layer=name), [Delayed(k, graph, layer=name) for k in keys]


def _prefix(key: Any, token: str) -> str:
    """``write-shard`` of ``("write-shard-<token>", 3)``."""
    return str(key[0] if isinstance(key, tuple) else key).removesuffix(f"-{token}")


def _runs(keys: list[Any], groupable: Any, per_task: int) -> list[list[Any]]:
    """``keys`` cut into runs of up to ``per_task`` consecutive groupable keys (others alone)."""
    runs: list[list[Any]] = []
    current: list[Any] = []
    for key in keys:
        if not groupable(key):
            if current:
                runs.append(current)
                current = []
            runs.append([key])
            continue
        current.append(key)
        if len(current) == per_task:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def run_group(nodes: Sequence[Task], keys: tuple[Any, ...], /, *values: Any) -> WriteReport:
    """Run the publishing tasks ``nodes`` one after the other; return the sum of their reports."""
    given = dict(zip(keys, values, strict=True))
    total = WriteReport()
    for node in nodes:
        report = node({dep: given[dep] for dep in node.dependencies})
        total = total + report
    return total
