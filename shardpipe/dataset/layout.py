"""Shard and inner-chunk shapes of a dataset's variables from per-dimension or per-variable sizes.

Pure: names, shapes and numbers in, shapes out. The accessor's ``shards``
and ``chunks`` name dimensions (``{"time": 365, "lat": 720}``) and apply to
every sharded variable; a variable's own ``encoding`` may give tuples
instead. The rules, for one variable:

- ``encoding[name]["shards"]`` / ``["chunks"]`` (tuples, as in xarray) win;
- otherwise a dimension named in ``shards`` takes that size (``-1`` or
  ``None``: the whole dimension), and one left out spans the whole dimension;
  a dimension named in ``chunks`` takes that size, one left out spans the
  shard;
- a variable none of whose dimensions is named gets shardpipe's defaults
  (inner chunks of about 1 MiB, shards of about 256 MiB, as in
  :func:`~shardpipe.to_sharded_zarr`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardpipe.core.checks import shape_param
from shardpipe.errors import InvalidArgumentError
from shardpipe.write.arguments import resolve_shapes

Shape = tuple[int, ...]


@dataclass(frozen=True)
class VariableShape:
    """What the layout of one variable depends on.

    Parameters
    ----------
    name : str
        The variable's name.
    dims : tuple of str
        Its dimension names.
    shape : tuple of int
        Its shape.
    itemsize : int
        Bytes per element as stored (after CF encoding, e.g. 2 for packed int16).
    """

    name: Hashable
    dims: tuple[Hashable, ...]
    shape: Shape
    itemsize: int


def check_dim_sizes(parameter: str, sizes: Any, dims: Sequence[Hashable]) -> dict[Hashable, int]:
    """Validate ``shards`` or ``chunks`` given per dimension name; return it as a dict.

    Raises
    ------
    InvalidArgumentError
        If it is not a mapping of the dataset's dimension names to positive
        integers (or ``-1``/``None`` for a whole dimension).
    """
    if sizes is None:
        return {}
    if not isinstance(sizes, Mapping):
        raise InvalidArgumentError(
            parameter,
            f"expected a dict of dimension name to size, got {sizes!r}",
            f'Pass e.g. {parameter}={{"time": 365}}, or give tuples per variable in '
            f'encoding={{"var": {{"{parameter}": (...)}}}}',
        )
    unknown = [d for d in sizes if d not in dims]
    if unknown:
        raise InvalidArgumentError(
            parameter,
            f"names dimension(s) {unknown} that the dataset lacks (it has {list(dims)})",
            f"Name only dimensions of the dataset in {parameter}",
        )
    checked: dict[Hashable, int] = {}
    for dim, size in sizes.items():
        if size is None or size == -1:
            checked[dim] = -1
        elif isinstance(size, int) and not isinstance(size, bool) and size > 0:
            checked[dim] = size
        else:
            raise InvalidArgumentError(
                parameter,
                f"size {size!r} for dimension {dim!r} is not a positive integer",
                "Give a positive integer, or -1 for the whole dimension",
            )
    return checked


def variable_layout(
    var: VariableShape,
    shards: Mapping[Hashable, int],
    chunks: Mapping[Hashable, int],
    encoding: Mapping[str, Any],
) -> tuple[Shape, Shape]:
    """Return ``(shard_shape, chunk_shape)`` of one variable by the module's rules.

    Raises
    ------
    InvalidArgumentError
        If the shapes are malformed or a shard is not a whole number of inner
        chunks; the message names the variable.
    """
    own_shards, own_chunks = encoding.get("shards"), encoding.get("chunks")
    given = [key for key in ("shards", "chunks") if encoding.get(key) is not None]
    for key in given:  # from encoding=: named so, with the variable and the key
        try:
            shape_param(key, encoding[key], len(var.dims))
        except InvalidArgumentError as err:
            raise _encoding_error(var, [key], err.problem, err.fix) from err
    named = any(d in shards for d in var.dims)
    if own_shards is None and named:
        own_shards = tuple(
            _size(shards.get(d, -1), length) for d, length in zip(var.dims, var.shape, strict=True)
        )
    if own_chunks is None and any(d in chunks for d in var.dims):
        if own_shards is None:
            own_chunks = tuple(
                _size(chunks.get(d, -1), length)
                for d, length in zip(var.dims, var.shape, strict=True)
            )
        else:
            shard_shape = _as_shape(own_shards, len(var.dims))
            own_chunks = tuple(
                _size(chunks.get(d, -1), s) for d, s in zip(var.dims, shard_shape, strict=True)
            )
    try:
        return resolve_shapes(var.shape, var.itemsize, own_shards, own_chunks)
    except InvalidArgumentError as err:
        if given:  # the shards and chunks do not fit each other, one of them from encoding=
            raise _encoding_error(var, given, f"shards {err.problem}", err.fix) from err
        raise InvalidArgumentError(
            err.parameter,
            f"variable {var.name!r} (dims {var.dims}): {err.problem}",
            err.fix,
        ) from err


def _encoding_error(
    var: VariableShape, keys: Sequence[str], problem: str, fix: str
) -> InvalidArgumentError:
    where = f"encoding[{var.name!r}]" + (f"[{keys[0]!r}]" if len(keys) == 1 else "")
    return InvalidArgumentError(
        "encoding", f"{where}: {problem} (variable {var.name!r}, dims {var.dims})", fix
    )


def _as_shape(value: Any, ndim: int) -> Any:
    return (value,) * ndim if isinstance(value, int) else value


def _size(size: int, whole: int) -> int:
    return max(whole, 1) if size == -1 else size


def grid_aligned_chunks(
    shape: Shape, chunk_shape: Shape, starts: Sequence[int]
) -> tuple[tuple[int, ...], ...]:
    """Dask chunks of a block of ``shape`` placed at ``starts`` that end on chunk boundaries.

    Every Dask chunk then lies inside one stored chunk, so no two tasks
    write the same chunk (what xarray's ``safe_chunks`` asks of the variables
    that xarray itself writes).
    """
    result = []
    for length, chunk, start in zip(shape, chunk_shape, starts, strict=True):
        sizes = []
        position, end = start, start + length
        while position < end:
            boundary = min(end, (position // chunk + 1) * chunk)
            sizes.append(boundary - position)
            position = boundary
        result.append(tuple(sizes) or (0,))
    return tuple(result)
