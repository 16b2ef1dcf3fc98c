"""What a pyramid write holds: each level from the shards of the level before, no regrouping."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
from dask.callbacks import Callback

import shardpipe
from shardpipe.core.pyramid import region_nbytes
from tests.support.ome_checks import check_image, reference_pyramid

SHAPE, BLOCKS = (64, 256, 512), (25, 70, 70)  # blocks that do not line up with the shards
SHARDS, CHUNKS = (32, 64, 64), (16, 32, 32)


def _source() -> tuple[np.ndarray, da.Array]:
    data = np.random.default_rng(0).integers(0, 4000, SHAPE, dtype="uint16")
    return data, da.from_array(data, chunks=BLOCKS)


class _HeldBytes(Callback):  # type: ignore[misc]
    """The most bytes of arrays Dask holds between tasks, views of the source's data left out.

    The source's blocks are views of the array ``da.from_array`` holds (as are
    the blocks of one shard a write cuts from it): no memory of their own.
    """

    def __init__(self, source: da.Array) -> None:
        super().__init__()
        graph = dict(source.__dask_graph__())
        first = next(v for v in graph.values() if isinstance(v, np.ndarray))
        self.data = first if first.base is None else first.base
        self.peak = 0

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, id: Any) -> None:
        held = sum(
            value.nbytes
            for value in list(state["cache"].values())
            if isinstance(value, np.ndarray) and not np.may_share_memory(value, self.data)
        )
        self.peak = max(self.peak, held)


def test_each_level_is_made_of_the_level_befores_shards_downsampled(tmp_path: Path) -> None:
    _, source = _source()
    job = shardpipe.prepare_ome_zarr(
        source, tmp_path / "img.ome.zarr", "zyx", scale_factors=[2, 4],
        shards=SHARDS, chunks=CHUNKS,
    )  # fmt: skip
    assert job.image is not None
    levels = [j.source for j in job.image.jobs]
    for before, level in itertools.pairwise(levels):
        # one block per shard of the level before, halved: level 1's shards take whole blocks
        assert all(set(c[:-1]) <= {s // 2} for c, s in zip(level.chunks, SHARDS, strict=True))
        assert level.numblocks == tuple(
            math.ceil(n / s) for n, s in zip(before.shape, SHARDS, strict=True)
        )
        layers = level.__dask_graph__().layers
        assert not any(name.startswith("rechunk") for name in layers)  # no regrouped copies


def test_a_pyramid_write_holds_a_few_shards_between_tasks(tmp_path: Path) -> None:
    data, source = _source()
    held = _HeldBytes(source)
    with dask.config.set(scheduler="threads", num_workers=2), held:
        shardpipe.to_ome_zarr(
            source, tmp_path / "img.ome.zarr", "zyx", scale_factors=[2, 4, 8],
            shards=SHARDS, chunks=CHUNKS,
        )  # fmt: skip
    expected = reference_pyramid(data, [(2, 2, 2), (4, 4, 4), (8, 8, 8)], "mean")
    check_image(tmp_path / "img.ome.zarr", expected)
    level1_shard = math.prod(SHARDS) * 2
    # 688 KiB measured; the regrouping step before (rechunk) held 12.5 MiB here
    assert held.peak <= 8 * level1_shard, held.peak


def test_regions_that_join_straddled_blocks_are_projected_and_kept_within_max_mem(
    tmp_path: Path,
) -> None:
    data = np.random.default_rng(1).integers(0, 4000, (64, 128, 128), dtype="uint16")
    source = da.from_array(data, chunks=(21, 45, 45))  # odd edges: windows straddle blocks
    budget = 1400 << 10  # a whole shard (32, 64, 64): 1.28 MiB piecewise, 1.53 MiB joined
    job = shardpipe.prepare_ome_zarr(
        source, tmp_path / "img.ome.zarr", "zyx", scale_factors=[2],
        shards=SHARDS, chunks=CHUNKS, max_mem=budget,
    )  # fmt: skip
    assert job.image is not None
    level1 = job.image.jobs[1].source
    down = job.image.downsample_mem[1]
    region = tuple(2 * max(c) for c in level1.chunks)
    assert region != SHARDS  # shrunk to fit
    assert down == region_nbytes(region, (2, 2, 2), np.dtype("uint16"), "mean", joined=True)
    assert down <= budget
    job.execute()
    check_image(tmp_path / "img.ome.zarr", reference_pyramid(data, [(2, 2, 2)], "mean"))
