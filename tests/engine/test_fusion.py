"""Blocks that feed a single task are computed inside it (shardpipe.fusion)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest

import shardpipe
from shardpipe.engine.graph import WriteGraph, build_write_graph
from shardpipe.engine.task_groups import shards_per_task
from tests.support.readers import assert_same, read_zarr


def _source(chunks: Any) -> da.Array:
    values = np.arange(40 * 30 * 20, dtype="uint16").reshape(40, 30, 20)
    return da.from_array(values, chunks=chunks) + 1


def _graph(tmp_path: Path, chunks: Any, *, in_process: bool = False) -> tuple[Any, WriteGraph]:
    source = _source(chunks)
    job = shardpipe.prepare_write(source, str(tmp_path), shards=(20, 30, 20), chunks=(10, 10, 10))
    graph = build_write_graph(
        source, job.plan, job.write_target("t"), job.key_of(), "t", in_process=in_process
    )
    return source, graph


def _same(value: Any) -> Any:
    return value


def _prefixes(graph: WriteGraph) -> list[str]:
    keys = dict(graph.result.__dask_graph__())
    return [str(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0] for k in keys]


def test_aligned_blocks_are_computed_inside_their_write_shard_task(tmp_path: Path) -> None:
    source, graph = _graph(tmp_path, (20, 30, 20))
    keys = dict(graph.result.__dask_graph__())
    block_keys = {b.key for b in source.to_delayed().flat}
    assert not block_keys & keys.keys()  # no task of its own for any block
    # one task per shard, the target and the result: nothing else to schedule
    assert sorted(_prefixes(graph)) == ["write-done", "write-shard", "write-shard", "write-target"]
    assert [p.key for p in graph.publishing] == [("write-shard-t", 0), ("write-shard-t", 1)]


def test_blocks_feeding_several_tasks_stay_tasks(tmp_path: Path) -> None:
    """Misaligned blocks make pieces for several shards: computed once, not per consumer."""
    # rows [0, 15) feed shard 0, [15, 30) shards 0 and 1, [30, 40) shard 1
    source, graph = _graph(tmp_path, (15, 30, 20))
    keys = dict(graph.result.__dask_graph__())
    blocks = source.to_delayed().flat
    assert [b.key in keys for b in blocks] == [False, True, False]
    assert _prefixes(graph).count("encode-piece") == 4


def test_fused_graph_writes_the_same_on_every_scheduler(tmp_path: Path) -> None:
    for scheduler in ("sync", "threads"):
        path = tmp_path / scheduler
        with dask.config.set(scheduler=scheduler):
            shardpipe.to_sharded_zarr(
                _source((20, 30, 20)), str(path), shards=(20, 30, 20), chunks=(10, 10, 10)
            )
        assert_same(read_zarr(str(path)), _source((20, 30, 20)).compute())


def test_one_set_of_annotations_is_kept(tmp_path: Path) -> None:
    with dask.annotate(retries=2):
        _, graph = _graph(tmp_path, (20, 30, 20))
    layers = graph.result.__dask_graph__().layers
    assert len(layers) == 1
    assert next(iter(layers.values())).annotations == {"retries": 2}


def test_layers_annotated_differently_are_not_fused(tmp_path: Path) -> None:
    source = _source((20, 30, 20))
    job = shardpipe.prepare_write(source, str(tmp_path), shards=(20, 30, 20), chunks=(10, 10, 10))
    with dask.annotate(priority=5):
        target = dask.delayed(_same, traverse=False)(job.write_target("t"))
    graph = build_write_graph(source, job.plan, target, job.key_of(), "t")
    keys = dict(graph.result.__dask_graph__())
    assert {b.key for b in source.to_delayed().flat} <= keys.keys()


def _small_shards(tmp_path: Path, threads: int | None) -> WriteGraph:
    """64 shards of 4 KiB, each in a block of its own."""
    values = np.arange(64 * 32 * 64, dtype="uint16").reshape(64, 32, 64)
    source = da.from_array(values, chunks=(4, 8, 64)) + 1
    job = shardpipe.prepare_write(source, str(tmp_path), shards=(4, 8, 64), chunks=(4, 8, 16))
    graph = build_write_graph(
        source, job.plan, job.write_target("t"), job.key_of(), "t", threads=threads
    )
    return graph


@pytest.mark.parametrize(
    ("shard_nbytes", "n_shards", "threads", "expected"),
    [
        (8 * 2**20, 128, 2, 2),  # 16 MiB per task
        (8 * 2**20, 128, None, 1),  # cluster unknown (to_delayed): one per task
        (2**20, 128, 2, 8),  # bounded by balance: 8 tasks per thread
        (2**20, 128, 64, 1),  # a large cluster needs every task
        (64 * 2**20, 128, 2, 1),  # large shards: one per task
    ],
)
def test_shards_per_task(
    shard_nbytes: int, n_shards: int, threads: int | None, expected: int
) -> None:
    assert shards_per_task(shard_nbytes, n_shards, threads) == expected


def test_small_shards_are_written_several_per_task(tmp_path: Path) -> None:
    graph = _small_shards(tmp_path, threads=2)
    assert graph.n_shards == 64
    assert len(graph.publishing) == 8 * 2  # 8 tasks per thread, 4 shards each
    assert {str(p.key[0]).rsplit("-", 1)[0] for p in graph.publishing} == {"write-shards"}
    with dask.config.set(scheduler="sync"):
        reports = dask.compute(*graph.publishing)
    assert [r.shards for r in reports] == [4] * 16
    assert len([p for p in (tmp_path / "c").rglob("*") if p.is_file()]) == 64


def test_shards_are_not_grouped_without_a_cluster(tmp_path: Path) -> None:
    graph = _small_shards(tmp_path, threads=None)
    assert len(graph.publishing) == graph.n_shards == 64
