"""Check and normalise the arguments of a write before any byte is written.

Every check raises :class:`~shardpipe.errors.InvalidArgumentError` naming the
parameter, what is wrong with it, and how to fix it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Mapping
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import zarr
from zarr.storage import MemoryStore

from shardpipe.codec.names import codec_specs
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
    check_dtype,
    check_int_tuple,
    check_shards_of_chunks,
    is_integer,
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


ARRAY_OVERRIDE_KEYS = ("shards", "chunks")
"""What ``arrays=`` of a group rechunk may set per array."""


def check_array_overrides(arrays: Any) -> dict[str, dict[str, Shape]]:
    """Check ``arrays={"path": {"shards": (...), "chunks": (...)}}`` of a group rechunk.

    A shape of None or ``"auto"`` is the default (the group's, else shardpipe's).
    """
    if arrays is None:
        return {}
    if not isinstance(arrays, Mapping):
        raise InvalidArgumentError(
            "arrays",
            f"expected a dict of array path to shapes, got {shown(arrays)}",
            'Pass e.g. arrays={"t2m": {"shards": (365, 720, 1440), "chunks": (30, 90, 90)}}',
        )
    checked: dict[str, dict[str, Shape]] = {}
    for path, shapes in arrays.items():
        if not isinstance(path, str) or not isinstance(shapes, Mapping):
            raise InvalidArgumentError(
                "arrays",
                f"entry {path!r}: {shapes!r} is not a dict of shapes under a string path",
                'Pass e.g. arrays={"t2m": {"shards": (365, 720, 1440)}}',
            )
        unknown = sorted(str(k) for k in shapes if k not in ARRAY_OVERRIDE_KEYS)
        if unknown:
            raise InvalidArgumentError(
                "arrays",
                f"entry {path!r} sets {unknown}, which are not per-array settings",
                "Give only 'shards' and 'chunks' per array",
            )
        checked[path] = {}
        for key, shape in shapes.items():
            if isinstance(shape, str) and shape == "auto":  # zarr's spelling of the default
                continue
            try:
                checked[path][key] = check_int_tuple(key, shape) or ()
            except InvalidArgumentError as err:
                raise InvalidArgumentError(
                    "arrays", f"entry {path!r}: {err.parameter}: {err.problem}", err.fix
                ) from None
            if shape is None:
                del checked[path][key]
    return checked


def check_dim_region(region: Any, dims: Collection[Hashable]) -> None:
    """Check a dataset's ``region``: ``"auto"``, or a dict of dimension name to slice."""
    if region is None or (isinstance(region, str) and region == "auto"):
        return
    example = 'Pass e.g. region={"time": slice(0, 365)}, or region="auto"'
    if not isinstance(region, Mapping):
        raise InvalidArgumentError(
            "region", f"expected a dict of dimension name to slice, got {shown(region)}", example
        )
    unknown = [d for d in region if d not in dims]
    if unknown:
        raise InvalidArgumentError(
            "region",
            f"names dimension(s) {unknown} that the dataset lacks (it has {list(dims)})",
            "Name only dimensions of the dataset",
        )
    for dim, where in region.items():
        if isinstance(where, str) and where == "auto":
            continue
        bounds = (where.start, where.stop) if isinstance(where, slice) else ()
        if (
            not isinstance(where, slice)
            or where.step not in (None, 1)
            or not all(b is None or is_integer(b) for b in bounds)
        ):
            raise InvalidArgumentError(
                "region",
                f"{where!r} for dimension {dim!r} is not a slice with integer bounds and step 1",
                example,
            )


ENCODING_KEYS = frozenset(
    {
        # CF, applied by xarray
        "dtype",
        "scale_factor",
        "add_offset",
        "_FillValue",
        "missing_value",
        "units",
        "calendar",
        "_Unsigned",
        "coordinates",
        # zarr, as xarray's zarr backend accepts them (and the keys it drops)
        "chunks",
        "shards",
        "compressors",
        "filters",
        "serializer",
        "fill_value",
        "write_empty_chunks",
        "cache_metadata",
        "chunk_key_encoding",
        "preferred_chunks",
        "source",
        "original_shape",
    }
)
"""Keys of one variable's ``encoding`` that the dataset writer accepts."""


def check_variable_encoding(name: Hashable, encoding: Any) -> dict[str, Any]:
    """Check the ``encoding`` of one dataset variable: a dict of known keys and a valid dtype."""
    if not isinstance(encoding, Mapping):
        raise InvalidArgumentError(
            "encoding",
            f"variable {name!r}: expected a dict, got {shown(encoding)}",
            'Pass e.g. encoding={"t2m": {"dtype": "int16", "scale_factor": 0.01}}',
        )
    unknown = sorted(str(k) for k in encoding if k not in ENCODING_KEYS)
    if unknown:
        raise InvalidArgumentError(
            "encoding",
            f"variable {name!r}: unknown key(s) {unknown}",
            f"Use only {', '.join(sorted(ENCODING_KEYS))}",
        )
    if "dtype" in encoding:
        try:
            check_dtype("dtype", encoding["dtype"])
        except InvalidArgumentError as err:
            raise InvalidArgumentError(
                "encoding", f"variable {name!r}: {err.parameter}: {err.problem}", err.fix
            ) from None
    checked = dict(encoding)
    for key in ("compressors", "filters", "serializer"):  # names and short dicts, as zarr's
        if key in checked:
            try:
                checked[key] = codec_specs(key, checked[key])
            except InvalidArgumentError as err:
                raise InvalidArgumentError(
                    "encoding", f"variable {name!r}: {key}: {err.problem}", err.fix
                ) from None
    for key in ("shards", "chunks"):  # zarr's "auto": shardpipe's default (None: unsharded)
        if isinstance(checked.get(key), str) and checked[key] == "auto":
            del checked[key]
    return checked
