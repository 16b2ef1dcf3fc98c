"""Check and normalise the arguments of a write before any byte is written.

Every check raises :class:`~shardpipe.errors.InvalidArgumentError` naming the
parameter, what is wrong with it, and how to fix it.
"""

from __future__ import annotations

import os
from typing import Any

import dask.array as da
import numpy as np
import zarr
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.storage import LocalStore, MemoryStore

from shardpipe.core.grid import Shape
from shardpipe.core.shard_format import INDEX_LOCATIONS, IndexLocation
from shardpipe.core.sizes import (
    default_chunk_shape,
    default_chunk_shape_within,
    default_shard_shape,
    parse_bytes,
)
from shardpipe.errors import ArrayExistsError, InvalidArgumentError, StoreNotWritableError
from shardpipe.storage.resolve import ResolvedStore


def check_array(arr: Any) -> None:
    """Accept a Dask or NumPy array of at least one dimension and a fixed-size dtype."""
    if not isinstance(arr, da.Array | np.ndarray):
        raise InvalidArgumentError(
            "arr",
            f"expected a dask.array.Array or numpy.ndarray, got {type(arr).__name__}",
            "Wrap the data with dask.array.from_array(...) first",
        )
    if arr.ndim == 0:
        raise InvalidArgumentError(
            "arr", "a 0-dimensional array cannot be sharded", "Reshape it to (1,)"
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


def _shape_param(name: str, value: Any, ndim: int) -> Shape | None:
    if value is None:
        return None
    if isinstance(value, int | np.integer):
        value = (int(value),) * ndim
    try:
        shape = tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            name,
            f"expected a tuple of {ndim} integers, got {value!r}",
            f"Pass {name}=(n0, n1, ...)",
        ) from None
    if len(shape) != ndim:
        raise InvalidArgumentError(
            name,
            f"{shape} has {len(shape)} dimensions but the array has {ndim}",
            "Give one size per array dimension",
        )
    if any(n <= 0 for n in shape):
        raise InvalidArgumentError(
            name, f"{shape} has a zero or negative size", "Every size must be a positive integer"
        )
    return shape


def resolve_shapes(shape: Shape, itemsize: int, shards: Any, chunks: Any) -> tuple[Shape, Shape]:
    """Return ``(shard_shape, chunk_shape)``, filling in documented defaults."""
    ndim = len(shape)
    shard_shape = _shape_param("shards", shards, ndim)
    chunk_shape = _shape_param("chunks", chunks, ndim)
    if chunk_shape is None:
        chunk_shape = (
            default_chunk_shape(shape, itemsize)
            if shard_shape is None
            else default_chunk_shape_within(shard_shape, itemsize)
        )
    if shard_shape is None:
        shard_shape = default_shard_shape(shape, chunk_shape, itemsize)
    bad = [d for d, (s, c) in enumerate(zip(shard_shape, chunk_shape, strict=True)) if s % c]
    if bad:
        raise InvalidArgumentError(
            "shards",
            f"{shard_shape} is not a multiple of chunks={chunk_shape} along dimension(s) {bad}",
            "Make every shard size a whole multiple of the inner chunk size",
        )
    return shard_shape, chunk_shape


def check_fill_value(fill_value: Any, dtype: np.dtype[Any]) -> None:
    """Refuse a fill value that the dtype cannot represent exactly."""
    if fill_value is None:
        return
    problem = None
    try:
        if dtype.kind in "iu":
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


def check_index_location(index_location: Any) -> IndexLocation:
    """Return ``index_location`` if it is ``"start"`` or ``"end"``."""
    if index_location not in INDEX_LOCATIONS:
        raise InvalidArgumentError(
            "index_location", f"unknown value {index_location!r}", "Use 'start' or 'end'"
        )
    result: IndexLocation = index_location
    return result


def check_max_mem(max_mem: Any) -> int:
    """Parse ``max_mem``."""
    try:
        return parse_bytes(max_mem)
    except ValueError as err:
        raise InvalidArgumentError(
            "max_mem", str(err), "Pass bytes or a string like '2GB'"
        ) from None


def build_metadata(**create_kwargs: Any) -> ArrayV3Metadata:
    """Let zarr validate the array definition, in memory, and return its metadata."""
    try:
        array = zarr.create_array(MemoryStore(), **create_kwargs)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            "compressors/filters/serializer",
            f"zarr rejects the array definition ({err})",
            "Pass codec objects or dicts as accepted by zarr.create_array",
        ) from err
    metadata = array.metadata
    assert isinstance(metadata, ArrayV3Metadata)
    return metadata


def check_target(target: ResolvedStore, overwrite: bool) -> None:
    """Refuse a read-only store, or an existing node at the path without ``overwrite``."""
    store = target.zarr_store
    if store.read_only:
        raise StoreNotWritableError(f"store: {store} is read-only; open it with read_only=False")
    if isinstance(store, LocalStore):
        root = str(store.root)
        probe = root
        while not os.path.exists(probe):
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
        if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
            raise StoreNotWritableError(
                f"store: cannot write under {root!r} ({probe!r} is not a writable directory); "
                "choose a directory you can write to"
            )
    if overwrite:
        return
    from zarr.core.sync import sync

    if sync(store.exists(target.key("zarr.json"))):
        where = target.path or "the store root"
        raise ArrayExistsError(
            f"store: an array or group already exists at {where!r} in {store}; "
            "pass overwrite=True to replace it, or choose another path"
        )
