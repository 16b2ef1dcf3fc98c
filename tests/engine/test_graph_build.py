"""Write graphs fused while they are built equal those fused afterwards (shardpipe.engine.graph).

``build_write_graph`` computes each block feeding a single task inside that
task as it makes the task, where nothing calls for read gates; otherwise it
builds the graph unfused and lets :func:`~shardpipe.engine.fusion.fuse_blocks`
fuse it. Both must give the same graph: same keys, same tasks, same inputs.
The second way is forced here by making the builder believe the layers are
annotated differently (``fuse_blocks`` then finds them alike and fuses).
"""

from __future__ import annotations

import functools
import gc
import math
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from dask.blockwise import Blockwise

import shardpipe
import shardpipe.engine.graph as graph_module
from shardpipe.core.waves import Wave
from shardpipe.engine.collector import collector_paused
from shardpipe.engine.graph import WriteGraph, build_write_graph
from shardpipe.internals.dask_task_spec import Alias, DataNode, Task, TaskRef
from tests.support.readers import assert_same, read_zarr

SHAPE = (48, 40, 30)


def _values() -> np.ndarray:
    return np.arange(np.prod(SHAPE), dtype="uint16").reshape(SHAPE)


def _describe(value: Any, nested: bool = False) -> Any:
    """What a graph node computes, comparable with ``==`` (nested tasks without their keys)."""
    if isinstance(value, Task):
        return (
            "task",
            None if nested else value.key,
            _describe(value.func),
            tuple(_describe(a, True) for a in value.args),
            tuple(sorted((k, _describe(v, True)) for k, v in value.kwargs.items())),
            value.data_producer,
            tuple(sorted(value.dependencies, key=str)),
        )
    if isinstance(value, DataNode):
        return ("data", _describe(value.value))
    if isinstance(value, Alias):
        return ("alias", value.target)
    if isinstance(value, TaskRef):
        return ("ref", value.key)
    if isinstance(value, functools.partial):
        return (
            "partial",
            value.func,
            tuple(_describe(a, True) for a in value.args),
            tuple(sorted((k, _describe(v, True)) for k, v in value.keywords.items())),
        )
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_describe(v, nested) for v in value))
    return value


def _described(graph: WriteGraph) -> dict[Any, Any]:
    layers = graph.result.__dask_graph__().layers
    nodes = dict(graph.result.__dask_graph__())
    return {
        "layers": len(layers),
        "publishing": [p.key for p in graph.publishing],
        "nodes": {key: _describe(node) for key, node in nodes.items()},
    }


def _both(
    monkeypatch: pytest.MonkeyPatch, source: da.Array, tmp_path: Path, **kwargs: Any
) -> tuple[WriteGraph, WriteGraph]:
    """The graph fused while built, and the graph fused afterwards, of one write."""
    options = {"shards": (16, 20, 30), "chunks": (8, 10, 15)} | kwargs.pop("layout", {})
    job = shardpipe.prepare_write(source, str(tmp_path), **options)
    target = job.write_target("t")

    def build(token: str) -> WriteGraph:
        return build_write_graph(source, job.plan, target, job.key_of(), token, **kwargs)

    early = build("t")
    with monkeypatch.context() as patch:
        patch.setattr(graph_module, "_annotated_alike", lambda graphs: False)
        late = build("t")
    return early, late


SOURCES = {
    "task blocks": lambda chunks: da.from_array(_values(), chunks=chunks) + 1,
    "data blocks": lambda chunks: da.from_array(_values(), chunks=chunks),
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize("in_process", [False, True])
@pytest.mark.parametrize(
    ("chunks", "layout", "wave"),
    [
        ((16, 20, 30), {}, None),  # one block per shard
        ((16, 20, 30), {}, (range(1, 2), range(0, 2), range(0, 1))),  # a wave of them
        ((8, 10, 15), {"max_mem": 40_000}, None),  # shards in parts, a block per part
        ((8, 10, 15), {"max_mem": 40_000}, (range(0, 2), range(1, 2), range(0, 1))),
        ((48, 40, 30), {}, None),  # one block feeding every shard: no fusion
    ],
)
def test_fused_while_built_equals_fused_after(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kind: str,
    in_process: bool,
    chunks: Any,
    layout: dict[str, Any],
    wave: Any,
) -> None:
    early, late = _both(
        monkeypatch,
        SOURCES[kind](chunks),
        tmp_path,
        layout=layout,
        in_process=in_process,
        wave=None if wave is None else Wave(1, wave),
        threads=2,
    )
    assert early.n_shards == late.n_shards
    assert _described(early) == _described(late)


def test_a_wave_keys_the_blocks_it_keeps_after_itself(tmp_path: Path) -> None:
    """A block kept as a task of its own gets a key of the wave: others may share the block."""
    source = da.from_array(_values(), chunks=(48, 40, 30)) + 1  # one block for all shards
    job = shardpipe.prepare_write(source, str(tmp_path), shards=(16, 20, 30), chunks=(8, 10, 15))
    waves = [Wave(n, (range(n, n + 1), range(2), range(1))) for n in range(2)]
    graphs = [
        build_write_graph(
            source, job.plan, job.write_target("t"), job.key_of(), f"t-w{w.number}", wave=w
        )
        for w in waves
    ]
    block_keys = [
        {k for k in dict(g.result.__dask_graph__()) if str(k[0]).startswith(source.name)}
        for g in graphs
    ]
    assert [len(keys) for keys in block_keys] == [1, 1]
    assert block_keys[0] != block_keys[1]
    assert {k[0] for keys in block_keys for k in keys} == {
        f"{source.name}-t-w0",
        f"{source.name}-t-w1",
    }


def test_waves_built_while_fused_write_the_source(tmp_path: Path) -> None:
    source = da.from_array(_values(), chunks=(8, 10, 15)) + 1
    with dask.config.set({"shardpipe.wave-tasks": 40, "scheduler": "threads"}):
        job = shardpipe.prepare_write(
            source, str(tmp_path), shards=(16, 20, 30), chunks=(8, 10, 15), max_mem=40_000
        )
        assert job.wave_schedule().n_waves > 1
        job.execute()
    assert_same(read_zarr(str(tmp_path)), _values() + 1)


def test_the_collector_is_paused_while_a_graph_is_built_and_runs_after(tmp_path: Path) -> None:
    seen: list[bool] = []
    source = da.from_array(_values(), chunks=(16, 20, 30)).map_blocks(
        lambda block: block, dtype="uint16"
    )
    job = shardpipe.prepare_write(source, str(tmp_path), shards=(16, 20, 30), chunks=(8, 10, 15))
    key_of = job.key_of()

    def spying_key_of(coords: Any) -> str:
        seen.append(gc.isenabled())
        return key_of(coords)

    assert gc.isenabled()
    build_write_graph(source, job.plan, job.write_target("t"), spying_key_of, "t")
    assert seen and not any(seen)
    assert gc.isenabled()
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # nested: only the outermost pause resumes it
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a collector paused before stays paused
    finally:
        gc.enable()


def _block_sums(block_id: Any = None) -> np.ndarray:
    return np.full((64, 64), sum(block_id), dtype="u1")


def test_a_wave_of_a_vast_computed_source_materialises_its_blocks_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``map_blocks`` source of 2^28 blocks: a wave's graph holds the wave's blocks, no more."""
    n = 2**20
    source = da.map_blocks(_block_sums, dtype="u1", chunks=((64,) * (n // 64), (64,) * (n // 64)))
    listed = Blockwise.get_output_keys

    def refuse(self: Blockwise) -> Any:
        if math.prod(self.dims[i] for i in self.output_indices) > 10**6:
            raise AssertionError("the vast source's keys were listed")
        return listed(self)

    monkeypatch.setattr(Blockwise, "get_output_keys", refuse)
    job = shardpipe.prepare_write(source, str(tmp_path), shards=(64, 64), chunks=(32, 32))
    wave = Wave(3, (range(1, 2), range(2, 4)))
    graph = build_write_graph(
        source, job.plan, job.write_target("t"), job.key_of(), "t-w3", wave=wave
    )
    nodes = dict(graph.result.__dask_graph__())
    assert graph.n_shards == 2
    assert sorted(k[0] for k in nodes if isinstance(k, tuple)) == ["write-shard-t-w3"] * 2
    with dask.config.set(scheduler="sync"):
        reports = dask.compute(*graph.publishing)
    assert sum(r.shards for r in reports) == 2
    assert sorted(p.name for p in (tmp_path / "c" / "1").iterdir()) == ["2", "3"]
