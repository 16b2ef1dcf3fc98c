"""Random sequences of region writes, appends, compactions and repairs against a NumPy model."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any, ClassVar

import dask
import dask.array as da
import numpy as np
import zarr
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

import shardpipe
from tests.support.examples import scaled
from tests.support.readers import assert_same, read_tensorstore

STRATEGIES = st.sampled_from(["auto", "in_place", "append", "rewrite"])


class UpdateMachine(RuleBasedStateMachine):
    """Drives one array through updates; after each step every reader must see the model."""

    shape: ClassVar[tuple[int, int]] = (13, 22)
    shards: ClassVar[tuple[int, int]] = (8, 8)
    chunks: ClassVar[tuple[int, int]] = (2, 4)
    blocks: ClassVar[tuple[int, int]] = (5, 7)  # of the first write: on no chunk boundary
    dtype: ClassVar[str] = "uint16"
    strategies: ClassVar[st.SearchStrategy[str]] = STRATEGIES
    options: ClassVar[dict[str, Any]] = {"fsync": False}
    url: ClassVar[str | None] = None  # None: a fresh local folder
    raw_only: ClassVar[bool] = False  # always uncompressed inner chunks

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp(prefix="shardpipe-stateful-")
        self.path = self.url or f"{self.folder}/a.zarr"
        self.model = np.zeros(0)
        self.rng = np.random.default_rng(0)

    def _values(self, shape: tuple[int, ...]) -> np.ndarray:
        # few distinct values, many zeros (the fill value): chunks change size,
        # some vanish, some reappear
        values = self.rng.integers(0, 3, shape) * self.rng.integers(0, 2, shape)
        return values.astype(self.dtype)

    @initialize(
        index_location=st.sampled_from(["end", "start"]),
        compressed=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def create(self, index_location: str, compressed: bool, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.model = self._values(self.shape)
        shardpipe.to_sharded_zarr(
            da.from_array(self.model, chunks=self.blocks),
            self.path,
            shards=self.shards,
            chunks=self.chunks,
            index_location=index_location,
            compressors="auto" if compressed and not self.raw_only else None,
            overwrite=True,
            storage_options=self.options,
        )

    @rule(data=st.data())
    def region_write(self, data: st.DataObject) -> None:
        region = []
        for n in self.model.shape:
            start = data.draw(st.integers(0, n - 1))
            stop = data.draw(st.integers(start + 1, min(n, start + 12)))
            region.append(slice(start, stop))
        new = self._values(tuple(s.stop - s.start for s in region))
        blocks = tuple(data.draw(st.integers(1, 6)) for _ in region)
        strategy = data.draw(self.strategies)
        shardpipe.to_sharded_zarr(
            da.from_array(new, chunks=blocks),
            self.path,
            region=tuple(region),
            write_strategy=strategy,
            storage_options=self.options,
        )
        self.model[tuple(region)] = new

    @rule(rows=st.integers(1, 9), axis=st.sampled_from([0, 1]), data=st.data())
    def append(self, rows: int, axis: int, data: st.DataObject) -> None:
        shape = list(self.model.shape)
        shape[axis] = rows
        new = self._values(tuple(shape))
        shardpipe.to_sharded_zarr(
            da.from_array(new, chunks=(4, 5)),
            self.path,
            append_dim=axis,
            write_strategy=data.draw(self.strategies),
            storage_options=self.options,
        )
        self.model = np.concatenate([self.model, new], axis=axis)

    @rule(threshold=st.sampled_from([0.0, 0.3]))
    def compact(self, threshold: float) -> None:
        shardpipe.compact(self.path, threshold=threshold, storage_options=self.options)
        if threshold == 0.0:
            assert shardpipe.info(self.path, storage_options=self.options).nbytes_unused == 0

    @rule()
    def repair(self) -> None:
        report = shardpipe.repair(self.path, storage_options=self.options)
        assert report.rolled_back == 0
        assert report.ok, str(report)

    @invariant()
    def readers_see_the_model(self) -> None:
        if self.model.size == 0:
            return
        arr = zarr.open_array(self.path, mode="r", storage_options=self._zarr_options())
        assert_same(np.asarray(arr[...]), self.model)
        assert_same(read_tensorstore("", self._kvstore()), self.model)
        assert shardpipe.verify(self.path, storage_options=self.options).ok

    def _zarr_options(self) -> dict[str, Any] | None:
        return self.options if self.url else None

    def _kvstore(self) -> dict[str, Any]:
        return {"driver": "file", "path": self.path}

    def teardown(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def test_local_updates_follow_the_model() -> None:
    with dask.config.set(scheduler="threads"):
        run_state_machine_as_test(
            UpdateMachine,
            settings=settings(max_examples=scaled(25), stateful_step_count=8, deadline=None),
        )


def test_s3_appends_and_rewrites_follow_the_model(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    """Shards of 6.25 MiB (uncompressed), so that appends are composed server side."""
    bucket, options = s3_bucket

    class S3Machine(UpdateMachine):
        shape = (2400, 2560)
        shards = (2560, 2560)
        chunks = (256, 256)
        blocks = (300, 320)  # (5, 7) would make 175,000 Dask tasks of the first write
        dtype = "uint8"
        strategies = st.sampled_from(["auto", "append", "rewrite"])
        url = f"s3://{bucket}/stateful.zarr"
        raw_only = True

        def _kvstore(self) -> dict[str, Any]:
            endpoint = options["client_kwargs"]["endpoint_url"]
            return {
                "driver": "s3",
                "bucket": bucket,
                "path": "stateful.zarr/",
                "endpoint": endpoint,
                "aws_region": "us-east-1",
                "aws_credentials": {"type": "environment"},
            }

    S3Machine.options = options
    with dask.config.set(scheduler="threads"):
        run_state_machine_as_test(
            S3Machine,
            settings=settings(max_examples=scaled(3), stateful_step_count=4, deadline=None),
        )
