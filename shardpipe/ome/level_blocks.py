"""The blocks a pyramid's levels hold between tasks, counted in the plan against ``max_mem``.

Every level of a pyramid is written in one computation that reads each
source block once (:mod:`shardpipe.ome.run`): a block of the source feeds
level 0's shards and the regions downsampled into level 1, and waits in
memory until the last of those tasks has run. The blocks are read in order,
a few ahead of their tasks (:mod:`shardpipe.engine.pyramid_gates`), so what
waits is bounded, level by level
(:func:`~shardpipe.core.pyramid_hold.pyramid_holds`). Blocks that are views
of an image in memory (``da.from_array`` of a NumPy array) cost nothing.

The plan counts it (:func:`level_holds`) and refuses a write whose blocks
waiting to be gathered would hold more than
:data:`~shardpipe.core.memory.HOLD_SHARE` times ``max_mem``
(:func:`check_level_holds`), the rule of a one-pass rechunk.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import dask.array as da
import numpy as np

from shardpipe import advice
from shardpipe.core.display import format_bytes
from shardpipe.core.grid import Coords
from shardpipe.core.memory import HOLD_SHARE
from shardpipe.core.pyramid_hold import LevelHold, blocks_in_shards, pyramid_holds
from shardpipe.engine.read_gates import read_ahead
from shardpipe.engine.scheduler import cluster_threads
from shardpipe.engine.source_window import views_memory
from shardpipe.errors import MemoryBudgetError
from shardpipe.write.job import ShardedWrite

__all__ = ["PyramidHold", "check_level_holds", "level_holds"]


@dataclass(frozen=True)
class PyramidHold:
    """What the levels of one pyramid hold between tasks.

    Parameters
    ----------
    name : str
        The pyramid (``"image"``, or a label image's group).
    levels : list of LevelHold
        Per level (none for a single level, written as any array).
    shard_shape : tuple of int
        Level 0's shards.
    aligned : bool
        Whether every block of the source lies inside one shard of level 0
        (a block across shards waits for the tasks of both).
    """

    name: str
    levels: list[LevelHold]
    shard_shape: tuple[int, ...]
    aligned: bool

    @property
    def nbytes(self) -> int:
        """Bytes the levels hold between tasks at most."""
        return sum(h.nbytes for h in self.levels)


def level_holds(
    name: str,
    arrays: Sequence[da.Array],
    jobs: Sequence[ShardedWrite],
    steps: Sequence[Sequence[int]],
) -> PyramidHold:
    """What each level of a pyramid holds between tasks, its blocks read in order.

    Parameters
    ----------
    name : str
        The pyramid, for messages.
    arrays : sequence of dask.array.Array
        Each level's Dask array (:func:`~shardpipe.ome.prepare.pyramid_arrays`).
    jobs : sequence of ShardedWrite
        Each level's write. A write reading its level in blocks of its own
        (views of an image in memory, :mod:`shardpipe.engine.source_window`)
        holds nothing of the level's blocks.
    steps : sequence of sequence of int
        Each level's step from the level before (level 0's ones first).
    """
    shard_shape = jobs[0].plan.layout.shard_shape
    aligned = blocks_in_shards(arrays[0].chunks, shard_shape)
    if len(arrays) == 1:  # no pyramid: written as any array, with its own read gates
        return PyramidHold(name, [], shard_shape, aligned)
    parts: list[Iterator[Sequence[Coords]]] = []
    free: list[bool] = []
    owns: list[bool] = []  # the level's write reads the level's own blocks (not views of it)
    for array, job in zip(arrays, jobs, strict=True):
        own = job.source.name == array.name
        owns.append(own)
        parts.append(_parts(job) if own else iter(()))
        free.append(views_memory(array) or views_memory(job.source))
    # a level's blocks come in the order of the blocks they are made from when those
    # are the blocks of the level before's write (then one level of the same graph)
    linked = [False, *owns[:-1]]
    holds = pyramid_holds(
        [a.chunks for a in arrays],
        steps,
        parts,
        itemsize=np.dtype(arrays[0].dtype).itemsize,
        free=free,
        linked=linked,
        shard_shapes=[j.plan.layout.shard_shape for j in jobs],
        read_ahead=read_ahead(cluster_threads()),
    )
    return PyramidHold(name, holds, shard_shape, aligned)


def _parts(job: ShardedWrite) -> Iterator[Sequence[Coords]]:
    """The blocks each part of the job's shards takes."""
    plan = job.plan
    for shard in plan.shards_in(plan.placement.shard_ranges):
        for part in shard.parts:
            yield part.blocks


def check_level_holds(pyramids: Sequence[PyramidHold], budget: int) -> None:
    """Refuse pyramids whose levels' blocks would wait in memory for more than the budget allows.

    ``pyramids`` are written in one computation: what their levels' blocks
    hold adds up. The blocks waiting to be gathered may hold up to
    :data:`~shardpipe.core.memory.HOLD_SHARE` times ``budget``; those read
    ahead (one per worker thread, as the running tasks are) are not counted
    against it.

    Raises
    ------
    shardpipe.errors.MemoryBudgetError
        Naming ``max_mem``, what each level holds, and what would fit.
    """
    waiting = sum(h.waiting_nbytes for p in pyramids for h in p.levels)
    if waiting <= HOLD_SHARE * budget:
        return
    held = "; ".join(
        f"{p.name} "
        + ", ".join(
            f"level {h.level} {min(h.span, h.n_blocks)} x {format_bytes(h.block_nbytes)}"
            for h in p.levels
            if h.waiting_nbytes
        )
        for p in pyramids
        if any(h.waiting_nbytes for h in p.levels)
    )
    pyramid, worst = max(
        ((p, h) for p in pyramids for h in p.levels), key=lambda ph: ph[1].waiting_nbytes
    )
    what = "the image" if pyramid.name == "image" else f"the label image {pyramid.name!r}"
    if worst.level == 0 and not pyramid.aligned:
        fix = (
            f"pass {what} in Dask blocks whose edges fall on the edges of level 0's "
            f"shards {pyramid.shard_shape} (a block then waits for the tasks of its own shard "
            "only), or "
        )
    else:
        fix = (
            f"pass smaller shards (level {worst.level}'s blocks wait until every part of the "
            "shards they feed is written), or "
        )
    raise MemoryBudgetError(
        f"blocks-held ({held}: blocks waiting for the tasks that gather them, which may hold "
        f"up to {HOLD_SHARE} x {advice.name('max_mem')})",
        waiting,
        budget,
        f"{fix}raise {advice.name('max_mem')} to at least "
        f"{math.ceil(waiting / HOLD_SHARE):,} bytes",
    )
