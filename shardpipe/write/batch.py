"""Many small region writes into an existing array as one job: ``write_regions``, ``RegionBatch``.

``to_sharded_zarr(data, store, region=...)`` is one job per call: it takes
the array's marker, changes the shards the region touches and lets go.
Corrections scattered over an array, made one call each, pay that each
time, and two calls touching the same shard change it twice. A batch is a
list of ``(region, data)`` pairs, regions spelt as ``region=`` spells them
(a tuple of slices), applied as one job: one marker, no Dask graph, each
shard the batch touches changed once by one writer that merges every pair
touching it (:mod:`shardpipe.core.region_batch`). Where regions overlap, the
later pair wins, as if the pairs were written one after another.

A batch is as crash-safe as a region write, shard by shard: every shard is
either as it was or fully updated, in place behind an undo record or by one
conditional put (:mod:`shardpipe.engine.update_tasks`). A batch is not one
transaction over its shards: killed part way, some shards hold the new data
and others the old; the next job on the array (or :func:`shardpipe.repair`)
rolls back a shard left mid-update, and running the same batch again
completes it (a batch writes absolute values, so repeating it is harmless).

Everything is checked before the marker is taken: every region inside the
array, every data array of its region's shape, of the array's dtype or cast
to it where its values fit (:mod:`shardpipe.core.value_casts`). The checked
pairs, grouped by shard, make a :class:`RegionBatchJob`, which shows them as a
plan and runs as every other job does (:func:`~shardpipe.write.job.run_job`):
one pass that writes by itself, in the calling thread, without a Dask graph
(:func:`~shardpipe.write.run.run_batch`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

import numpy as np
from dask.system import CPU_COUNT

from shardpipe import advice
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.core.checks import check_bool
from shardpipe.core.display import html_table, text_table
from shardpipe.core.grid import Box, Coords
from shardpipe.core.memory import DEFAULT_MAX_MEM
from shardpipe.core.region_batch import ChunkFill, group_by_shard
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.locations import resolved_name
from shardpipe.stored.metadata import layout_of, read_metadata
from shardpipe.stored.places import check_not_a_file
from shardpipe.write.arguments import (
    ExistingArray,
    cast_source,
    check_castable,
    check_max_mem,
    check_strategy,
    check_strategy_possible,
    check_writable,
    region_offset,
)
from shardpipe.write.job import Pass, PassReports, run_job
from shardpipe.write.options import STORED_PARAMETERS
from shardpipe.write.parameters import SharedParameters, shares_parameters
from shardpipe.write.planning import memory_model
from shardpipe.write.resume import check_no_other_job
from shardpipe.write.run import run_batch

__all__ = ["RegionBatch", "RegionBatchJob", "write_regions"]


BATCH_PARAMETERS = STORED_PARAMETERS | SharedParameters(
    """
    write_empty_chunks : bool
        Store inner chunks equal to the fill value (by default they are
        dropped from the shard).
    max_mem : int or str
        Memory budget of a shard's writer (a rewrite holds the whole old shard).
    """,
    {},
)
"""The entries of the parameters of :func:`write_regions` and :class:`RegionBatch`."""


@shares_parameters(BATCH_PARAMETERS)
def write_regions(
    updates: Sequence[tuple[tuple[slice, ...], Any]],
    store: Any,
    *,
    path: str | None = None,
    storage_options: dict[str, Any] | None = None,
    write_strategy: str = "auto",
    write_empty_chunks: bool = False,
    max_mem: int | str = DEFAULT_MAX_MEM,
) -> WriteReport:
    """Write many regions of an existing sharded array as one job.

    Each pair ``(region, data)`` writes ``data`` into ``region``, as
    ``to_sharded_zarr(data, store, region=region)`` would; all pairs are
    applied together, under one job marker and without a Dask graph, each
    shard changed once. Where regions overlap, the later pair wins.

    Parameters
    ----------
    updates : sequence of (region, data)
        ``region``: a tuple of slices, one per dimension (``None`` bounds
        allowed, negative bounds count from the end, step 1), inside the
        array. ``data``: a NumPy array (or anything ``numpy.asarray``
        takes) of the region's shape, of the array's dtype or one cast to
        it where every value fits (``int64`` values 0..65535 into ``uint16``).

    Returns
    -------
    WriteReport
        Shards changed, bytes written, the strategies used.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        On a bad pair or argument, before anything is written.
    shardpipe.errors.JobConflictError
        If another job holds the array, or its ``zarr.json`` changed.
    shardpipe.errors.ShardConflictError
        If a shard changed while the batch updated it.

    See Also
    --------
    RegionBatch : the same, collecting ``batch[region] = data`` in a ``with`` block.
    """
    batch = _BatchTarget.open(
        store, path, storage_options, write_strategy, write_empty_chunks, max_mem
    )
    if isinstance(updates, str | bytes) or not isinstance(updates, Sequence):
        raise InvalidArgumentError(
            "updates",
            f"expected a list of (region, data) pairs, got {type(updates).__name__}",
            "Pass e.g. [((slice(0, 64), slice(0, 64)), data), ...]",
        )
    boxes, arrays = [], []
    for position, pair in enumerate(updates):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise InvalidArgumentError(
                "updates",
                f"item {position} is {_shown(pair)}, not a (region, data) pair",
                "Give each update as a tuple (region, data)",
            )
        where = f"updates[{position}]"
        box, array = batch.check_pair(pair[0], pair[1], where, where)
        boxes.append(box)
        arrays.append(array)
    return batch.apply(boxes, arrays)


@shares_parameters(BATCH_PARAMETERS)
class RegionBatch:
    """Collect region writes into an existing array; apply them as one job when the block ends.

    ``batch[region] = data`` checks the pair at once (region inside the
    array, data of its shape and the array's dtype) and keeps a copy of the
    data; on leaving the ``with`` block without an error, every pair is
    applied as by :func:`write_regions` (later assignments win where
    regions overlap). If the block raises, nothing is written.

    Parameters
    ----------

    Attributes
    ----------
    report : shardpipe.WriteReport or None
        What the batch wrote, once applied.

    Examples
    --------
    >>> with shardpipe.RegionBatch("volume.zarr") as batch:  # doctest: +SKIP
    ...     for box, values in corrections:
    ...         batch[box] = values
    >>> batch.report.shards  # doctest: +SKIP
    """

    def __init__(
        self,
        store: Any,
        *,
        path: str | None = None,
        storage_options: dict[str, Any] | None = None,
        write_strategy: str = "auto",
        write_empty_chunks: bool = False,
        max_mem: int | str = DEFAULT_MAX_MEM,
    ) -> None:
        self._target = _BatchTarget.open(
            store, path, storage_options, write_strategy, write_empty_chunks, max_mem
        )
        self._boxes: list[Box] = []
        self._data: list[np.ndarray] = []
        self._applied = False
        self.report: WriteReport | None = None

    def __setitem__(self, region: tuple[slice, ...], data: Any) -> None:
        if self._applied:
            raise InvalidArgumentError(
                "region",
                "the batch was applied already when the with block ended",
                "Start a new RegionBatch for more writes",
            )
        box, array = self._target.check_pair(region, data, "batch[region]", "batch[region] = value")
        self._boxes.append(box)
        self._data.append(array.copy())  # the caller may reuse its buffer

    def __len__(self) -> int:
        return len(self._boxes)

    def __enter__(self) -> RegionBatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        boxes, data = self._boxes, self._data
        self._boxes, self._data, self._applied = [], [], True
        if exc_type is None:
            self.report = self._target.apply(boxes, data)

    def __repr__(self) -> str:
        state = "applied" if self._applied else f"{len(self)} pending write(s)"
        return f"RegionBatch({self._target.where}, {state})"


class _BatchTarget:
    """The array a batch writes into, read and checked once; checks pairs and applies them."""

    def __init__(
        self,
        target: ResolvedStore,
        existing: ExistingArray,
        write_empty_chunks: bool,
        budget: int,
    ) -> None:
        self.target = target
        self.existing = existing
        self.write_empty_chunks = write_empty_chunks
        self.layout = layout_of(existing.metadata)
        self.dtype = existing.metadata.dtype.to_native_dtype()
        self.rewrite_fits, self.encoders = self._sized(budget)

    @classmethod
    def open(
        cls,
        store: Any,
        path: str | None,
        storage_options: dict[str, Any] | None,
        write_strategy: Any,
        write_empty_chunks: Any,
        max_mem: Any,
    ) -> _BatchTarget:
        """The array at ``store``, every argument checked, rewrites sized against ``max_mem``."""
        strategy = check_strategy(write_strategy)
        empty = check_bool("write_empty_chunks", write_empty_chunks)
        target = resolve_store(store, path, storage_options)
        check_not_a_file(target, "store")
        check_writable(target)
        if target.transactional:
            raise InvalidArgumentError(
                "store",
                "a batch of region writes into an Icechunk session is not supported",
                "Write each region with to_sharded_zarr(data, session.store, region=...), "
                "then commit the session",
            )
        check_strategy_possible(strategy, target.shards)
        metadata, version = read_metadata(target, "store")
        existing = ExistingArray(metadata, version, None, strategy)
        return cls(target, existing, empty, check_max_mem(max_mem))

    @property
    def where(self) -> str:
        return advice.place(self.target.path) + f" in {resolved_name(self.target)}"

    def _sized(self, budget: int) -> tuple[bool, int]:
        """Whether a shard's writer may rewrite it whole within ``budget`` (else refuse).

        And how many inner chunks it may encode at once: what ``budget`` leaves
        beside a rewrite (:meth:`~shardpipe.core.memory.MemoryModel.encoders_within`).
        """
        codec = ChunkCodec.from_metadata(self.existing.metadata)
        model = memory_model(codec, self.layout.chunk_shape, self.target.shards)
        shard_nbytes = math.prod(self.layout.shard_shape) * codec.dtype.itemsize
        rewrite_mem = 2 * model.encoded(shard_nbytes)  # the old shard and the new
        rewrite_fits = rewrite_mem <= budget
        abilities = self.target.shards.abilities
        can_avoid = abilities.append or (abilities.parts and abilities.copy_range)
        if not rewrite_fits and (self.existing.strategy == "rewrite" or not can_avoid):
            raise MemoryBudgetError(
                "update-shard",
                rewrite_mem,
                budget,
                "a rewrite holds the whole old shard and the new one; raise "
                + advice.name("max_mem"),
            )
        # each chunk encoded beside the first holds one more working set
        return rewrite_fits, model.encoders_within(budget, rewrite_mem, CPU_COUNT)

    def check_pair(
        self, region: Any, data: Any, region_parameter: str, parameter: str
    ) -> tuple[Box, np.ndarray]:
        """The box of ``region`` and ``data`` as a NumPy array, both checked against the array.

        Refusals name ``region_parameter`` (the region) or ``parameter`` (the data).
        """
        shape = tuple(self.layout.shape)
        if not hasattr(data, "shape") or not hasattr(data, "dtype"):
            raise InvalidArgumentError(
                parameter,
                f"the data is {_shown(data)}, not an array",
                "Give a NumPy array of the region's shape",
            )
        if len(data.shape) != len(shape):
            raise InvalidArgumentError(
                parameter,
                f"the data has {len(data.shape)} dimension(s), the array {len(shape)} {shape}",
                "Give data of the region's shape",
            )
        cast = check_castable(data.dtype, self.dtype, parameter)
        try:
            offset = region_offset(region, shape, tuple(data.shape))
        except InvalidArgumentError as err:
            raise InvalidArgumentError(region_parameter, err.problem, err.fix) from None
        box = tuple((o, o + n) for o, n in zip(offset, data.shape, strict=True))
        return box, cast_source(np.asarray(data), self.dtype, cast, parameter)

    def job(self, boxes: list[Box], data: list[np.ndarray]) -> RegionBatchJob:
        """The job writing the checked pairs."""
        return RegionBatchJob(
            self.target,
            self.existing,
            group_by_shard(self.layout, boxes),
            boxes,
            data,
            rewrite_fits=self.rewrite_fits,
            encoders=self.encoders,
            write_empty_chunks=self.write_empty_chunks,
        )

    def apply(self, boxes: list[Box], data: list[np.ndarray]) -> WriteReport:
        """Write the checked pairs as one job (nothing at all when no pair touches an element)."""
        job = self.job(boxes, data)
        return job.execute() if job.groups else WriteReport()


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{type(value).__name__} {text[:40]}..."


@dataclass(frozen=True, repr=False)
class RegionBatchJob:
    """Checked pairs ``(region, data)`` of one existing array, grouped by the shard they touch.

    Attributes
    ----------
    target : ResolvedStore
        The array.
    existing : ExistingArray
        Its metadata and ``zarr.json`` version as read when the pairs were
        checked, and the write strategy.
    groups : dict of shard coordinates to list of ChunkFill
        The touched inner chunks of every shard touched.
    boxes, data : sequence
        The pairs' boxes (array coordinates) and values, in order.
    rewrite_fits, encoders, write_empty_chunks
        How shards are written (see :func:`~shardpipe.write.run.run_batch`).
    """

    target: ResolvedStore
    existing: ExistingArray
    groups: dict[Coords, list[ChunkFill]]
    boxes: Sequence[Box]
    data: Sequence[np.ndarray]
    rewrite_fits: bool
    encoders: int
    write_empty_chunks: bool

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows (what ``repr`` and the HTML show)."""
        n_chunks = sum(len(fills) for fills in self.groups.values())
        return [
            ("array", str(self.target.zarr_store)),
            ("regions", f"{len(self.boxes):,} (later ones win where they overlap)"),
            ("shards", f"{len(self.groups):,} touched, each changed once by one writer"),
            ("inner chunks", f"{n_chunks:,} touched"),
            ("write_strategy", repr(self.existing.strategy)),
        ]

    def __repr__(self) -> str:
        return text_table("RegionBatchJob", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("RegionBatchJob", self.summary_rows())

    def passes(self) -> list[Pass]:
        """One pass, writing by itself in the calling thread (no Dask graph)."""
        return [Pass("write the regions", write=self._write)]

    def _write(self, progress: bool) -> list[WriteReport]:
        check_no_other_job(self.target, None, "write a batch of regions into the array")
        report = run_batch(
            self.target,
            self.existing,
            self.groups,
            self.boxes,
            self.data,
            rewrite_fits=self.rewrite_fits,
            encoders=self.encoders,
            write_empty_chunks=self.write_empty_chunks,
        )
        return [report]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> WriteReport:
        """The batch's report, with the time taken."""
        return replace(sum(reports[0], WriteReport()), seconds=seconds)

    def execute(self) -> WriteReport:
        """Write the regions (see :func:`~shardpipe.write.batch.write_regions`)."""
        report: WriteReport = run_job(self)
        return report
