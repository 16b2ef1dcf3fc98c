"""Check the arguments of ``to_ome_zarr``: the image, per-axis values, factors, layouts, labels.

Every check raises :class:`~shardpipe.errors.InvalidArgumentError` naming
the parameter, the value and the fix, before anything is written. Per-axis
values (``scale``, ``translation``, ``shards``, ``chunks``, a factor of
``scale_factors``) are given either as a sequence with one entry per axis
or as a mapping from axis name to value, as ome-zarr-py and ngff-zarr take
them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np

from shardpipe import advice
from shardpipe.core.checks import is_integer, shape_param
from shardpipe.core.downsample import METHODS
from shardpipe.core.grid import Shape
from shardpipe.core.pyramid import check_factors
from shardpipe.core.sizes import default_chunk_shape, default_shard_shape
from shardpipe.errors import InvalidArgumentError
from shardpipe.ome.axes import Axis, apply_units, parse_axes
from shardpipe.ome.label_checks import label_list, label_name_problem

__all__ = [
    "ImageInput",
    "LabelInput",
    "check_image",
    "check_labels",
    "check_method",
    "layout_param",
    "per_axis_floats",
    "scale_factors_param",
]

DEFAULT_AXES = {2: "yx", 3: "zyx", 5: "tczyx"}
"""The axes of an image passed without any (a 4-d array is ambiguous: czyx or tzyx)."""


@dataclass(frozen=True)
class ImageInput:
    """An image as ``to_ome_zarr`` takes it: data, axes, and where its voxels are.

    Parameters
    ----------
    data : dask.array.Array
        The voxels.
    axes : tuple of Axis
        One per dimension of ``data``.
    scale, translation : tuple of float
        Physical size of a voxel and position of the first one, per axis.
    """

    data: da.Array
    axes: tuple[Axis, ...]
    scale: tuple[float, ...]
    translation: tuple[float, ...]


@dataclass(frozen=True)
class LabelInput:
    """One label image of ``labels=``.

    Parameters
    ----------
    name : str
        Its name, the group ``labels/<name>``.
    data : dask.array.Array
        Integer label ids.
    colors, properties : list of dict or None
        The spec's ``colors`` and ``properties`` lists.
    """

    name: str
    data: da.Array
    colors: list[dict[str, Any]] | None
    properties: list[dict[str, Any]] | None


def _as_dask(data: Any, parameter: str, chunks: Shape | None = None) -> da.Array:
    if isinstance(data, da.Array):
        if any(math.isnan(n) for c in data.chunks for n in c):
            raise InvalidArgumentError(
                parameter,
                f"the Dask array has unknown chunk sizes (shape {data.shape})",
                "Call arr.compute_chunk_sizes() first",
            )
        return data
    if isinstance(data, np.ndarray):
        wrapped: da.Array = da.from_array(data, chunks=chunks or "auto")
        return wrapped
    raise InvalidArgumentError(
        parameter,
        f"expected a Dask array, a NumPy array or an xarray DataArray, got {type(data).__name__}",
        "Wrap the data with dask.array.from_array(...) first",
    )


def _check_dtype(data: da.Array, parameter: str, *, labels: bool) -> None:
    kind = np.dtype(data.dtype).kind
    if labels and kind not in "iu":
        raise InvalidArgumentError(
            parameter,
            f"dtype {data.dtype}: label images hold integer ids",
            "Cast the labels, e.g. labels.astype('uint32')",
        )
    if kind not in "iuf":
        raise InvalidArgumentError(
            parameter,
            f"dtype {data.dtype} is not an integer or float type",
            "Cast the image, e.g. image.astype('float32')",
        )
    if any(n == 0 for n in data.shape):
        raise InvalidArgumentError(
            parameter, f"shape {data.shape} has an empty dimension", "Pass some data"
        )


def per_axis_floats(
    parameter: str,
    value: Any,
    axes: Sequence[Axis],
    default: float,
    *,
    positive: bool,
) -> tuple[float, ...]:
    """One finite number per axis, from a sequence or a mapping by axis name."""
    names = [a.name for a in axes]
    fix = f"Pass one number per axis {names}, or a mapping such as {{{names[-1]!r}: 0.5}}"
    if value is None:
        return tuple(float(default) for _ in axes)
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise InvalidArgumentError(
                parameter, f"{unknown} are not axes of the image {names}", fix
            )
        items = [value.get(n, default) for n in names]
    elif isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray):
        raise InvalidArgumentError(parameter, f"expected numbers per axis, got {value!r}", fix)
    else:
        items = list(value)
        if len(items) != len(axes):
            raise InvalidArgumentError(
                parameter, f"{len(items)} values {items} for {len(axes)} axes {names}", fix
            )
    out = []
    for name, item in zip(names, items, strict=True):
        if isinstance(item, bool | np.bool_) or not isinstance(
            item, int | float | np.integer | np.floating
        ):
            raise InvalidArgumentError(
                parameter, f"{item!r} for axis {name!r} is not a number", fix
            )
        number = float(item)
        if not math.isfinite(number) or (positive and number <= 0):
            raise InvalidArgumentError(
                parameter,
                f"{item!r} for axis {name!r} is not a "
                + ("positive finite number" if positive else "finite number"),
                fix,
            )
        out.append(number)
    return tuple(out)


def layout_param(parameter: str, value: Any, axes: Sequence[Axis]) -> Shape | None:
    """A shape per axis (``shards``, ``chunks``) from a sequence, an int or a mapping by name.

    A mapping may leave axes out: those get 1 along time and channel axes
    and are filled in by the defaults along space axes (``None`` entries).
    """
    if value is None:
        return None
    names = [a.name for a in axes]
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            raise InvalidArgumentError(
                parameter,
                f"{unknown} are not axes of the image {names}",
                f"Name axes it has, e.g. {{{names[-1]!r}: 256}}",
            )
        missing = [n for n in names if n not in value]
        if missing:
            raise InvalidArgumentError(
                parameter,
                f"{dict(value)!r} leaves out the axes {missing}",
                "Give a size for every axis (1 along time and channel is usual)",
            )
        value = [value[n] for n in names]
    return shape_param(parameter, value, len(axes))


def default_layout(
    shape: Shape, axes: Sequence[Axis], itemsize: int, shards: Shape | None, chunks: Shape | None
) -> tuple[Shape, Shape]:
    """``(shards, chunks)`` of level 0, the given ones or the defaults, checked.

    Defaults: one time point and one channel per chunk and shard; space
    axes as :mod:`shardpipe.core.sizes` has them (about 1 MiB inner chunks,
    about 256 MiB shards, near cubes).
    """
    space = [d for d, a in enumerate(axes) if a.is_space]
    if chunks is None:
        spatial = default_chunk_shape(tuple(shape[d] for d in space), itemsize)
        if shards is not None:  # the default chunk inside a given shard: a divisor of it
            spatial = tuple(
                math.gcd(c, shards[d]) if shards[d] % c else c
                for c, d in zip(spatial, space, strict=True)
            )
        picked = dict(zip(space, spatial, strict=True))
        chunks = tuple(picked.get(d, 1) for d in range(len(shape)))
    if shards is None:
        spatial = default_shard_shape(
            tuple(shape[d] for d in space), tuple(chunks[d] for d in space), itemsize
        )
        picked = dict(zip(space, spatial, strict=True))
        shards = tuple(picked.get(d, chunks[d]) for d in range(len(shape)))
    bad = [axes[d].name for d in range(len(shape)) if shards[d] % chunks[d]]
    if bad:
        raise InvalidArgumentError(
            "shards",
            f"{shards} is not a multiple of {advice.setting('chunks', chunks)} along the axes "
            f"{bad}",
            "Make every shard size a whole multiple of the inner chunk size",
        )
    return shards, chunks


def scale_factors_param(value: Any, axes: Sequence[Axis], shape: Shape) -> list[Shape] | None:
    """The levels' cumulative factors, or None for the default rule.

    ``value`` is a list with one entry per level after the first: an int
    (that factor along every space axis, as ngff-zarr and ome-zarr-py take
    it) or a mapping from axis name to factor (axes left out: 1). The
    factors are bounded by the image's ``shape`` and by
    :data:`~shardpipe.core.pyramid.MAX_LEVELS` (see
    :func:`~shardpipe.core.pyramid.check_factors`).
    """
    if value is None:
        return None
    names = [a.name for a in axes]
    fix = (
        "Pass e.g. scale_factors=[2, 4, 8] (along every space axis) or "
        "[{'y': 2, 'x': 2}, {'z': 2, 'y': 4, 'x': 4}]"
    )
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise InvalidArgumentError(
            "scale_factors", f"expected a list of factors, got {value!r}", fix
        )
    factors = []
    for item in value:
        if is_integer(item):
            factors.append(tuple(int(item) if a.is_space else 1 for a in axes))
            continue
        if not isinstance(item, Mapping):
            raise InvalidArgumentError(
                "scale_factors", f"{item!r} is neither an integer nor a mapping by axis", fix
            )
        unknown = [k for k in item if k not in names]
        if unknown:
            raise InvalidArgumentError(
                "scale_factors", f"{unknown} are not axes of the image {names}", fix
            )
        wrong = [v for v in item.values() if not is_integer(v)]
        if wrong:
            raise InvalidArgumentError(
                "scale_factors", f"{wrong[0]!r} in {dict(item)!r} is not an integer", fix
            )
        factors.append(tuple(int(item.get(n, 1)) for n in names))
    check_factors(factors, shape, "scale_factors", [a.name for a in axes])
    for factor in factors:
        moved = [a.name for a, f in zip(axes, factor, strict=True) if f > 1 and not a.is_space]
        if moved:
            raise InvalidArgumentError(
                "scale_factors",
                f"{factor} downsamples the axes {moved}, which are not space axes",
                "Downsample only space axes (time points and channels are kept)",
            )
    return factors


def check_method(method: Any, labels: bool, parameter: str = "method") -> str:
    """The downsampling method: given, or ``mean`` for images and ``mode`` for labels."""
    if method is None:
        return "mode" if labels else "mean"
    if method not in METHODS:
        raise InvalidArgumentError(
            parameter,
            f"{method!r} is not one of {METHODS}",
            "Pass 'mean' (images), 'mode' or 'nearest' (labels)",
        )
    if labels and method == "mean":
        raise InvalidArgumentError(
            parameter,
            "'mean' would average label ids into ids that are not there",
            "Use 'mode' or 'nearest' for labels",
        )
    return str(method)


def _from_xarray(image: Any) -> tuple[Any, list[str], dict[str, Any]]:
    """``(data, dims, per-axis values)`` of a DataArray: its coordinates give scale and origin."""
    dims = [str(d) for d in image.dims]
    scale: dict[str, float] = {}
    translation: dict[str, float] = {}
    units: dict[str, str] = {}
    for dim in dims:
        if dim not in image.coords:
            continue
        values = np.asarray(image.coords[dim].values, dtype=np.float64)
        if values.size >= 1:
            translation[dim] = float(values[0])
        if values.size >= 2:
            steps = np.diff(values)
            if not np.allclose(steps, steps[0], rtol=1e-6, atol=0):
                raise InvalidArgumentError(
                    "image",
                    f"the coordinate {dim!r} is not evenly spaced, so it has no one voxel size",
                    "Give it evenly spaced coordinates, or drop them and pass scale=",
                )
            scale[dim] = float(steps[0])
        unit = image.coords[dim].attrs.get("units") or image.coords[dim].attrs.get("unit")
        if isinstance(unit, str):
            units[dim] = unit
    return image.data, dims, {"scale": scale, "translation": translation, "units": units}


def _is_data_array(value: Any) -> bool:
    return type(value).__name__ == "DataArray" and hasattr(value, "dims")


def check_image(
    image: Any,
    axes: Any,
    scale: Any,
    translation: Any,
    axes_units: Any,
    *,
    parameter: str = "image",
) -> ImageInput:
    """The image, its axes and where its voxels are, checked (see :class:`ImageInput`)."""
    found: dict[str, Any] = {"scale": {}, "translation": {}, "units": {}}
    if _is_data_array(image):
        data, dims, found = _from_xarray(image)
        if axes is None:
            axes = dims
        else:
            names = [a if isinstance(a, str) else a.get("name") for a in axes]
            if list(names) != dims:
                raise InvalidArgumentError(
                    "axes",
                    f"{list(names)} differ from the DataArray's dims {dims}",
                    "Leave axes out (the dims name them) or pass them in the same order",
                )
        image = data
    data = _as_dask(image, parameter)
    _check_dtype(data, parameter, labels=False)
    if axes is None:
        if data.ndim not in DEFAULT_AXES:
            raise InvalidArgumentError(
                "axes",
                f"a {data.ndim}-d array has no default axes",
                "Pass axes, e.g. 'czyx' or 'tzyx'",
            )
        axes = DEFAULT_AXES[data.ndim]
    parsed = parse_axes(axes, data.ndim)
    parsed = apply_units(parsed, found["units"] or None) if found["units"] else parsed
    parsed = apply_units(parsed, axes_units)
    if scale is None and found["scale"]:
        scale = found["scale"]
    if translation is None and found["translation"]:
        translation = found["translation"]
    return ImageInput(
        data,
        parsed,
        per_axis_floats("scale", scale, parsed, 1.0, positive=True),
        per_axis_floats("translation", translation, parsed, 0.0, positive=False),
    )


def check_labels(labels: Any, shape: Shape, axes: Sequence[Axis]) -> list[LabelInput]:
    """The label images of ``labels=``: integer arrays of the image's shape, with metadata.

    A label image has the image's shape, or the image's shape without its
    channel axis (it then has the image's other axes).
    """
    if labels is None:
        return []
    fix = (
        "Pass labels={'cells': array} or {'cells': {'data': array, 'colors': {...}, "
        "'properties': {...}}}"
    )
    if not isinstance(labels, Mapping):
        raise InvalidArgumentError(
            "labels", f"expected a mapping from name to label image, got {labels!r}", fix
        )
    out = []
    for name, entry in labels.items():
        problem = label_name_problem(name)
        if problem is not None:
            raise InvalidArgumentError(
                "labels",
                f"{name!r} is not a label name: {problem}",
                "Name each label image like a Zarr group, e.g. labels={'cells': array}",
            )
        colors = properties = None
        data = entry
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"data", "colors", "properties"}
            if unknown or "data" not in entry:
                raise InvalidArgumentError(
                    "labels", f"the entry of {name!r} has the keys {sorted(entry)}", fix
                )
            data = entry["data"]
            colors = label_list(entry.get("colors"), "labels", "rgba")
            properties = label_list(entry.get("properties"), "labels", "properties")
        if _is_data_array(data):
            data = data.data
        array = _as_dask(data, "labels")
        _check_dtype(array, "labels", labels=True)
        channel = [d for d, a in enumerate(axes) if a.type == "channel"]
        without = tuple(n for d, n in enumerate(shape) if d not in channel)
        if tuple(array.shape) not in (tuple(shape), without):
            raise InvalidArgumentError(
                "labels",
                f"{name!r} has the shape {tuple(array.shape)}, not the image's {tuple(shape)}"
                + (f" (or {without} without its channel axis)" if channel else ""),
                "Pass label images of the image's shape",
            )
        out.append(LabelInput(name, array, colors, properties))
    return out
