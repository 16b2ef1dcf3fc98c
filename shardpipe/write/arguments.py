"""Check and normalise the arguments of a write before any byte is written.

Every check raises :class:`~shardpipe.errors.InvalidArgumentError` naming the
parameter, what is wrong with it, and how to fix it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import zarr
from zarr.storage import MemoryStore

from shardpipe.core.grid import Shape
from shardpipe.core.sizes import (
    default_chunk_shape,
    default_chunk_shape_within,
    default_shard_shape,
    parse_bytes,
)
from shardpipe.errors import (
    InvalidArgumentError,
)
from shardpipe.internals.zarr_core import ArrayV3Metadata

if TYPE_CHECKING:  # resolve_store checks its path here: import it only where it is used
    pass


from shardpipe.core.checks import (
    check_shards_of_chunks,
    shape_param,
    shown,
)


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
            "max_mem", str(err), "Pass bytes or a string like '2GB'"
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
