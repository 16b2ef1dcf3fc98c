"""The source's blocks feeding a write graph: the key and the task of each.

A write graph (:mod:`shardpipe.engine.graph`) needs, of the source, the
tasks computing the blocks its shards use, and nothing else of the source's
graph: a petabyte source has millions of blocks, a wave of its write a few
thousand. The source's graph is culled and optimised for exactly those
blocks' keys (Dask's own ``__dask_optimize__``, as ``to_delayed`` does for
all of them), so nothing walks the rest. A source that reads an array-like
directly (``da.from_zarr``, ``da.from_array``) is read through a window on
that array-like instead (:func:`~shardpipe.engine.source_window.read_window`).

The blocks of one wave are tasks of the source's graph, whose keys other
waves on the scheduler at the same time may hold too (a block larger than a
wave feeds several). A block kept as a task of its own in a wave's graph
therefore gets a key of that wave: the source's name with the write's token.

With ``optimize`` False (the levels of a pyramid, which share the source's
blocks) the source's graph is kept as it is, with its keys, and no block is
computed inside another task.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Mapping
from typing import Any

import dask.array as da
from dask.highlevelgraph import HighLevelGraph
from dask.utils import ensure_dict

from shardpipe.core.grid import Coords
from shardpipe.core.plan import WritePlan
from shardpipe.core.waves import Wave
from shardpipe.engine.source_window import read_window
from shardpipe.internals.dask_task_spec import GraphNode, TaskRef

__all__ = ["SourceBlocks"]


class SourceBlocks:
    """The source's blocks a write (or one wave of it) uses, by block coordinates.

    Parameters
    ----------
    arr : dask.array.Array
        The source; its block grid is ``plan.blocks``.
    plan : WritePlan
        The write's plan.
    wave : Wave, optional
        The wave the graph writes (its blocks are keyed after ``token``).
    used : collection of Coords
        The blocks the graph uses.
    token : str
        Unique id of the graph.
    optimize : bool
        Cull and optimise the source's graph for the used blocks; False
        keeps it as it is (its keys too).
    """

    def __init__(
        self,
        arr: da.Array,
        plan: WritePlan,
        wave: Wave | None,
        used: Collection[Coords],
        token: str,
        *,
        optimize: bool = True,
    ) -> None:
        self.origin: Coords = (0,) * arr.ndim
        self.optimized = optimize
        self._keys: dict[Coords, tuple[Any, ...]] = {}
        self._token = token
        has_empty = not all(all(sizes) for sizes in plan.blocks.chunks)
        index = None
        if wave is not None and not has_empty:
            first, stop = _block_ranges(plan, wave)
            bounds = plan.blocks.bounds
            index = tuple(
                slice(bounds[d][a], bounds[d][b])
                for d, (a, b) in enumerate(zip(first, stop, strict=True))
            )
        if not optimize:
            if index is not None:
                arr = arr[index]
                self.origin = first
            self.name = arr.name
            self.nodes: Mapping[Any, Any] = arr.__dask_graph__()
            self._rename = False
            self._internal: frozenset[Any] = frozenset()
            self._held: frozenset[Any] = frozenset()
            return
        window = None if index is None else read_window(arr, index)
        if window is not None:
            arr = window
            self.origin = first
        self.name = arr.name
        self._keys = {b: self._source_key(b) for b in used}
        graph = arr.__dask_graph__()
        self.nodes = ensure_dict(arr.__dask_optimize__(graph, list(self._keys.values())))
        self._internal = frozenset().union(
            *(node.dependencies for node in self.nodes.values() if node.dependencies)
        )
        self._held = frozenset(
            _futures_dropped(graph, self.nodes, self._keys.values(), self._internal)
        )
        self.nodes.update((key, graph[key]) for key in self._held)  # futures: no dependencies
        # blocks of a wave get keys of their own, unless the window's name is the wave's already
        self._rename = wave is not None and window is None

    def _source_key(self, block: Coords) -> tuple[Any, ...]:
        """The key of ``block`` in the source's graph."""
        known = self._keys.get(block)
        if known is None:
            known = (self.name, *(b - o for b, o in zip(block, self.origin, strict=True)))
        return known

    def key(self, block: Coords) -> Any:
        """The key of ``block`` as a task of its own in the write's graph."""
        key = self._source_key(block)
        if self._rename and key not in self._internal and key not in self._held:
            return (f"{self.name}-{self._token}", *block)
        return key

    def node(self, block: Coords) -> Any:
        """The task computing ``block`` in the source's graph (under its source key)."""
        return self.nodes[self._source_key(block)]

    def used_by_source(self, block: Coords) -> bool:
        """Whether other tasks of the source's graph take ``block`` as an input."""
        return bool(self._internal) and self._source_key(block) in self._internal

    def tasks(self, blocks: Collection[Coords], inlined: Collection[Coords] = ()) -> dict[Any, Any]:
        """The source's tasks for a write's graph: ``blocks`` under their :meth:`key`.

        Blocks in ``inlined`` (computed inside the task using them) are left
        out; every other task of the source's graph is kept.
        """
        out = dict(self.nodes)
        for block in inlined:
            del out[self._source_key(block)]
        if not self._rename:
            return out
        gone = set(inlined)
        for block in blocks:
            if block in gone:
                continue
            old, new = self._source_key(block), self.key(block)
            if old != new:
                node: GraphNode = out.pop(old)
                out[new] = node.substitute({}, key=new)
        return out

    def graph(self) -> HighLevelGraph:
        """The source's graph as a graph of its own, when it is kept as it is (no optimisation)."""
        assert isinstance(self.nodes, HighLevelGraph)
        return self.nodes


def _futures_dropped(
    graph: Mapping[Any, Any],
    nodes: Mapping[Any, Any],
    keys: Collection[Any],
    dependencies: Collection[Any],
) -> list[Any]:
    """Keys of the futures that Dask's optimisation dropped from ``graph``, leaving ``nodes``.

    ``keys`` are the blocks asked for, ``dependencies`` those of ``nodes``.

    A source persisted on a ``distributed`` cluster is a graph of futures: the
    blocks are futures, or are computed from futures, and the optimisation
    drops them. They go back into the write's graph as they are, under their
    keys (the cluster holds their data; the graph keeps them alive until it
    runs, ``compute=False`` too), and are never computed inside another task.
    """
    dropped = [key for key in {*keys, *dependencies} if key not in nodes]
    for key in dropped:
        if not isinstance(graph[key], TaskRef):  # a future is one
            raise RuntimeError(
                f"Dask's optimisation of the source's graph dropped {key!r}, which is not "
                "a future: shardpipe does not know this Dask's graphs"
            )
    return dropped


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
