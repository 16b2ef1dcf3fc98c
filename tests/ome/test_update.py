"""Updates of OME-Zarr images: appends to every level, region writes, labels added later."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import ArrayExistsError, InvalidArgumentError
from shardpipe.write.options import check_array_options
from tests.support.ome_checks import check_image, reference_pyramid
from tests.support.spies import count_calls_by_module

FACTORS = [(1, 1, 1, 2, 2), (1, 1, 2, 4, 4)]


def _volume(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 4000, shape, dtype=np.uint16)


def _write(root: Path, data: np.ndarray) -> None:
    shardpipe.to_ome_zarr(
        da.from_array(data, chunks=(2, 1, 7, 30, 25)),
        root,
        "tczyx",
        scale_factors=[{"y": 2, "x": 2}, {"z": 2, "y": 4, "x": 4}],
        shards=(1, 1, 8, 32, 32),
        chunks=(1, 1, 4, 16, 16),
    )


def test_time_points_append_to_every_level(tmp_path: Path) -> None:
    root = tmp_path / "img.ome.zarr"
    data = _volume((3, 2, 20, 64, 60), 1)
    _write(root, data)
    for seed, n in ((2, 2), (3, 1)):
        new = _volume((n, 2, 20, 64, 60), seed)
        shardpipe.to_ome_zarr(da.from_array(new, chunks=(1, 2, 9, 64, 31)), root, append_dim="t")
        data = np.concatenate([data, new])
        check_image(root, reference_pyramid(data, FACTORS, "mean"))
    assert shardpipe.verify(str(root), complete=True).ok
    assert not (root / ".shardpipe").exists()  # no record left once done


def test_an_append_along_a_downsampled_axis_needs_whole_windows(tmp_path: Path) -> None:
    root = tmp_path / "img.ome.zarr"
    data = _volume((1, 1, 16, 32, 32), 4)  # z: 16, a multiple of the coarsest factor 2
    _write(root, data)
    new = _volume((1, 1, 5, 32, 32), 5)
    shardpipe.to_ome_zarr(new, root, append_dim="z")
    data = np.concatenate([data, new], axis=2)
    check_image(root, reference_pyramid(data, FACTORS, "mean"))
    # now z is 21: appending again would change the last window of level 2
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(InvalidArgumentError, match="append_dim") as caught:
        shardpipe.to_ome_zarr(new, root, append_dim="z")
    assert "not a multiple of the coarsest level's factor 2" in str(caught.value)
    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before  # nothing written


def test_a_region_write_recomputes_the_lower_levels(tmp_path: Path) -> None:
    root = tmp_path / "img.ome.zarr"
    data = _volume((3, 2, 20, 64, 60), 6)
    _write(root, data)
    patch = _volume((2, 1, 5, 13, 17), 7)
    region = (slice(1, 3), slice(1, 2), slice(3, 8), slice(21, 34), slice(40, 57))
    job = shardpipe.ome.update.prepare_ome_update(
        patch, shardpipe.storage.resolve.resolve_store(str(root)), region=region
    )
    assert "phase 2 level 2" in repr(job)
    shardpipe.to_ome_zarr(da.from_array(patch, chunks=(1, 1, 5, 7, 9)), root, region=region)
    data[region] = patch
    check_image(root, reference_pyramid(data, FACTORS, "mean"))
    assert shardpipe.verify(str(root), complete=True).ok


@pytest.mark.parametrize("kind", ["region", "append"])
def test_an_update_checks_its_options_once_for_every_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Three levels written: the options are checked by the door, not again for each level."""
    root = tmp_path / "img.ome.zarr"
    data = _volume((3, 2, 20, 64, 60), 8)
    _write(root, data)
    calls = count_calls_by_module(monkeypatch, check_array_options)
    if kind == "region":
        patch = _volume((1, 1, 5, 13, 17), 9)
        region = (slice(1, 2), slice(0, 1), slice(3, 8), slice(21, 34), slice(40, 57))
        shardpipe.to_ome_zarr(patch, root, region=region, max_mem="64MB")
        data[region] = patch
    else:
        new = _volume((1, 2, 20, 64, 60), 9)
        shardpipe.to_ome_zarr(new, root, append_dim="t", max_mem="64MB")
        data = np.concatenate([data, new])
    assert calls == {"shardpipe.ome.api": 1}, calls
    check_image(root, reference_pyramid(data, FACTORS, "mean"))


def test_a_label_image_updates_like_an_image(tmp_path: Path) -> None:
    root = tmp_path / "img.ome.zarr"
    image = _volume((2, 1, 8, 32, 32), 8)
    labels = (image[:, 0] // 1000).astype(np.uint8)
    shardpipe.to_ome_zarr(
        image,
        root,
        "tczyx",
        scale_factors=[{"y": 2, "x": 2}],
        shards=(1, 1, 8, 32, 32),
        chunks=(1, 1, 8, 16, 16),
        labels={"seg": labels},
    )
    new_labels = (_volume((1, 1, 8, 32, 32), 9)[:, 0] // 1000).astype(np.uint8)
    shardpipe.to_ome_zarr(new_labels, root, path="labels/seg", append_dim="t")
    labels = np.concatenate([labels, new_labels])
    check_image(
        root, reference_pyramid(labels, [(1, 1, 2, 2)], "mode"), group="labels/seg", label=True
    )


def test_labels_are_added_to_a_stored_image(tmp_path: Path) -> None:
    root = tmp_path / "img.ome.zarr"
    image = _volume((2, 12, 48, 40), 10)
    shardpipe.to_ome_zarr(
        da.from_array(image, chunks=(1, 5, 20, 20)),
        root,
        "czyx",
        scale=(1.0, 3.0, 0.5, 0.5),
        scale_factors=[2, 4],
        shards=(1, 8, 32, 32),
        chunks=(1, 4, 16, 16),
        labels={"first": (image[0] > 2000).astype(np.uint8)},
    )
    second = (image[1] // 1000).astype(np.uint16)
    shardpipe.to_ome_zarr(None, root, labels={"second": second})
    group = zarr.open_group(str(root), mode="r")
    assert group["labels"].attrs["ome"]["labels"] == ["first", "second"]
    factors = [(2, 2, 2), (4, 4, 4)]
    check_image(root, reference_pyramid(second, factors, "mode"), group="labels/second", label=True)
    stored = group["labels/second"].attrs["ome"]["multiscales"][0]["datasets"][1]
    assert stored["coordinateTransformations"][0]["scale"] == [6.0, 1.0, 1.0]
    assert group["labels/second/0"].shards == (8, 32, 32)  # the image's shards
    with pytest.raises(ArrayExistsError, match="second"):
        shardpipe.to_ome_zarr(None, root, labels={"second": second})
    shardpipe.to_ome_zarr(None, root, labels={"second": second + 1}, overwrite=True)
    check_image(
        root, reference_pyramid(second + 1, factors, "mode"), group="labels/second", label=True
    )
    check_image(root, reference_pyramid(image, [(1, 2, 2, 2), (1, 4, 4, 4)], "mean"))
