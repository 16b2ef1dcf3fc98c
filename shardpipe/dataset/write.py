"""Write an xarray Dataset or DataArray as sharded Zarr v3 arrays (``ds.shard.to_zarr``).

xarray does what it knows: CF encoding (times, packing, ``_FillValue``,
``dtype``), attributes, ``dimension_names``, coordinates and the variables
that are not sharded, written through its own zarr backend
(``dump_to_store`` into its ``ZarrStore``). shardpipe writes the data of the
sharded variables, all of them in one Dask computation:

- a variable that is new (every variable with ``mode="w"``/``"w-"``):
  xarray creates the array (metadata only: a writer passed to xarray takes
  the encoded data instead of storing it), and a job of
  :func:`~shardpipe.write.prepare.prepare_fill` fills it;
- a sharded variable that exists (``mode="a"``/``"r+"``): its new data is
  encoded with the stored variable's encoding, as xarray does, and written
  by shardpipe's update machinery (``append_dim`` grows it, ``region`` writes
  a box of it), planned and checked before xarray writes anything.

Consolidated metadata is written last.

This leans on xarray's backend internals (``dump_to_store``, ``ZarrStore``
and its region checks, ``ArrayWriter``), not only on its public API: the
tests run against the xarray version pinned in ``requirements/``.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn, Unpack

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from dask.delayed import Delayed, delayed
from xarray.backends.common import ArrayWriter
from xarray.backends.writers import dump_to_store
from xarray.backends.zarr import ZarrStore

from shardpipe import advice
from shardpipe.codec.checksums import checksummed_compressors
from shardpipe.dataset.arguments import check_arguments
from shardpipe.dataset.dry_run import check_metadata_write
from shardpipe.dataset.existing import StoredVariables, check_compatible
from shardpipe.dataset.layout import (
    VariableShape,
    grid_aligned_chunks,
    variable_layout,
)
from shardpipe.dataset.options import DATASET_PARAMETERS, DatasetOptions
from shardpipe.dataset.recovery_notes import recovery_noted
from shardpipe.dataset.write_report import DatasetWriteReport
from shardpipe.dataset.xarray_store import region_checked, xarray_store
from shardpipe.engine.reports import WriteReport
from shardpipe.engine.scheduler import check_store_reachable
from shardpipe.errors import ArrayExistsError, InvalidArgumentError
from shardpipe.storage.resolve import ResolvedStore, resolve_store
from shardpipe.stored.locations import Location, locations_read, resolved_name
from shardpipe.stored.metadata import is_sharded
from shardpipe.stored.places import check_nothing_else_there, check_reads_apart, check_target
from shardpipe.write.arguments import check_run, check_writable
from shardpipe.write.job import Pass, PassReports, RunOptions, ShardedWrite, run_checked_job
from shardpipe.write.options import DEFAULT_ARRAY_OPTIONS
from shardpipe.write.parameters import shares_parameters
from shardpipe.write.prepare import prepare_checked, prepare_fill
from shardpipe.write.resume import check_no_other_job

CARRIED_ENCODING = frozenset(
    {"dtype", "scale_factor", "add_offset", "_FillValue", "missing_value", "units", "calendar"}
)
"""CF keys of a variable's own ``encoding`` kept for its sharded array.

Its layout and codec keys (``chunks``, ``shards``, ``compressors``, ...,
``preferred_chunks``, netCDF's ``zlib``) describe the store it was read
from, not the one written: they are dropped; give them in ``encoding=``.
"""

SHARDED_KINDS = "biufcmM"
"""NumPy dtype kinds of the data variables shardpipe shards (strings are left to xarray)."""


@shares_parameters(DATASET_PARAMETERS)
def to_zarr(
    obj: xr.Dataset | xr.DataArray,
    store: Any,
    *,
    compute: bool = True,
    progress: bool = False,
    commit: str | None = None,
    rebase: bool = False,
    **options: Unpack[DatasetOptions],
) -> DatasetWriteReport | Delayed:
    """Write ``obj`` to a Zarr v3 group whose data variables are sharded.

    What ``obj.shard.to_zarr(...)`` does: see
    :meth:`shardpipe.dataset.accessor.ShardAccessor.to_zarr`.

    Parameters
    ----------
    obj : xarray.Dataset or xarray.DataArray
        What to write (a DataArray is named as ``DataArray.to_zarr`` names it).
    """
    ds = as_dataset(obj)
    checked = check_arguments(ds, compute=compute, progress=progress, **options)
    mode, progress, compute = checked.mode, checked.progress, checked.compute
    consolidated, chunk_checksums = checked.consolidated, checked.chunk_checksums
    strategy, budget, encoding = checked.strategy, checked.budget, checked.encoding
    shard_sizes, chunk_sizes = checked.shard_sizes, checked.chunk_sizes
    append_dim, region = checked.append_dim, checked.region
    given = {name: dict(value) for name, value in encoding.items()}  # the caller's, as given
    root, stored = _open_target(store, checked.group, checked.storage_options, mode)
    if mode in ("w", "w-"):  # the group is replaced: nothing it holds may be read
        check_reads_apart(
            root,
            [place for var in ds.variables.values() for place in _reads_of(var)],
            parameter="store",
            fix="Write to another path (then delete the old group and move the new one into "
            "place), or load() the dataset into memory first",
        )
    run = RunOptions(progress, *check_run(commit, rebase, root))
    if root.transactional:
        if not compute:
            raise InvalidArgumentError(
                "compute",
                "False, but a write into an Icechunk session runs at once: the changes its "
                "tasks make are merged into the session in this process",
                "Use compute=True",
            )
        consolidated = False  # Icechunk lists its own metadata; it keeps no consolidated copy
    to_update = [name for name in ds.data_vars if name in stored.sharded and mode in ("a", "r+")]
    if to_update and not compute:
        raise InvalidArgumentError(
            "compute",
            f"variables {to_update} exist and are updated, which runs at once",
            "Use compute=True",
        )
    new = [
        name
        for name in ds.data_vars
        if name not in stored.names and _shardable(ds.variables[name], encoding.get(name, {}))
    ]
    for name in new:
        encoding[name] = _sharded_encoding(
            name,
            ds.variables[name],
            encoding.get(name, {}),
            shard_sizes,
            chunk_sizes,
            chunk_checksums=chunk_checksums,
            index_at_start=not root.shards.abilities.suffix_ranges,
        )

    zstore = (
        xarray_store(root, mode, append_dim, region, stored.consolidated)
        if mode in ("a", "r+")
        else None
    )
    regions: dict[Hashable, slice] = {}
    if zstore is not None:
        ds = region_checked(zstore, ds, region, mode)
        regions = dict(zstore._write_region or {})
        zstore._validate_encoding(encoding)
    updates = _prepare_updates(
        ds, to_update, stored, root, zstore, regions, append_dim, strategy, budget
    )
    sources = [ds.variables[n].data for n in new if isinstance(ds.variables[n].data, da.Array)]
    for source in sources:
        check_store_reachable(source, root)

    check_metadata_write(ds.drop_vars(to_update), encoding, given)  # in memory, first
    writer = _ShardRouter()
    with recovery_noted(root, mode):  # what to do with what a failure leaves
        if zstore is None:  # with mode "w", xarray replaces what is there now
            zstore = xarray_store(root, mode, None, None, consolidated=False)
        dump_to_store(ds.drop_vars(to_update), zstore, writer, encoding=encoding)  # type: ignore[no-untyped-call]
        try:
            fills = [
                (str(target.path), _prepare_fill(target, source, root, budget))
                for source, target in writer.sharded
            ]
        except BaseException as err:
            _undo_created(err, root, mode)
            raise
        jobs = {**dict(fills), **updates}
        if not compute:
            others = writer.sync(compute=False)  # type: ignore[no-untyped-call]
            parts = [job.to_delayed() for job in jobs.values()]
            finished: Delayed = delayed(_finish_delayed, pure=False)(
                list(jobs), parts, others, root, consolidated
            )
            return finished
        job = _DatasetWrite(root, ds, jobs, writer, zstore, consolidated)
        report: DatasetWriteReport = run_checked_job(job, run)
    return report


@dataclass
class _DatasetWrite:
    """A dataset's write as a job: its sharded variables' writes, then xarray's own writes."""

    target: ResolvedStore
    ds: xr.Dataset
    jobs: dict[str, ShardedWrite]
    writer: _ShardRouter
    zstore: ZarrStore
    consolidated: bool

    def summary_rows(self) -> list[tuple[str, str]]:
        return [(path, str(dict(job.summary_rows())["shards"])) for path, job in self.jobs.items()]

    def passes(self) -> list[Pass]:
        """One pass: the sharded variables, then what xarray writes itself, then consolidation."""
        return [Pass("write the dataset", lambda _: list(self.jobs.values()), self._end)]

    def _end(self, _: Sequence[WriteReport]) -> None:
        # xarray's own writes go through the session itself, which stays in this process
        local = {"scheduler": "threads"} if self.target.transactional else None
        self.writer.sync(compute=True, chunkmanager_store_kwargs=local)  # type: ignore[no-untyped-call]
        self.zstore.close()
        if self.consolidated:
            _consolidate(self.target)

    def finish(
        self, reports: PassReports, seconds: float, snapshot_id: str | None
    ) -> DatasetWriteReport:
        return DatasetWriteReport(
            (_variable(self.ds, path), replace(report, snapshot_id=snapshot_id))
            for path, report in zip(self.jobs, reports[0], strict=True)
        )


def _open_target(
    store: Any, group: str | None, storage_options: dict[str, Any] | None, mode: str
) -> tuple[ResolvedStore, StoredVariables]:
    """Resolve the target group, read what it holds, refuse what ``mode`` forbids.

    Refused: a read-only store, anything at the target with ``mode="w-"``,
    and a running shardpipe job on any of its arrays (which ``"w"`` would
    delete and ``"a"``/``"r+"`` would change under it).
    """
    root = resolve_store(store, group, storage_options)
    check_writable(root)
    check_target(root, overwrite=True)
    stored = StoredVariables.read(root, mode)
    if mode == "w-" and stored.exists:
        raise ArrayExistsError(
            f"{advice.name('mode')}: a Zarr node already exists at "
            f"{advice.place(root.path, resolved_name(root))}; pass "
            f"{advice.setting('mode', 'w')} to replace it, or {advice.setting('mode', 'a')} to add "
            "to it"
        )
    if mode == "w-":
        check_nothing_else_there(root, "store", advice.setting("mode", "w"))
    for path in stored.array_paths():
        check_no_other_job(ResolvedStore(root.zarr_store, root.shards, path), None, "write it")
    return root, stored


def _reads_of(var: xr.Variable) -> list[Location]:
    """Where the zarr arrays a variable's data reads live (its data is not loaded)."""
    return locations_read(getattr(var, "_data", None))


def cf_encoding(var: xr.Variable) -> dict[str, Any]:
    """The CF keys (:data:`CARRIED_ENCODING`) of a variable's own encoding."""
    return {k: v for k, v in var.encoding.items() if k in CARRIED_ENCODING}


def keep_cf_encoding(ds: xr.Dataset) -> xr.Dataset:
    """A shallow copy of ``ds`` whose variables keep only the CF keys of their encoding.

    For a dataset read from one store and written to another: its layout and
    codec encodings (numcodecs compressors of a Zarr v2 store, say) would
    otherwise follow its coordinates into the new store.
    """
    out = ds.copy(deep=False)
    for var in out.variables.values():
        var.encoding = cf_encoding(var)
    return out


def as_dataset(obj: Any) -> xr.Dataset:
    """Return ``obj`` as a Dataset, naming a DataArray as ``DataArray.to_zarr`` does."""
    if isinstance(obj, xr.Dataset):
        return obj
    if not isinstance(obj, xr.DataArray):
        raise InvalidArgumentError(
            "obj",
            f"expected an xarray Dataset or DataArray, got {type(obj).__name__}",
            "For a Dask or NumPy array, use shardpipe.to_sharded_zarr",
        )
    from xarray.backends.api import DATAARRAY_NAME, DATAARRAY_VARIABLE

    if obj.name is None:
        return obj.to_dataset(name=DATAARRAY_VARIABLE)
    if obj.name in obj.coords or obj.name in obj.dims:
        ds = obj.to_dataset(name=DATAARRAY_VARIABLE)
        ds.attrs[DATAARRAY_NAME] = obj.name
        return ds
    return obj.to_dataset()


class _ShardRouter(ArrayWriter):
    """An xarray ``ArrayWriter`` that keeps the data bound for sharded arrays.

    xarray creates every array and hands its encoded data to ``add``: data
    for a sharded array is kept (shardpipe writes it), the rest is written as
    xarray would.
    """

    __slots__ = ("sharded",)

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.sharded: list[tuple[Any, zarr.Array[Any]]] = []

    def add(self, source: Any, target: Any, region: Any = None) -> None:
        if isinstance(target, zarr.Array) and is_sharded(target.metadata) and np.ndim(source):
            self.sharded.append((source, target))
            return
        if isinstance(source, da.Array) and isinstance(target, zarr.Array) and source.ndim:
            # xarray's chunk-alignment check is off (shardpipe aligns the sharded variables):
            # give the variables xarray writes Dask chunks inside its stored chunks instead
            starts = [s.start or 0 for s in region] if region else [0] * source.ndim
            source = source.rechunk(grid_aligned_chunks(source.shape, target.chunks, starts))
        super().add(source, target, region)  # type: ignore[no-untyped-call]


def _shardable(var: xr.Variable, encoding: Mapping[str, Any]) -> bool:
    if "shards" in encoding and encoding["shards"] is None:
        return False  # the caller asked for an unsharded array
    return var.ndim > 0 and var.dtype.kind in SHARDED_KINDS


def _sharded_encoding(
    name: Hashable,
    var: xr.Variable,
    encoding: dict[str, Any],
    shards: Mapping[Hashable, int],
    chunks: Mapping[Hashable, int],
    *,
    chunk_checksums: bool,
    index_at_start: bool = False,
) -> dict[str, Any]:
    own = cf_encoding(var)
    encoding = {**own, **encoding}
    dtype = np.dtype(encoding.get("dtype", var.dtype))
    shape = VariableShape(name, tuple(var.dims), tuple(var.shape), dtype.itemsize)
    shard_shape, chunk_shape = variable_layout(shape, shards, chunks, encoding)
    sharded: dict[str, Any] = {**encoding, "shards": shard_shape, "chunks": chunk_shape}
    if index_at_start and "index_location" not in encoding:
        # a store that serves no suffix ranges (Azure): zarr-python reads the index first
        sharded["shards"] = {"shape": shard_shape, "index_location": "start"}
    if chunk_checksums:
        try:
            sharded["compressors"] = checksummed_compressors(
                encoding.get("compressors", "auto"), dtype, chunk_checksums=True
            )
        except InvalidArgumentError as err:
            raise InvalidArgumentError(
                "encoding", f"encoding[{name!r}]['compressors']: {err.problem}", err.fix
            ) from err
    return sharded


def _prepare_updates(
    ds: xr.Dataset,
    names: list[Hashable],
    stored: StoredVariables,
    root: ResolvedStore,
    zstore: Any,
    regions: Mapping[Hashable, slice],
    append_dim: Hashable | None,
    strategy: str,
    budget: int,
) -> dict[str, ShardedWrite]:
    """Plan the updates of existing sharded variables, checking them against the store.

    ``strategy`` and ``budget`` were checked by the door: each variable's write
    takes them, with its own ``region`` or ``append_dim``, and does not check them again.
    """
    jobs: dict[str, ShardedWrite] = {}
    if not names:
        return jobs
    options = replace(DEFAULT_ARRAY_OPTIONS, write_strategy=strategy, max_mem=budget)
    encoded = stored.encode_like_stored(zstore, {n: ds.variables[n] for n in names})
    for name in names:
        var = encoded[name]
        check_compatible(name, ds.variables[name], stored, regions, append_dim)
        path = root.key(str(name))
        array_shape = stored.shapes[name]
        if append_dim is not None and append_dim in var.dims:
            where = replace(options, append_dim=var.dims.index(append_dim))
        else:
            region = tuple(
                _bounded(regions.get(dim, slice(None)), size)
                for dim, size in zip(var.dims, array_shape, strict=True)
            )
            where = replace(options, region=region)
        try:
            jobs[path] = prepare_checked(
                var.data, ResolvedStore(root.zarr_store, root.shards, path), where
            )
        except InvalidArgumentError as err:
            _raise_for_variable(err, f"variable {name!r}")
    return jobs


def _bounded(region: slice, size: int) -> slice:
    start, stop, _ = region.indices(size)
    return slice(start, stop)


def _prepare_fill(
    target: zarr.Array[Any], source: Any, root: ResolvedStore, budget: int
) -> ShardedWrite:
    path = str(target.path)
    try:
        return prepare_fill(
            source, ResolvedStore(root.zarr_store, root.shards, path), budget=budget
        )
    except InvalidArgumentError as err:
        _raise_for_variable(err, f"variable at {path!r}")


def _raise_for_variable(err: InvalidArgumentError, which: str) -> NoReturn:
    """Raise ``err`` again naming the variable (in the message; a note for subclasses)."""
    if type(err) is InvalidArgumentError:
        raise InvalidArgumentError(err.parameter, f"{which}: {err.problem}", err.fix) from err
    err.add_note(f"shardpipe: raised for {which}")
    raise err


def _undo_created(err: BaseException, root: ResolvedStore, mode: str) -> None:
    """After xarray wrote a new group but a fill could not be planned: remove the group."""
    if mode not in ("w", "w-"):
        err.add_note("shardpipe: the arrays xarray created for new variables were left in place")
        return
    from shardpipe.internals.zarr_core import sync

    sync(root.zarr_store_for_writes.delete_dir(root.path))


def _variable(ds: xr.Dataset, path: str) -> Hashable:
    name = path.rsplit("/", 1)[-1]
    return next((n for n in ds.variables if str(n) == name), name)


def _consolidate(root: ResolvedStore) -> None:
    """Write consolidated metadata at the store's root, as xarray does (and reads it)."""
    with warnings.catch_warnings():
        # zarr warns that consolidated metadata is not in the v3 spec; xarray writes it anyway
        warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
        zarr.consolidate_metadata(root.zarr_store_for_writes, zarr_format=3)


def _finish_delayed(
    names: list[str],
    reports: list[WriteReport],
    _others: Any,
    root: ResolvedStore,
    consolidated: bool,
) -> DatasetWriteReport:
    if consolidated:
        _consolidate(root)
    return DatasetWriteReport(zip(names, reports, strict=True))
