"""xarray's metadata write of a dataset, done first in memory: its errors come before any byte.

``ds.shard.to_zarr`` lets xarray create the arrays (CF encoding, dtypes,
fill values, codecs, chunk keys) and keeps the data of the sharded ones.
Many values of ``encoding`` are only checked by xarray and zarr while they
create the arrays: a ``scale_factor`` that is a string, a ``_FillValue`` the
packed dtype cannot hold, ``units`` on a variable that is no time, codecs
zarr refuses. Checked there, they failed with a raw ``TypeError`` or
``ValueError`` after the group was created in the target. :func:`check_metadata_write`
runs the same ``dump_to_store`` into a zarr ``MemoryStore``, with a writer
that keeps no data, and reports the first variable that fails by name.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends.common import ArrayWriter
from xarray.backends.writers import dump_to_store
from xarray.backends.zarr import ZarrStore
from zarr.storage import MemoryStore

from shardpipe.errors import InvalidArgumentError

LAZY_ABOVE = 16 << 20
"""NumPy-backed variables larger than this are wrapped in Dask for the dry run (no copies)."""


class _NoData(ArrayWriter):
    """An xarray ``ArrayWriter`` that drops every piece of data it is handed."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]

    def add(self, source: Any, target: Any, region: Any = None) -> None:
        return None


def check_metadata_write(
    ds: xr.Dataset,
    encoding: Mapping[Hashable, Mapping[str, Any]],
    given: Mapping[Hashable, Any],
) -> None:
    """Create ``ds``'s arrays in memory as xarray would in the target; data is not touched.

    Parameters
    ----------
    ds : xarray.Dataset
        The variables xarray is about to create in the target.
    encoding : dict
        The encoding passed to xarray (the caller's, with the shard layout
        shardpipe adds to sharded variables).
    given : dict
        The caller's ``encoding`` argument: a variable named there is
        reported as ``encoding``, any other as ``obj``.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming the first variable xarray or zarr cannot create, with their error.
    """
    try:
        _dump(ds, encoding)
    except Exception as err:  # what fails here fails in the target: find the variable
        for name in ds.variables:
            own = {name: encoding[name]} if name in encoding else {}
            try:
                _dump(xr.Dataset({name: ds.variables[name]}), own)
            except Exception as alone:
                raise _refusal(name, alone, given) from alone
        raise InvalidArgumentError(
            "encoding" if given else "obj",
            f"xarray and zarr cannot create the dataset's arrays ({type(err).__name__}: {err})",
            "Check the encoding of the variables together (e.g. 'coordinates')",
        ) from err


def _dump(ds: xr.Dataset, encoding: Mapping[Hashable, Mapping[str, Any]]) -> None:
    dry = ds.copy(deep=False)
    for var in dry.variables.values():
        var.encoding = dict(var.encoding)  # xarray pops keys from the encodings it writes
        large = isinstance(var.data, np.ndarray) and var.data.nbytes > LAZY_ABOVE
        if large and not isinstance(var, xr.IndexVariable):
            var.data = var.chunk().data
    store = ZarrStore.open_group(
        MemoryStore(),
        mode="w",
        consolidated=False,
        consolidate_on_close=False,
        safe_chunks=False,
        zarr_format=3,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray warns again in the real write
        dump_to_store(  # type: ignore[no-untyped-call]
            dry, store, _NoData(), encoding={k: dict(v) for k, v in encoding.items()}
        )


def _refusal(name: Hashable, err: Exception, given: Mapping[Hashable, Any]) -> InvalidArgumentError:
    if name in given:
        return InvalidArgumentError(
            "encoding",
            f"variable {name!r}: xarray and zarr cannot create it with encoding[{name!r}]="
            f"{dict(given[name])!r} ({type(err).__name__}: {err})",
            "Fix or leave out the key they refuse (see xarray's and zarr's encodings)",
        )
    return InvalidArgumentError(
        "obj",
        f"variable {name!r}: xarray and zarr cannot create it ({type(err).__name__}: {err})",
        "Check its dtype, attributes and encoding (var.encoding)",
    )
