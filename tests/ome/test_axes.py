"""OME-Zarr axes: what the spec allows, as strings, names or axis objects."""

from __future__ import annotations

from typing import Any

import pytest

from shardpipe.errors import InvalidArgumentError
from shardpipe.ome.axes import Axis, apply_units, parse_axes


@pytest.mark.parametrize(
    ("axes", "types"),
    [
        ("yx", ["space", "space"]),
        ("zyx", ["space"] * 3),
        ("xyz", ["space"] * 3),  # any order of space axes
        ("tczyx", ["time", "channel", "space", "space", "space"]),
        ("tyx", ["time", "space", "space"]),
        ("cyx", ["channel", "space", "space"]),
        (["t", "c", "y", "x"], ["time", "channel", "space", "space"]),
        (
            [{"name": "angle", "type": "channel"}, {"name": "y", "type": "space", "unit": "inch"},
             {"name": "x", "type": "space"}],
            ["channel", "space", "space"],
        ),
    ],
)  # fmt: skip
def test_the_spec_allows(axes: Any, types: list[str]) -> None:
    parsed = parse_axes(axes, len(types))
    assert [a.type for a in parsed] == types


@pytest.mark.parametrize(
    ("axes", "words"),
    [
        ("ytx", "spec's order"),
        ("zct", "spec's order"),
        ("x", "1 axes"),
        ("tcx", "space axes"),
        (["t", {"name": "u", "type": "time"}, "y", "x"], "2 time axes"),
        ("ccyx", "repeat"),
        ("zzyx", "repeat"),
        ("wzyx", "no known type"),
        ([{"name": "z", "type": "custom"}, "y", "x"], "not one of"),
        ([{"name": "z", "type": "space", "unit": "furlong"}, "y", "x"], "space units"),
        ([{"name": "t", "type": "time", "unit": "meter"}, "y", "x"], "time units"),
        ([{"name": "", "type": "space"}, "y", "x"], "axis object"),
        ([3, "y", "x"], "neither"),
    ],
)
def test_the_spec_refuses(axes: Any, words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words) as caught:
        parse_axes(axes, len(axes))
    assert caught.value.parameter == "axes"


def test_units_apply_by_name() -> None:
    axes = parse_axes("tzyx", 4)
    with_units = apply_units(axes, {"t": "millisecond", "x": "nanometer"})
    assert with_units[0] == Axis("t", "time", "millisecond")
    assert with_units[3].to_json() == {"name": "x", "type": "space", "unit": "nanometer"}
    assert with_units[1].unit is None
