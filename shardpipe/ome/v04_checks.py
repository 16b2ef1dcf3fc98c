"""An OME-Zarr 0.4 source, checked whole before a conversion plans or writes anything.

:func:`validate_source` reads every document of the image and of its label
images, at most :data:`~shardpipe.ome.source_reads.MAX_DOCUMENT_NBYTES`
each, and refuses anything wrong in them with an
:class:`~shardpipe.errors.InvalidArgumentError` naming ``source``, the
document, the value and the fix:

* the ``multiscales`` of each group (:func:`~shardpipe.ome.v04_source.translate_image`):
  version 0.4, valid axes (:func:`~shardpipe.ome.axes.axes_from_document`),
  datasets with a scale transform of one number per axis
  (:func:`~shardpipe.ome.metadata.read_multiscale`), at most
  :data:`~shardpipe.core.pyramid.MAX_LEVELS` of them;
* dataset paths and label names: relative paths inside their group (no
  empty, ``.`` or ``..`` part, no leading ``/``, no ``\\`` or control
  characters), each once, none inside another; a label name is one part,
  and no level of the image lies in ``labels``;
* each level's ``.zarray`` (:func:`~shardpipe.codec.v2_array.check_zarray`),
  with one dimension per axis of its group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardpipe.codec.v2_array import V2Array, check_zarray
from shardpipe.core.checks import shown
from shardpipe.core.pyramid import MAX_LEVELS
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.ome.axes import Axis, axes_from_document
from shardpipe.ome.metadata import NGFF_VERSION, read_multiscale
from shardpipe.ome.v04_source import REPAIR, labels_of, read_json, translate_image
from shardpipe.storage.resolve import ResolvedStore

__all__ = ["MAX_LEVEL_TASKS", "SourceImage", "SourceLevel", "check_level_tasks", "validate_source"]

MAX_LEVEL_TASKS = 2**24
"""Most tasks the conversion of one level may take (shards copied, or chunks decoded): a
Dask graph of 16 million tasks takes gigabytes before the first one runs."""


@dataclass(frozen=True)
class SourceLevel:
    """A level array of the source.

    Parameters
    ----------
    array : V2Array
        Its checked ``.zarray``.
    zarray : dict
        The document itself.
    """

    array: V2Array
    zarray: dict[str, Any]


@dataclass(frozen=True)
class SourceImage:
    """What a checked 0.4 source holds.

    Parameters
    ----------
    groups : dict of str to dict
        The 0.5 attributes of every group to write, by path (``""``,
        ``"labels"``, ``"labels/<name>"``).
    images : list of (str, list of str)
        Each image group (the image, then each label image) and the paths
        of its levels.
    levels : dict of str to SourceLevel
        Every level, by its path in the image group.
    """

    groups: dict[str, dict[str, Any]]
    images: list[tuple[str, list[str]]]
    levels: dict[str, SourceLevel]


def validate_source(src: ResolvedStore) -> SourceImage:
    """Read and check every document of the 0.4 image at ``src``; reads no chunk.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming ``source``, the document, the value and the fix.
    """
    groups: dict[str, dict[str, Any]] = {}
    images: list[tuple[str, list[str]]] = []
    axes: dict[str, tuple[Axis, ...]] = {}
    groups[""], images_paths, axes[""] = _image(src, "", "the source")
    images.append(("", images_paths))
    names = labels_of(src)
    _check_paths(names, "labels/.zattrs", "label name", nested=False)
    if names:
        groups["labels"] = {"ome": {"version": NGFF_VERSION, "labels": names}}
        inside = [p for p in images_paths if p.split("/")[0] == "labels"]
        if inside:
            raise InvalidArgumentError(
                "source",
                f".zattrs: the dataset path {inside[0]!r} lies in the labels group",
                REPAIR,
            )
    for name in names:
        group = f"labels/{name}"
        groups[group], paths, axes[group] = _image(src, group, f"the label image {name!r}")
        images.append((group, paths))
    levels = {}
    for group, paths in images:
        for path in paths:
            full = f"{group}/{path}" if group else path
            levels[full] = _level(src, full, axes[group])
    return SourceImage(groups, images, levels)


def _image(
    src: ResolvedStore, group: str, what: str
) -> tuple[dict[str, Any], list[str], tuple[Axis, ...]]:
    """The 0.5 attributes of an image group, its level paths and its axes, checked."""
    where = f"{group}/.zattrs" if group else ".zattrs"
    ome, paths = translate_image(read_json(src, where, what), where)
    if len(paths) > MAX_LEVELS:
        raise InvalidArgumentError(
            "source",
            f"{where} lists {len(paths):,} datasets, more than the {MAX_LEVELS} levels a "
            "pyramid may have",
            REPAIR,
        )
    _check_paths(paths, where, "dataset path", nested=True)
    document = ome["multiscales"][0].get("axes")
    if not isinstance(document, list):
        raise InvalidArgumentError(
            "source", f"{where}: the multiscales axes are {shown(document)}, not a list", REPAIR
        )
    try:
        axes = axes_from_document(document, where)
        read_multiscale({"ome": ome}, where)
    except (InvalidArgumentError, MetadataError) as err:
        problem = err.problem if isinstance(err, InvalidArgumentError) else str(err)
        raise InvalidArgumentError("source", problem, REPAIR) from None
    return {"ome": ome}, paths, axes


def _check_paths(paths: list[str], where: str, kind: str, *, nested: bool) -> None:
    """Refuse a path that leaves its group, repeats or lies inside another.

    ``nested``: the paths may have several parts (dataset paths), or must
    be one folder's name (label names).
    """
    rule = (
        "a relative path inside the group (no empty, '.' or '..' part, no leading '/', no '\\' "
        "or control characters)"
        if nested
        else "the name of a folder (no '/', no '.' or '..', no '\\' or control characters)"
    )
    seen: set[str] = set()
    for path in paths:
        parts = path.split("/")
        if (
            any(part in ("", ".", "..") for part in parts)
            or any(c == "\\" or ord(c) < 32 or c == "\x7f" for c in path)
            or (not nested and len(parts) > 1)
        ):
            raise InvalidArgumentError(
                "source", f"{where}: the {kind} {path!r} is not {rule}", REPAIR
            )
        if path in seen:
            raise InvalidArgumentError(
                "source", f"{where}: the {kind} {path!r} is listed more than once", REPAIR
            )
        seen.add(path)
    for path in paths:
        parts = path.split("/")
        outers = ("/".join(parts[:n]) for n in range(1, len(parts)))
        outer = next((o for o in outers if o in seen), None)
        if outer is not None:
            raise InvalidArgumentError(
                "source", f"{where}: the {kind} {path!r} lies inside the level {outer!r}", REPAIR
            )


def _level(src: ResolvedStore, path: str, axes: tuple[Axis, ...]) -> SourceLevel:
    """The level array at ``path``, checked, with one dimension per axis of its group."""
    key = f"{path}/.zarray"
    zarray = read_json(src, key, f"the level {path!r}")
    array = check_zarray(zarray, key)
    if len(array.shape) != len(axes):
        raise InvalidArgumentError(
            "source",
            f"{key}: the level {path!r} has {len(array.shape)} dimensions (shape "
            f"{list(array.shape)}) for {len(axes)} axes {[a.name for a in axes]}",
            REPAIR,
        )
    return SourceLevel(array, zarray)


def check_level_tasks(path: str, count: int, what: str, fix: str) -> None:
    """Refuse to convert the level at ``path`` in more than :data:`MAX_LEVEL_TASKS` tasks.

    ``what`` names the tasks (``"shards, one task each"``), ``fix`` says how
    to have fewer.
    """
    if count > MAX_LEVEL_TASKS:
        raise InvalidArgumentError(
            "source",
            f"the level {path!r} ({path}/.zarray) would be converted as {count:,} {what}, more "
            f"than the {MAX_LEVEL_TASKS:,} a conversion plans",
            fix,
        )
