"""What a pyramid write holds: each level from the shards of the level before, no regrouping.

The blocks of a computed source feed level 0's shards and level 1's regions, and wait
between those tasks: they are read in order, a few ahead of their tasks, and counted in
the plan (:mod:`shardpipe.ome.level_blocks`). The peak is measured in a process of its
own (forked from the fork server, which has done the imports) on two threads: the
kernel's high-water mark (``VmHWM``), reset just before the write, above the RSS then.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import textwrap
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from dask.callbacks import Callback

import shardpipe
from shardpipe.core.pyramid import region_nbytes
from shardpipe.errors import MemoryBudgetError
from tests.support.fork_server import ForkServer
from tests.support.ome_checks import check_image, reference_level, reference_pyramid

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


# -- computed sources: blocks read in order, counted in the plan -----------------------------


class _CachedBytes(Callback):  # type: ignore[misc]
    """The most bytes of arrays Dask holds between tasks (every block is computed here)."""

    def __init__(self) -> None:
        super().__init__()
        self.peak = 0

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, id: Any) -> None:
        held = sum(v.nbytes for v in list(state["cache"].values()) if isinstance(v, np.ndarray))
        self.peak = max(self.peak, held)


def _computed(shape: tuple[int, ...], blocks: tuple[int, ...]) -> da.Array:
    return da.random.RandomState(0).randint(0, 4000, shape, chunks=blocks, dtype="uint16")


def test_computed_blocks_wait_between_tasks_within_the_plans_count(tmp_path: Path) -> None:
    """Level 0's shards in parts, level 1 in one shard of parts: Dask used to compute every
    source block first (to finish level 1's parts) and hold them all, 8.5 MiB of an 8 MiB
    source; read in order, a few ahead of their tasks, 1.2-1.3 MiB wait (1.6 MiB counted)."""
    source = _computed((128, 256, 128), (32, 64, 64))
    job = shardpipe.prepare_ome_zarr(
        source, tmp_path / "img.ome.zarr", "zyx", shards=(64, 256, 128), chunks=(16, 32, 16),
        max_mem="2MB", scale_factors=[2],
    )  # fmt: skip
    assert job.image is not None
    assert [j.plan.n_multipart_shards for j in job.image.jobs] == [2, 1]
    held = _CachedBytes()
    with dask.config.set(scheduler="threads", num_workers=2), held:
        job.execute()
    assert held.peak <= source.nbytes // 4, held.peak
    assert job.image.hold is not None
    assert held.peak <= job.image.hold.nbytes, (held.peak, job.image.hold)
    assert held.peak >= job.image.hold.nbytes // 4  # the count is not vacuous
    assert "blocks held" in repr(job)
    data = source.compute()
    written = zarr.open_group(tmp_path / "img.ome.zarr", mode="r")
    np.testing.assert_array_equal(written["0"][:], data)
    box = (slice(0, 8), slice(0, 16), slice(0, 16))  # a corner of level 1, against NumPy
    expected = reference_level(
        data[tuple(slice(2 * b.start, 2 * b.stop) for b in box)], (2, 2, 2), "mean"
    )
    np.testing.assert_array_equal(written["1"][box], expected)


def test_blocks_that_would_wait_past_max_mem_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """Blocks across a whole row of shards wait for the shards below them: 20 of 17 MiB."""
    source = _computed((512, 1024, 512), (100, 300, 300))
    with pytest.raises(MemoryBudgetError) as caught:
        shardpipe.to_ome_zarr(
            source, tmp_path / "img.ome.zarr", "zyx", max_mem="128MB", scale_factors=[2]
        )
    message = str(caught.value)
    assert message.startswith("max_mem: a blocks-held (image level 0 20 x 17.2 MiB"), message
    assert "blocks whose edges fall on the edges of level 0's shards (256, 1024, 512)" in message
    assert "raise max_mem to at least 262,369,622 bytes" in message  # 1.5 x that holds them
    assert not (tmp_path / "img.ome.zarr").exists()
    # the same image in memory: its blocks are views, holding them costs nothing
    data = np.zeros((512, 1024, 512), dtype="uint16")  # pages not touched
    job = shardpipe.prepare_ome_zarr(
        da.from_array(data, chunks=(100, 300, 300), name=False), tmp_path / "img.ome.zarr",
        "zyx", max_mem="128MB",
    )  # fmt: skip
    assert job.image is not None and job.image.hold is not None
    assert job.image.hold.levels[0].nbytes == 0


def test_levels_from_regions_finer_than_their_blocks_do_not_wait_for_each_other(
    tmp_path: Path,
) -> None:
    """Level 1's regions (the thin shards) cut each tall block of level 0 in four along z.

    Read in C order, level 1's second row of blocks would wait for the writes of its first
    row, which wait for level 0's last blocks, which wait for the second row (a cycle Dask
    refuses); read by the place of the blocks they are made from, they do not.
    """
    data = np.random.default_rng(2).integers(0, 4000, (32, 64, 64), dtype="uint16")
    source = da.from_array(data, chunks=(32, 16, 16)).map_blocks(np.copy, dtype="uint16")
    factors = [{"y": 2, "x": 2}, {"y": 4, "x": 4}]
    with dask.config.set(scheduler="sync"):
        shardpipe.to_ome_zarr(
            source, tmp_path / "img.ome.zarr", "zyx", scale_factors=factors,
            shards=(8, 16, 16), chunks=(4, 8, 8),
        )  # fmt: skip
    expected = reference_pyramid(data, [(1, 2, 2), (1, 4, 4)], "mean")
    check_image(tmp_path / "img.ome.zarr", expected)


CHILD = textwrap.dedent(
    """
    import json, sys
    import dask, dask.array as da
    import shardpipe

    out, max_mem = sys.argv[1], int(sys.argv[2])
    shape, blocks = (384, 1024, 512), (128, 256, 256)  # 384 MiB of uint16, computed

    def source(shape, blocks):
        return da.random.RandomState(0).randint(0, 4000, shape, chunks=blocks, dtype="uint16")

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(field)

    local = {"fsync": False}
    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.to_ome_zarr(source((64, 64, 64), (32, 32, 32)), out + "-warm", "zyx",
                              scale_factors=[2], compressors=None, storage_options=local)
        job = shardpipe.prepare_ome_zarr(source(shape, blocks), out, "zyx", max_mem=max_mem,
                                         scale_factors=[2], compressors=None,
                                         storage_options=local)
        baseline = status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS high-water mark
        job.execute()
        peak = status("VmHWM")
    print(json.dumps({"measured": peak - baseline, "levels": len(job.image.levels),
                      "task": job.max_projected_mem}))
    """
)

MiB = 2**20


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status (Linux only)")
def test_a_pyramid_of_a_computed_source_stays_under_twice_max_mem(
    tmp_path: Path, fork_server: ForkServer
) -> None:
    """A ``da.random`` image of 384 MiB under ``max_mem="128MB"``, on two threads.

    Its blocks feed level 0's shards and level 1's regions; Dask kept each until both had
    run, and computed them all before writing level 0: +449 to +472 MiB (3.7-3.9 x
    max_mem). Read in order, a few ahead of their tasks: +133 to +183 MiB, within the
    bound the rechunk of slabs keeps too.
    """
    max_mem = 128 * 10**6
    done = fork_server.run(CHILD, [str(tmp_path / "img.ome.zarr"), str(max_mem)], timeout=300)
    assert done.returncode == 0, done.stderr()
    result = json.loads(done.stdout().strip().splitlines()[-1])
    print(f"pyramid: {result['measured'] / MiB:.1f} MiB above the baseline")
    assert result["levels"] == 2, result
    assert result["measured"] <= 2 * max_mem, result
    assert result["measured"] >= result["task"] // 2, result  # not vacuous
