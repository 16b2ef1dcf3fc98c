"""Check and normalise the arguments of a write before any byte is written.

Every check raises :class:`~shardpipe.errors.InvalidArgumentError` naming the
parameter, what is wrong with it, and how to fix it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

import dask.array as da
import numpy as np
import zarr
from zarr.core.metadata.v3 import ArrayV3Metadata
from zarr.storage import LocalStore, MemoryStore

from shardpipe.core.grid import Shape
from shardpipe.core.sizes import (
    default_chunk_shape,
    default_chunk_shape_within,
    default_shard_shape,
    parse_bytes,
)
from shardpipe.errors import (
    ArrayExistsError,
    InvalidArgumentError,
    SourceOverlapsTargetError,
    StoreNotWritableError,
)
from shardpipe.formats.zarr_sharding import INDEX_LOCATIONS, IndexLocation
from shardpipe.locations import source_locations, store_location
from shardpipe.storage.resolve import ResolvedStore


def check_bool(name: str, value: Any) -> bool:
    """Accept only ``True`` or ``False`` (a string such as ``"False"`` is refused)."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidArgumentError(
            name,
            f"expected True or False, got {value!r} ({type(value).__name__})",
            f"Pass {name}=True or {name}=False",
        )
    return bool(value)


def check_array(arr: Any) -> None:
    """Accept a Dask or NumPy array: one dimension or more, known chunks, a fixed-size dtype."""
    if not isinstance(arr, da.Array | np.ndarray):
        kind = type(arr).__name__
        fix = "Wrap the data with dask.array.from_array(...) first"
        if kind in ("DataArray", "Dataset", "Variable"):
            fix = (
                f"Pass the xarray {kind}'s Dask or NumPy array (e.g. data_array.data) together "
                "with dimension_names=data_array.dims"
            )
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


def _is_integer(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _shape_param(name: str, value: Any, ndim: int) -> Shape | None:
    if value is None:
        return None
    if _is_integer(value):
        value = (value,) * ndim
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise InvalidArgumentError(
            name,
            f"expected a tuple of {ndim} integers, got {value!r}",
            f"Pass {name}=(n0, n1, ...) with one positive integer per dimension",
        )
    items = list(value)
    wrong = [v for v in items if not _is_integer(v)]
    if wrong:
        raise InvalidArgumentError(
            name,
            f"{tuple(items)!r} holds {wrong[0]!r} ({type(wrong[0]).__name__}), not an integer",
            f"Pass {name}=(n0, n1, ...) with whole numbers; sizes are never rounded",
        )
    shape = tuple(int(v) for v in items)
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


def check_dimension_names(dimension_names: Any, ndim: int) -> None:
    """Accept None or one name (a string or None) per dimension."""
    if dimension_names is None:
        return
    if isinstance(dimension_names, str | bytes) or not hasattr(dimension_names, "__iter__"):
        raise InvalidArgumentError(
            "dimension_names",
            f"expected a sequence of {ndim} names, got {dimension_names!r}",
            'Pass one string per dimension, e.g. ("z", "y", "x")',
        )
    names = list(dimension_names)
    if len(names) != ndim or not all(n is None or isinstance(n, str) for n in names):
        raise InvalidArgumentError(
            "dimension_names",
            f"{names!r} is not {ndim} names (strings or None) for an array of {ndim} dimensions",
            "Give one name per dimension",
        )


def check_attributes(attributes: Any) -> None:
    """Accept None or a JSON-serialisable mapping with string keys."""
    if attributes is None:
        return
    if not isinstance(attributes, Mapping):
        raise InvalidArgumentError(
            "attributes",
            f"expected a dict, got {type(attributes).__name__}",
            "Pass a dict of JSON-serialisable values",
        )
    try:
        json.dumps(dict(attributes), allow_nan=True)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            "attributes",
            f"cannot be stored as JSON ({err})",
            "Convert values to str, int, float, bool, None, lists or dicts (e.g. arr.tolist())",
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


def check_source_is_not_target(arr: da.Array, target: ResolvedStore) -> None:
    """Refuse a write whose target is, contains or lies inside an array it reads."""
    where = store_location(target.zarr_store, target.path)
    if where is None:
        return
    for source in source_locations(arr):
        if source.overlaps(where):
            raise SourceOverlapsTargetError(
                "store",
                f"the target {where} overlaps the zarr array {source} that the Dask array "
                "reads; writing would destroy the data before it is read",
                "Write to another path (then delete the old array and move the new one "
                "into place), or use shardpipe's rechunking into a new path",
            )


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


def check_store_reachable(arr: da.Array, target: ResolvedStore) -> None:
    """Refuse a zarr ``MemoryStore`` that worker processes would write copies of.

    A ``MemoryStore`` lives in this process's memory. Tasks running in other
    processes (a distributed cluster with worker processes) would write into
    their own unpickled copies, and the data would be lost without an error.
    """
    from shardpipe.progress import distributed_client, runs_in_process

    if not isinstance(target.zarr_store, MemoryStore) or runs_in_process(arr):
        return
    client = distributed_client()
    if client is None:
        return
    here = os.getpid()
    if all(pid == here for pid in client.run(os.getpid).values()):
        return  # workers are threads of this process
    raise InvalidArgumentError(
        "store",
        f"{target.zarr_store} lives in this process's memory, but the active distributed "
        "client runs tasks in worker processes, which would write into their own copies "
        "(the data would be lost)",
        "Write to a local path or S3, or compute with dask.config.set(scheduler='threads')",
    )
