"""OME-Zarr writes, conversions and dataset writes into a small tmpfs that fills up.

For ``tests/faults/test_writers_full_disk.py``. ``python -m
tests.support.writers_full_disk_child WORKDIR SCENARIOS_JSON``: writes each
kind's result once on the ordinary disk under WORKDIR (the reference), then
for each scenario (``{"kind": ..., "free_kib": ...}``) mounts a fresh 8 MiB
tmpfs under WORKDIR (the process must be allowed to mount: root, or run
under ``unshare -rm``), fills it until ``free_kib`` KiB are left, runs the
write, frees the space, runs the recovery the guides give for the kind and
reports on one line of JSON what happened: the error and its message and
notes, and whether the recovered result equals the reference.

Kinds and their recoveries:

- ``ome``: ``to_ome_zarr`` of an image with a label image; the same call
  with ``resume=True`` (also after a write that succeeded);
- ``ome_append``: a time point appended to an image (written before the disk
  is filled) with ``append_dim``; the same call with ``resume=True`` (not
  after an append that succeeded: that one must not run twice);
- ``convert``: ``convert_ome_zarr`` of an OME-Zarr 0.4 image; the same
  call with ``overwrite=True``;
- ``dataset``: ``ds.shard.to_zarr`` of a new dataset; the same call with
  ``mode="w"``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import xarray as xr
import zarr

import shardpipe
from tests.support.full_disk_child import fill, report_each, tmpfs

IMAGE = np.random.default_rng(3).integers(0, 4000, (2, 16, 40, 40), dtype=np.uint16)
MASK = (IMAGE[0] > 2000).astype(np.uint8)
OME = dict(shards=(1, 8, 32, 32), chunks=(1, 8, 16, 16), scale_factors=[{"y": 2, "x": 2}])


def _image() -> da.Array:
    return da.from_array(IMAGE, chunks=(1, 8, 20, 20))


def _labels() -> dict[str, Any]:
    return {"mask": da.from_array(MASK, chunks=(8, 20, 20))}


def write_ome(target: Path, **extra: Any) -> None:
    """The image (and its label image) the ``ome`` scenarios write."""
    shardpipe.to_ome_zarr(_image(), str(target), "czyx", labels=_labels(), **OME, **extra)


TIMES = np.random.default_rng(4).integers(0, 4000, (3, 16, 40, 40), dtype=np.uint16)


def write_times(target: Path) -> None:
    """The image the ``ome_append`` scenarios append to: the first two time points."""
    shardpipe.to_ome_zarr(da.from_array(TIMES[:2], chunks=(1, 8, 20, 20)), str(target), "tzyx",
                          **OME)  # fmt: skip


def append_time(target: Path, **extra: Any) -> None:
    """The append of the ``ome_append`` scenarios: the last time point."""
    source = da.from_array(TIMES[2:], chunks=(1, 8, 20, 20))
    shardpipe.to_ome_zarr(source, str(target), append_dim="t", **extra)


def write_v04(root: Path) -> None:
    """The OME-Zarr 0.4 image the ``convert`` scenarios convert (ome-zarr-py writes it)."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_labels

    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    options = {"chunks": (1, 8, 16, 16)}
    write_image(
        IMAGE, group, axes="czyx", fmt=FormatV04(), storage_options=options, scale_factors=(2,)
    )
    write_labels(
        MASK,
        group,
        name="mask",
        axes="zyx",
        fmt=FormatV04(),
        scale_factors=(2,),
        storage_options={"chunks": (8, 16, 16)},
    )


def dataset() -> xr.Dataset:
    """The dataset the ``dataset`` scenarios write: two sharded variables and a coordinate."""
    rng = np.random.default_rng(5)
    return xr.Dataset(
        {
            "t2m": (("time", "y", "x"), rng.random((24, 20, 16), dtype="float32")),
            "count": (("time", "y", "x"), rng.integers(0, 99, (24, 20, 16), dtype="int16")),
        },
        coords={"time": np.arange(24), "y": np.linspace(0, 1, 20)},
        attrs={"title": "full disk"},
    ).chunk({"time": 5})


DATASET = dict(shards={"time": 8, "y": 20, "x": 16}, chunks={"time": 4, "y": 10, "x": 8})


def _write(kind: str, target: Path, source: Path, recover: bool = False) -> None:
    if kind == "ome":
        write_ome(target, resume=recover)
    elif kind == "ome_append":
        append_time(target, resume=recover)
    elif kind == "convert":
        shardpipe.convert_ome_zarr(
            str(source), str(target), shards=(1, 8, 32, 32), overwrite=recover
        )
    else:
        dataset().shard.to_zarr(str(target), mode="w" if recover else "w-", **DATASET)


def same_tree(got: Path, expected: Path) -> str | None:
    """None when every group's attributes and every array's data are the same; else what differs."""
    a = zarr.open_group(str(got), mode="r")
    b = zarr.open_group(str(expected), mode="r")
    if dict(a.attrs) != dict(b.attrs):
        return "the group attributes"
    names = sorted(name for name, _ in b.members(max_depth=None))
    got_names = sorted(name for name, _ in a.members(max_depth=None))
    if got_names != names:
        return f"the members ({names} expected)"
    for name in names:
        left, right = a[name], b[name]
        if dict(left.attrs) != dict(right.attrs):
            return f"the attributes of {name!r}"
        if isinstance(right, zarr.Array):
            assert isinstance(left, zarr.Array)
            if not np.array_equal(left[...], right[...]):
                return f"the data of {name!r}"
    return None


def scenario(work: Path, kind: str, free_kib: int, source: Path) -> dict[str, Any]:
    """Run one scenario in a tmpfs of its own; return what it left."""
    with tmpfs(work / f"{kind}-{free_kib}") as where:
        target = where / "out.zarr"
        if kind == "ome_append":
            write_times(target)
        fill(where, free_kib * 1024)
        result: dict[str, Any] = {"kind": kind, "free_kib": free_kib, "error": None}
        try:
            _write(kind, target, source)
        except Exception as err:
            result["error"] = type(err).__name__
            result["message"] = str(err)
            result["notes"] = list(getattr(err, "__notes__", []))
        os.unlink(where / "filler")
        try:
            if kind != "ome_append" or result["error"] is not None:
                _write(kind, target, source, recover=True)
        except Exception as err:
            result["recovered"] = f"{type(err).__name__}: {err}"
            return result
        result["recovered"] = "ok"
        result["differs"] = same_tree(target, work / f"{kind}-reference.zarr")
        checks: list[Callable[[], Any]] = []
        if kind == "dataset":
            checks = [lambda n=n: shardpipe.verify(str(target), path=n) for n in ("t2m", "count")]
            read = xr.open_zarr(str(target)).load()
            result["dataset_equal"] = bool(read.identical(dataset().load()))
        else:
            checks = [lambda: shardpipe.verify(str(target), complete=True)]
        result["verify"] = [p for check in checks for p in check().problems]
        return result


def main(work: str, scenarios: str) -> int:
    root = Path(work)
    source = root / "source-v04.zarr"
    with dask.config.set(scheduler="threads"):
        write_v04(source)
        for kind in ("ome", "convert", "dataset"):
            _write(kind, root / f"{kind}-reference.zarr", source)
        write_times(root / "ome_append-reference.zarr")
        _write("ome_append", root / "ome_append-reference.zarr", source)
    return report_each(scenarios, lambda s: scenario(root, s["kind"], s["free_kib"], source))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
