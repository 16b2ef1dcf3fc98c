"""Images and labels computed lazily (Dask arithmetic, not ``da.from_array`` alone) get every level.

The levels of a pyramid are written in one graph whose block tasks are
gated (:mod:`shardpipe.engine.pyramid_gates`): a chain of tasks making a
block (``(image + 1) * 2``, ``(image // 1500).astype(...)``) is moved
inside the block's task. Each level is read back by zarr-python and
tensorstore and compared with the source computed by NumPy.
"""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import zarr

import shardpipe
from tests.support.ome_checks import check_image, reference_pyramid, stored_factors


def _levels_of(root: Path, group: str = "") -> list[tuple[int, ...]]:
    node = zarr.open_group(str(root / group) if group else str(root), mode="r")
    factors = stored_factors(node)
    assert factors, "a multi-level pyramid is expected"
    return factors


def test_an_image_computed_from_an_array_gets_its_pyramid(tmp_path: Path) -> None:
    values = np.random.default_rng(7).integers(0, 2000, (8, 64, 64), dtype="uint16")
    image = (da.from_array(values, chunks=(8, 40, 40)) + 1) * 2  # two tasks a block
    root = tmp_path / "cells.ome.zarr"
    shardpipe.to_ome_zarr(image, root, "zyx", chunks=(8, 16, 16))
    expected = (values + 1) * 2
    check_image(root, reference_pyramid(expected, _levels_of(root), "mean"))


def test_labels_computed_from_the_image_get_their_pyramid(tmp_path: Path) -> None:
    image = da.random.randint(0, 4000, (8, 64, 64), chunks=(8, 40, 40)).astype("uint16")
    root = tmp_path / "cells.ome.zarr"
    shardpipe.to_ome_zarr(
        image,
        root,
        "zyx",
        chunks=(8, 16, 16),
        labels={"nuclei": (image // 1500).astype("uint32")},
    )
    values = np.asarray(image.compute())  # the same blocks: the graph's seeds are fixed
    check_image(root, reference_pyramid(values, _levels_of(root), "mean"))
    nuclei = (values // 1500).astype("uint32")
    factors = _levels_of(root, "labels/nuclei")
    check_image(root, reference_pyramid(nuclei, factors, "mode"), group="labels/nuclei", label=True)
