"""Check and normalise the arguments of a write before any byte is written.

Every check raises :class:`~shardpipe.errors.InvalidArgumentError` naming the
parameter, what is wrong with it, and how to fix it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Collection, Hashable, Mapping
from typing import TYPE_CHECKING, Any

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
from shardpipe.locations import Location, source_locations, store_location

if TYPE_CHECKING:  # resolve_store checks its path here: import it only where it is used
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
    check_choice("index_location", index_location, INDEX_LOCATIONS, "Use 'start' or 'end'")
    result: IndexLocation = index_location
    return result


def check_max_mem(max_mem: Any) -> int:
    """Parse ``max_mem``: a positive integer of bytes or a string like ``"2GB"`` (not a float)."""
    if isinstance(max_mem, float | np.floating):
        raise InvalidArgumentError(
            "max_mem",
            f"expected an integer number of bytes or a string, got {_shown(max_mem)}",
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
    check_json_dict("attributes", attributes)


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


# -- generic checks, shared by the public functions -------------------------------------------


def _shown(value: Any) -> str:
    """``repr`` of ``value`` (cut to 80 characters) and its type, for messages."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def check_int(
    name: str, value: Any, *, minimum: int = 1, maximum: int | None = None, example: int = 1
) -> int:
    """Accept a whole number (not a bool, not a float) in ``[minimum, maximum]``.

    Parameters
    ----------
    name : str
        The parameter, as the message names it.
    value : Any
        What was passed.
    minimum, maximum : int
        The accepted range (``maximum`` None: no upper bound).
    example : int
        A good value, for the message's fix.

    Returns
    -------
    int
        ``value`` as a Python int.
    """
    bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if (
        not _is_integer(value)
        or int(value) < minimum
        or (maximum is not None and int(value) > maximum)
    ):
        raise InvalidArgumentError(
            name,
            f"expected an integer {bounds}, got {_shown(value)}",
            f"Pass e.g. {name}={example}",
        )
    return int(value)


def check_choice(name: str, value: Any, choices: Collection[str], fix: str | None = None) -> str:
    """Accept one of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidArgumentError(
            name,
            f"unknown value {value!r}",
            fix or f"Use one of {', '.join(repr(c) for c in choices)}",
        )
    return value


def check_path(name: str, value: Any) -> str | None:
    """Accept None or a ``/``-separated path inside a store, without ``.`` or ``..`` parts."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(
            name,
            f"expected a str such as 'group/array', got {_shown(value)}",
            f"Pass {name} as a string, or leave it out for the store's root",
        )
    if any(part in (".", "..") for part in value.split("/")):
        raise InvalidArgumentError(
            name,
            f"{value!r} has a '.' or '..' part; paths inside a store cannot leave it",
            f"Give {name} inside the store (e.g. 'group/array'), or point the store elsewhere",
        )
    return value


def check_json_dict(name: str, value: Any) -> dict[str, Any] | None:
    """Accept None or a mapping with string keys whose values JSON can store."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            name,
            f"expected a dict, got {_shown(value)}",
            "Pass a dict of JSON-serialisable values",
        )
    keys = [k for k in value if not isinstance(k, str)]
    if keys:
        raise InvalidArgumentError(
            name,
            f"key {keys[0]!r} ({type(keys[0]).__name__}) is not a string; JSON would "
            f"store it as {json.dumps(str(keys[0]))}",
            "Use string keys",
        )
    try:
        json.dumps(dict(value), allow_nan=True)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            name,
            f"cannot be stored as JSON ({err})",
            "Convert values to str, int, float, bool, None, lists or dicts (e.g. arr.tolist())",
        ) from None
    return dict(value)


def check_options(name: str, value: Any) -> dict[str, Any] | None:
    """Accept None or a dict of fsspec options with string keys."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError(
            name,
            f"expected a dict of option names to values, got {_shown(value)}",
            'Pass a dict such as {"anon": True}',
        )
    checked: dict[str, Any] = value
    return checked


def check_progress(progress: Any, compute: Any) -> tuple[bool, bool]:
    """Check ``progress`` and ``compute``: a progress bar needs the work to run now."""
    compute = check_bool("compute", compute)
    progress = check_bool("progress", progress)
    if progress and not compute:
        raise InvalidArgumentError(
            "progress",
            "a progress bar cannot follow work returned with compute=False",
            "Pass compute=True, or watch the delayed work with "
            "dask.diagnostics.ProgressBar() or distributed.progress()",
        )
    return progress, compute


def check_dtype(name: str, value: Any) -> np.dtype[Any]:
    """Accept what ``numpy.dtype`` reads as a fixed-size dtype."""
    try:
        dtype: np.dtype[Any] = np.dtype(value)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(
            name, f"{value!r} is not a NumPy dtype ({err})", "Use e.g. 'uint16' or 'float32'"
        ) from None
    if dtype.kind in "OV" or dtype.hasobject:
        raise InvalidArgumentError(
            name, f"dtype {dtype} is not supported", "Use a fixed-size numeric or bool dtype"
        )
    return dtype


def check_int_tuple(name: str, value: Any) -> Shape | None:
    """Accept None or a tuple of positive integers of any length (for arrays of any rank)."""
    if value is None:
        return None
    if _is_integer(value) or isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise InvalidArgumentError(
            name,
            f"expected a tuple of positive integers, got {_shown(value)}",
            f"Pass e.g. {name}=(64, 64, 64)",
        )
    items = list(value)
    return _shape_param(name, items, len(items))


ARRAY_OVERRIDE_KEYS = ("shards", "chunks")
"""What ``arrays=`` of a group rechunk may set per array."""


def check_array_overrides(arrays: Any) -> dict[str, dict[str, Shape]]:
    """Check ``arrays={"path": {"shards": (...), "chunks": (...)}}`` of a group rechunk."""
    if arrays is None:
        return {}
    if not isinstance(arrays, Mapping):
        raise InvalidArgumentError(
            "arrays",
            f"expected a dict of array path to shapes, got {_shown(arrays)}",
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
            "region", f"expected a dict of dimension name to slice, got {_shown(region)}", example
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
            or not all(b is None or _is_integer(b) for b in bounds)
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
            f"variable {name!r}: expected a dict, got {_shown(encoding)}",
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
    return dict(encoding)


def _location_of(url: str) -> Location:
    """Where a local path or an fsspec URL points (for overlap checks; nothing is opened)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme in ("file", "local"):
        local = os.path.realpath(rest if sep else url)
        return Location("file", "", local.strip("/"))
    return Location(scheme, "", rest.strip("/"))


def check_temp_store(temp_store: Any, target: ResolvedStore, source: Any) -> str | None:
    """Accept None or a path or URL that does not exist and overlaps neither source nor target.

    The intermediate copy of a two-pass rechunk is written there and deleted
    afterwards: the source, the target or existing data there would be lost.
    ``source`` is what the rechunk reads (a zarr or Dask array).
    """
    if temp_store is None:
        return None
    if not isinstance(temp_store, str | os.PathLike):
        raise InvalidArgumentError(
            "temp_store",
            f"expected a local path or fsspec URL, got {_shown(temp_store)}",
            "Pass e.g. temp_store='/scratch/tmp.zarr'",
        )
    where = os.fspath(temp_store)
    location = _location_of(where)
    if isinstance(source, zarr.Array):
        read = [store_location(source.store, source.path)]
    else:
        read = list(source_locations(source)) if isinstance(source, da.Array) else []
    for other in [store_location(target.zarr_store, target.path), *read]:
        if other is not None and location.overlaps(other):
            raise InvalidArgumentError(
                "temp_store",
                f"{where!r} overlaps {other}, which the rechunk reads or writes; the "
                "intermediate copy is deleted afterwards",
                "Give a separate path for the intermediate copy",
            )
    if location.scheme == "file" and os.path.exists("/" + location.path):
        raise InvalidArgumentError(
            "temp_store",
            f"{where!r} exists; the intermediate copy would replace it and then delete it",
            "Give a path that does not exist yet",
        )
    return where


def check_source_options(source: Any, options: Any) -> dict[str, Any] | None:
    """Check ``source_storage_options``: a dict, given only for a source named by URL."""
    checked = check_options("source_storage_options", options)
    if not checked:
        return checked
    is_url = isinstance(source, str | os.PathLike) and "://" in os.fspath(source)
    if not is_url or os.fspath(source).startswith("file://"):
        raise InvalidArgumentError(
            "source_storage_options",
            f"{sorted(checked)} do not apply to the source {source!r}: they are for sources "
            "given as a URL (s3://...)",
            "Leave source_storage_options out",
        )
    return checked


def check_node_present(target: ResolvedStore, parameter: str, *, records: bool = False) -> None:
    """Refuse a target at which there is no Zarr array or group (v3 or v2) to read.

    With ``records``, shardpipe's records of an unfinished job (``.shardpipe/``)
    count as something there too (what ``repair`` cleans up).
    """
    keys = ("zarr.json", ".zarray", ".zgroup")
    if any(target.shards.get(target.key(k)) is not None for k in keys):
        return
    if records:
        from shardpipe.journal import JOB_DIR

        if next(iter(target.shards.list(target.key(f"{JOB_DIR}/"))), None) is not None:
            return
    where = target.path or "the store root"
    raise InvalidArgumentError(
        parameter,
        f"there is no Zarr array or group at {where!r} of {target.zarr_store} (no zarr.json, "
        ".zarray or .zgroup)",
        "Check the store and path: they must name an existing array or group",
    )


def resolve_named(name: str, store: Any, path: Any, storage_options: Any) -> ResolvedStore:
    """Resolve like :func:`~shardpipe.storage.resolve.resolve_store`; errors name ``name``."""
    from shardpipe.storage.resolve import resolve_store

    try:
        return resolve_store(store, path, storage_options)
    except InvalidArgumentError as err:
        if type(err) is not InvalidArgumentError or err.parameter != "store":
            raise
        raise InvalidArgumentError(name, err.problem, err.fix) from None


def check_store_like(name: str, store: Any) -> None:
    """Accept what zarr opens as a store: a path, a URL, a zarr ``Store`` or a mapping."""
    from zarr.abc.store import Store

    if not isinstance(store, str | os.PathLike | Store | Mapping):
        raise InvalidArgumentError(
            name,
            f"expected a local path, an fsspec URL or a zarr Store, got {_shown(store)}",
            "Pass e.g. '/data/dataset.zarr' or 's3://bucket/dataset.zarr'",
        )
