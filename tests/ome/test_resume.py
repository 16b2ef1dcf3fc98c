"""``to_ome_zarr(..., resume=True)`` after a write that finished: accepted, nothing written again.

A pyramid write removes its group record at the end; ``resume=True`` then
finds the image and no record (a script run again, a write killed after its
last step). It is accepted, as ``to_sharded_zarr`` accepts it for an array,
when the same write made the image, and refused otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import ArrayExistsError, InvalidArgumentError

IMAGE = np.random.default_rng(11).integers(0, 4000, (2, 12, 40, 36), dtype=np.uint16)
MASK = (IMAGE[0] > 2000).astype(np.uint8)
LAYOUT: dict[str, Any] = dict(shards=(1, 8, 32, 32), chunks=(1, 4, 16, 16), scale_factors=[2])


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    with dask.config.set(scheduler="threads"):
        yield


def _image(data: np.ndarray = IMAGE) -> da.Array:
    return da.from_array(data, chunks=(1, 5, 17, 36))


def _labels() -> dict[str, Any]:
    return {"mask": da.from_array(MASK, chunks=(5, 17, 36))}


def _files(root: Path) -> dict[str, int]:
    """Every file under ``root`` but shardpipe's records, with its modification time."""
    return {
        str(p.relative_to(root)): p.stat().st_mtime_ns
        for p in root.rglob("*")
        if p.is_file() and ".shardpipe" not in p.parts and p.name != "zarr.json"
    }


def _arrays(root: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(root), mode="r")
    return {name: a[...] for name, a in group.arrays()} | {
        f"labels/mask/{name}": a[...]
        for name, a in zarr.open_group(str(root / "labels" / "mask"), mode="r").arrays()
    }


def test_resume_after_a_finished_pyramid_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "img.ome.zarr"
    shardpipe.to_ome_zarr(_image(), target, "czyx", labels=_labels(), **LAYOUT)
    files, before = _files(target), _arrays(target)
    job = shardpipe.prepare_ome_zarr(_image(), target, "czyx", labels=_labels(), resume=True,
                                     **LAYOUT)  # fmt: skip
    assert all(j.n_shards_skipped == j.plan.n_shards for j in job.jobs)
    report = job.execute()
    assert report.shards == 0
    assert _files(target) == files  # no shard written again
    after = _arrays(target)
    assert after.keys() == before.keys()
    assert all(np.array_equal(after[k], before[k]) for k in before)
    assert not (target / ".shardpipe").exists()
    assert shardpipe.verify(str(target), complete=True).ok
    group = shardpipe.to_ome_zarr(_image(), target, "czyx", labels=_labels(), resume=True,
                                  **LAYOUT)  # fmt: skip
    assert isinstance(group, zarr.Group)


def test_resume_after_labels_were_added_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "img.ome.zarr"
    shardpipe.to_ome_zarr(_image(), target, "czyx", **LAYOUT)
    shardpipe.to_ome_zarr(None, target, labels=_labels())
    files = _files(target)
    report = shardpipe.prepare_ome_zarr(None, target, labels=_labels(), resume=True).execute()
    assert report.shards == 0
    assert _files(target) == files
    with pytest.raises(ArrayExistsError, match="label images named"):  # without resume, as ever
        shardpipe.to_ome_zarr(None, target, labels=_labels())


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"name": "other"}, "holds other attributes"),  # the group's metadata
        ({"labels": None}, "the group 'labels' is there, which this write does not make"),
        ({"labels": {"cells": MASK}}, "holds other attributes"),  # another label list
    ],
)
def test_resume_after_a_finished_write_refuses_other_metadata(
    tmp_path: Path, change: dict[str, Any], names: str
) -> None:
    target = tmp_path / "img.ome.zarr"
    shardpipe.to_ome_zarr(_image(), target, "czyx", labels=_labels(), **LAYOUT)
    files = _files(target)
    arguments: dict[str, Any] = {"labels": _labels(), **LAYOUT, **change}
    with pytest.raises(InvalidArgumentError, match=r"^resume: ") as caught:
        shardpipe.to_ome_zarr(_image(), target, "czyx", resume=True, **arguments)
    assert names in str(caught.value)
    assert _files(target) == files


def test_resume_after_a_finished_write_refuses_another_image(tmp_path: Path) -> None:
    target = tmp_path / "img.ome.zarr"
    shardpipe.to_ome_zarr(_image(), target, "czyx", **LAYOUT)
    files = _files(target)
    with pytest.raises(InvalidArgumentError, match="written by another job: its source"):
        shardpipe.to_ome_zarr(_image(IMAGE + 1), target, "czyx", resume=True, **LAYOUT)
    assert _files(target) == files


def test_resume_over_a_group_shardpipe_did_not_write_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "img.ome.zarr"
    zarr.open_group(str(target), mode="w").attrs.put({"made": "elsewhere"})
    with pytest.raises(InvalidArgumentError, match="holds other attributes"):
        shardpipe.to_ome_zarr(_image(), target, "czyx", resume=True, **LAYOUT)
    assert zarr.open_group(str(target), mode="r").attrs.asdict() == {"made": "elsewhere"}
