"""Convert an OME-Zarr 0.4 image (Zarr v2) into a sharded OME-Zarr 0.5 image (Zarr v3).

Every level array of the image and of each label image is converted as it
is (no level is computed again). Where the chunks carry over
(:func:`~shardpipe.codec.v2_carry.carried_codec`: no filters, C order, a
compressor Zarr v3 has), the v2 chunks become the inner chunks of the v3
shards byte for byte, one task per shard (:mod:`shardpipe.ome.carry_tasks`);
otherwise the level is decoded and written again with shardpipe's
defaults (a write job per level). The metadata moves under
``attributes.ome`` with ``version: "0.5"`` (the per-multiscale and
per-label ``version`` keys go); ``omero``, labels, colours and properties
are kept.

Order: the target's group metadata, then every level array's ``zarr.json``
and shards. A conversion that stops part way leaves a group whose missing
shards read as the fill value; ``verify`` reports the unfinished
conversion (the group's record) until it is run again with
``overwrite=True``. Into an Icechunk session nothing is visible before the
commit (``commit=``), and an interrupted conversion leaves the branch as
it was.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr
from dask.base import compute
from dask.delayed import delayed

from shardpipe import advice
from shardpipe.codec.chunk_codec import ChunkCodec
from shardpipe.codec.v2_carry import CarriedCodec, carried_codec
from shardpipe.core.checks import check_bool
from shardpipe.core.display import html_table, text_table
from shardpipe.core.grid import Shape, ceildiv
from shardpipe.core.memory import DEFAULT_MAX_MEM
from shardpipe.engine.progress import ShardBar, local_progress
from shardpipe.engine.reports import WriteReport, add_reports
from shardpipe.engine.scheduler import distributed_client
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.ome.arguments import default_layout, layout_param
from shardpipe.ome.axes import Axis, axes_from_document
from shardpipe.ome.carry_tasks import CarryTarget, carry_shard
from shardpipe.ome.conversion_recovery import advise_conversion_rerun
from shardpipe.ome.metadata import NGFF_VERSION
from shardpipe.ome.options import CONVERSION_PARAMETERS
from shardpipe.ome.report import OmeZarrReport
from shardpipe.ome.run import delete_group_record, remove_group, save_group_record, write_group
from shardpipe.ome.v04_checks import SourceLevel, check_level_tasks, validate_source
from shardpipe.ome.v04_source import SOURCE_VERSION, codec_name, fill_value_of
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.bounded_reads import bounded_array
from shardpipe.stored.locations import resolved_name
from shardpipe.stored.metadata import format_of
from shardpipe.stored.places import check_not_a_file, check_reads_apart, check_target
from shardpipe.write.arguments import check_writable
from shardpipe.write.job import Pass, PassReports, ShardedWrite, run_job
from shardpipe.write.options import ArrayOptions, check_array_options
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.prepare import prepare_checked

__all__ = ["OmeZarrConversion", "convert_ome_zarr", "prepare_ome_conversion"]


@dataclass(frozen=True)
class LevelConversion:
    """How one level array is converted.

    Parameters
    ----------
    path : str
        Its path in the image group.
    shape, chunks, shards : tuple of int
        Its shape, its v2 chunks (the v3 inner chunks) and the v3 shards.
    dtype : numpy.dtype
        Its data type.
    carried : CarriedCodec or None
        How its chunks carry over, or None when it is written again.
    zarray : dict
        The v2 array's ``.zarray``.
    job : ShardedWrite or None
        The write of a level whose chunks do not carry over.
    """

    path: str
    shape: Shape
    chunks: Shape
    shards: Shape
    dtype: np.dtype[Any]
    carried: CarriedCodec | None
    zarray: dict[str, Any]
    job: ShardedWrite | None

    @property
    def n_shards(self) -> int:
        """Shards of the v3 array."""
        return math.prod(ceildiv(n, s) for n, s in zip(self.shape, self.shards, strict=True))


@dataclass
class OmeZarrConversion:
    """A planned conversion of an OME-Zarr 0.4 image to sharded 0.5: run it with :meth:`execute`.

    Parameters
    ----------
    source, target : ResolvedStore
        The 0.4 image group and where the 0.5 one goes.
    groups : dict of str to dict
        The attributes of every group to write, by path (``""``, ``"labels"``,
        ``"labels/<name>"``).
    levels : list of LevelConversion
        Every level array.
    axes : dict of str to tuple of Axis
        Each image group's axes (dimension names of its arrays).
    overwrite : bool
        Remove what is at the target first.
    chunk_checksums : bool
        End the inner chains with ``crc32c``.
    max_mem : int
        Memory budget per task.
    """

    source: ResolvedStore
    target: ResolvedStore
    groups: dict[str, dict[str, Any]]
    levels: list[LevelConversion]
    axes: dict[str, tuple[Axis, ...]]
    overwrite: bool
    chunk_checksums: bool
    max_mem: int
    notes: list[str] = field(default_factory=list)
    _carried: dict[str, WriteReport] = field(default_factory=dict, init=False, repr=False)

    def summary_rows(self) -> list[tuple[str, str]]:
        """The plan as ``(label, value)`` rows."""
        rows = [
            (
                "source",
                f"{resolved_name(self.source)} (OME-Zarr {SOURCE_VERSION}, Zarr v2)",
            ),
            ("target", f"{resolved_name(self.target)} (OME-Zarr {NGFF_VERSION}, sharded)"),
        ]
        for level in self.levels:
            how = (
                f"chunks copied as they are ({codec_name(level.carried)})"
                if level.carried is not None
                else "decoded and written again"
            )
            rows.append(
                (
                    level.path,
                    f"shape {level.shape}, {level.dtype}, {level.n_shards:,} shard(s) of "
                    f"{level.shards}, inner chunks {level.chunks}: {how}",
                )
            )
        return rows

    def __repr__(self) -> str:
        return text_table("OmeZarrConversion", self.summary_rows())

    def _repr_html_(self) -> str:
        return html_table("OmeZarrConversion", self.summary_rows())

    def passes(self) -> list[Pass]:
        """One pass: the groups, the levels whose chunks carry over, then the levels written again.

        It begins by removing the target (``overwrite``), saving the group's
        record and writing the groups, then copies the chunks of the levels
        whose chunks carry over (one computation, one task per shard); its
        writes are the levels decoded and written again; it ends by removing
        the record.
        """
        self._carried = {}
        target = self.target
        transactional = target.transactional

        def begin(progress: bool) -> list[ShardedWrite]:
            if self.overwrite:
                remove_group(target)
            if not transactional:
                save_group_record(target, {"convert": str(self.source.zarr_store)}, "conversion")
            for path in sorted(self.groups, key=lambda p: (p.count("/"), p)):
                write_group(target, path, self.groups[path])
            self._carried = self._carry(progress)
            return [level.job for level in self.levels if level.job is not None]

        def end(_: Sequence[WriteReport]) -> None:
            if not transactional:
                delete_group_record(target)

        return [Pass("convert", begin, end)]

    def finish(
        self, reports: PassReports, seconds: float, snapshot_id: str | None
    ) -> OmeZarrReport:
        """Each level array's report, in level order."""
        written = iter(reports[0])
        ordered = {
            level.path: self._carried[level.path] if level.job is None else next(written)
            for level in self.levels
        }
        return OmeZarrReport(ordered, seconds, snapshot_id)

    @advise_conversion_rerun
    @shares_parameters(CONVERSION_PARAMETERS)
    def execute(
        self, *, progress: bool = False, commit: str | None = None, rebase: bool = False
    ) -> OmeZarrReport:
        """Write the groups, then every level array; return each level's report.

        Parameters
        ----------
        """
        return run_job(self, progress=progress, commit=commit, rebase=rebase)

    def _carry(self, progress: bool) -> dict[str, WriteReport]:
        """Copy the chunks of every level whose chunks carry over; return each one's report."""
        tasks, carried, n_carried = [], [], 0
        for level in self.levels:
            if level.carried is None:
                continue
            carry = self._create_carried(level)
            grid = tuple(ceildiv(n, s) for n, s in zip(level.shape, level.shards, strict=True))
            shards = list(np.ndindex(*grid))
            tasks.append([delayed(carry_shard, pure=False)(carry, s) for s in shards])
            carried.append(level.path)
            n_carried += len(shards)
        # into an Icechunk session the tasks write through its store: threads of this process
        transactional = self.target.transactional
        local = dask.config.set(scheduler="threads") if transactional else nullcontext()
        show = progress and bool(tasks) and distributed_client() is None
        with local, ShardBar(n_carried, 1, show) as bar, local_progress(bar, ("carry_shard",)):
            results = compute(*tasks)
        return {path: add_reports(*done) for path, done in zip(carried, results, strict=True)}

    def _create_carried(self, level: LevelConversion) -> CarryTarget:
        """Write the v3 metadata of a level whose chunks carry over; return its tasks' target."""
        carried = level.carried
        assert carried is not None
        compressors: list[Any] = [] if carried.compressor is None else [carried.compressor]
        if self.chunk_checksums:
            compressors.append({"name": "crc32c"})
        serializer: Any = {"name": "bytes", "configuration": {"endian": carried.endian}}
        if carried.endian is None:
            serializer = {"name": "bytes"}
        group = level.path.rsplit("/", 1)[0] if "/" in level.path else ""
        array = zarr.create_array(
            self.target.zarr_store_for_writes,
            name=self.target.key(level.path),
            shape=level.shape,
            dtype=level.dtype.newbyteorder("=") if level.dtype.byteorder == ">" else level.dtype,
            chunks=level.chunks,
            shards=level.shards,
            compressors=compressors or None,
            serializer=serializer,
            filters=None,
            fill_value=fill_value_of(level.zarray, level.dtype),
            dimension_names=[a.name for a in self.axes[group]],
            zarr_format=3,
            overwrite=True,
        )
        metadata = array.metadata
        assert isinstance(metadata, ArrayV3Metadata)
        codec = ChunkCodec.from_metadata(metadata)
        return CarryTarget(
            source=self.source.shards,
            source_prefix=self.source.key(f"{level.path}/"),
            separator=str(level.zarray.get("dimension_separator") or "."),
            chunk_grid=tuple(ceildiv(n, c) for n, c in zip(level.shape, level.chunks, strict=True)),
            target=self.target.shards,
            target_prefix=self.target.key(f"{level.path}/"),
            shard_format=format_of(metadata),
            rewrap_zlib=carried.rewrap_zlib,
            checksum=self.chunk_checksums,
            limit=codec.step_limit,
        )


@shares_parameters(CONVERSION_PARAMETERS)
def prepare_ome_conversion(
    source: Any,
    target: Any,
    *,
    path: str | None = None,
    shards: Any = None,
    overwrite: bool = False,
    source_storage_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    max_mem: int | str = DEFAULT_MAX_MEM,
    chunk_checksums: bool = True,
    reencode: bool = False,
) -> OmeZarrConversion:
    """Validate and plan a conversion (see :func:`convert_ome_zarr`); write nothing.

    The options are checked once, here: the levels written again plan with them.

    Parameters
    ----------
    """
    checked = check_array_options(
        dict(overwrite=overwrite, chunk_checksums=chunk_checksums, max_mem=max_mem)
    )
    overwrite, chunk_checksums, budget = checked.overwrite, checked.chunk_checksums, checked.max_mem
    reencode = check_bool("reencode", reencode)
    # a level's own array is new in the group made (or emptied) for the conversion
    level_options = replace(checked, overwrite=False)
    src = resolve_store(source, None, source_storage_options)
    image = validate_source(src)
    groups, images = image.groups, image.images
    axes: dict[str, tuple[Axis, ...]] = {}
    dst = resolve_store(target, path, storage_options)
    check_reads_apart(
        dst,
        [src],
        parameter="target",
        fix="Convert into a new path outside the source image (then delete the 0.4 image and "
        "move the new one into its place): shardpipe does not convert in place",
    )
    check_not_a_file(dst, "target")
    check_writable(dst)
    check_target(dst, overwrite, "target")
    levels = []
    by_name: dict[str, int] | None = None
    for group, level_paths in images:
        entry = groups[group]["ome"]["multiscales"][0]
        try:
            group_axes = axes_from_document(entry.get("axes"), f"{group or 'the image'}")
        except InvalidArgumentError as err:
            raise InvalidArgumentError("source", err.problem, err.fix) from err
        axes[group] = group_axes
        group_shards: Any = None
        if shards is not None and by_name is None:  # the image's first: shards name its axes
            given = layout_param("shards", shards, group_axes)
            assert given is not None
            by_name = {a.name: n for a, n in zip(group_axes, given, strict=True)}
        if by_name is not None:
            missing = [a.name for a in group_axes if a.name not in by_name]
            if missing:
                raise InvalidArgumentError(
                    "shards",
                    f"the label image {group!r} has the axes {missing}, which the image has not",
                    "Leave shards out, or convert the label image on its own",
                )
            group_shards = tuple(by_name[a.name] for a in group_axes)
        for level_path in level_paths:
            path = f"{group}/{level_path}" if group else level_path
            levels.append(
                _plan_level(
                    src,
                    dst,
                    path,
                    image.levels[path],
                    group_axes,
                    group_shards,
                    level_options,
                    reencode,
                )
            )
    return OmeZarrConversion(src, dst, groups, levels, axes, overwrite, chunk_checksums, budget)


def _plan_level(
    src: ResolvedStore,
    dst: ResolvedStore,
    path: str,
    level: SourceLevel,
    axes: tuple[Axis, ...],
    shards: Any,
    options: ArrayOptions,
    reencode: bool,
) -> LevelConversion:
    """How the level at ``path`` is converted; one written again plans with ``options``
    (checked already) and its own layout."""
    budget = options.max_mem
    shape, chunks, dtype = level.array.shape, level.array.chunks, level.array.dtype
    native = dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype
    shard_shape, _ = default_layout(
        shape, axes, dtype.itemsize, layout_param("shards", shards, axes), chunks
    )
    carried = None if reencode else carried_codec(level.array)
    job = None
    if carried is not None:
        n_shards = math.prod(ceildiv(n, s) for n, s in zip(shape, shard_shape, strict=True))
        check_level_tasks(path, n_shards, "shards, one task each", "Pass larger shards")
        projected = 2 * math.prod(shard_shape) * dtype.itemsize + 64 * math.prod(
            ceildiv(s, c) for s, c in zip(shard_shape, chunks, strict=True)
        )
        if projected > budget:
            raise MemoryBudgetError(
                f"carry-shard ({path})",
                projected,
                budget,
                "a shard's task holds its chunks and the joined shard; raise "
                f"{advice.name('max_mem')} or pass "
                "smaller shards",
            )
    else:
        check_level_tasks(
            path,
            level.array.n_chunks,
            "chunks, one Dask block each",
            "Convert without reencode (chunks are copied a shard at a time), or rewrite the "
            "level with larger chunks",
        )
        # read and decoded within bounds, as a rechunk's source is
        array = bounded_array(
            zarr.open_array(src.zarr_store, path=src.key(path), mode="r", zarr_format=2)
        )
        job = prepare_checked(
            da.from_zarr(array).astype(native),
            dst,
            replace(
                options,
                path=path,
                shards=shard_shape,
                chunks=chunks,
                dimension_names=[a.name for a in axes],
                fill_value=level.array.fill_value,
            ),
        )
    return LevelConversion(path, shape, chunks, shard_shape, dtype, carried, level.zarray, job)


@shares_parameters(CONVERSION_PARAMETERS)
def convert_ome_zarr(
    source: Any,
    target: Any,
    *,
    path: str | None = None,
    shards: Any = None,
    overwrite: bool = False,
    source_storage_options: dict[str, Any] | None = None,
    storage_options: dict[str, Any] | None = None,
    max_mem: int | str = DEFAULT_MAX_MEM,
    chunk_checksums: bool = True,
    reencode: bool = False,
    progress: bool = False,
    commit: str | None = None,
    rebase: bool = False,
) -> OmeZarrReport:
    """Convert the OME-Zarr 0.4 image at ``source`` into a sharded OME-Zarr 0.5 image at ``target``.

    Parameters
    ----------

    Returns
    -------
    OmeZarrReport
        Each level array's report (and, with ``commit``, the snapshot id).
    """
    return prepare_ome_conversion(
        source,
        target,
        path=path,
        shards=shards,
        overwrite=overwrite,
        source_storage_options=source_storage_options,
        storage_options=storage_options,
        max_mem=max_mem,
        chunk_checksums=chunk_checksums,
        reencode=reencode,
    ).execute(progress=progress, commit=commit, rebase=rebase)
