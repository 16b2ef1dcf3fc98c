"""An existing sharded array as the target of an update: its metadata, and where the source goes.

``to_sharded_zarr(..., region=...)`` writes into a box of an existing array;
``append_dim=`` grows it along one axis and writes at the new end. Both are
checked here against the array's metadata before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from shardpipe import advice
from shardpipe.core.checks import is_integer
from shardpipe.core.grid import Coords, Shape
from shardpipe.core.shard_update import STRATEGIES
from shardpipe.core.value_casts import CastRule, cast_checked, cast_rule
from shardpipe.errors import InvalidArgumentError
from shardpipe.internals.zarr_core import ArrayV3Metadata
from shardpipe.storage.base import ObjectVersion, ShardStore
from shardpipe.stored.metadata import format_of, layout_of


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
