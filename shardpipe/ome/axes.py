"""OME-Zarr axes: parse what the caller passes, check it against the NGFF 0.5 rules.

An image has 2 to 5 axes, each with a name, a type and (for space and time
axes) optionally a unit. The rules (NGFF 0.5, "axes metadata"):

* names are unique;
* there are 2 or 3 axes of type ``space``, at most one ``time`` axis and at
  most one ``channel`` axis;
* the ``time`` axis comes first, then the ``channel`` axis, then the space
  axes (``tczyx``; ``zyx`` and ``xyz`` are fine, ``ytx`` is not);
* a unit, where given, is one of the spec's (UDUNITS-2) names for its type.

``axes`` may be a string of one-letter names (``"tczyx"``), a list of
names, or a list of the spec's axis objects (``{"name": "z", "type":
"space", "unit": "micrometer"}``). The names ``t``, ``c``, ``z``, ``y`` and
``x`` have their usual types; any other name needs an axis object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shardpipe.errors import InvalidArgumentError

__all__ = [
    "AXIS_TYPES",
    "SPACE_UNITS",
    "TIME_UNITS",
    "Axis",
    "apply_units",
    "axes_from_document",
    "parse_axes",
]

SPACE_UNITS = frozenset(
    [
        "angstrom",
        "attometer",
        "centimeter",
        "decimeter",
        "exameter",
        "femtometer",
        "foot",
        "gigameter",
        "hectometer",
        "inch",
        "kilometer",
        "megameter",
        "meter",
        "micrometer",
        "mile",
        "millimeter",
        "nanometer",
        "parsec",
        "petameter",
        "picometer",
        "terameter",
        "yard",
        "yoctometer",
        "yottameter",
        "zeptometer",
        "zettameter",
    ]
)
"""Units the NGFF 0.5 spec lists for axes of type ``space``."""

TIME_UNITS = frozenset(
    [
        "attosecond",
        "centisecond",
        "day",
        "decisecond",
        "exasecond",
        "femtosecond",
        "gigasecond",
        "hectosecond",
        "hour",
        "kilosecond",
        "megasecond",
        "microsecond",
        "millisecond",
        "minute",
        "nanosecond",
        "petasecond",
        "picosecond",
        "second",
        "terasecond",
        "yoctosecond",
        "yottasecond",
        "zeptosecond",
        "zettasecond",
    ]
)
"""Units the NGFF 0.5 spec lists for axes of type ``time``."""

AXIS_TYPES = ("time", "channel", "space")
"""Axis types, in the order the spec requires them."""

_TYPE_OF_NAME = {"t": "time", "c": "channel", "z": "space", "y": "space", "x": "space"}
_AXES_FIX = (
    "Pass axes in the spec's order (time, then channel, then 2 or 3 space axes), e.g. "
    "'zyx', 'czyx', 'tczyx', or axis objects such as "
    "[{'name': 'z', 'type': 'space', 'unit': 'micrometer'}, ...]"
)


@dataclass(frozen=True)
class Axis:
    """One axis of an OME-Zarr image.

    Parameters
    ----------
    name : str
        Its name, also the array's dimension name.
    type : str
        ``"time"``, ``"channel"`` or ``"space"``.
    unit : str or None
        One of the spec's units for its type, or None.
    """

    name: str
    type: str
    unit: str | None = None

    @property
    def is_space(self) -> bool:
        """Whether the axis is spatial (the only kind a pyramid downsamples)."""
        return self.type == "space"

    def to_json(self) -> dict[str, str]:
        """The spec's axis object."""
        out = {"name": self.name, "type": self.type}
        if self.unit is not None:
            out["unit"] = self.unit
        return out


def _one_axis(item: Any, parameter: str) -> Axis:
    if isinstance(item, str):
        if item not in _TYPE_OF_NAME:
            raise InvalidArgumentError(
                parameter,
                f"the axis name {item!r} has no known type (t, c, z, y and x do)",
                "Give it as an axis object with a type, e.g. {'name': 'angle', 'type': 'space'}",
            )
        return Axis(item, _TYPE_OF_NAME[item])
    if isinstance(item, Mapping):
        unknown = set(item) - {"name", "type", "unit"}
        name, kind, unit = item.get("name"), item.get("type"), item.get("unit")
        if unknown or not isinstance(name, str) or not name:
            raise InvalidArgumentError(
                parameter,
                f"{dict(item)!r} is not an axis object (keys name, type and unit; a "
                "non-empty name)",
                _AXES_FIX,
            )
        if kind is None:
            kind = _TYPE_OF_NAME.get(name)
        if kind not in AXIS_TYPES:
            raise InvalidArgumentError(
                parameter,
                f"axis {name!r} has the type {kind!r}, not one of {AXIS_TYPES}",
                _AXES_FIX,
            )
        if unit is not None and not isinstance(unit, str):
            raise InvalidArgumentError(
                parameter, f"axis {name!r} has the unit {unit!r}, not a string", _AXES_FIX
            )
        return Axis(name, kind, unit)
    raise InvalidArgumentError(
        parameter,
        f"{item!r} ({type(item).__name__}) is neither an axis name nor an axis object",
        _AXES_FIX,
    )


def parse_axes(axes: Any, ndim: int, parameter: str = "axes") -> tuple[Axis, ...]:
    """The axes ``axes`` describes, checked against the spec and against ``ndim``.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``parameter``: unknown names or types, a wrong count, repeated
        names, an order the spec forbids, or units not in its lists.
    """
    if isinstance(axes, str):
        items: list[Any] = list(axes)
    elif isinstance(axes, Sequence):
        items = list(axes)
    else:
        raise InvalidArgumentError(
            parameter,
            f"expected a string such as 'zyx' or a list of axes, got {type(axes).__name__}",
            _AXES_FIX,
        )
    parsed = tuple(_one_axis(item, parameter) for item in items)
    if len(parsed) != ndim:
        raise InvalidArgumentError(
            parameter,
            f"{len(parsed)} axes {[a.name for a in parsed]} for an array of {ndim} dimensions",
            "Pass one axis per dimension of the array",
        )
    check_axes(parsed, parameter)
    return parsed


def check_axes(axes: Sequence[Axis], parameter: str = "axes") -> None:
    """Refuse axes that break the spec's rules (see the module's documentation)."""
    names = [a.name for a in axes]
    if not 2 <= len(axes) <= 5:
        raise InvalidArgumentError(
            parameter, f"{len(axes)} axes {names}; OME-Zarr images have 2 to 5", _AXES_FIX
        )
    if len(set(names)) != len(names):
        raise InvalidArgumentError(parameter, f"the axis names {names} repeat a name", _AXES_FIX)
    kinds = [a.type for a in axes]
    if not 2 <= kinds.count("space") <= 3:
        raise InvalidArgumentError(
            parameter,
            f"{names} has {kinds.count('space')} space axes; the spec wants 2 or 3",
            _AXES_FIX,
        )
    for kind in ("time", "channel"):
        if kinds.count(kind) > 1:
            raise InvalidArgumentError(
                parameter, f"{names} has {kinds.count(kind)} {kind} axes; at most one", _AXES_FIX
            )
    ranks = [AXIS_TYPES.index(k) for k in kinds]
    if ranks != sorted(ranks):
        raise InvalidArgumentError(
            parameter,
            f"{names} (types {kinds}) is not in the spec's order: time first, then channel, "
            "then space",
            _AXES_FIX,
        )
    for axis in axes:
        _check_unit(axis, parameter)


def _check_unit(axis: Axis, parameter: str) -> None:
    if axis.unit is None:
        return
    if axis.type == "channel":
        raise InvalidArgumentError(
            parameter,
            f"the channel axis {axis.name!r} has the unit {axis.unit!r}; channels have none",
            "Leave the channel axis's unit out",
        )
    allowed = SPACE_UNITS if axis.type == "space" else TIME_UNITS
    if axis.unit not in allowed:
        example = "micrometer" if axis.type == "space" else "second"
        raise InvalidArgumentError(
            parameter,
            f"the unit {axis.unit!r} of {axis.type} axis {axis.name!r} is not one of the "
            f"spec's {axis.type} units",
            f"Use a UDUNITS-2 name such as {example!r} (one of {sorted(allowed)})",
        )


def apply_units(axes: tuple[Axis, ...], axes_units: Any) -> tuple[Axis, ...]:
    """``axes`` with the units of ``axes_units`` (a mapping from axis name to unit).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``axes_units``: an unknown axis, a unit not in the spec's lists,
        or a unit that contradicts one given in ``axes``.
    """
    if axes_units is None:
        return axes
    if not isinstance(axes_units, Mapping):
        raise InvalidArgumentError(
            "axes_units",
            f"expected a mapping from axis name to unit, got {type(axes_units).__name__}",
            "Pass e.g. {'z': 'micrometer', 'y': 'micrometer', 'x': 'micrometer'}",
        )
    names = [a.name for a in axes]
    unknown = [k for k in axes_units if k not in names]
    if unknown:
        raise InvalidArgumentError(
            "axes_units", f"{unknown} are not axes of the image {names}", "Name axes it has"
        )
    out = []
    for axis in axes:
        unit = axes_units.get(axis.name)
        if unit is None:
            out.append(axis)
            continue
        if axis.unit is not None and axis.unit != unit:
            raise InvalidArgumentError(
                "axes_units",
                f"{unit!r} for axis {axis.name!r}, whose axis object says {axis.unit!r}",
                "Give each unit once",
            )
        if not isinstance(unit, str):
            raise InvalidArgumentError(
                "axes_units", f"{unit!r} for axis {axis.name!r} is not a string", "Pass unit names"
            )
        replaced = Axis(axis.name, axis.type, unit)
        _check_unit(replaced, "axes_units")
        out.append(replaced)
    return tuple(out)


def axes_from_document(document: Any, where: str) -> tuple[Axis, ...]:
    """The axes of a stored multiscales object (read back for updates and checks).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``store`` when the stored axes are not valid 0.5 axes.
    """
    try:
        axes = tuple(_one_axis(item, "store") for item in document)
        check_axes(axes, "store")
    except InvalidArgumentError as err:
        raise InvalidArgumentError(
            "store", f"the multiscales axes stored at {where} are not valid: {err}", err.fix
        ) from err
    return axes
