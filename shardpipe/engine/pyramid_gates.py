"""Read gates over the levels of a pyramid, computed in one graph.

The levels of a pyramid are written in one computation
(:mod:`shardpipe.engine.pyramid`): a block of the source feeds level 0's
shards and the regions downsampled into level 1, a block of level 1 feeds
level 1's shards and level 2's regions, and so on. Dask keeps a block until
every task taking it has run, and orders such a graph to finish the deep
levels' shards first: it computed every block of the source before writing
a level-0 shard (a ``da.random`` source of 512 MiB under
``max_mem="128MB"`` held +600 MiB).

:func:`gate_levels` gives each level's blocks the order of
:mod:`shardpipe.engine.read_gates`: a chain of ``read-gate`` tasks per
level, block ``i`` of the level computed only once every task taking
blocks of the level at or before ``i - read_ahead`` is done. The tasks
taking a level's blocks are its writes' parts (:class:`BlockConsumers`,
from :func:`~shardpipe.engine.graph.build_write_graph`) and the next
level's blocks themselves (each a downsampling task, found in the graph).

Each level's blocks are ordered as they can come: level 0's as its write
says (shard by shard, or in C order:
:func:`~shardpipe.core.pyramid_hold.source_places`), a deeper level's by
the place of the last block of the level before that it takes, then in C
order (:func:`level_order`). A region finer than the blocks it is cut from
would otherwise come, in C order, before blocks it waits for, and the
chains would wait for each other. The plan counts what this order holds
(:mod:`shardpipe.core.pyramid_hold`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dask.delayed import Delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from shardpipe.core.grid import Coords
from shardpipe.engine.read_gates import add_read_gates, computing_task
from shardpipe.internals.dask_task_spec import Task, convert_legacy_graph

__all__ = ["BlockConsumers", "gate_levels", "level_order"]


@dataclass(frozen=True)
class BlockConsumers:
    """The source blocks of one write in a shared graph, and the write's tasks taking them.

    Parameters
    ----------
    keys : mapping
        Key of each block the write takes, by its block coordinates.
    consumers : tuple of (key, blocks)
        The write's tasks that take blocks (its parts, or whole shards) and
        the coordinates of the blocks each takes.
    read_ahead : int
        How many blocks reads may run ahead of the tasks taking them.
    order : tuple of Coords, optional
        The order the blocks are read in when they are not made from the
        blocks of another write (:func:`~shardpipe.core.pyramid_hold.source_places`);
        default C order.
    """

    keys: Mapping[Coords, Any]
    consumers: tuple[tuple[Any, tuple[Coords, ...]], ...]
    read_ahead: int
    order: tuple[Coords, ...] | None = None


def level_order(coords: Sequence[Coords], parents: Mapping[Coords, Sequence[int]]) -> list[Coords]:
    """The order a level's blocks are read in: by their last parent's place, then C order.

    ``parents`` gives the places (in the level before's order) of the
    blocks each block is computed from.
    """
    return sorted(coords, key=lambda c: (max(parents.get(c, ()), default=-1), c))


def gate_levels(
    publishing: Sequence[Delayed], writes: Sequence[BlockConsumers], token: str
) -> list[Delayed] | None:
    """``publishing`` over one graph in which every level's blocks go through read gates.

    Parameters
    ----------
    publishing : sequence of Delayed
        The publishing tasks of the writes computed together; their graphs
        hold every task.
    writes : sequence of BlockConsumers
        Per write: its source's blocks and the tasks taking them. Writes of
        the same source (the same block keys) are one level.
    token : str
        Unique id of the computation: the gated graph is one layer named after it.

    Returns
    -------
    list of Delayed or None
        ``publishing`` over the gated graph, with their keys; None when no
        block can be held back, or when the graphs' layers carry different
        annotations (which one layer could not keep).
    """
    if not writes:
        return None
    graph = HighLevelGraph.merge(*(p.__dask_graph__() for p in publishing))
    annotations = [layer.annotations or None for layer in graph.layers.values()]
    if any(a != annotations[0] for a in annotations):
        return None
    dsk: dict[Any, Any] = convert_legacy_graph(dict(graph))
    levels = _levels(writes)
    dependents: dict[Any, int] = {}
    for node in dsk.values():
        for dep in node.dependencies:
            dependents[dep] = dependents.get(dep, 0) + 1
    owner: dict[Any, tuple[int, Coords]] = {}
    computing: list[dict[Coords, Any]] = []
    for number, level in enumerate(levels):
        tasks = {}
        for coords, key in level.keys.items():
            task = computing_task(dsk, key)
            owner.setdefault(key, (number, coords))
            if task is not None:
                _fuse_chain(dsk, task, dependents, owner)
                owner.setdefault(task, (number, coords))
                tasks[coords] = task
        computing.append(tasks)
    # the blocks of other levels that each level's blocks are computed from
    taken: list[list[tuple[Any, tuple[Coords, ...]]]] = [[] for _ in levels]
    parents: list[dict[Coords, list[Coords]]] = [{} for _ in levels]
    parent_level: list[int | None] = [None] * len(levels)
    for number, tasks in enumerate(computing):
        for coords, task in tasks.items():
            inputs: dict[int, list[Coords]] = {}
            for dep in dsk[task].dependencies:
                found = owner.get(dep)
                if found is not None and found[0] != number:
                    inputs.setdefault(found[0], []).append(found[1])
            for source, blocks in inputs.items():
                taken[source].append((task, tuple(blocks)))
                if parent_level[number] in (None, source):
                    parent_level[number] = source
                    parents[number][coords] = blocks
    places: list[dict[Coords, int]] = [{} for _ in levels]
    gated = False
    for number in _parents_first(parent_level):
        level = levels[number]
        before = parent_level[number]
        if before is not None:
            ranked = {
                c: [places[before][b] for b in blocks] for c, blocks in parents[number].items()
            }
            order = level_order(list(level.keys), ranked)
        else:
            order = list(level.order) if level.order is not None else sorted(level.keys)
        places[number] = {c: i for i, c in enumerate(order)}
        if not computing[number]:
            continue  # data (views of an image in memory): nothing to hold back
        consumers = [*level.consumers, *taken[number]]
        added = add_read_gates(
            dsk,
            level.keys,
            consumers,
            level.read_ahead,
            f"{token}-{number}",
            order=order,
            only_gathering=False,
            whole_blocks=owner.keys(),
        )
        gated = gated or added
    if not gated:
        return None
    name = f"shardpipe-levels-{token}"
    layer = HighLevelGraph({name: MaterializedLayer(dsk, annotations[0])}, {name: set()})
    return [Delayed(p.key, layer, layer=name) for p in publishing]


def _fuse_chain(
    dsk: dict[Any, Any], key: Any, dependents: Mapping[Any, int], keep: Mapping[Any, Any]
) -> None:
    """Compute inside the task ``key`` the chain of tasks before it that nothing else takes.

    A block made by ``map_blocks`` over ``da.random`` is two tasks, the
    first holding a block of its own (float64: four times a ``uint16``
    block) until the second runs: inside one task, it is freed as soon as
    the block is made, as in a write's graph (Dask's array optimisation,
    which a graph of several writes does not get). Only a task taking one
    task (not a key in ``keep``) taken by nothing else is moved inside.

    The chain stops at the first task that cannot be moved (a block of
    another level, a value, a task others take too); the tasks moved before
    it are then in ``key``'s task, which replaces the old one either way.
    """
    node = dsk[key]
    while len(node.dependencies) == 1:
        (dep,) = node.dependencies
        before = dsk.get(dep)
        if dep in keep or not isinstance(before, Task) or dependents.get(dep, 0) != 1:
            break
        node = node.substitute({dep: before})
        del dsk[dep]
    dsk[key] = node


def _levels(writes: Sequence[BlockConsumers]) -> list[BlockConsumers]:
    """The writes grouped by their blocks: writes of one source are one level."""
    grouped: dict[frozenset[tuple[Coords, Any]], BlockConsumers] = {}
    for write in writes:
        if not write.keys:
            continue
        id_ = frozenset(write.keys.items())
        known = grouped.get(id_)
        if known is None:
            grouped[id_] = write
        else:
            grouped[id_] = BlockConsumers(
                known.keys,
                known.consumers + write.consumers,
                max(known.read_ahead, write.read_ahead),
                known.order,
            )
    return list(grouped.values())


def _parents_first(parent: Sequence[int | None]) -> list[int]:
    """The levels, each after the level its blocks are computed from."""
    out: list[int] = []
    seen: set[int] = set()

    def visit(n: int, path: frozenset[int]) -> None:
        if n in seen or n in path:
            return
        p = parent[n]
        if p is not None:
            visit(p, path | {n})
        seen.add(n)
        out.append(n)

    for n in range(len(parent)):
        visit(n, frozenset())
    return out
