"""One multiscale image of an OME-Zarr write (the image, or a label image), level by level."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardpipe.core.display import format_bytes
from shardpipe.core.pyramid import PyramidLevel
from shardpipe.ome.axes import Axis
from shardpipe.ome.level_blocks import PyramidHold
from shardpipe.write.job import ShardedWrite

__all__ = ["MultiscaleWrite"]


@dataclass(frozen=True)
class MultiscaleWrite:
    """One multiscale image (the image, or a label image) planned level by level.

    Parameters
    ----------
    path : str
        Its group, relative to the image group (``""`` or ``"labels/<name>"``).
    axes : tuple of Axis
        Its axes.
    levels : list of PyramidLevel
        Shapes, factors, shards and chunks per level.
    method : str
        How each level is made from the one before.
    jobs : list of ShardedWrite
        One write per level, in level order.
    downsample_mem : list of int
        Projected bytes of one task making the level from the one before
        (0 for level 0).
    attributes : dict
        The group's ``zarr.json`` attributes.
    hold : PyramidHold or None
        What its levels' blocks hold between tasks (:mod:`shardpipe.ome.level_blocks`).
    """

    path: str
    axes: tuple[Axis, ...]
    levels: list[PyramidLevel]
    method: str
    jobs: list[ShardedWrite]
    downsample_mem: list[int]
    attributes: dict[str, Any]
    hold: PyramidHold | None = None

    def rows(self) -> list[tuple[str, str]]:
        """One summary row per level."""
        title = self.path or "image"
        out = []
        for level, job, down in zip(self.levels, self.jobs, self.downsample_mem, strict=True):
            plan = job.plan
            memory = format_bytes(max(plan.max_projected_mem, down))
            skipped = job.n_shards_skipped
            out.append(
                (
                    f"{title} {level.index}",
                    f"shape {level.shape}, factor {level.factor}, {plan.n_shards:,} shard(s) of "
                    f"{level.shard_shape}"
                    + (f" ({skipped:,} complete, skipped)" if skipped else "")
                    + f", chunks {level.chunk_shape}, {plan.num_tasks:,} tasks"
                    + (f" + {job.source.npartitions:,} {self.method}" if level.index else "")
                    + f", peak {memory}",
                )
            )
        return out
