"""Checks of a label image of ``to_ome_zarr``: its name, its colors and properties.

A label image is the group ``labels/<name>`` of an OME-Zarr image: its name
must be one Zarr group name that no other key of the ``labels`` group uses
(:func:`label_name_problem`). Its ``colors`` and ``properties`` become the
spec's lists of objects, each with an integer ``label-value``
(:func:`label_list`). Each check raises or says what is wrong before anything
is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shardpipe.core.checks import is_integer
from shardpipe.core.keys import key_problem
from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.keys import JOB_DIR

__all__ = ["label_list", "label_name_problem"]


def label_list(value: Any, parameter: str, key: str) -> list[dict[str, Any]] | None:
    """``colors`` or ``properties`` as the spec's list of objects with a ``label-value``.

    ``value`` is that list, or a mapping from label value to an RGBA
    (``key="rgba"``) or to a dict of properties; ``parameter`` is named in
    the errors.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        items: list[Any] = []
        for label, entry in value.items():
            if key == "rgba":
                items.append({"label-value": label, "rgba": entry})
            elif isinstance(entry, Mapping):
                items.append({"label-value": label, **entry})
            else:
                items.append(None)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        items = list(value)
    else:
        items = [None]
    fix = (
        "Pass colors as {label: [r, g, b, a]} or [{'label-value': 1, 'rgba': [255, 0, 0, 255]}], "
        "properties as {label: {'class': 'cell'}} or [{'label-value': 1, 'class': 'cell'}]"
    )
    seen: set[int] = set()
    for item in items:
        if not isinstance(item, Mapping) or not is_integer(item.get("label-value")):
            raise InvalidArgumentError(parameter, f"{item!r} has no integer 'label-value'", fix)
        label = int(item["label-value"])
        if label in seen:
            raise InvalidArgumentError(parameter, f"the label-value {label} repeats", fix)
        seen.add(label)
        if key == "rgba":
            rgba = item.get("rgba")
            if (
                not isinstance(rgba, Sequence)
                or len(rgba) != 4
                or not all(is_integer(v) and 0 <= int(v) <= 255 for v in rgba)
            ):
                raise InvalidArgumentError(
                    parameter, f"the rgba {rgba!r} of label {label} is not four integers 0-255", fix
                )
    out = []
    for item in items:
        entry = {str(k): v for k, v in item.items()}
        entry["label-value"] = int(entry["label-value"])
        if key == "rgba":
            entry["rgba"] = [int(v) for v in entry["rgba"]]
        out.append(entry)
    return out


def label_name_problem(name: Any) -> str | None:
    """What makes ``name`` unfit to name a label image, or None.

    A label image is the group ``labels/<name>``, beside the ``labels``
    group's own ``zarr.json``: its name is one Zarr node name (not empty,
    no ``/``, not starting with ``__``, which Zarr v3 reserves), a safe key
    (no NUL, no backslash: :func:`~shardpipe.core.keys.key_problem`), not
    ``zarr.json`` (in any case: file systems that ignore case would mix the
    two up) and not starting with ``.`` (``.``, ``..``, shardpipe's
    records (:data:`~shardpipe.storage.keys.JOB_DIR`), Zarr v2's ``.zattrs``...).
    """
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a str"
    if name == "":
        return "it is empty"
    if "/" in name:
        return "it holds '/' (a label image is one group under labels/)"
    if name.startswith("."):
        return f"it starts with '.', as '.', '..' and records such as {JOB_DIR} and .zattrs do"
    if name.startswith("__"):
        return "it starts with '__', which Zarr v3 reserves"
    if name.casefold() == "zarr.json":
        return "it is the labels group's own metadata document"
    return key_problem(name)
