"""The checks of a Zarr v3 array's ``zarr.json`` document that zarr does not make.

Before zarr reads an array's document (:func:`~shardpipe.stored.metadata.parse_array_metadata`),
:func:`check_array_document` checks the types and ranges of the keys shardpipe
computes with. The shard shape, the inner-chunk shapes, the dimension names and
the index location get the checks a write applies to the same arguments
(:func:`~shardpipe.core.checks.shape_param`,
:func:`~shardpipe.core.checks.check_shards_of_chunks`,
:func:`~shardpipe.core.checks.check_dimension_names`,
:func:`~shardpipe.formats.zarr_sharding.check_index_location`), at every level
of sharding, and the limits are the writers' (:data:`~shardpipe.core.checks.MAX_NDIM`,
:data:`~shardpipe.core.checks.MAX_SIZE`). Every refusal is a
:class:`~shardpipe.errors.MetadataError` naming the document's key, what is
wrong with which value, and the fix (:func:`broken_document`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from shardpipe import advice
from shardpipe.core.checks import (
    MAX_NDIM,
    MAX_SIZE,
    check_dimension_names,
    check_shards_of_chunks,
    shape_param,
)
from shardpipe.core.grid import Shape
from shardpipe.errors import InvalidArgumentError, MetadataError
from shardpipe.formats.zarr_sharding import check_index_location

MAX_SHARD_SLOTS = 2**26
"""Most inner chunks a shard may hold: its index then takes 1 GiB."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def broken_document(key: str, problem: str, node: str = "array") -> MetadataError:
    """The error for the metadata of the ``node`` at ``key``: what is wrong, and the fix."""
    return MetadataError(f"{key!r}: {problem}. {metadata_fix(node)}")


def metadata_fix(node: str) -> str:
    """How to fix a broken metadata document of a ``node`` (``"array"``, ``"group"``...)."""
    return f"Restore it from a copy, or write the {node} again ({advice.setting('overwrite')})"


def as_broken[T](key: str, what: str, check: Callable[..., T], *args: Any) -> T:
    """Run a check of a write's arguments on ``what``, a value of the document at ``key``.

    Its :class:`~shardpipe.errors.InvalidArgumentError` becomes a
    :class:`~shardpipe.errors.MetadataError` naming ``key`` and ``what``
    (its text cut to 400 characters: a forged value may be long).
    """
    try:
        return check(*args)
    except InvalidArgumentError as err:
        problem = err.problem if len(err.problem) <= 400 else f"{err.problem[:397]}..."
        raise broken_document(key, f"{what}: {problem}") from None


def _check_extents(value: Any, name: str, key: str) -> list[int]:
    """``value`` as a list of integers in ``[0, MAX_SIZE]``, at most ``MAX_NDIM`` long."""
    if not isinstance(value, list) or not all(_is_int(n) for n in value):
        raise broken_document(key, f"{name} must be a list of integers, got {value!r:.200}")
    if len(value) > MAX_NDIM:
        raise broken_document(key, f"{name} has {len(value)} dimensions, more than {MAX_NDIM}")
    if any(not 0 <= n <= MAX_SIZE for n in value):
        raise broken_document(key, f"{name} {value!r:.200} has an extent outside [0, {MAX_SIZE}]")
    return list(value)


def _check_sharding(
    codecs: list[Any], outer: Shape | None, ndim: int, key: str, *, nested: bool = False
) -> None:
    """Check every ``sharding_indexed`` codec of ``codecs`` and of the chains nested in them.

    ``outer`` is the shape of the chunks the chain encodes (the shards, for
    the array's own chain; None when not known). A sharding codec first in
    its chain gets these chunks as they are: its inner chunks must divide
    them, at most :data:`MAX_SHARD_SLOTS` to a shard.
    """
    where = "a nested sharding_indexed codec" if nested else "the sharding_indexed codec"
    for position, codec in enumerate(codecs):
        if not isinstance(codec, dict) or codec.get("name") != "sharding_indexed":
            continue
        config = codec.get("configuration")
        if not isinstance(config, dict):
            raise broken_document(key, f"{where} has no configuration")
        given = config.get("chunk_shape")
        inner = as_broken(key, f"{where}'s chunk_shape", shape_param, "chunks", given, ndim)
        if inner is None:
            raise broken_document(key, f"{where} has no chunk_shape")
        if position == 0 and outer is not None:
            what = f"the chunk shape {where} splits" if nested else "the shard shape"
            as_broken(key, what, check_shards_of_chunks, outer, inner)
            slots = math.prod(o // i for o, i in zip(outer, inner, strict=True))
            if slots > MAX_SHARD_SLOTS:
                raise broken_document(
                    key,
                    f"shards of shape {outer} hold {slots:,} inner chunks of shape {inner}, "
                    f"more than the {MAX_SHARD_SLOTS:,} shardpipe reads the index of",
                )
        if "index_location" in config:
            location = config["index_location"]
            as_broken(key, f"{where}'s index_location", check_index_location, location)
        chain = config.get("codecs")
        if isinstance(chain, list):
            _check_sharding(chain, inner, ndim, key, nested=True)


def check_array_document(document: dict[str, Any], key: str) -> None:
    """Check what zarr does not: the types and ranges of the keys shardpipe computes with.

    The shard shape, inner-chunk shapes, dimension names and index locations
    get the checks of a write's arguments (:func:`~shardpipe.core.checks.shape_param`,
    :func:`~shardpipe.core.checks.check_shards_of_chunks`,
    :func:`~shardpipe.core.checks.check_dimension_names`,
    :func:`~shardpipe.formats.zarr_sharding.check_index_location`).
    """
    for name in ("shape", "data_type", "chunk_grid", "codecs", "fill_value"):
        if name not in document:
            raise broken_document(key, f"the array metadata has no {name!r}")
    shape = _check_extents(document["shape"], "'shape'", key)
    grid = document["chunk_grid"]
    if not isinstance(grid, dict) or not isinstance(grid.get("configuration", {}), dict):
        raise broken_document(key, f"'chunk_grid' must be an object, got {grid!r:.200}")
    shards = None
    if grid.get("name") == "regular":
        given = grid.get("configuration", {}).get("chunk_shape")
        what = "'chunk_grid' chunk_shape (the shard shape)"
        shards = as_broken(key, what, shape_param, "shards", given, len(shape))
    codecs = document["codecs"]
    if not isinstance(codecs, list) or not all(isinstance(c, (dict, str)) for c in codecs):
        raise broken_document(key, f"'codecs' must be a list of codecs, got {codecs!r:.200}")
    _check_sharding(codecs, shards, len(shape), key)
    if document.get("dimension_names") is not None:
        names = document["dimension_names"]
        as_broken(key, "'dimension_names'", check_dimension_names, names, len(shape))
    for name, kind in (("attributes", dict), ("chunk_key_encoding", (dict, str))):
        if name in document and not isinstance(document[name], kind):
            raise broken_document(key, f"{name!r} has the wrong type, got {document[name]!r:.200}")


def consolidated_arrays(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The Zarr v3 array documents in a group document's consolidated metadata."""
    consolidated = document.get("consolidated_metadata")
    members = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if not isinstance(members, dict):
        return []
    return [
        (str(path), member)
        for path, member in members.items()
        if isinstance(member, dict)
        and member.get("node_type") == "array"
        and member.get("zarr_format") == 3
    ]
