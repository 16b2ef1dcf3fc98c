"""A two-pass rechunk whose copy fails part way: no copy task writes after it raises.

The copy's tasks run on Dask's threads or a cluster's workers; a source block
that fails ends the computation while another block's task may still be
storing chunks into the copy. The rechunk removes a copy it placed once it
fails, so a task still running would write into it again: a stray copy without
its record next to the target. Here the first block's store task is slowed and
another block fails: the rechunk must raise only once that task has ended, and
leave no copy behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
from distributed.diagnostics.plugin import WorkerPlugin

import shardpipe
from shardpipe.rechunking import raw_copy

STORE_SECONDS = 1.5
"""How long the first block's store task sleeps before it stores its chunks."""


def _source(dtype: str = "f4") -> da.Array:
    """(64, 32, 32) in blocks of 16 steps; the second block fails after 0.3 s."""

    def block(block_info: dict[Any, Any] | None = None) -> np.ndarray:
        assert block_info is not None
        if block_info[None]["array-location"][0][0] == 16:
            time.sleep(0.3)
            raise ValueError("a bad block")
        return np.ones(block_info[None]["chunk-shape"], dtype)

    blocks: da.Array = da.map_blocks(
        block, chunks=((16,) * 4, (32,), (32,)), dtype=dtype, meta=np.empty((0, 0, 0), dtype)
    )
    return blocks


def _slowed(original: Callable[..., None], done: Path) -> Callable[..., None]:
    """``store_block`` that takes :data:`STORE_SECONDS` longer for the first block, then
    stores it and touches ``done`` (and ``done.started`` as it starts)."""

    def slow(block: Any, store: Any, offset: Any, chunk_shape: Any, fill_value: Any) -> None:
        if offset[0] != 0:
            original(block, store, offset, chunk_shape, fill_value)
            return
        done.with_suffix(".started").touch()
        time.sleep(STORE_SECONDS)
        original(block, store, offset, chunk_shape, fill_value)
        done.touch()

    return slow


def _rechunk_fails_after_the_slow_store(target: Path, done: Path, dtype: str = "f4") -> None:
    job = shardpipe.plan_rechunk(
        _source(dtype),
        target,
        shards=(64, 16, 16),
        chunks=(64, 8, 8),
        max_mem=150_000 * np.dtype(dtype).itemsize // 4,  # two passes
    )
    assert job.intermediate is not None  # a copy beside it
    # numbers go through raw_copy, dates through zarr-python (da.store)
    assert raw_copy.raw_copy_dtype(np.dtype(dtype)) == (dtype == "f4")
    with pytest.raises(ValueError, match="a bad block"):
        job.execute()
    assert done.with_suffix(".started").exists(), "the slow store task never started"
    assert done.exists(), "the rechunk raised while a copy task was still storing"
    left = sorted(p.name for p in target.parent.iterdir())
    assert left == ["done", "done.started"], left  # no copy left


def test_on_threads_the_copy_tasks_end_before_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = tmp_path / "done"
    monkeypatch.setattr(raw_copy, "store_block", _slowed(raw_copy.store_block, done))
    with dask.config.set(scheduler="threads", num_workers=4):  # the slow store runs at once
        _rechunk_fails_after_the_slow_store(tmp_path / "out.zarr", done)


def test_a_copy_through_zarr_ends_its_tasks_before_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dates are not copied raw: zarr-python writes the copy (``da.store``)."""
    import zarr

    done = tmp_path / "done"
    setitem = zarr.Array.__setitem__

    def slow(self: zarr.Array[Any], selection: Any, value: Any) -> None:
        if selection[0].start != 0:
            setitem(self, selection, value)
            return
        done.with_suffix(".started").touch()
        time.sleep(STORE_SECONDS)
        setitem(self, selection, value)
        done.touch()

    monkeypatch.setattr(zarr.Array, "__setitem__", slow)
    with dask.config.set(scheduler="threads", num_workers=4):
        _rechunk_fails_after_the_slow_store(tmp_path / "out.zarr", done, "M8[s]")


class _SlowCopy(WorkerPlugin):
    """A worker plugin: ``store_block`` slowed as :func:`_slowed` does, in the workers."""

    name = "shardpipe-slow-copy"

    def __init__(self, done: Path) -> None:
        self.done = done

    def setup(self, worker: Any) -> None:
        self.original = raw_copy.store_block
        raw_copy.store_block = _slowed(self.original, self.done)  # type: ignore[assignment]

    def teardown(self, worker: Any) -> None:
        raw_copy.store_block = self.original  # type: ignore[method-assign]


@pytest.mark.cluster
def test_on_a_cluster_the_copy_tasks_end_before_the_error(
    tmp_path: Path, cluster_client: Any
) -> None:
    cluster_client.register_plugin(_SlowCopy(tmp_path / "done"))
    try:
        _rechunk_fails_after_the_slow_store(tmp_path / "out.zarr", tmp_path / "done")
    finally:
        cluster_client.unregister_worker_plugin(_SlowCopy.name)


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_the_copy_s_tasks_word_messages_as_their_caller_does(scheduler: str) -> None:
    """A copy task's error names the flags when the command line runs it (its context
    variables reach the pool's threads, as they reach Dask's own)."""
    from dask.delayed import delayed

    from shardpipe import advice
    from shardpipe.engine.scheduler import compute_settled

    def task() -> None:
        raise ValueError(f"rerun with {advice.setting('resume')}")

    with (
        dask.config.set(scheduler=scheduler),
        advice.command_line_terms(),
        pytest.raises(ValueError, match=r"rerun with --resume$"),
    ):
        compute_settled([delayed(task)()], ["task"])
