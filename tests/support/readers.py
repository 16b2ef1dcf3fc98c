"""Independent readers used to check what shardpipe wrote."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorstore as ts
import zarr


def read_zarr(path: str, *, pipeline: str | None = None) -> np.ndarray:
    """Read the whole array at local ``path`` with zarr-python (optionally the zarrs pipeline)."""
    if pipeline is None:
        return np.asarray(zarr.open_array(path, mode="r")[...])
    with zarr.config.set({"codec_pipeline.path": pipeline}):
        return np.asarray(zarr.open_array(path, mode="r")[...])


def read_tensorstore(path: str, kvstore: dict[str, Any] | None = None) -> np.ndarray:
    """Read the whole array at local ``path`` (or ``kvstore``) with tensorstore's zarr3 driver."""
    spec = {"driver": "zarr3", "kvstore": kvstore or {"driver": "file", "path": path}}
    return np.asarray(ts.open(spec, read=True).result().read().result())


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal values and dtype, NaN equal to NaN."""
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_array_equal(actual, expected, strict=True)
