"""The default pyramid: space axes halved until a level fits one inner chunk.

A (2, 60, 700, 500) ``czyx`` stack fits in one default shard (about 256 MiB);
it still gets the levels a viewer zooms out through, as ome-zarr-py writes
them, with the thin ``z`` left whole.
"""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import zarr

import shardpipe
from tests.support.ome_checks import read_with_ome_zarr_py, reference_pyramid, stored_factors


def test_a_thin_czyx_stack_is_planned_down_to_one_chunk(tmp_path: Path) -> None:
    image = da.zeros((2, 60, 700, 500), chunks=(1, 60, 350, 250), dtype="uint16")
    job = shardpipe.prepare_ome_zarr(image, tmp_path / "cells.ome.zarr", "czyx")
    assert job.image is not None
    levels = job.image.levels
    assert [level.factor for level in levels] == [
        (1, 1, 1, 1),
        (1, 1, 2, 2),
        (1, 1, 4, 4),
        (1, 1, 8, 8),
    ]
    assert levels[-1].shape == (2, 60, 88, 63)
    assert levels[-1].chunk_shape == (1, 60, 88, 63)  # one chunk per channel
    assert all(level.chunk_shape[1:] != level.shape[1:] for level in levels[:-1])


def test_the_levels_of_a_thin_stack_read_back_with_ome_zarr(tmp_path: Path) -> None:
    values = np.random.default_rng(5).integers(0, 4000, (2, 6, 70, 50), dtype="uint16")
    root = tmp_path / "cells.ome.zarr"
    shardpipe.to_ome_zarr(
        da.from_array(values, chunks=(1, 6, 40, 30)), root, "czyx", chunks=(1, 6, 16, 16)
    )
    from ome_zarr_models.v05.image import Image

    group = zarr.open_group(str(root), mode="r")
    Image.from_zarr(group)  # a valid OME-Zarr 0.5 image
    factors = [(1, 1, 2, 2), (1, 1, 4, 4), (1, 1, 8, 4)]  # y 70 -> 9, x 50 -> 13; z 6 stays
    assert stored_factors(group) == factors
    levels = read_with_ome_zarr_py(root)[0]
    for got, want in zip(levels, reference_pyramid(values, factors, "mean"), strict=True):
        np.testing.assert_array_equal(got, want, strict=True)
