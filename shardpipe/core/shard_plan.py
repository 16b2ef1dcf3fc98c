"""The plan of one shard: its coverage and its parts, each with the blocks feeding it.

Made by :meth:`shardpipe.core.plan.WritePlan.shard`; see
:mod:`shardpipe.core.plan` for what parts, direct parts and gathered parts are.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardpipe.core.grid import Box, ChunkBox, Coords
from shardpipe.core.region import ShardCoverage

__all__ = ["PartPlan", "ShardPlan"]


@dataclass(frozen=True)
class PartPlan:
    """One part of a shard: a box of inner chunks and the blocks feeding it.

    Parameters
    ----------
    number : int
        Position of the part in the shard, from 0.
    chunks : ChunkBox
        The inner chunks of the part (local to the shard).
    region : Box
        Elements of the array the source gives the part (array coordinates).
    blocks : tuple of Coords
        The Dask blocks that hold those elements.
    blocks_nbytes : tuple of int
        Raw bytes of each of those blocks.
    gather_in_task : bool
        On a scheduler in this process, the part's task may cut all its
        blocks itself (holding them all fits the budget).
    """

    number: int
    chunks: ChunkBox
    region: Box
    blocks: tuple[Coords, ...]
    blocks_nbytes: tuple[int, ...] = ()
    gather_in_task: bool = True

    @property
    def is_direct(self) -> bool:
        """Whether one block holds the whole part."""
        return len(self.blocks) == 1


@dataclass(frozen=True)
class ShardPlan:
    """The parts of one shard.

    Parameters
    ----------
    coords : Coords
        Grid coordinates of the shard.
    coverage : ShardCoverage
        Which of its inner chunks the region covers, fully or partly.
    parts : tuple of PartPlan
        Its parts, in the order their bytes appear in the shard.
    """

    coords: Coords
    coverage: ShardCoverage
    parts: tuple[PartPlan, ...]

    @property
    def is_single_part(self) -> bool:
        """Whether the shard is written by one task in one go."""
        return len(self.parts) == 1
