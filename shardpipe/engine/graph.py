"""Turn a :class:`~shardpipe.core.plan.WritePlan` into a Dask graph.

The tasks are made directly (Dask's ``Task``, taken from
``shardpipe.internals.dask_task_spec``, over the tasks of the source's blocks:
:mod:`shardpipe.engine.source_blocks`), so the graph
runs on any Dask scheduler and building it costs no ``dask.delayed`` call
per task. Task names read well on the dashboard::

    encode-piece   a block encodes the inner chunks it holds of a part
    write-shard    a shard that fits one task: encode (or gather) and publish
    write-shards   several small shards' write-shard tasks run as one (distributed)
    update-shard   an existing shard: merge, encode, change it (in place, append, rewrite)
    create-array   write the array's metadata (graphs from ``to_delayed`` only)
    begin-shard    start a shard written in parts (staging / multipart upload)
    write-part     encode (or gather) one part of a large shard and write it
    stamp-shard    write a large shard's index and publish it atomically
    merge-changes  add up reports and merge their Icechunk forks, 16 at a time
    write-done     remove the staging area, add up the reports

On a transactional backend (an Icechunk session) each publishing task
writes through its own fork of the session
(:func:`~shardpipe.engine.publish_tasks.collecting_changes`) and its report carries the
fork back; ``merge-changes`` tasks merge them in a tree on the workers, so
the client receives at most :data:`MERGE_FAN_IN` merged forks per graph.

A graph covers the whole write, or one wave of it (a box of shards:
:mod:`shardpipe.core.waves`). Dask culls the source's graph to the blocks
feeding the graph's shards: no step walks every block of the array. The
shards' plans are made once per class of shards alike up to a translation
(:meth:`~shardpipe.core.plan.WritePlan.shards_in`).

A block that feeds a single task is computed inside that task
(:func:`~shardpipe.engine.fusion.fuse_blocks`): on ``distributed`` it is then born
on the worker that encodes it, so no block travels between workers, and the
scheduler handles one task per shard instead of two. Where no read gate
(:mod:`shardpipe.engine.read_gates`) is needed, the tasks are fused as they
are made, with no pass over the finished graph: the same graph, made at
about 25,000 tasks per second of one core, a wave of a petabyte write
(``python -m benchmarks.wave_graphs``). Every task runs inside
:func:`~shardpipe.engine.heap.heap_buffers`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import dask.array as da
from dask.base import get_annotations
from dask.delayed import Delayed, delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from shardpipe.core.grid import Box, Coords
from shardpipe.core.plan import PartPlan, WritePlan
from shardpipe.core.pyramid_hold import source_places
from shardpipe.core.waves import Wave
from shardpipe.engine.collector import collector_paused
from shardpipe.engine.fusion import fuse_blocks, in_scope
from shardpipe.engine.heap import in_heap_scope
from shardpipe.engine.publish_tasks import (
    begin_shard,
    collecting_changes,
    finish_write,
    stamp_shard,
    write_part,
    write_shard,
)
from shardpipe.engine.pyramid_gates import BlockConsumers
from shardpipe.engine.read_gates import gate_reads, read_ahead
from shardpipe.engine.reports import WriteReport, add_reports
from shardpipe.engine.source_blocks import SourceBlocks
from shardpipe.engine.task_groups import group_publishing, shards_per_task
from shardpipe.engine.tasks import WriteTarget, encode_piece
from shardpipe.engine.update_tasks import UpdateTarget, update_shard
from shardpipe.internals.dask_task_spec import Alias, DataNode, GraphNode, Task, TaskRef

PUBLISHING_TASKS = ("write-shard", "update-shard", "stamp-shard")
"""Names of the tasks after which a shard is complete at its key."""

MERGE_FAN_IN = 16
"""Reports (and Icechunk forks) one ``merge-changes`` task adds up."""


@dataclass(frozen=True)
class WriteGraph:
    """The delayed result of a write and the keys of its publishing tasks.

    Parameters
    ----------
    result : Delayed
        Computes to a :class:`~shardpipe.engine.reports.WriteReport` for the whole array.
    publishing : list of Delayed
        One per shard, or per group of shards (:mod:`shardpipe.engine.task_groups`,
        and the ``merge-changes`` tree of a transactional write): done once
        its shards are at their keys; computes to their report.
    n_shards : int
        Shards the graph writes.
    blocks : BlockConsumers or None
        For a graph whose source's blocks other graphs computed with it take
        too (``shared_source``): the blocks and the tasks taking them, for
        read gates over all the graphs (:mod:`shardpipe.engine.pyramid_gates`).
    """

    result: Delayed
    publishing: list[Delayed]
    n_shards: int
    blocks: BlockConsumers | None = None


@collector_paused()
def build_write_graph(
    arr: da.Array,
    plan: WritePlan,
    target: WriteTarget | UpdateTarget | Delayed,
    key_of: Callable[[Coords], str],
    token: str,
    *,
    in_process: bool = False,
    update: bool = False,
    skip: frozenset[Coords] = frozenset(),
    threads: int | None = None,
    wave: Wave | None = None,
    shared_source: bool = False,
) -> WriteGraph:
    """Build the Dask graph that writes ``arr`` according to ``plan``.

    Parameters
    ----------
    arr : dask.array.Array
        The source; its block grid is ``plan.blocks``.
    plan : WritePlan
        The plan.
    target : WriteTarget or Delayed
        Where and how to write; shipped once to each worker. A ``Delayed``
        that computes to the target (after writing the metadata, say) makes
        every task wait for it.
    key_of : callable
        Maps shard grid coordinates to the shard's storage key.
    token : str
        Unique id of this write, used in task names.
    in_process : bool
        The graph will run on a scheduler inside this process (threads or
        synchronous), where nothing travels between workers: a part's task
        then cuts the blocks feeding it itself, with no ``encode-piece``
        tasks in between, wherever the plan says holding them fits the budget.
    update : bool
        The array exists: each shard is changed by one ``update-shard``
        task (``target`` is then an :class:`~shardpipe.engine.update_tasks.UpdateTarget`),
        which needs every shard to be a single part.
    skip : frozenset of shard coordinates
        Shards not to write (complete already, when a job resumes).
    threads : int, optional
        Worker threads of the ``distributed`` cluster the graph will run on:
        small shards are then written several per task
        (:mod:`shardpipe.engine.task_groups`).
    wave : Wave, optional
        Write only this box of shards (``token`` should then name the wave).
    shared_source : bool
        The source's blocks also feed other graphs computed together with
        this one (the levels of a pyramid, :mod:`shardpipe.engine.pyramid`):
        they keep their keys (the source's graph is not optimised) and stay
        tasks of their own, not fused into this write's tasks, so that each
        is computed once for every graph; the result's ``blocks`` says which
        tasks take them, for read gates over all the graphs
        (:func:`~shardpipe.engine.pyramid_gates.gate_levels`).

    Python's cyclic garbage collector is paused while the graph is built
    (:mod:`shardpipe.engine.collector`).
    """
    ranges = plan.placement.shard_ranges if wave is None else wave.ranges
    shards = list(plan.shards_in(ranges, skip=skip))
    uses: dict[Coords, int] = {}
    gathers = False
    for shard in shards:
        if update and not shard.is_single_part:
            raise ValueError(f"shard {shard.coords}: updates are written in one part")
        for part in shard.parts:
            gathers = gathers or len(part.blocks) > 1
            for b in part.blocks:
                uses[b] = uses.get(b, 0) + 1
    blocks = SourceBlocks(arr, plan, wave, uses.keys(), token, optimize=not shared_source)
    transactional = (
        isinstance(target, WriteTarget | UpdateTarget) and target.store.abilities.transactional
    )

    def publisher(func: Callable[..., Any]) -> Callable[..., Any]:
        return partial(collecting_changes, func) if transactional else func

    target_d = (
        target
        if isinstance(target, Delayed)
        else delayed(target, name=f"write-target-{token}", traverse=False)
    )
    piece_target = target_d
    if isinstance(target, UpdateTarget):
        piece_target = delayed(target.write, name=f"piece-target-{token}", traverse=False)
    outside = _graphs_of(target_d)
    # a block feeding one task is computed inside it (fusion.py), here at once where
    # no read gate or differing annotations stand in the way
    fuse_now = (
        not shared_source
        and not gathers
        and _annotated_alike(outside)
        and not any(isinstance(blocks.node(b), Alias) for b in uses)
    )
    tasks = _Tasks(token, blocks, uses if fuse_now else {})
    target_ref, piece_ref = TaskRef(target_d.key), TaskRef(piece_target.key)

    boxes_of: dict[Coords, Box] = {}  # one box per block, shared by the parts it feeds

    def block_box(block: Coords) -> Box:
        box = boxes_of.get(block)
        if box is None:
            box = boxes_of[block] = plan.placement.block_box(block)
        return box

    def sources(coords: Coords, part: PartPlan) -> tuple[list[Any], tuple[Box, ...] | None]:
        """The blocks feeding a part (with their boxes), or the pieces they make."""
        if part.is_direct or (in_process and part.gather_in_task):
            return [tasks.block(b) for b in part.blocks], tuple(map(block_box, part.blocks))
        pieces = [
            tasks.add(
                encode_piece,
                "encode-piece",
                (piece_ref, tasks.block(b)),
                {"block_box": block_box(b), "shard": coords, "part": part},
            )
            for b in part.blocks
        ]
        return pieces, None

    publishing = []
    consumers: list[tuple[Any, tuple[Coords, ...]]] = []  # part tasks and their blocks
    for shard in shards:
        coords = shard.coords
        key = key_of(coords)
        if shard.is_single_part:
            part = shard.parts[0]
            deps, box = sources(coords, part)
            static = {"shard": coords, "key": key, "part": part, "block_boxes": box}
            func: Callable[..., WriteReport] = update_shard if update else write_shard
            name = "update-shard" if update else "write-shard"
            if update:
                static["coverage"] = shard.coverage
            publishing.append(tasks.add(publisher(func), name, (target_ref, *deps), static))
            consumers.append((publishing[-1].key, part.blocks))
            continue
        handle = tasks.add(begin_shard, "begin-shard", (target_ref,), {"key": key})
        reports = []
        for part in shard.parts:
            deps, box = sources(coords, part)
            static = {
                "shard": coords,
                "part": part,
                "block_boxes": box,
                "is_last": part.number == len(shard.parts) - 1,
            }
            reports.append(tasks.add(write_part, "write-part", (target_ref, handle, *deps), static))
            consumers.append((reports[-1].key, part.blocks))
        publishing.append(
            tasks.add(
                publisher(stamp_shard),
                "stamp-shard",
                (target_ref, handle, *reports),
                {"shard": coords},
            )
        )
    if piece_target is not target_d and "encode-piece" in tasks.names:
        outside += _graphs_of(piece_target)
    publishing_keys = [p.key for p in publishing]
    done_key = f"write-done-{token}"
    tasks.tasks[done_key] = Task(done_key, finish_write, target_ref, *publishing)
    if tasks.inlined:
        # what fuse_blocks would make of the graph below: one layer, blocks inside their tasks
        layer = f"shardpipe-write-{token}"
        dsk = {k: v for graph in outside for k, v in graph.items()}
        dsk.update(blocks.tasks(uses.keys(), tasks.inlined))
        dsk.update(tasks.tasks)
        graph = HighLevelGraph({layer: MaterializedLayer(dsk)}, {layer: set()})
        result = Delayed(done_key, graph, layer=layer)
        publishing_d = [Delayed(key, graph, layer=layer) for key in publishing_keys]
        return _finished(result, publishing_d, plan, len(shards), threads, token, transactional)
    layer = f"shardpipe-tasks-{token}"
    source = _source_graph(blocks, uses.keys(), token)
    graph = _with_layer([*outside, source], layer, tasks.tasks)
    result = Delayed(done_key, graph, layer=layer)
    publishing_d = [Delayed(key, graph, layer=layer) for key in publishing_keys]
    block_keys = {b: blocks.key(b) for _, fed in consumers for b in fed}
    if shared_source:
        if transactional:
            result, publishing_d = _merge_in_tree(result, publishing_d, token)
        places = source_places(plan.blocks.chunks, plan.layout.shard_shape, plan.placement.offset)
        order = tuple(sorted(block_keys, key=lambda b: int(places[b])))
        uses_d = BlockConsumers(block_keys, tuple(consumers), read_ahead(threads), order)
        return WriteGraph(result, publishing_d, len(shards), uses_d)
    gated = gate_reads(result, publishing_d, block_keys, consumers, read_ahead(threads), token)
    if gated is not None:
        result, publishing_d = gated
    fused = fuse_blocks(result, publishing_d, {blocks.key(b) for b in uses}, token)
    if fused is None:
        if transactional:
            result, publishing_d = _merge_in_tree(result, publishing_d, token)
        return WriteGraph(result, publishing_d, len(shards))
    return _finished(*fused, plan, len(shards), threads, token, transactional)


def _finished(
    result: Delayed,
    publishing: list[Delayed],
    plan: WritePlan,
    n_shards: int,
    threads: int | None,
    token: str,
    transactional: bool,
) -> WriteGraph:
    """The write graph from a fused one: small shards grouped, reports merged in a tree."""
    shard_nbytes = plan.nbytes_in // max(plan.n_shards, 1)
    per_task = shards_per_task(shard_nbytes, n_shards, threads)
    grouped = group_publishing(result, publishing, per_task, token)
    if grouped is not None:
        result, publishing = grouped
    if transactional:
        result, publishing = _merge_in_tree(result, publishing, token)
    return WriteGraph(result, publishing, n_shards)


class _Tasks:
    """The write's own tasks, made one by one, with the blocks computed inside them.

    Parameters
    ----------
    token : str
        Unique id of the write: task names end with it.
    blocks : SourceBlocks
        The source's blocks.
    uses : dict
        How many tasks use each block; a block used by one task, computed
        by a task of the source's graph that nothing else there needs, is
        computed inside the task using it (as :func:`~shardpipe.engine.fusion.fuse_blocks`
        would). Empty: every block stays a task of its own.
    """

    def __init__(self, token: str, blocks: SourceBlocks, uses: dict[Coords, int]) -> None:
        self.token = token
        self.blocks = blocks
        self.uses = uses
        self.tasks: dict[Any, Task] = {}
        self.inlined: list[Coords] = []
        self._counter = itertools.count()
        self.names: dict[str, str] = {}  # task names made, with their key prefix

    def block(self, block: Coords) -> TaskRef | GraphNode:
        """What a task takes for ``block``: the block's own task to run inside, or its key."""
        if self.uses.get(block) == 1 and not self.blocks.used_by_source(block):
            node = self.blocks.node(block)
            if isinstance(node, Task | DataNode):
                self.inlined.append(block)
                return node
        return TaskRef(self.blocks.key(block))

    def add(
        self,
        func: Callable[..., Any],
        name: str,
        args: tuple[TaskRef | GraphNode, ...],
        static: dict[str, Any],
    ) -> TaskRef:
        """One task named ``name`` calling ``func(*args, **static)``; returns a reference to it.

        Tasks are made directly (no ``dask.delayed`` call per task, which
        costs about 160 us each); static values are bound with
        ``functools.partial`` so that nothing walks through them. A task
        computing blocks inside it runs them and itself inside
        :func:`~shardpipe.engine.heap.heap_buffers`.
        """
        prefix = self.names.get(name)
        if prefix is None:
            prefix = self.names[name] = f"{name}-{self.token}"
        key = (prefix, next(self._counter))
        node = Task(key, partial(in_heap_scope, func, **static), *args)
        inside = [a for a in args if isinstance(a, GraphNode)]
        if inside:
            node = in_scope(node, any(a.data_producer for a in inside))
        self.tasks[key] = node
        return TaskRef(key)


def _graphs_of(*targets: Delayed) -> list[HighLevelGraph]:
    """The graphs of ``targets``, each once."""
    graphs: dict[int, HighLevelGraph] = {}
    for dep in targets:
        graph = dep.__dask_graph__()
        if not isinstance(graph, HighLevelGraph):
            graph = HighLevelGraph.from_collections(str(dep.key), graph)
        graphs.setdefault(id(dep), graph)
    return list(graphs.values())


def _annotated_alike(graphs: Iterable[HighLevelGraph]) -> bool:
    """Whether every layer of ``graphs`` has the annotations layers made now get."""
    now = get_annotations() or None
    return all(
        (layer.annotations or None) == now for graph in graphs for layer in graph.layers.values()
    )


def _source_graph(blocks: SourceBlocks, used: Collection[Coords], token: str) -> HighLevelGraph:
    """The source's tasks for the blocks ``used``, as a graph of their own named after ``token``."""
    if not blocks.optimized:
        return blocks.graph()
    return HighLevelGraph.from_collections(
        f"source-blocks-{token}", blocks.tasks(used), dependencies=()
    )


def _merge_in_tree(
    result: Delayed, publishing: list[Delayed], token: str
) -> tuple[Delayed, list[Delayed]]:
    """``result`` adding up the publishing reports through ``merge-changes`` tasks.

    Each adds up to :data:`MERGE_FAN_IN` reports (merging their Icechunk
    forks), level by level, until at most that many are left: those become
    the graph's publishing tasks (what a streamed run gathers) and
    ``write-done``'s inputs.
    """
    dsk: dict[Any, Any] = dict(result.__dask_graph__())
    done = dsk[result.key]
    before = {p.key for p in publishing}
    args = [a for a in done.args if not (isinstance(a, TaskRef) and a.key in before)]
    level = [p.key for p in publishing]
    counter = itertools.count()
    while len(level) > MERGE_FAN_IN:
        merged = []
        for start in range(0, len(level), MERGE_FAN_IN):
            key = (f"merge-changes-{token}", next(counter))
            group = level[start : start + MERGE_FAN_IN]
            dsk[key] = Task(key, add_reports, *(TaskRef(k) for k in group))
            merged.append(key)
        level = merged
    dsk[result.key] = Task(result.key, done.func, *args, *(TaskRef(k) for k in level))
    return Delayed(result.key, dsk), [Delayed(k, dsk) for k in level]


def _with_layer(
    graphs: Iterable[HighLevelGraph], name: str, tasks: dict[Any, Task]
) -> HighLevelGraph:
    """``graphs`` merged, with ``tasks`` as one more layer depending on all of them."""
    merged = HighLevelGraph.merge(*graphs)
    layers = {**merged.layers, name: MaterializedLayer(tasks)}
    dependencies = {**merged.dependencies, name: set(merged.layers)}
    return HighLevelGraph(layers, dependencies)
