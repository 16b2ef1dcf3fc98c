"""to_ome_zarr: pyramids equal to a NumPy reference, valid 0.5 metadata, read by the community."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import shardpipe
from shardpipe.errors import MemoryBudgetError
from tests.support.ome_checks import (
    check_image,
    read_with_napari,
    read_with_ngff_zarr,
    read_with_ome_zarr_py,
    reference_pyramid,
    stored_factors,
)
from tests.support.spies import count_calls


def _data(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.normal(100, 30, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


CASES = [
    # axes, shape, dtype, Dask blocks (never aligned with shards), scale_factors, shards, chunks
    ("yx", (70, 90), "uint8", (33, 41), None, (32, 32), (16, 16)),
    ("zyx", (20, 64, 60), "uint16", (7, 30, 25), [{"y": 2, "x": 2}, {"z": 2, "y": 4, "x": 4}],
     (8, 32, 32), (4, 16, 16)),
    ("czyx", (2, 12, 40, 36), "float32", (1, 5, 17, 36), [2], (1, 8, 16, 16), (1, 4, 8, 8)),
    ("tczyx", (3, 2, 9, 30, 28), "int16", (2, 1, 4, 11, 28), [2, 4], (1, 1, 4, 16, 16),
     (1, 1, 2, 8, 8)),
    ("tyx", (4, 50, 45), "int32", (3, 20, 20), [{"y": 2, "x": 2}, {"y": 6, "x": 6}], (2, 16, 16),
     (1, 8, 8)),
    ("cyx", (3, 40, 33), "float64", (2, 13, 33), [3], (1, 16, 16), (1, 8, 8)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] + "-" + c[2] for c in CASES])
def test_every_level_equals_the_numpy_reference(tmp_path: Path, case: tuple[Any, ...]) -> None:
    axes, shape, dtype, blocks, factors, shards, chunks = case
    data = _data(shape, dtype)
    shardpipe.to_ome_zarr(
        da.from_array(data, chunks=blocks),
        tmp_path / "img.ome.zarr",
        axes,
        scale_factors=factors,
        shards=shards,
        chunks=chunks,
    )
    group = zarr.open_group(str(tmp_path / "img.ome.zarr"), mode="r")
    expected = reference_pyramid(data, stored_factors(group), "mean")
    if factors is None:  # the default rule: levels until one fits a shard
        assert len(expected) > 1
        last = expected[-1].shape
        assert all(n <= s for n, s in zip(last, shards, strict=True))
    else:
        assert len(expected) == len(factors) + 1
    check_image(tmp_path / "img.ome.zarr", expected)
    assert shardpipe.verify(str(tmp_path / "img.ome.zarr"), complete=True).ok


@pytest.mark.parametrize("method", ["mode", "nearest"])
def test_labels_have_their_own_pyramid_on_the_images_levels(tmp_path: Path, method: str) -> None:
    image = _data((2, 16, 48, 40), "uint16")
    cells = (image[0] // 20000).astype(np.uint32)  # four ids, without the channel axis
    nuclei = (image // 30000).astype(np.int8)  # with it
    colors = {1: [255, 0, 0, 255], 2: [0, 255, 0, 128]}
    properties = {1: {"class": "membrane"}, 2: {"class": "nucleus", "area": 12}}
    shardpipe.to_ome_zarr(
        da.from_array(image, chunks=(1, 5, 20, 20)),
        tmp_path / "img.ome.zarr",
        "czyx",
        scale=(1.0, 2.0, 0.5, 0.5),
        axes_units={"z": "micrometer", "y": "micrometer", "x": "micrometer"},
        scale_factors=[{"y": 2, "x": 2}, {"z": 2, "y": 4, "x": 4}],
        shards=(1, 8, 32, 32),
        chunks=(1, 4, 16, 16),
        labels={
            "cells": {"data": da.from_array(cells, chunks=(7, 13, 40)), "colors": colors,
                      "properties": properties},
            "nuclei": da.from_array(nuclei, chunks=(1, 16, 17, 17)),
        },
        label_method=method,
    )  # fmt: skip
    root = tmp_path / "img.ome.zarr"
    factors = [(1, 1, 2, 2), (1, 2, 4, 4)]
    check_image(root, reference_pyramid(image, factors, "mean"))
    check_image(
        root,
        reference_pyramid(cells, [f[1:] for f in factors], method),
        group="labels/cells",
        label=True,
    )
    check_image(root, reference_pyramid(nuclei, factors, method), group="labels/nuclei", label=True)
    group = zarr.open_group(str(root), mode="r")
    assert group["labels"].attrs["ome"]["labels"] == ["cells", "nuclei"]
    label = group["labels/cells"].attrs["ome"]["image-label"]
    assert label["colors"] == [
        {"label-value": 1, "rgba": [255, 0, 0, 255]},
        {"label-value": 2, "rgba": [0, 255, 0, 128]},
    ]
    assert label["properties"][1] == {"label-value": 2, "class": "nucleus", "area": 12}
    assert label["source"] == {"image": "../../"}
    # the label levels sit where the image's do
    image_sets = group.attrs["ome"]["multiscales"][0]["datasets"]
    label_sets = group["labels/cells"].attrs["ome"]["multiscales"][0]["datasets"]
    for a, b in zip(image_sets, label_sets, strict=True):
        for ta, tb in zip(
            a["coordinateTransformations"], b["coordinateTransformations"], strict=True
        ):
            assert ta[ta["type"]][1:] == tb[tb["type"]]


def test_the_communitys_readers_read_the_levels(tmp_path: Path) -> None:
    image = _data((24, 64, 56), "uint16", seed=3)
    labels = (image // 16384).astype(np.uint8)
    root = tmp_path / "img.ome.zarr"
    shardpipe.to_ome_zarr(
        da.from_array(image, chunks=(10, 30, 30)),
        root,
        "zyx",
        scale=(2.0, 0.5, 0.5),
        axes_units={"z": "micrometer", "y": "micrometer", "x": "micrometer"},
        scale_factors=[{"y": 2, "x": 2}, {"z": 2, "y": 4, "x": 4}],
        shards=(8, 32, 32),
        chunks=(4, 16, 16),
        name="volume",
        channel_names=None,
        labels={"seg": labels},
    )
    expected = reference_pyramid(image, [(1, 2, 2), (2, 4, 4)], "mean")
    expected_labels = reference_pyramid(labels, [(1, 2, 2), (2, 4, 4)], "mode")
    nodes = read_with_ome_zarr_py(root)
    assert len(nodes) == 2  # the image, then its label image
    for got, want in zip(nodes[0], expected, strict=True):
        np.testing.assert_array_equal(got, want, strict=True)
    for got, want in zip(nodes[1], expected_labels, strict=True):
        np.testing.assert_array_equal(got, want, strict=True)
    for got, want in zip(read_with_ngff_zarr(root), expected, strict=True):
        np.testing.assert_array_equal(got, want, strict=True)
    layers = read_with_napari(root)
    kinds = [layer[2] for layer in layers]
    assert kinds == ["image", "labels"]
    for got, want in zip(layers[0][0], expected, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want, strict=True)
    for got, want in zip(layers[1][0], expected_labels, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want, strict=True)
    assert layers[0][1]["scale"] == [2.0, 0.5, 0.5]


def test_each_source_block_is_read_once_for_every_level(tmp_path: Path) -> None:
    reads: list[Any] = []
    lock = threading.Lock()

    def counted(block: np.ndarray, block_id: Any = None) -> np.ndarray:
        if block.size:  # Dask's own probe with an empty block
            with lock:
                reads.append(block_id)
        return block

    source = da.from_array(_data((30, 90, 70), "uint16"), chunks=(11, 40, 33))
    counted_source = source.map_blocks(counted, dtype=source.dtype)
    reads.clear()
    shardpipe.to_ome_zarr(
        counted_source,
        tmp_path / "img.ome.zarr",
        "zyx",
        scale_factors=[2, 4, 8],
        shards=(16, 32, 32),
        chunks=(8, 16, 16),
        labels={"seg": counted_source.astype("uint32")},
    )
    # every block once, for the four levels of the image and of the labels made from it
    assert sorted(reads) == sorted(np.ndindex(*source.numblocks))


def test_the_plan_shows_levels_shards_tasks_and_memory(tmp_path: Path) -> None:
    source = da.zeros((64, 256, 256), dtype="uint16", chunks=(20, 100, 100))
    job = shardpipe.prepare_ome_zarr(
        source,
        tmp_path / "img.ome.zarr",
        "zyx",
        scale_factors=[2, 4],
        shards=(32, 128, 128),
        chunks=(16, 64, 64),
        max_mem="64MiB",
    )
    text = repr(job)
    assert "image 0: shape (64, 256, 256), factor (1, 1, 1), 8 shard(s) of (32, 128, 128)" in text
    assert "image 1: shape (32, 128, 128), factor (2, 2, 2), 1 shard(s)" in text
    assert "image 2: shape (16, 64, 64), factor (4, 4, 4)" in text
    assert f"tasks: {job.num_tasks:,} in one computation" in text
    assert "max_mem 64.0 MiB" in text
    assert job.max_projected_mem <= 64 << 20
    assert not (tmp_path / "img.ome.zarr").exists()  # planning writes nothing
    assert "<table>" in job._repr_html_()


def test_the_levels_plan_with_the_options_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three levels of an image and of a label image: six writes planned, their options
    checked by the door only, not for the levels' writes."""
    import shardpipe.ome.prepare as ome_prepare

    calls = count_calls(monkeypatch, ome_prepare, "check_array_options", "prepare_checked")
    source = da.zeros((64, 256, 256), dtype="uint16", chunks=(32, 128, 128))
    shardpipe.prepare_ome_zarr(
        source,
        tmp_path / "img.ome.zarr",
        "zyx",
        scale_factors=[2, 4],
        labels={"mask": source.astype("uint8")},
        shards=(32, 128, 128),
        chunks=(16, 64, 64),
    )
    assert calls == {"check_array_options": 1, "prepare_checked": 6}, calls


def test_a_downsampling_task_beyond_max_mem_refuses_the_plan(tmp_path: Path) -> None:
    # one block of a window per axis holds more than max_mem: no regrouping can help
    source = da.zeros((4, 4096, 4096), dtype="uint16", chunks=(4, 4096, 4096))
    with pytest.raises(MemoryBudgetError, match="max_mem") as caught:
        shardpipe.prepare_ome_zarr(
            source,
            tmp_path / "img.ome.zarr",
            "zyx",
            scale_factors=[{"y": 2048, "x": 2048}],
            shards=(4, 64, 64),
            chunks=(4, 32, 32),
            max_mem="8MiB",
        )
    assert "downsample-mean" in caught.value.task
    assert not (tmp_path / "img.ome.zarr").exists()


def test_an_xarray_data_array_gives_axes_scale_translation_and_units(tmp_path: Path) -> None:
    data = _data((10, 32, 30), "uint16")
    array = xr.DataArray(
        da.from_array(data, chunks=(5, 16, 15)),
        dims=("z", "y", "x"),
        coords={
            "z": ("z", 100.0 + 2.0 * np.arange(10), {"units": "micrometer"}),
            "y": ("y", 0.25 * np.arange(32), {"units": "micrometer"}),
            "x": ("x", -3.0 + 0.25 * np.arange(30), {"units": "micrometer"}),
        },
    )
    shardpipe.to_ome_zarr(array, tmp_path / "img.ome.zarr", scale_factors=[2], shards=(8, 16, 16))
    group = zarr.open_group(str(tmp_path / "img.ome.zarr"), mode="r")
    multiscale = group.attrs["ome"]["multiscales"][0]
    assert [a["unit"] for a in multiscale["axes"]] == ["micrometer"] * 3
    first, second = multiscale["datasets"]
    assert first["coordinateTransformations"] == [
        {"type": "scale", "scale": [2.0, 0.25, 0.25]},
        {"type": "translation", "translation": [100.0, 0.0, -3.0]},
    ]
    # a level-1 voxel is the window of two, at its centre
    assert second["coordinateTransformations"][1]["translation"] == [101.0, 0.125, -2.875]
    check_image(tmp_path / "img.ome.zarr", reference_pyramid(data, [(2, 2, 2)], "mean"))


def test_omero_channels_are_stored(tmp_path: Path) -> None:
    omero = {
        "channels": [
            {"label": "DAPI", "color": "0000FF", "window": {"start": 0, "end": 100, "min": 0,
                                                          "max": 255}},
            {"label": "GFP", "color": "00FF00", "window": {"start": 0, "end": 200, "min": 0,
                                                         "max": 255}},
        ]
    }  # fmt: skip
    shardpipe.to_ome_zarr(
        da.zeros((2, 8, 16, 16), dtype="uint8", chunks=4), tmp_path / "a", "czyx", omero=omero
    )
    shardpipe.to_ome_zarr(
        da.zeros((2, 8, 16, 16), dtype="uint8", chunks=4),
        tmp_path / "b",
        "czyx",
        channel_names=["DAPI", "GFP"],
    )
    from ome_zarr_models.v05.image import Image

    for name in "ab":
        model = Image.from_zarr(zarr.open_group(str(tmp_path / name), mode="r"))
        omero_doc = model.attributes.ome.model_dump()["omero"]
        assert [c["label"] for c in omero_doc["channels"]] == ["DAPI", "GFP"]


def test_only_axes_given_makes_a_pyramid_down_to_one_shard(tmp_path: Path) -> None:
    # z voxels four times x's: x and y halved first, then all three
    source = da.zeros((200, 2048, 2048), dtype="uint8", chunks=(40, 512, 512))
    job = shardpipe.prepare_ome_zarr(
        source, tmp_path / "img", "zyx", scale=(4.0, 1.0, 1.0), shards=(64, 512, 512)
    )
    assert job.image is not None
    factors = [level.factor for level in job.image.levels]
    assert factors == [(1, 1, 1), (1, 2, 2), (1, 4, 4), (2, 8, 8), (4, 16, 16)]
    assert job.image.levels[-1].n_shards == 1
    assert all(level.n_shards > 1 for level in job.image.levels[:-1])


def test_threads_with_one_worker_and_synchronous_give_the_same_image(tmp_path: Path) -> None:
    data = _data((12, 40, 44), "uint16", seed=9)
    expected = reference_pyramid(data, [(2, 2, 2), (4, 4, 4)], "mean")
    for scheduler in ("synchronous", "threads"):
        with dask.config.set(scheduler=scheduler, num_workers=1):
            shardpipe.to_ome_zarr(
                da.from_array(data, chunks=(5, 17, 19)),
                tmp_path / scheduler,
                "zyx",
                scale_factors=[2, 4],
                shards=(8, 16, 16),
                chunks=(4, 8, 8),
            )
        check_image(tmp_path / scheduler, expected)
