"""Which source dtypes a write into an existing array takes, and the values they must hold.

A region write, an append or a batch writes into an array whose dtype is
fixed. zarr-python casts whatever it is given (an ``int64`` 70000 into
``uint16`` becomes 4464); shardpipe casts only where no value changes its
meaning:

- ``"same"``: the dtypes are equal, nothing is cast;
- ``"safe"``: every value of the source dtype fits the target
  (``numpy.can_cast(..., "safe")``: ``uint8`` into ``uint16``, ``float32``
  into ``float64``), cast without looking at the values;
- ``"checked"``: integers (or booleans) into a narrower or differently signed
  integer type, and integers or floats into a narrower float (NumPy's
  ``"same_kind"``): cast when every value fits, each block checked for the
  first value outside the target's range (floats round to the nearest target
  value, as NumPy casts them; NaN and infinities stay what they are);
- ``None``: anything else (floats into integers, complex into real, into
  booleans, strings) is refused: the caller converts first.

Pure: NumPy in, NumPy out.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from shardpipe.errors import InvalidArgumentError

__all__ = ["CastRule", "cast_checked", "cast_rule", "first_out_of_range"]

CastRule = Literal["same", "safe", "checked"]


def cast_rule(source: np.dtype[Any], target: np.dtype[Any]) -> CastRule | None:
    """How values of ``source`` are written into an array of ``target`` (module notes).

    Parameters
    ----------
    source, target : numpy.dtype
        The data's dtype and the array's.

    Returns
    -------
    {"same", "safe", "checked"} or None
        ``None``: the data must be converted by the caller first.
    """
    if source == target:
        return "same"
    if np.can_cast(source, target, "safe"):
        return "safe"
    if source.kind in "biu" and target.kind in "iu":
        return "checked"
    if source.kind in "biuf" and target.kind == "f" and np.can_cast(source, target, "same_kind"):
        return "checked"
    return None


def first_out_of_range(values: np.ndarray, target: np.dtype[Any]) -> Any | None:
    """The first value of ``values`` (in C order) that ``target`` cannot hold, or ``None``.

    Integers fit between ``numpy.iinfo(target)``'s bounds; into a float type,
    finite values fit up to its largest finite magnitude (NaN and infinities
    always fit).

    Parameters
    ----------
    values : numpy.ndarray
        Integer, boolean or float values.
    target : numpy.dtype
        An integer or float dtype.

    Returns
    -------
    int or float or None
        The offending value as a Python number.
    """
    if values.size == 0:
        return None
    if target.kind in "iu":
        bounds = np.iinfo(target)
        lowest, highest = int(bounds.min), int(bounds.max)
        if int(values.min()) >= lowest and int(values.max()) <= highest:
            return None
        outside = (values < lowest) | (values > highest)
    else:
        largest = float(np.finfo(target).max)
        with np.errstate(invalid="ignore", over="ignore"):
            magnitude = np.abs(values.astype(np.float64, copy=False))
        outside = np.isfinite(magnitude) & (magnitude > largest)
        if not outside.any():
            return None
    first = int(np.flatnonzero(outside.ravel(order="C"))[0])
    value: Any = values.ravel(order="C")[first].item()
    return value


def cast_checked(values: np.ndarray, target: np.dtype[Any], parameter: str) -> np.ndarray:
    """``values`` cast to ``target`` when each one fits it.

    Parameters
    ----------
    values : numpy.ndarray
        A block of the data written.
    target : numpy.dtype
        The array's dtype.
    parameter : str
        The parameter the data came in, named by the refusal.

    Returns
    -------
    numpy.ndarray
        The values, as ``target``.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``parameter``, both dtypes and the first value ``target``
        cannot hold.
    """
    bad = first_out_of_range(values, target)
    if bad is not None:
        raise InvalidArgumentError(
            parameter,
            f"the {values.dtype} value {bad!r} does not fit the array's dtype {target}",
            f"Clip or convert the data to values {target} holds first "
            f"(e.g. with numpy.clip), or write into an array of a wider dtype",
        )
    return values.astype(target, copy=False)
