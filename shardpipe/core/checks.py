"""Generic checks of argument values: booleans, integers, choices, paths, JSON, dtypes, shapes.

Each raises :class:`~shardpipe.errors.InvalidArgumentError` naming the
parameter, showing the value and saying how to fix it. The checks of
shapes (shard and chunk shapes, how they divide, dimension names) and the
limits (:data:`MAX_SIZE`, :data:`MAX_NDIM`, :data:`MAX_DASK_BLOCKS`) are the
ones every writer applies to its arguments and every reader to a stored
``zarr.json`` (:mod:`shardpipe.stored.array_document`). The checks of a
write's other arguments are in :mod:`shardpipe.write.arguments`, those of where
data is read and written in :mod:`shardpipe.stored.places`.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from shardpipe import advice
from shardpipe.core.grid import Shape
from shardpipe.errors import (
    InvalidArgumentError,
)

if TYPE_CHECKING:  # resolve_store checks its path here: import it only where it is used
    pass

MAX_SIZE = 2**63 - 1
"""The largest size, element count or byte count NumPy, Dask and zarr index (int64)."""

MAX_NDIM = 64
"""The most dimensions an array may have (NumPy's limit)."""


def check_bool(name: str, value: Any) -> bool:
    """Accept only ``True`` or ``False`` (a string such as ``"False"`` is refused)."""
    if not isinstance(value, bool | np.bool_):
        raise InvalidArgumentError(
            name,
            f"expected True or False, got {value!r} ({type(value).__name__})",
            f"Pass {name}=True or {name}=False",
        )
    return bool(value)


def is_integer(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def shown(value: Any) -> str:
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
        not is_integer(value)
        or int(value) < minimum
        or (maximum is not None and int(value) > maximum)
    ):
        raise InvalidArgumentError(
            name,
            f"expected an integer {bounds}, got {shown(value)}",
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


def check_entry_keys(
    parameter: str, entry: str, settings: Mapping[Any, Any], known: Collection[str], what: str
) -> None:
    """Refuse the keys of ``settings``, one entry of a per-name option, that are not ``known``.

    For the options that give settings by name: a dataset's ``encoding=``
    (per variable), a group rechunk's ``arrays=`` (per array). ``entry``
    names the entry in the message (``"variable 't'"``), ``what`` the
    settings it may hold (``"per-array settings"``).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``parameter``, the entry and the keys refused; the fix lists
        the keys known, after the nearest one where one is near.
    """
    unknown = sorted(str(key) for key in settings if key not in known)
    if not unknown:
        return
    names = sorted(known)
    near = difflib.get_close_matches(unknown[0], names, n=1, cutoff=0.6)
    hint = f"Did you mean {near[0]!r}? " if near else ""
    raise InvalidArgumentError(
        parameter,
        f"{entry}: unknown key(s) {unknown}, which are not {what}",
        f"{hint}Give only {', '.join(map(repr, names))}",
    )


@contextmanager
def checking_entry(parameter: str, entry: str) -> Iterator[None]:
    """Inside, a setting of one entry of a per-name option refused is ``parameter``'s error.

    A check of one setting names the setting (``dtype``); raised again, the
    error names the option (``encoding``), the entry and the setting:
    ``"variable 't': dtype: 'nope' is not a NumPy dtype"``, with the same fix.
    """
    try:
        yield
    except InvalidArgumentError as err:
        raise InvalidArgumentError(
            parameter, f"{entry}: {err.parameter}: {err.problem}", err.fix
        ) from None


def check_path(name: str, value: Any) -> str | None:
    """Accept None or a ``/``-separated path inside a store, without ``.`` or ``..`` parts."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentError(
            name,
            f"expected a str such as 'group/array', got {shown(value)}",
            f"Pass {name} as a string, or leave it out for the store's root",
        )
    if any(part in (".", "..") for part in value.split("/")):
        raise InvalidArgumentError(
            name,
            f"{value!r} has a '.' or '..' part; paths inside a store cannot leave it",
            f"Give {name} inside the store (e.g. 'group/array'), or point the store elsewhere",
        )
    return value


MAX_JSON_DEPTH = 100
"""How deeply JSON values of arguments may nest (lists in dicts in lists ...)."""


def json_problem(value: Any, where: str, depth: int = 0) -> str | None:
    """What keeps ``value`` from being stored as strict JSON, and where; None if nothing.

    Strict: what ``json.dumps(value, allow_nan=False)`` writes, with string
    keys at every level (``json.dumps`` would turn other keys into strings
    silently). NaN and infinities are refused: ``json.dumps`` writes them as
    ``NaN`` and ``Infinity``, which are not JSON.

    Parameters
    ----------
    value : Any
        The value to check.
    where : str
        How the message names ``value`` (``"attributes"``); the path to a
        nested value is appended (``attributes['a'][0]``).
    depth : int
        Levels above ``value`` (for the nesting limit).
    """
    if value is None or isinstance(value, str | int):  # bool is an int
        return None
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return (
            f"{where} is {float(value)!r}, which JSON cannot hold (json.dumps would write "
            f"{json.dumps(float(value))}, which strict readers refuse)"
        )
    if depth >= MAX_JSON_DEPTH:
        return f"{where} nests deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return (
                    f"{where}: key {key!r} ({type(key).__name__}) is not a string; JSON would "
                    f"store it as {json.dumps(str(key))}"
                )
            found = json_problem(item, f"{where}[{key!r}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = json_problem(item, f"{where}[{index}]", depth + 1)
            if found:
                return found
        return None
    return f"{where} is {shown(value)}, which cannot be stored as JSON"


JSON_FIX = (
    "Convert values to str, int, finite float, bool, None, lists or dicts with string keys "
    "(e.g. arr.tolist(); NaN or infinity as a string such as 'nan', or None)"
)


def check_json(name: str, value: Any, where: str, fix: str = JSON_FIX) -> None:
    """Refuse ``value`` (reached as ``where``) if strict JSON cannot hold it; name ``name``.

    See :func:`json_problem`.
    """
    found = json_problem(value, where)
    if found:
        raise InvalidArgumentError(name, found, fix)


def check_json_dict(name: str, value: Any) -> dict[str, Any] | None:
    """Accept None or a mapping that strict JSON can hold (:func:`json_problem`)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            name,
            f"expected a dict, got {shown(value)}",
            "Pass a dict of JSON-serialisable values",
        )
    check_json(name, value, name)
    return dict(value)


def check_options(name: str, value: Any) -> dict[str, Any] | None:
    """Accept None or a dict of fsspec options with string keys."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InvalidArgumentError(
            name,
            f"expected a dict of option names to values, got {shown(value)}",
            'Pass a dict such as {"anon": True}',
        )
    checked: dict[str, Any] = value
    return checked


def check_progress(progress: Any, compute: Any, *, planned: str | None = None) -> tuple[bool, bool]:
    """Check ``progress`` and ``compute``: a progress bar needs the work to run now.

    ``planned`` names the function that plans the work without running it
    (``"shardpipe.prepare_write"``), whose job can run with a progress bar.
    """
    compute = check_bool("compute", compute)
    progress = check_bool("progress", progress)
    if progress and not compute:
        first = f"Use {planned}(...).execute(progress=True)" if planned else "Pass compute=True"
        raise InvalidArgumentError(
            "progress",
            "a progress bar cannot follow work returned with compute=False",
            f"{first}, or watch the delayed work with "
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
    if is_integer(value) or isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise InvalidArgumentError(
            name,
            f"expected a tuple of positive integers, got {shown(value)}",
            f"Pass e.g. {name}=(64, 64, 64)",
        )
    items = list(value)
    return shape_param(name, items, len(items))


def shape_param(name: str, value: Any, ndim: int) -> Shape | None:
    """Accept None, or one positive integer per dimension (one integer: the same for all).

    Sizes are never rounded or converted from floats or strings, and their
    product must stay within :data:`MAX_SIZE` (:func:`check_size_limit`).
    """
    if value is None:
        return None
    if is_integer(value):
        value = (value,) * ndim
    if isinstance(value, str | bytes) or not hasattr(value, "__iter__"):
        raise InvalidArgumentError(
            name,
            f"expected a tuple of {ndim} integers, got {value!r}",
            f"Pass {name}=(n0, n1, ...) with one positive integer per dimension",
        )
    items = list(value)
    wrong = [v for v in items if not is_integer(v)]
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
    check_size_limit(name, shape)
    return shape


def check_size_limit(name: str, shape: Shape, itemsize: int = 1) -> None:
    """Refuse a shape whose sizes, element count or bytes exceed :data:`MAX_SIZE`.

    NumPy, Dask and zarr index with int64: a larger shape cannot be
    allocated, sliced or planned, and arithmetic on it overflows.
    """
    elements = math.prod(shape)
    if max(shape, default=0) > MAX_SIZE or elements * itemsize > MAX_SIZE:
        what = "bytes" if itemsize > 1 and elements <= MAX_SIZE else "elements"
        total = elements * itemsize if what == "bytes" else elements
        raise InvalidArgumentError(
            name,
            f"{shape} holds {total:,} {what}, beyond 2**63 - 1 ({MAX_SIZE:,}), the largest "
            "size NumPy, Dask and zarr can index",
            "Give sizes whose product fits in a signed 64-bit integer",
        )


def check_shards_of_chunks(shard_shape: Shape, chunk_shape: Shape) -> None:
    """Refuse shards that are not a whole number of inner chunks along every dimension."""
    bad = [d for d, (s, c) in enumerate(zip(shard_shape, chunk_shape, strict=True)) if s % c]
    if bad:
        raise InvalidArgumentError(
            "shards",
            f"{shard_shape} is not a multiple of {advice.setting('chunks', chunk_shape)} along "
            f"dimension(s) {bad}",
            "Make every shard size a whole multiple of the inner chunk size",
        )


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


MAX_DASK_BLOCKS = 2**24
"""The most blocks of a Dask array shardpipe makes: of a made-up source (``shardpipe plan
--shape``) or of an array it opens (``open_array``, ``open_dataset``). Dask handles
every block in Python: planning more takes minutes and gigabytes, and opening a
one-dimensional array of this many blocks about 30 s."""


def dask_block_count(shape: Shape, block: Shape) -> int:
    """How many blocks of ``block`` cover ``shape``, by arithmetic (no list of them is made).

    An extent of 0 makes no block (a block extent of 0 is taken as 1).
    """
    return math.prod(-(-n // max(b, 1)) for n, b in zip(shape, block, strict=True))


def check_made_up_blocks(
    shape: Shape, blocks: Shape | None, itemsize: int, auto_block_nbytes: int
) -> None:
    """Refuse a made-up source of more than :data:`MAX_DASK_BLOCKS` Dask blocks.

    With ``blocks`` None (Dask's ``"auto"`` blocks of ``auto_block_nbytes``,
    its ``array.chunk-size``) the count is estimated from the bytes, before
    Dask builds the block tuples, which for an absurd shape would not fit in
    memory.
    """
    if blocks is None:
        count = -(-math.prod(shape) * itemsize // auto_block_nbytes)
        fix = "Give --blocks (Dask block shape) so that there are fewer blocks"
    else:
        count = dask_block_count(shape, blocks)
        fix = "Give larger --blocks"
    if count > MAX_DASK_BLOCKS:
        raise InvalidArgumentError(
            "blocks",
            f"a made-up source of shape {shape} would have {'at least ' if blocks is None else ''}"
            f"{count:,} Dask blocks (at most {MAX_DASK_BLOCKS:,} are planned)",
            fix,
        )
