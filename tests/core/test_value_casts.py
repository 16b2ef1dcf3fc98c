"""The dtypes a write into an existing array casts, and the values it refuses (brute force)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shardpipe.core.value_casts import cast_checked, cast_rule, first_out_of_range
from shardpipe.errors import InvalidArgumentError

INTEGERS = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOATS = ["float16", "float32", "float64"]


@pytest.mark.parametrize(
    ("source", "target", "rule"),
    [
        ("uint16", "uint16", "same"),
        ("uint8", "uint16", "safe"),
        ("float32", "float64", "safe"),
        ("int64", "uint16", "checked"),
        ("uint64", "int8", "checked"),
        ("bool", "int8", "safe"),
        ("int64", "float32", "checked"),
        ("float64", "float16", "checked"),
        ("float64", "uint16", None),
        ("int8", "bool", None),
        ("complex64", "float64", None),
        ("<U3", "int64", None),
    ],
)
def test_the_rule_of_each_pair(source: str, target: str, rule: str | None) -> None:
    assert cast_rule(np.dtype(source), np.dtype(target)) == rule


def _brute_first_outside(values: np.ndarray, target: np.dtype[Any]) -> Any | None:
    for value in values.ravel(order="C").tolist():
        if target.kind in "iu":
            info = np.iinfo(target)
            if not int(info.min) <= int(value) <= int(info.max):
                return value
        elif np.isfinite(value) and abs(value) > float(np.finfo(target).max):
            return value
    return None


@st.composite
def _values_and_target(draw: st.DrawFn) -> tuple[np.ndarray, np.dtype[Any]]:
    source = np.dtype(draw(st.sampled_from(INTEGERS + FLOATS)))
    targets = [t for t in INTEGERS[1:] + FLOATS if cast_rule(source, np.dtype(t)) == "checked"]
    target = np.dtype(draw(st.sampled_from(targets or ["float64"])))
    values = draw(hnp.arrays(source, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5)))
    return values, target


@given(_values_and_target())
def test_the_first_value_out_of_range_is_the_brute_force_one(
    case: tuple[np.ndarray, np.dtype[Any]],
) -> None:
    values, target = case
    expected = _brute_first_outside(values, target)
    found = first_out_of_range(values, target)
    assert (found is None) == (expected is None)
    if expected is not None:
        assert found == expected
        with pytest.raises(InvalidArgumentError, match=f"does not fit the array's dtype {target}"):
            cast_checked(values, target, "arr")
    else:
        cast = cast_checked(values, target, "arr")
        assert cast.dtype == target
        if target.kind in "iu":
            assert np.array_equal(cast.astype(values.dtype), values)


def test_the_refusal_names_the_parameter_and_the_value() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        cast_checked(np.array([3, -7, -8], "int64"), np.dtype("uint8"), "updates[2]")
    assert info.value.parameter == "updates[2]"
    assert "int64 value -7 does not fit the array's dtype uint8" in str(info.value)
