"""What a Zarr group already holds, and whether new data for its variables fits it.

Read before anything is written: an append or a region write is checked
here (variables, dimensions, sizes, dtypes) and refused with an error that
names the variable and the parameter.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr
import zarr
from xarray import conventions

from shardpipe import advice
from shardpipe.errors import InvalidArgumentError, ShardpipeError
from shardpipe.internals.zarr_core import ConsolidatedMetadata
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.stored.locations import resolved_name
from shardpipe.stored.metadata import (
    ZARR_PARSE_ERRORS,
    broken_metadata,
    is_sharded,
    read_node_metadata,
)


@dataclass(frozen=True)
class StoredVariables:
    """The variables of the group at a write's target, as stored and as decoded.

    Parameters
    ----------
    exists : bool
        Whether a Zarr node is at the target.
    names : frozenset
        Names of the arrays in the group.
    sharded : frozenset
        Names of those that are sharded Zarr v3 arrays.
    shapes : dict
        Stored shape per array.
    decoded : xarray.Dataset or None
        The group opened lazily with xarray (CF-decoded), for checks.
    paths : tuple of str
        Store paths of the arrays at the target.
    consolidated : bool
        Whether the store's root holds consolidated metadata.
    """

    exists: bool
    names: frozenset[Hashable] = frozenset()
    sharded: frozenset[Hashable] = frozenset()
    shapes: dict[Hashable, tuple[int, ...]] = field(default_factory=dict)
    decoded: xr.Dataset | None = None
    paths: tuple[str, ...] = ()
    consolidated: bool = False

    @classmethod
    def read(cls, root: ResolvedStore, mode: str) -> StoredVariables:
        """Read the group at ``root`` (its variables only where ``mode`` keeps them).

        Raises
        ------
        shardpipe.errors.MetadataError
            If the ``zarr.json`` of the group or of an array in it is broken.
        """
        read_node_metadata(root.shards, root.key("zarr.json"))  # checked: broken ones raise
        try:
            node = zarr.open(store=root.zarr_store, path=root.path, mode="r")
        except (FileNotFoundError, KeyError, zarr.errors.NodeNotFoundError):
            if mode in ("a", "r+"):
                raise InvalidArgumentError(
                    "mode",
                    f"{mode!r} writes into an existing group, and there is none at "
                    f"{advice.place(root.path, resolved_name(root))}",
                    f"Write the dataset first with {advice.setting('mode', 'w-')}",
                ) from None
            return cls(exists=False)
        if not isinstance(node, zarr.Group):
            return cls(exists=True, paths=(root.path,))
        try:
            arrays = dict(node.arrays())
        except (FileNotFoundError, ShardpipeError):
            raise
        except ZARR_PARSE_ERRORS as err:  # an array of the group has metadata zarr cannot read
            raise broken_metadata(root.shards, root.key(""), err) from err
        paths = tuple(str(a.path) for a in arrays.values())
        if mode not in ("a", "r+"):
            return cls(exists=True, paths=paths)
        decoded = xr.open_zarr(
            root.zarr_store, group=root.path or None, chunks=None, consolidated=False
        )
        consolidated = consolidated_metadata(root) is not None
        return cls(
            exists=True,
            names=frozenset(arrays),
            sharded=frozenset(n for n, a in arrays.items() if is_sharded(a.metadata)),
            shapes={n: tuple(a.shape) for n, a in arrays.items()},
            decoded=decoded,
            paths=paths,
            consolidated=consolidated,
        )

    def array_paths(self) -> tuple[str, ...]:
        """Store paths of the arrays at the target (to check for running jobs)."""
        return self.paths

    def encode_like_stored(
        self, zstore: Any, variables: Mapping[Hashable, xr.Variable]
    ) -> dict[Hashable, xr.Variable]:
        """CF-encode new data of stored variables exactly as the stored data was encoded.

        What xarray's ``ZarrStore.store`` does for existing variables: decode
        the stored variable to learn its encoding, give it to the new data,
        encode with the store's coders.
        """
        stored, _, _ = conventions.decode_cf_variables(
            variables={name: zstore.open_store_variable(name=name) for name in variables},
            attributes={},
        )
        with_encoding = {}
        for name, var in variables.items():
            with_encoding[name] = var.copy(deep=False)
            with_encoding[name].encoding = stored[name].encoding
        encoded, _ = zstore.encode(with_encoding, {})
        return dict(encoded)


def consolidated_metadata(root: ResolvedStore) -> ConsolidatedMetadata | None:
    """The consolidated metadata at the store's root (where xarray writes it), if any.

    Raises
    ------
    shardpipe.errors.MetadataError
        If the root's ``zarr.json`` (which holds it) is broken.
    """
    read_node_metadata(root.shards, "zarr.json")  # a broken one is not "no consolidated metadata"
    try:
        top = zarr.open_group(root.zarr_store, mode="r", use_consolidated=True)
    except ValueError:  # zarr: "Consolidated metadata requested ... but not found"
        return None
    return top.metadata.consolidated_metadata


def check_compatible(
    name: Hashable,
    var: xr.Variable,
    stored: StoredVariables,
    regions: Mapping[Hashable, slice],
    append_dim: Hashable | None,
) -> None:
    """Refuse new data for the stored variable ``name`` that does not fit it.

    Dimensions must be the stored ones in the stored order, the dtype the
    stored (decoded) dtype, and every dimension that is neither appended to
    nor given a region must keep its stored size.
    """
    assert stored.decoded is not None
    parameter = "append_dim" if append_dim is not None else "region"
    old = stored.decoded.variables[name]
    if tuple(var.dims) != tuple(old.dims):
        raise InvalidArgumentError(
            parameter,
            f"variable {name!r} has dims {var.dims}; the stored one has {old.dims}",
            f"Transpose it first: ds[{name!r}].transpose(*{old.dims!r})",
        )
    if np.dtype(var.dtype) != np.dtype(old.dtype):
        raise InvalidArgumentError(
            parameter,
            f"variable {name!r} has dtype {var.dtype}; the stored one has {old.dtype}",
            f"Cast it first: ds[{name!r}].astype({str(old.dtype)!r})",
        )
    for dim, new_size, old_size in zip(var.dims, var.shape, old.shape, strict=True):
        if dim == append_dim or dim in regions:
            continue
        if new_size != old_size:
            raise InvalidArgumentError(
                parameter,
                f"variable {name!r} has {new_size} along {dim!r}; the stored one has "
                f"{old_size} (only {append_dim or list(regions)!r} may differ)",
                "Write data of the stored size along the other dimensions",
            )
    for dim, window in regions.items():
        if dim not in var.dims:
            continue
        size = old.shape[var.dims.index(dim)]
        start, stop, _ = window.indices(size)
        if (window.stop is not None and window.stop > size) or stop - start != var.sizes[dim]:
            raise InvalidArgumentError(
                "region",
                f"variable {name!r}: region {dim}={window} does not fit the stored size "
                f"{size} with {var.sizes[dim]} new values",
                f"Give a slice of length {var.sizes[dim]} within 0..{size}",
            )
