"""Rechunk every array of a Zarr group into a sharded Zarr v3 hierarchy (``--recursive``).

The hierarchy is kept: every group is created with its attributes, every
array at the same path. Arrays are rechunked by :func:`~shardpipe.plan_rechunk`
with the shapes given for all arrays (where their number of dimensions
fits) or for that array (``arrays={"path": {"shards": ..., "chunks": ...}}``),
and all of them are written in one Dask computation. The rule for small
arrays: an array of at most :data:`SMALL_NBYTES` raw bytes (1 MiB, one
default inner chunk) gains nothing from sharding and is copied as an
unsharded Zarr v3 array of one chunk, with its fill value, dimension names
and attributes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Unpack

import numpy as np
import zarr

from shardpipe import advice
from shardpipe.core.checks import check_bool, check_int_tuple, json_problem
from shardpipe.core.display import (
    ShowsSummary,
    Summary,
    format_bytes,
    format_count,
    format_nbytes,
    html_table,
)
from shardpipe.core.sizes import DEFAULT_CHUNK_NBYTES
from shardpipe.engine.reports import WriteReport
from shardpipe.errors import ArrayExistsError, InvalidArgumentError
from shardpipe.rechunking.api import plan_checked_rechunk
from shardpipe.rechunking.job import RechunkJob
from shardpipe.rechunking.options import (
    GROUP_PARAMETERS,
    GroupRechunkOptions,
    check_array_overrides,
)
from shardpipe.rechunking.source import open_source, raise_if_access_refused
from shardpipe.storage.local.contained import contained
from shardpipe.storage.loopless_finalizers import close_on_their_loops
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.urls import check_location
from shardpipe.stored.locations import resolved_name, store_location
from shardpipe.stored.places import (
    check_reads_apart,
    check_source_options,
    check_target,
    resolve_named,
)
from shardpipe.write.arguments import check_run, check_writable
from shardpipe.write.job import Pass, PassReports, RunOptions, run_checked_job, run_job, together
from shardpipe.write.options import DEFAULT_ARRAY_OPTIONS, check_array_options
from shardpipe.write.parameters import shares_parameters

SMALL_NBYTES = DEFAULT_CHUNK_NBYTES
"""Arrays of at most this many raw bytes are copied unsharded, in one chunk."""


@dataclass(repr=False)
class GroupRechunkReport(ShowsSummary):
    """What :func:`rechunk_group` did.

    Attributes
    ----------
    rechunked : dict
        Per array path, the :class:`~shardpipe.WriteReport` of its rechunk.
    copied : list of str
        Small arrays copied unsharded.
    groups : list of str
        Groups created.
    snapshot_id : str or None
        The Icechunk snapshot the rechunk committed (``commit="message"``).
    """

    rechunked: dict[str, WriteReport] = field(default_factory=dict)
    copied: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    snapshot_id: str | None = None

    def _summary(self) -> Summary:
        stored = sum(r.nbytes for r in self.rechunked.values())
        rows = [
            ("rechunked", f"{format_count(len(self.rechunked))} array(s)"),
            ("copied", f"{format_count(len(self.copied))} small array(s), unsharded"),
            ("groups", format_count(len(self.groups))),
            ("bytes stored", format_nbytes(stored)),
            *(
                (path, f"{format_count(r.shards_written)} shard(s), {format_nbytes(r.nbytes)}")
                for path, r in self.rechunked.items()
            ),
        ]
        if self.snapshot_id:
            rows.insert(4, ("snapshot", self.snapshot_id))
        return Summary("GroupRechunkReport", None, rows)

    def __str__(self) -> str:
        lines = [f"{path}: {report}" for path, report in self.rechunked.items()]
        lines += [f"{path}: copied unsharded (small)" for path in self.copied]
        stored = sum(r.nbytes for r in self.rechunked.values())
        lines.append(
            f"total: {len(self.rechunked)} array(s) rechunked ({format_nbytes(stored)} stored), "
            f"{len(self.copied)} copied, {len(self.groups)} group(s)"
            + (f"; committed as snapshot {self.snapshot_id}" if self.snapshot_id else "")
        )
        return "\n".join(lines)


@dataclass
class GroupRechunkJob:
    """A planned rechunk of a group: one :class:`~shardpipe.RechunkJob` per array, and copies.

    Attributes
    ----------
    target : ResolvedStore
        Where the hierarchy goes.
    source : zarr.Group
        The group read.
    jobs : dict
        Per array path, its planned rechunk.
    small : list
        ``(path, array)`` of the small arrays to copy unsharded.
    overwrite : bool
        Whether the target is replaced.
    """

    target: ResolvedStore
    source: zarr.Group
    jobs: dict[str, RechunkJob]
    small: list[tuple[str, zarr.Array[Any]]]
    overwrite: bool
    _finish: Callable[[PassReports, float, str | None], list[Any]] = field(
        init=False, repr=False, compare=False, default=lambda *_: []
    )

    def __repr__(self) -> str:
        lines = ["GroupRechunkJob"]
        for path, job in self.jobs.items():
            rows = dict(job.summary_rows())
            lines.append(f"  {path}:")
            for label in ("read", "intermediate", "layout", "shards", "tasks"):
                lines.append(f"    {label}: {rows[label]}")
            lines.append(f"    peak memory per task: {rows['peak memory per task']}")
        lines += [
            f"  {path}: copied unsharded ({format_bytes(a.nbytes)})" for path, a in self.small
        ]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return html_table("GroupRechunkJob", self.summary_rows())

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows: each array's reads, layout, shards and tasks."""
        rows = []
        for path, job in self.jobs.items():
            member = dict(job.summary_rows())
            for label in ("read", "intermediate", "layout", "shards", "tasks"):
                rows.append((f"{path}: {label}", member[label]))
        rows += [(path, f"copied unsharded ({format_bytes(a.nbytes)})") for path, a in self.small]
        return rows

    def passes(self) -> list[Pass]:
        """The groups and small copies first, then every array's rechunk as a whole job.

        Pass ``k`` of every array's rechunk runs in one computation: arrays
        rechunked in one pass run with the first passes of those that need two.
        """
        passes, self._finish = together(list(self.jobs.values()), self._prepare)
        return passes()

    def finish(
        self, reports: PassReports, seconds: float, snapshot_id: str | None
    ) -> GroupRechunkReport:
        """The group's report: each array's, the copies, the groups, the snapshot."""
        rechunked = self._finish(reports, seconds, snapshot_id)
        report = GroupRechunkReport(snapshot_id=snapshot_id)
        report.rechunked = dict(zip(self.jobs, rechunked, strict=True))
        report.copied = [path for path, _ in self.small]
        report.groups = [p for p, n in sorted(self.source.members(max_depth=None)) if _is_group(n)]
        return report

    def _prepare(self) -> None:
        """Create the root and every group with their attributes; copy the small arrays."""
        root = self.target
        zarr.open_group(
            root.zarr_store_for_writes,  # a full disk: StorageFullError naming the key
            path=root.path,
            mode="w" if self.overwrite else "a",
            zarr_format=3,
            attributes=dict(self.source.attrs),
        )
        for path, node in sorted(self.source.members(max_depth=None)):
            if _is_group(node):
                zarr.open_group(
                    root.zarr_store_for_writes,
                    path=root.key(path),
                    mode="a",
                    zarr_format=3,
                    attributes=dict(node.attrs),
                )
        for path, array in self.small:
            _copy_small(array, root, path)

    @shares_parameters(GROUP_PARAMETERS)
    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> GroupRechunkReport:
        """Create the groups, copy the small arrays, rechunk the others pass by pass.

        Into an Icechunk session, ``commit`` commits the whole hierarchy at
        the end, as in :meth:`~shardpipe.ShardedWrite.execute`. A failed
        rechunk merges none of its shards into the session; the groups, the
        small copies and the arrays' metadata stay in it until
        ``discard_changes()``.

        Parameters
        ----------
        """
        return run_job(self, progress=progress, commit=commit, rebase=rebase)


@shares_parameters(GROUP_PARAMETERS)
def plan_group_rechunk(
    source: Any, target: Any, **options: Unpack[GroupRechunkOptions]
) -> GroupRechunkJob:
    """Plan the rechunk of every array of the group at ``source``; write nothing.

    Every array is planned as :func:`~shardpipe.plan_rechunk` plans it, with the
    options given here (checked once, here, for all of them).

    Parameters
    ----------

    Returns
    -------
    GroupRechunkJob
        The planned rechunks and copies: ``print`` it to see them, call
        ``execute()`` to run them.
    """
    given = check_array_options(options)
    shards = check_int_tuple("shards", given.shards)
    chunks = check_int_tuple("chunks", given.chunks)
    overrides = check_array_overrides(options.get("arrays"))
    overwrite, resume = given.overwrite, given.resume
    source_storage_options = options.get("source_storage_options")
    storage_options = given.storage_options
    group = _open_group(source, check_source_options(source, source_storage_options))
    root = resolve_named("target", target, None, storage_options)
    check_writable(root)
    check_target(root, overwrite=True, name="target")  # a file there, a read-only store
    check_reads_apart(
        root,
        [store_location(group.store, group.path)],
        parameter="target",
        fix="Rechunk into a path outside the source group (then delete the source and move "
        "the new group into its place if you want it there)",
    )
    members = dict(group.members(max_depth=None))
    _check_attributes(group, members)
    unknown = sorted(set(overrides) - {p for p, n in members.items() if isinstance(n, zarr.Array)})
    if unknown:
        raise InvalidArgumentError(
            "arrays",
            f"names {unknown}, which are not arrays of the source group",
            "Give paths of arrays, relative to the group",
        )
    if root.shards.get(root.key("zarr.json")) is not None and not (overwrite or resume):
        raise ArrayExistsError(
            f"{advice.name('target')}: something exists at {resolved_name(root)}; pass "
            f"{advice.setting('overwrite')} to replace it, "
            f"or {advice.setting('resume')} to carry on an interrupted rechunk"
        )
    jobs: dict[str, RechunkJob] = {}
    small: list[tuple[str, zarr.Array[Any]]] = []
    for path, node in sorted(members.items()):
        if not isinstance(node, zarr.Array):
            continue
        if node.nbytes <= SMALL_NBYTES:
            small.append((path, node))
            continue
        shapes = overrides.get(path, {})
        jobs[path] = plan_checked_rechunk(  # the options checked once, above
            node,
            replace(root, path=root.key(path)),  # keeps the scheme the user wrote
            replace(
                DEFAULT_ARRAY_OPTIONS,
                shards=shapes.get("shards", shards if _fits(shards, node) else None),
                chunks=shapes.get("chunks", chunks if _fits(chunks, node) else None),
                max_mem=given.max_mem,
                compressors=given.compressors,
                chunk_checksums=given.chunk_checksums,
                index_location=given.index_location,
                overwrite=overwrite,
                resume=resume,
            ),
        )
    return GroupRechunkJob(root, group, jobs, small, overwrite)


@shares_parameters(GROUP_PARAMETERS)
def rechunk_group(
    source: Any,
    target: Any,
    *,
    progress: bool = False,
    commit: str | None = None,
    rebase: bool = False,
    **options: Unpack[GroupRechunkOptions],
) -> GroupRechunkReport:
    """Rechunk every array of a group.

    ``plan_group_rechunk(source, target, **options).execute(progress=...,
    commit=..., rebase=...)``: see :func:`~shardpipe.plan_group_rechunk` and
    :meth:`~shardpipe.GroupRechunkJob.execute`.

    Parameters
    ----------

    Returns
    -------
    GroupRechunkReport
        What was rechunked, copied and created (and, with ``commit``, the
        Icechunk snapshot committed).
    """
    progress = check_bool("progress", progress)
    job = plan_group_rechunk(source, target, **options)
    return run_checked_job(job, RunOptions(progress, *check_run(commit, rebase, job.target)))


def _open_group(source: Any, storage_options: dict[str, Any] | None) -> zarr.Group:
    if isinstance(source, zarr.Group):
        return source
    if isinstance(source, str | os.PathLike):
        close_on_their_loops(check_location("source", source))  # finalizers at exit
    try:
        store = contained(source)  # a local path: kept inside its folder
        options = storage_options if store is source else None
        return zarr.open_group(store, mode="r", storage_options=options)
    except Exception as err:
        raise_if_access_refused(str(source), err)
        raise InvalidArgumentError(
            "source",
            f"cannot open a Zarr group at {source!r} ({type(err).__name__}: {err})",
            "Give the path or URL of a Zarr v2 or v3 group (for one array, leave --recursive out)",
        ) from err


def _check_attributes(group: zarr.Group, members: Mapping[str, Any]) -> None:
    """Refuse a source whose groups or arrays hold attributes strict JSON cannot hold.

    They are copied into the target's ``zarr.json`` documents, where ``NaN``
    or ``Infinity`` would not be JSON.
    """
    for path, node in [("", group), *sorted(members.items())]:
        found = json_problem(dict(node.attrs), "attributes")
        if found:
            kind = "group" if isinstance(node, zarr.Group) else "array"
            raise InvalidArgumentError(
                "source",
                f"{kind} {path or '/'!r}: {found}",
                "Fix the attributes in the source; rechunk_group copies every node's attributes",
            )


def _is_group(node: Any) -> bool:
    return isinstance(node, zarr.Group)


def _fits(shape: Any, array: zarr.Array[Any]) -> bool:
    return shape is not None and len(tuple(shape)) == array.ndim


def _copy_small(array: zarr.Array[Any], root: ResolvedStore, path: str) -> None:
    """Copy a small array unsharded, in one chunk, with what carries over."""
    opened = open_source(array)
    copy = zarr.create_array(
        root.zarr_store_for_writes,
        name=root.key(path),
        shape=array.shape,
        dtype=array.dtype,
        chunks=tuple(max(1, n) for n in array.shape) if array.ndim else "auto",
        fill_value=opened.fill_value,
        dimension_names=opened.dimension_names,
        attributes=opened.attributes,
        overwrite=True,
    )
    copy[...] = np.asarray(opened.array[...])  # read within bounds, as every source
