"""Turn a :class:`~shardpipe.core.plan.WritePlan` into a Dask graph.

The tasks are made directly (``dask._task_spec.Task``, one graph layer over
the source's blocks from ``to_delayed``), so the graph runs on any Dask
scheduler and building it costs no ``dask.delayed`` call per task. Task
names read well on the dashboard::

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
:mod:`shardpipe.core.waves`). A wave's blocks come from the source sliced
to the box of blocks feeding it, so Dask culls the source's graph to them:
no step walks every block of the array.

A block that feeds a single task is computed inside that task
(:func:`~shardpipe.engine.fusion.fuse_blocks`): on ``distributed`` it is then born
on the worker that encodes it, so no block travels between workers, and the
scheduler handles one task per shard instead of two. Every task runs inside
:func:`~shardpipe.engine.heap.heap_buffers`.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import dask.array as da
import numpy as np
from dask._task_spec import Task, TaskRef
from dask.delayed import Delayed, delayed
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from shardpipe.core.grid import Box, Coords
from shardpipe.core.plan import PartPlan, ShardPlan, WritePlan
from shardpipe.core.waves import Wave
from shardpipe.engine.fusion import fuse_blocks
from shardpipe.engine.heap import in_heap_scope
from shardpipe.engine.publish_tasks import (
    begin_shard,
    collecting_changes,
    finish_write,
    stamp_shard,
    write_part,
    write_shard,
)
from shardpipe.engine.read_gates import gate_reads, read_ahead
from shardpipe.engine.reports import add_reports
from shardpipe.engine.source_window import read_window
from shardpipe.engine.task_groups import group_publishing, shards_per_task
from shardpipe.engine.tasks import WriteTarget, encode_piece
from shardpipe.engine.update_tasks import UpdateTarget, update_shard

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
    """

    result: Delayed
    publishing: list[Delayed]
    n_shards: int


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
        tasks of their own, neither fused into this write's tasks nor held
        behind read gates, so that each is computed once for every graph.
    """
    blocks = SourceBlocks(arr, plan, wave, optimize=not shared_source)
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
    counter = itertools.count()
    tasks: dict[Any, Task] = {}
    outside: dict[int, HighLevelGraph] = {}  # graphs of the Delayed inputs, by identity

    def ref(dep: Any) -> TaskRef:
        if isinstance(dep, Delayed):
            graph = dep.__dask_graph__()
            if not isinstance(graph, HighLevelGraph):
                graph = HighLevelGraph.from_collections(str(dep.key), graph)
            outside.setdefault(id(graph), graph)
            return TaskRef(dep.key)
        return TaskRef(dep)

    def call(func: Callable[..., Any], name: str, *deps: Any, **static: Any) -> Any:
        """One task, returning its key: ``deps`` are its inputs, ``static`` plain values.

        Tasks are made directly (no ``dask.delayed`` call per task, which
        costs about 160 us each); static values are bound with
        ``functools.partial`` so that nothing walks through them.
        """
        key = (f"{name}-{token}", next(counter))
        bound = partial(in_heap_scope, func, **static)
        tasks[key] = Task(key, bound, *(ref(dep) for dep in deps))
        return key

    boxes_of: dict[Coords, Box] = {}  # one box per block, shared by the parts it feeds

    def block_box(block: Coords) -> Box:
        box = boxes_of.get(block)
        if box is None:
            box = boxes_of[block] = plan.placement.block_box(block)
        return box

    def sources(coords: Coords, part: PartPlan) -> tuple[list[Any], tuple[Box, ...] | None]:
        """The blocks feeding a part (with their boxes), or the pieces they make."""
        if part.is_direct or (in_process and part.gather_in_task):
            boxes = tuple(block_box(b) for b in part.blocks)
            return [blocks[b] for b in part.blocks], boxes
        pieces = [
            call(
                encode_piece,
                "encode-piece",
                piece_target,
                blocks[b],
                block_box=block_box(b),
                shard=coords,
                part=part,
            )
            for b in part.blocks
        ]
        return pieces, None

    publishing = []
    consumers: list[tuple[Any, tuple[Coords, ...]]] = []  # part tasks and their blocks
    n_shards = 0
    for shard in _shards(plan, wave):
        if shard.coords in skip:
            continue
        n_shards += 1
        key = key_of(shard.coords)
        if update and not shard.is_single_part:
            raise ValueError(f"shard {shard.coords}: updates are written in one part")
        if shard.is_single_part:
            part = shard.parts[0]
            deps, box = sources(shard.coords, part)
            name, func, extra = (
                ("update-shard", update_shard, {"coverage": shard.coverage})
                if update
                else ("write-shard", write_shard, {})
            )
            publishing.append(
                call(
                    publisher(func),
                    name,
                    target_d,
                    *deps,
                    shard=shard.coords,
                    key=key,
                    part=part,
                    block_boxes=box,
                    **extra,
                )
            )
            consumers.append((publishing[-1], part.blocks))
            continue
        handle = call(begin_shard, "begin-shard", target_d, key=key)
        reports = []
        for part in shard.parts:
            deps, box = sources(shard.coords, part)
            is_last = part.number == len(shard.parts) - 1
            reports.append(
                call(
                    write_part,
                    "write-part",
                    target_d,
                    handle,
                    *deps,
                    shard=shard.coords,
                    part=part,
                    block_boxes=box,
                    is_last=is_last,
                )
            )
            consumers.append((reports[-1], part.blocks))
        publishing.append(
            call(
                publisher(stamp_shard),
                "stamp-shard",
                target_d,
                handle,
                *reports,
                shard=shard.coords,
            )
        )
    done_key = f"write-done-{token}"
    tasks[done_key] = Task(done_key, finish_write, ref(target_d), *(ref(p) for p in publishing))
    layer = f"shardpipe-tasks-{token}"
    graph = _with_layer(outside.values(), layer, tasks)
    result = Delayed(done_key, graph, layer=layer)
    publishing = [Delayed(key, graph, layer=layer) for key in publishing]
    if shared_source:
        if transactional:
            result, publishing = _merge_in_tree(result, publishing, token)
        return WriteGraph(result, publishing, n_shards)
    block_keys = {b: blocks[b].key for _, fed in consumers for b in fed}
    gated = gate_reads(result, publishing, block_keys, consumers, read_ahead(threads), token)
    if gated is not None:
        result, publishing = gated
    fused = fuse_blocks(result, publishing, blocks.keys(), token)
    if fused is not None:
        result, publishing = fused
        shard_nbytes = plan.nbytes_in // max(plan.n_shards, 1)
        per_task = shards_per_task(shard_nbytes, n_shards, threads)
        grouped = group_publishing(result, publishing, per_task, token)
        if grouped is not None:
            result, publishing = grouped
    if transactional:
        result, publishing = _merge_in_tree(result, publishing, token)
    return WriteGraph(result, publishing, n_shards)


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


def _shards(plan: WritePlan, wave: Wave | None) -> Iterator[ShardPlan]:
    """The shards to write, in C order: all of the plan's, or one wave's."""
    if wave is None:
        return plan.iter_shards()
    return (plan.shard(coords) for coords in itertools.product(*wave.ranges))


class SourceBlocks:
    """The source's blocks feeding a write or one wave of it, as ``Delayed`` by block coordinates.

    For a wave, the source is sliced to the box of blocks that feed its
    shards, at block edges, so the slice has exactly those blocks and Dask
    culls the rest of the source's graph away. A source that reads an
    array-like directly (``da.from_zarr``, ``da.from_array``) is instead read
    through a window on that array-like (:func:`~shardpipe.engine.source_window.read_window`). A
    source with empty blocks (which a slice could drop) is taken whole. With ``optimize``
    False, the blocks keep the keys they have in the source's graph.
    """

    def __init__(
        self, arr: da.Array, plan: WritePlan, wave: Wave | None, *, optimize: bool = True
    ) -> None:
        self.origin: Coords = (0,) * arr.ndim
        if wave is not None and all(all(sizes) for sizes in plan.blocks.chunks):
            first, stop = _block_ranges(plan, wave)
            bounds = plan.blocks.bounds
            index = tuple(
                slice(bounds[d][a], bounds[d][b])
                for d, (a, b) in enumerate(zip(first, stop, strict=True))
            )
            window = read_window(arr, index)
            arr = arr[index] if window is None else window
            self.origin = first
        self._delayed: np.ndarray = arr.to_delayed(optimize_graph=optimize)

    def __getitem__(self, block: Coords) -> Delayed:
        local = tuple(b - o for b, o in zip(block, self.origin, strict=True))
        found: Delayed = self._delayed[local]
        return found

    def keys(self) -> set[Any]:
        """Keys of the blocks."""
        return {b.key for b in self._delayed.flat}


def _block_ranges(plan: WritePlan, wave: Wave) -> tuple[Coords, Coords]:
    """Per dimension, the first block feeding ``wave`` and one past the last (source blocks)."""
    layout, placement = plan.layout, plan.placement
    first, stop = [], []
    for d, shards in enumerate(wave.ranges):
        size, (r0, r1) = layout.shard_shape[d], placement.region[d]
        lo = max(shards.start * size, r0) - placement.offset[d]
        hi = min(shards.stop * size, r1) - placement.offset[d]
        bounds = plan.blocks.bounds[d]
        first.append(bisect_right(bounds, lo) - 1)
        stop.append(bisect_right(bounds, hi - 1))
    return tuple(first), tuple(stop)
