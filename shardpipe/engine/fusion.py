"""Compute each block that feeds a single task inside that task.

:func:`~shardpipe.engine.graph.build_write_graph` takes the source's blocks as
tasks of their own (``arr.to_delayed()``). On ``distributed`` such a block is
computed wherever the scheduler likes, and must then reach the task that
encodes it; the scheduler's work stealing moves these consumers to idle
workers, taking their 8 MiB blocks along (seen in the workers' transfer logs
on a LocalCluster of two processes). Fused, a block exists only inside the
task that encodes it, so it never travels; the scheduler and the workers
handle one task per shard instead of two (a few milliseconds of event-loop
time each on a worker, measured), and a block is freed as soon as its task
ends.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import partial
from typing import Any

from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from shardpipe.engine.heap import run_in_heap_scope
from shardpipe.internals.dask_task_spec import Alias, DataNode, GraphNode, Task, TaskRef


def fuse_blocks(
    result: Delayed, publishing: Sequence[Delayed], block_keys: Collection[Any], token: str
) -> tuple[Delayed, list[Delayed]] | None:
    """Inline every block that feeds a single task into that task.

    The fused task keeps the consumer's key and runs the block's task inline,
    then the consumer's function, all inside
    :func:`~shardpipe.engine.heap.heap_buffers` (where the block is allocated and
    freed). The block's own dependencies become the fused task's. A block
    feeding several tasks (pieces of a misaligned block) stays a task of its
    own, computed once; so does one whose key is reached through an alias
    that something else uses too.

    Parameters
    ----------
    result : Delayed
        The write's result; its graph holds every task of the write.
    publishing : sequence of Delayed
        The publishing tasks, which must stay addressable by their keys.
    block_keys : collection
        Keys of the source array's blocks.
    token : str
        Unique id of the write: the fused graph is one layer named after it.

    Returns
    -------
    (Delayed, list of Delayed) or None
        ``result`` and ``publishing`` over the fused graph, or None when
        nothing was fused, or when the graph's layers carry different
        annotations (which one layer could not keep).
    """
    hlg = result.__dask_graph__()
    if not isinstance(hlg, HighLevelGraph):
        return None
    same, annotations = _common_annotations(hlg)
    if not same:
        return None
    dsk: dict[Any, Any] = dict(hlg)
    dependents: dict[Any, list[Any]] = {}
    for key, node in dsk.items():
        if not isinstance(node, GraphNode):  # a persisted block's future: no dependencies
            continue
        for dep in node.dependencies:
            dependents.setdefault(dep, []).append(key)
    inlined: dict[Any, dict[Any, Any]] = {}
    for block in block_keys:
        users = dependents.get(block, [])
        if len(users) != 1 or not isinstance(dsk[users[0]], Task):
            continue
        chain = _single_use_chain(dsk, dependents, block)
        if chain is not None:
            inlined.setdefault(users[0], {})[block] = chain
    if not inlined:
        return None
    for key, subs in inlined.items():
        fused = dsk[key].substitute({block: dsk[chain[-1]] for block, chain in subs.items()})
        # a root task for distributed's scheduler, as the block's task was
        root = any(dsk[chain[-1]].data_producer for chain in subs.values())
        for chain in subs.values():
            for gone in chain:
                del dsk[gone]
        dsk[key] = in_scope(fused, root)
    name = f"shardpipe-write-{token}"
    graph = HighLevelGraph({name: MaterializedLayer(dsk, annotations)}, {name: set()})
    return (
        Delayed(result.key, graph, layer=name),
        [Delayed(task.key, graph, layer=name) for task in publishing],
    )


def _single_use_chain(
    dsk: Mapping[Any, Any], dependents: Mapping[Any, list[Any]], block: Any
) -> list[Any] | None:
    """Keys from ``block`` through its aliases to the task computing it (or its data), or None.

    None when that is neither, or when the task or an alias on the way is
    used by anything else (it then stays, computed once).
    """
    chain = [block]
    node = dsk.get(block)
    while isinstance(node, Alias):
        target = node.target
        if target not in dsk or len(dependents.get(target, [])) != 1:
            return None
        chain.append(target)
        node = dsk[target]
    return chain if isinstance(node, Task | DataNode) else None


def in_scope(node: Task, root: bool) -> Task:
    """``node`` run inside :func:`~shardpipe.engine.heap.heap_buffers`, nested blocks included."""
    keys = tuple(sorted(node.dependencies, key=str))
    return Task(
        node.key,
        partial(run_in_heap_scope, node, keys),
        *(TaskRef(key) for key in keys),
        _data_producer=root,
    )


def _common_annotations(hlg: HighLevelGraph) -> tuple[bool, Mapping[str, Any] | None]:
    """Whether every layer of ``hlg`` has the same annotations, and which (None: none)."""
    values = [layer.annotations or None for layer in hlg.layers.values()]
    first = values[0] if values else None
    return all(value == first for value in values), first
