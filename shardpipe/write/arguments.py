"""Check and normalise the arguments of a write before any byte is written.

Every check raises :class:`~shardpipe.errors.InvalidArgumentError` naming the
parameter, what is wrong with it, and how to fix it: the source and its
layout, the budget, a region write's or an append's place in the existing
array and its ``write_strategy`` (``to_sharded_zarr(..., region=...)`` writes
into a box of an existing array, ``append_dim=`` grows it along one axis and
writes at the new end), how data of another dtype is cast into the array, the
settings an update may not change, a read-only Icechunk session as the target
(:func:`check_writable`), and ``commit``/``rebase`` (:func:`check_run`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import zarr
from zarr.storage import MemoryStore

from shardpipe import advice
from shardpipe.core.checks import check_shards_of_chunks, is_integer, shape_param, shown
from shardpipe.core.grid import Coords, Shape
from shardpipe.core.shard_update import STRATEGIES
from shardpipe.core.sizes import (
    default_chunk_shape,
    default_chunk_shape_within,
    default_shard_shape,
    parse_bytes,
)
from shardpipe.core.value_casts import CastRule, cast_checked, cast_rule
from shardpipe.errors import InvalidArgumentError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.storage.base import ObjectVersion, ShardStore
from shardpipe.storage.icechunk.store import IcechunkShardStore
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import resolved_name
from shardpipe.stored.metadata import format_of, layout_of


def check_array(arr: Any) -> None:
    """Accept a Dask or NumPy array: one dimension or more, known chunks, a fixed-size dtype."""
    if not isinstance(arr, da.Array | np.ndarray):
        kind = type(arr).__name__
        fix = "Wrap the data with dask.array.from_array(...) first"
        if kind == "Dataset":
            fix = (
                "Write a Dataset with its accessor, ds.shard.to_zarr(store, shards={...}) "
                "(after import shardpipe): every data variable sharded, coordinates and "
                "attributes kept"
            )
        elif kind == "DataArray":
            fix = (
                "Write a DataArray with its accessor, da.shard.to_zarr(store, shards={...}) "
                "(after import shardpipe), as ds.shard.to_zarr writes a Dataset; or pass its "
                "array, da.data, with dimension_names=da.dims"
            )
        elif kind == "Variable":
            fix = "Pass its array, var.data, with dimension_names=var.dims"
        raise InvalidArgumentError(
            "arr", f"expected a dask.array.Array or numpy.ndarray, got {kind}", fix
        )
    if arr.ndim == 0:
        raise InvalidArgumentError(
            "arr", "a 0-dimensional array cannot be sharded", "Reshape it to (1,)"
        )
    if isinstance(arr, da.Array) and any(math.isnan(n) for c in arr.chunks for n in c):
        raise InvalidArgumentError(
            "arr",
            f"the Dask array has unknown chunk sizes (shape {arr.shape}), as after boolean "
            "indexing",
            "Call arr.compute_chunk_sizes() first, or arr = arr.rechunk(...) to known sizes",
        )
    dtype = arr.dtype
    if dtype.kind in "OV" or dtype.hasobject:
        raise InvalidArgumentError(
            "arr",
            f"dtype {dtype} is not supported",
            "Convert the array to a fixed-size numeric, bool or string dtype (e.g. astype('U16'))",
        )


def as_dask_array(arr: da.Array | np.ndarray, shard_shape: Shape) -> da.Array:
    """Return a Dask array as is; wrap a NumPy array in blocks of one shard.

    The NumPy array is not hashed for a name (``name=False``): hashing costs a
    full pass over the data and the graph is computed once.
    """
    if isinstance(arr, da.Array):
        return arr
    wrapped: da.Array = da.from_array(arr, chunks=shard_shape, name=False)
    return wrapped


def resolve_shapes(shape: Shape, itemsize: int, shards: Any, chunks: Any) -> tuple[Shape, Shape]:
    """Return ``(shard_shape, chunk_shape)``, filling in documented defaults."""
    ndim = len(shape)
    shard_shape = shape_param("shards", shards, ndim)
    chunk_shape = shape_param("chunks", chunks, ndim)
    if chunk_shape is None:
        chunk_shape = (
            default_chunk_shape(shape, itemsize)
            if shard_shape is None
            else default_chunk_shape_within(shard_shape, itemsize)
        )
    if shard_shape is None:
        shard_shape = default_shard_shape(shape, chunk_shape, itemsize)
    check_shards_of_chunks(shard_shape, chunk_shape)
    return shard_shape, chunk_shape


def check_fill_value(fill_value: Any, dtype: np.dtype[Any]) -> None:
    """Refuse a fill value that the dtype cannot represent exactly."""
    if fill_value is None:
        return
    problem = None
    try:
        if dtype.kind in "iu" and isinstance(fill_value, str | bytes):
            problem = (
                f"{fill_value!r} cannot be stored as {dtype}: a {type(fill_value).__name__} "
                "is not a number (it is never converted)"
            )
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            as_float = float(fill_value)
            if not as_float.is_integer() or not info.min <= int(fill_value) <= info.max:
                problem = f"{fill_value!r} is not an integer in [{info.min}, {info.max}]"
        elif dtype.kind == "b":
            if fill_value not in (True, False, 0, 1):
                problem = f"{fill_value!r} is not a boolean"
        elif dtype.kind in "fc":
            value = np.asarray(fill_value)
            if value.dtype.kind not in "biufc" or (dtype.kind == "f" and value.dtype.kind == "c"):
                problem = f"{fill_value!r} is not a number of kind {dtype.kind!r}"
            elif np.isfinite(value) and not np.isfinite(value.astype(dtype)):
                problem = f"{fill_value!r} overflows {dtype}"
        else:
            np.asarray(fill_value, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as err:
        problem = f"{fill_value!r} cannot be stored as {dtype} ({err})"
    if problem:
        raise InvalidArgumentError(
            "fill_value", f"{problem} for dtype {dtype}", "Pick a value of the array's dtype"
        )


def check_max_mem(max_mem: Any) -> int:
    """Parse ``max_mem``: a positive integer of bytes or a string like ``"2GB"`` (not a float)."""
    if isinstance(max_mem, float | np.floating):
        raise InvalidArgumentError(
            "max_mem",
            f"expected an integer number of bytes or a string, got {shown(max_mem)}",
            f"Pass max_mem={int(max_mem)!r} or a string like '2.5GB'"
            if math.isfinite(max_mem) and max_mem > 0
            else "Pass bytes or a string like '2GB'",
        )
    try:
        return parse_bytes(max_mem)
    except ValueError as err:
        raise InvalidArgumentError(
            "max_mem", str(err), "Pass a positive integer of bytes or a string like '2GB'"
        ) from None


def build_metadata(**create_kwargs: Any) -> ArrayV3Metadata:
    """Let zarr validate the array definition, in memory, and return its metadata."""
    try:
        array = zarr.create_array(MemoryStore(), **create_kwargs)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            "compressors/filters/serializer",
            f"zarr rejects the codecs ({err})",
            "Pass codec objects or dicts as accepted by zarr.create_array",
        ) from err
    metadata = array.metadata
    assert isinstance(metadata, ArrayV3Metadata)
    return metadata


def check_writable(target: ResolvedStore) -> None:
    """Refuse a read-only Icechunk session as the target of a write (before anything is written)."""
    if target.transactional and target.zarr_store.read_only:
        shards = target.shards
        assert isinstance(shards, IcechunkShardStore) and shards.session is not None
        raise InvalidArgumentError(
            "store",
            f"the Icechunk session on snapshot {shards.session.snapshot_id} is read-only",
            "Open a writable one: repo.writable_session('main') (or another branch)",
        )


def check_run(commit: object, rebase: object, target: ResolvedStore) -> tuple[str | None, bool]:
    """Check ``commit`` and ``rebase`` for jobs writing to ``target``; return them.

    Used by :func:`~shardpipe.write.job.run_jobs`, and by the front doors that return delayed work
    (``compute=False``) so that a wrong ``commit`` is refused there too.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        For a message that is not a non-empty string, ``commit`` on a target
        that is not an Icechunk session, or ``rebase`` without ``commit``.
    """
    if commit is not None and not (isinstance(commit, str) and commit.strip()):
        raise InvalidArgumentError(
            "commit",
            f"expected a commit message, got {commit!r}",
            'Pass a non-empty string such as commit="write temperature", or leave it out',
        )
    if not isinstance(rebase, bool):
        raise InvalidArgumentError(
            "rebase", f"expected True or False, got {rebase!r}", "Pass rebase=True or leave it out"
        )
    if commit is not None and not target.transactional:
        raise InvalidArgumentError(
            "commit",
            f"{commit!r}, but {resolved_name(target)} is not an Icechunk session: its "
            "writes take effect as they happen",
            "Leave commit out, or pass a writable Icechunk Session as the store",
        )
    if rebase and commit is None:
        raise InvalidArgumentError(
            "rebase",
            "True without commit: rebasing happens when committing",
            'Pass commit="message" too, or commit the session yourself',
        )
    return commit, rebase


def region_offset(region: Any, shape: Shape, source_shape: Shape) -> Coords:
    """Where a source of ``source_shape`` goes for ``region`` in an array of ``shape``.

    ``region`` is a tuple of ``slice`` objects (``None`` bounds allowed,
    negative bounds count from the end, step 1), one per dimension, whose
    shape must be the source's.
    """
    if not isinstance(region, tuple) or not all(isinstance(s, slice) for s in region):
        raise InvalidArgumentError(
            "region",
            f"expected a tuple of slices, got {region!r}",
            "Pass e.g. region=(slice(0, 10), slice(None), slice(None)), one slice per dimension",
        )
    if len(region) != len(shape):
        raise InvalidArgumentError(
            "region",
            f"{len(region)} slice(s) for an array of {len(shape)} dimensions {shape}",
            f"Give exactly {len(shape)} slices (slice(None) for a whole dimension)",
        )
    offset = []
    for d, (s, n, m) in enumerate(zip(region, shape, source_shape, strict=True)):
        for bound in (s.start, s.stop, s.step):
            if bound is not None and not is_integer(bound):
                raise InvalidArgumentError(
                    "region",
                    f"dimension {d}: {s!r} has a bound that is not an integer",
                    "Use integer slice bounds",
                )
        if s.step not in (None, 1):
            raise InvalidArgumentError(
                "region", f"dimension {d}: {s!r} has step {s.step}", "Use contiguous slices"
            )
        start = 0 if s.start is None else int(s.start)
        stop = n if s.stop is None else int(s.stop)
        start, stop = (start + n if start < 0 else start), (stop + n if stop < 0 else stop)
        if 0 <= stop < start <= n:
            raise InvalidArgumentError(
                "region",
                f"dimension {d}: {s!r} runs backwards (from {start} down to {stop})",
                "Give the smaller bound first, e.g. slice(5, 10)",
            )
        if not 0 <= start <= stop <= n:
            raise InvalidArgumentError(
                "region",
                f"dimension {d}: {s!r} lies outside the array's extent [0, {n})",
                "Give a region inside the array, or grow it with append_dim",
            )
        if stop - start != m:
            raise InvalidArgumentError(
                "region",
                f"dimension {d}: {s!r} holds {stop - start} element(s) but the source has {m}",
                "Make the region's shape equal the source's shape "
                f"(source shape {tuple(source_shape)})",
            )
        offset.append(start)
    return tuple(offset)


def append_axis(append_dim: Any, dimension_names: Sequence[str | None] | None) -> Any:
    """``append_dim`` as an axis: a dimension name becomes its position in ``dimension_names``.

    An integer (or anything else) is returned as given, for
    :func:`appended_shape` to check.
    """
    if not isinstance(append_dim, str):
        return append_dim
    names = list(dimension_names or ())
    if append_dim not in names:
        named = [n for n in names if n is not None]
        raise InvalidArgumentError(
            "append_dim",
            f"{append_dim!r} is not a dimension name of the array"
            + (f" (its dimension_names are {names})" if named else " (it has no dimension_names)"),
            f"Use one of {named} or an axis number" if named else "Use an axis number",
        )
    return names.index(append_dim)


def appended_shape(append_dim: Any, shape: Shape, source_shape: Shape) -> tuple[Shape, Coords]:
    """The grown shape, and the offset of the source, for ``append_dim`` (an axis)."""
    ndim = len(shape)
    if not is_integer(append_dim) or not -ndim <= int(append_dim) < ndim:
        raise InvalidArgumentError(
            "append_dim",
            f"{append_dim!r} is not an axis of the {ndim}-dimensional array",
            f"Use an integer in [{-ndim}, {ndim})",
        )
    axis = int(append_dim) % ndim
    if len(source_shape) != ndim:
        raise InvalidArgumentError(
            "append_dim",
            f"the source has {len(source_shape)} dimensions, the array {ndim}",
            "Append data with as many dimensions as the array",
        )
    for d, (n, m) in enumerate(zip(shape, source_shape, strict=True)):
        if d != axis and n != m:
            raise InvalidArgumentError(
                "append_dim",
                f"appending along axis {axis} needs every other dimension to match, but "
                f"dimension {d} is {m} in the source and {n} in the array {shape}",
                "Give a source of shape ("
                + ", ".join("k" if i == axis else str(n) for i, n in enumerate(shape))
                + ")",
            )
    grown = tuple(n + (source_shape[d] if d == axis else 0) for d, n in enumerate(shape))
    offset = tuple(shape[d] if d == axis else 0 for d in range(ndim))
    return grown, offset


def check_strategy(write_strategy: Any) -> str:
    """Return ``write_strategy`` if it is one of :data:`~shardpipe.core.shard_update.STRATEGIES`."""
    if write_strategy not in STRATEGIES:
        raise InvalidArgumentError(
            "write_strategy",
            f"unknown value {write_strategy!r}",
            f"Use one of {', '.join(repr(s) for s in STRATEGIES)}",
        )
    return str(write_strategy)


def check_strategy_possible(strategy: str, store: ShardStore) -> None:
    """Refuse a ``write_strategy`` that ``store`` cannot carry out (``"auto"`` always can)."""
    abilities = store.abilities
    if strategy == "in_place" and not abilities.write_at:
        raise InvalidArgumentError(
            "write_strategy",
            f"'in_place' needs writes at an offset, which {type(store).__name__} cannot do",
            "Use 'auto', 'append' (S3) or 'rewrite'",
        )
    composes = abilities.parts and abilities.copy_range
    if strategy == "append" and not (abilities.append or composes):
        raise InvalidArgumentError(
            "write_strategy",
            f"'append' needs appends or server-side range copies, which "
            f"{type(store).__name__} cannot do",
            "Use 'auto' or 'rewrite'",
        )


def check_source_dtype(dtype: np.dtype[Any], metadata: ArrayV3Metadata) -> None:
    """Refuse a source whose dtype is not the array's."""
    target = metadata.dtype.to_native_dtype()
    if np.dtype(dtype) != target:
        raise InvalidArgumentError(
            "arr",
            f"dtype {np.dtype(dtype)} does not match the existing array's {target}",
            f"Convert the source first, e.g. arr.astype({str(target)!r})",
        )


def check_castable(dtype: Any, target: np.dtype[Any], parameter: str) -> CastRule:
    """How data of ``dtype`` goes into an array of ``target``, or a refusal naming ``parameter``.

    See :mod:`shardpipe.core.value_casts`: equal dtypes, safe casts, and casts
    whose values are checked (integers into integers, into narrower floats).
    """
    rule = cast_rule(np.dtype(dtype), target)
    if rule is None:
        raise InvalidArgumentError(
            parameter,
            f"the data's dtype {np.dtype(dtype)} cannot be cast to the array's {target} "
            "without changing values",
            f"Convert it first, e.g. data.astype({str(target)!r})",
        )
    return rule


def cast_source(arr: Any, target: np.dtype[Any], rule: CastRule, parameter: str) -> Any:
    """``arr`` (NumPy or Dask) as ``target``, by ``rule`` (:func:`check_castable`).

    Data in memory is checked whole, here, before anything is written. A
    Dask array is not computed twice: each block is checked where it is
    computed, in the task that writes its shard, so a value out of range
    fails the write before that shard is written (shards written before it
    keep the new values; each is whole).
    """
    if rule == "same":
        return arr
    if isinstance(arr, da.Array):
        if rule == "safe":
            return arr.astype(target)
        return da.map_blocks(cast_checked, arr, target, parameter, dtype=target)
    values = np.asarray(arr)
    if rule == "safe":
        return values.astype(target)
    return cast_checked(values, target, parameter)


def check_unchanged_settings(metadata: ArrayV3Metadata, **given: Any) -> None:
    """Refuse layout or codec arguments that differ from the existing array's.

    Arguments left at their defaults are not compared; the others must
    describe the existing array exactly.
    """
    layout = layout_of(metadata)
    existing: dict[str, Any] = {
        "shards": layout.shard_shape,
        "chunks": layout.chunk_shape,
        "index_location": format_of(metadata).index_location,
    }
    for name, value in given.items():
        if value is None or (isinstance(value, str) and value == "auto"):
            continue
        if name in existing:
            mine = tuple(value) if isinstance(value, (list, tuple)) else value
            if mine != existing[name]:
                raise InvalidArgumentError(
                    name,
                    f"{value!r} differs from the existing array's {existing[name]!r}",
                    f"Leave {advice.name(name)} out when writing into an existing array, "
                    "or rewrite the "
                    f"whole array with {advice.setting('overwrite')}",
                )
            continue
        raise InvalidArgumentError(
            name,
            f"{value!r} cannot be changed by a region write or an append",
            f"Leave {advice.name(name)} out (the existing array's settings are used), or "
            "rewrite the whole "
            f"array with {advice.setting('overwrite')}",
        )


@dataclass(frozen=True)
class ExistingArray:
    """The array an update writes into.

    Attributes
    ----------
    metadata : ArrayV3Metadata
        Its metadata as read before planning.
    version : ObjectVersion
        Version of its ``zarr.json`` then (the update publishes only if it
        is unchanged).
    grown : ArrayV3Metadata or None
        The metadata to publish after the shards (an append), else None.
    strategy : str
        ``write_strategy``.
    update : str
        Identity of the update: a hash of its source's Dask name, its place
        in the array and the array's metadata before it. Records of the
        shards it finished are kept under it, so that ``resume=True`` can
        skip them after an interruption.
    in_place_fits : bool
        Whether an update in place (which keeps the old bytes it overwrites)
        fits ``max_mem``; when not, ``"auto"`` appends or rewrites instead.
    """

    metadata: ArrayV3Metadata
    version: ObjectVersion
    grown: ArrayV3Metadata | None
    strategy: str
    update: str = ""
    in_place_fits: bool = True
