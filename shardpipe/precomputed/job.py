"""The precomputed write job: a planned volume, shown, run through the runner or delayed.

:func:`~shardpipe.precomputed.api.to_neuroglancer_precomputed` checks every
argument and plans every scale (writing nothing); the :class:`PrecomputedWrite`
it makes runs as one pass of the runner (:mod:`shardpipe.write.job`): the
marker and ``info`` first, then every shard of every scale in one computation,
the marker removed by the last task.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

import dask.array as da
from dask.delayed import Delayed, delayed

from shardpipe import advice
from shardpipe.core.display import format_bytes, html_table, text_table
from shardpipe.core.precomputed_plan import ScaleGrid
from shardpipe.engine.progress import ShardBar, local_progress
from shardpipe.engine.pyramid import downsampled
from shardpipe.engine.reports import WriteReport, add_reports
from shardpipe.errors import ArrayExistsError, ShardpipeError, WriteFailedError
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.precomputed.graph import PUBLISHING, shard_tasks
from shardpipe.precomputed.tasks import PrecomputedTarget
from shardpipe.storage.base import ShardStore
from shardpipe.storage.keys import PRECOMPUTED_UNFINISHED, STAGING_DIR
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import resolved_name
from shardpipe.write.job import Pass, PassReports, run_job

Level = tuple[tuple[int, ...], ScaleGrid, PrecomputedSharding, Any]
"""A scale as planned: its downsampling factor, chunk grid, sharding and parts."""


@dataclass
class PrecomputedWrite:
    """A planned write of a sharded Neuroglancer precomputed volume.

    Attributes
    ----------
    target : ResolvedStore
        The volume's directory.
    source : dask.array.Array
        The volume, indexed ``(x, y, z, channel)``.
    levels : list
        Every scale as planned: factor, chunk grid, sharding, parts.
    scale_infos : list of dict
        Their entries of the ``info`` file.
    info : dict
        The ``info`` file.
    method : str
        How a scale is downsampled from the one before.
    overwrite : bool
        Replace a volume already there.
    """

    target: ResolvedStore
    source: da.Array
    levels: list[Level]
    scale_infos: list[dict[str, Any]]
    info: dict[str, Any]
    method: str
    overwrite: bool
    _reports: list[WriteReport] = field(default_factory=list, init=False, repr=False)

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows: one per scale."""
        rows = [
            (
                "volume",
                f"{resolved_name(self.target)}: {self.info.get('type')}, "
                f"{self.source.dtype}, {self.source.shape[3]} channel(s)",
            )
        ]
        for (factor, grid, _, _), scale in zip(self.levels, self.scale_infos, strict=True):
            rows.append(
                (
                    f"scale {scale['key']}",
                    f"size {tuple(scale['size'])}, factor {factor}, chunks "
                    f"{tuple(grid.chunk_size)}, {format_bytes(self.source.dtype.itemsize)} "
                    "per voxel",
                )
            )
        return rows

    def __repr__(self) -> str:
        return text_table("PrecomputedWrite", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("PrecomputedWrite", self.summary_rows())

    def passes(self) -> list[Pass]:
        """One pass: the marker and ``info``, then every shard in one computation."""

        def begin(progress: bool) -> list[Any]:
            self._reports.append(self._compute(progress))
            return []

        return [Pass("write the volume", begin)]

    def finish(self, reports: PassReports, seconds: float, snapshot_id: str | None) -> WriteReport:
        """The write's report (shards, chunks, bytes), with the time taken."""
        return replace(self._reports[-1], seconds=seconds)

    def execute(self, *, progress: bool = False) -> WriteReport:
        """Write the volume; return what was written."""
        return run_job(self, progress=progress)

    def to_delayed(self) -> Delayed:
        """Write the marker and ``info`` now; return the shards' write as a ``Delayed``."""
        total, _, _, _ = self._graph()
        return total

    def _graph(self) -> tuple[Delayed, int, list[str], str]:
        """Write the marker and ``info``; the graph, its shard tasks, prefixes and staging."""
        target = self.target
        token = uuid.uuid4().hex[:12]
        marker = target.key(PRECOMPUTED_UNFINISHED)
        _write_info(
            target,
            self.info,
            self.scale_infos,
            self.overwrite,
            _unfinished(token, self.scale_infos),
        )
        staging = target.key(f"{STAGING_DIR}/{token}")
        tasks = []
        prefixes = []
        level: da.Array = self.source
        previous: tuple[int, ...] = (1, 1, 1)
        for (factor, grid, spec, parts), scale_info in zip(
            self.levels, self.scale_infos, strict=True
        ):
            step = tuple(f // p for f, p in zip(factor, previous, strict=True))
            level, previous = downsampled(level, step, self.method), factor
            prefix = target.key(f"{scale_info['key']}/")
            prefixes.append(prefix)
            ship = PrecomputedTarget(target.shards, prefix, grid, spec, self.info_encoding)
            tasks.extend(shard_tasks(level, ship, f"{token}-{scale_info['key']}", parts, staging))
        total: Delayed = delayed(_finish, pure=False)(
            target.shards, staging, marker, *tasks, dask_key_name=f"write-done-{token}"
        )
        return total, len(tasks), prefixes, staging

    @property
    def info_encoding(self) -> str:
        """The chunk encoding of every scale."""
        return str(self.scale_infos[0]["encoding"])

    def _compute(self, progress: bool) -> WriteReport:
        total, n_tasks, prefixes, staging = self._graph()
        try:
            with (
                ShardBar(n_tasks, 1, show=progress) as bar,
                local_progress(bar, PUBLISHING, per_task=True),
            ):
                report: WriteReport = total.compute()
            return report
        except BaseException as err:
            try:
                for prefix in prefixes:
                    self.target.shards.cleanup(staging, prefix)
            except Exception as cleanup_err:
                err.add_note(f"shardpipe: removing the staging data failed too ({cleanup_err!r})")
            left = (
                f"the volume at {resolved_name(self.target)} is left unfinished (its info "
                "and the shards published so far; verify reports it): write it again with "
                f"{advice.setting('overwrite')}"
            )
            if isinstance(err, ShardpipeError) or not isinstance(err, Exception):
                err.add_note(f"shardpipe: {left}")
                raise
            raise WriteFailedError(
                f"the precomputed write failed part way ({type(err).__name__}: {err}); {left}"
            ) from err


def _finish(store: ShardStore, staging: str, marker: str, *reports: WriteReport) -> WriteReport:
    """Last task: remove the (empty) staging area and the unfinished-write marker; add up."""
    store.discard_staging(staging)
    store.delete(marker)  # every shard is published: the volume is complete
    return add_reports(*reports)


def _unfinished(token: str, scales: list[dict[str, Any]]) -> dict[str, Any]:
    """The document of the unfinished-write marker (what ``verify`` reports)."""
    return {
        "job": token,
        "started": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "scales": [scale["key"] for scale in scales],
    }


def _write_info(
    target: ResolvedStore,
    info: dict[str, Any],
    scales: list[dict[str, Any]],
    overwrite: bool,
    unfinished: dict[str, Any],
) -> None:
    """Mark the volume unfinished, then write ``info`` (with ``overwrite``, after removing
    the old shards of these scales). The marker goes first: from then until the last
    shard is published, ``verify`` reports an unfinished write."""
    store, info_key, marker = target.shards, target.key("info"), target.key(PRECOMPUTED_UNFINISHED)
    exists = store.get(info_key) is not None
    if exists and not overwrite:
        left = store.size(marker) is not None
        raise ArrayExistsError(
            "store: a precomputed volume already exists at "
            f"{resolved_name(target)} (its info "
            + ("file, left by an unfinished write" if left else "file")
            + f"); pass {advice.setting('overwrite')} to replace it"
        )
    store.put(marker, [json.dumps(unfinished).encode()])
    if exists:
        for scale in scales:
            store.delete_many(list(store.list(target.key(f"{scale['key']}/"))))
    store.put(info_key, [json.dumps(info, indent=1).encode()])
