"""Hold back the reading of blocks until the parts fed by earlier blocks are written.

When parts of shards are gathered from several blocks (slabs into cubes: a
part needs every slab of its inner chunks' depth), a part can only be
written once its last block is read, and until then its earlier blocks (or
the pieces cut from them) wait in memory. Dask orders a graph to finish one
publishing task after another: for slabs shared by every shard of a layer,
that means reading *every* block of the wave before the first shard is
done, and holding them all (a one-pass rechunk of 512 MiB of slabs held
512 MiB). ``max_mem`` bounds each task, not that.

:func:`gate_reads` adds the order the data needs: blocks are read in C
order, and block ``i`` is read only once every part whose blocks all come
at or before block ``i - read_ahead`` is written. Reads run ahead of the
written parts by ``read_ahead`` blocks (enough to keep every thread busy)
and no further, so what waits in memory is what the parts being gathered
need (their blocks) plus ``read_ahead`` blocks. The order is a chain of
no-op ``read-gate`` tasks, one per block::

    read-gate i  <-  parts whose last block is i - read_ahead, read-gate i - 1
    block i      <-  read-gate i

No cycle can form: a part only waits for blocks, and block ``i`` only for
parts of blocks before ``i``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import dask.config
from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
from dask.system import CPU_COUNT

from shardpipe.core.grid import Coords
from shardpipe.internals.dask_task_spec import Alias, Task, TaskRef

__all__ = ["add_read_gates", "computing_task", "gate_reads", "read_ahead"]


def read_ahead(threads: int | None) -> int:
    """Blocks reads may run ahead of the written parts: one per worker thread.

    ``threads`` are those of a ``distributed`` cluster; None means Dask's
    local schedulers (``num_workers`` in Dask's config, else the cores).
    """
    if threads is None:
        threads = dask.config.get("num_workers", None) or CPU_COUNT
    return max(1, int(threads))


def gate_reads(
    result: Delayed,
    publishing: Sequence[Delayed],
    block_keys: Mapping[Coords, Any],
    consumers: Iterable[tuple[Any, tuple[Coords, ...]]],
    read_ahead: int,
    token: str,
) -> tuple[Delayed, list[Delayed]] | None:
    """``result`` and ``publishing`` over a graph whose block reads wait for earlier parts.

    Parameters
    ----------
    result : Delayed
        The write's result; its graph holds every task of the write.
    publishing : sequence of Delayed
        The publishing tasks, which must stay addressable by their keys.
    block_keys : mapping
        Key of each source block in the graph, by its block coordinates.
    consumers : iterable of (key, blocks)
        The tasks that write a part (or a whole shard) and the blocks feeding
        each: once such a task is done, nothing of those blocks is needed for it.
    read_ahead : int
        How many blocks reads may run ahead of the written parts (at least 1).
    token : str
        Unique id of the write: the gated graph is one layer named after it.

    Returns
    -------
    (Delayed, list of Delayed) or None
        None when no block can be held back (every part is fed by one block,
        or the graph's layers carry different annotations).
    """
    hlg = result.__dask_graph__()
    if not isinstance(hlg, HighLevelGraph):
        return None
    annotations = [layer.annotations or None for layer in hlg.layers.values()]
    if any(a != annotations[0] for a in annotations):
        return None
    dsk: dict[Any, Any] = dict(hlg)
    if not add_read_gates(dsk, block_keys, consumers, read_ahead, token):
        return None
    name = f"shardpipe-gated-{token}"
    graph = HighLevelGraph({name: MaterializedLayer(dsk, annotations[0])}, {name: set()})
    return (
        Delayed(result.key, graph, layer=name),
        [Delayed(task.key, graph, layer=name) for task in publishing],
    )


def add_read_gates(
    dsk: dict[Any, Any],
    block_keys: Mapping[Coords, Any],
    consumers: Iterable[tuple[Any, tuple[Coords, ...]]],
    read_ahead: int,
    token: str,
    *,
    order: Sequence[Coords] | None = None,
    only_gathering: bool = True,
    whole_blocks: Collection[Any] | None = None,
) -> bool:
    """Add the ``read-gate`` chain of ``block_keys`` to the graph ``dsk`` (changed in place).

    Parameters are those of :func:`gate_reads`; ``token`` names the chain's
    tasks (one chain per token); ``order`` is the order blocks are read in
    (default: C order of their coordinates). Returns False, leaving ``dsk`` as it was,
    when there are no blocks or, with ``only_gathering``, when every consumer
    is fed by one block (without it, blocks feeding several consumers are
    gated too: their consumers finish out of order otherwise).

    A block's task is what waits for its gate; with ``whole_blocks``, every
    task of the block's computation that no block before it needs waits (the
    first of them: the others wait for those), the source's graph walked up
    to the keys in ``whole_blocks`` (blocks gated by other chains). A source
    whose blocks are computed by several tasks each (``map_blocks`` over
    ``da.random``, not fused) would otherwise compute the first ones of
    every block at once.
    """
    read_ahead = max(1, read_ahead)
    order = sorted(block_keys) if order is None else list(order)
    index = {coords: i for i, coords in enumerate(order)}
    ending: dict[int, list[Any]] = {}
    gathers = False
    for key, blocks in consumers:
        gathers = gathers or len(blocks) > 1
        ending.setdefault(max(index[b] for b in blocks), []).append(key)
    if not order or (only_gathering and not gathers):
        return False
    gated: set[Any] = set()
    seen: set[Any] = set()  # tasks of blocks before (with whole_blocks)
    previous: Any = None
    for i, coords in enumerate(order):
        computing = computing_task(dsk, block_keys[coords])
        waiting = [computing] if computing is not None else []
        if whole_blocks is not None and computing is not None:
            waiting = _first_new_tasks(dsk, computing, seen, whole_blocks)
        if i < read_ahead:
            gated.update(waiting)
            continue
        gate = (f"read-gate-{token}", i)
        deps = [*ending.get(i - read_ahead, []), *([previous] if previous is not None else [])]
        dsk[gate] = Task(gate, _passed, *(TaskRef(d) for d in deps))
        previous = gate
        for key in waiting:
            if key not in gated:
                gated.add(key)
                dsk[key] = _gated(dsk[key], gate)
    return True


def _gated(node: Task, gate: Any) -> Task:
    """``node`` (same key) waiting for ``gate`` besides its dependencies."""
    keys = tuple(sorted(node.dependencies, key=str))
    return Task(
        node.key,
        partial(_after_gate, node, keys),
        *(TaskRef(k) for k in keys),
        TaskRef(gate),
        _data_producer=node.data_producer,
    )


def _first_new_tasks(
    dsk: Mapping[Any, Any], start: Any, seen: set[Any], stop: Collection[Any]
) -> list[Any]:
    """The tasks computing ``start`` not in ``seen`` whose inputs all are: the first to run.

    Walks ``start``'s dependencies (not past ``seen`` or ``stop``) and adds
    every key it meets to ``seen``.
    """
    new: list[Any] = []
    stack = [start]
    while stack:
        key = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        node = dsk.get(key)
        if node is None:
            continue
        new.append(key)
        stack.extend(d for d in node.dependencies if d not in seen and d not in stop)
    tasks = {k for k in new if isinstance(dsk[k], Task)}  # data (a view, say) runs nothing
    return [k for k in new if k in tasks and not (dsk[k].dependencies & tasks)]


def computing_task(dsk: Mapping[Any, Any], key: Any) -> Any:
    """The key of the task that computes ``key`` (through aliases), or None if no task does."""
    node = dsk.get(key)
    while isinstance(node, Alias):
        key = node.target
        node = dsk.get(key)
    return key if isinstance(node, Task) else None


def _passed(*done: Any) -> None:
    """A ``read-gate`` task: done once its inputs are."""
    return None


def _after_gate(node: Task, keys: tuple[Any, ...], /, *values: Any) -> Any:
    """Run the block's own task on its dependencies' values (the gate's value is last)."""
    return node(dict(zip(keys, values[: len(keys)], strict=True)))
