"""Each option of a call is checked in one place: the run's options once per call path.

A front door that checks ``progress``, ``commit`` and ``rebase`` (to refuse them before
planning, or with ``compute``) hands the checked values to the runner, which does not
check them again; a job's ``execute`` checks them once, where the runner begins.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import xarray as xr
import zarr

import shardpipe
import shardpipe.dataset.accessor
from shardpipe.core.checks import check_bool
from shardpipe.write.arguments import check_run
from tests.support.spies import count_calls_by_module

VOLUME = np.arange(16 * 16 * 16, dtype="uint16").reshape(16, 16, 16)
LAYOUT: dict[str, Any] = {"shards": (8, 16, 16), "chunks": (8, 8, 8)}


def _source(tmp: Path) -> Any:
    shardpipe.to_sharded_zarr(VOLUME, tmp / "src.zarr", **LAYOUT)
    return tmp / "src.zarr"


def _group(tmp: Path) -> Any:
    root = zarr.open_group(tmp / "group.zarr", mode="w", zarr_format=3)
    root.create_array("a", shape=VOLUME.shape, dtype=VOLUME.dtype, chunks=(8, 8, 8))[...] = VOLUME
    return tmp / "group.zarr"


def _dataset(tmp: Path) -> Any:
    return xr.Dataset({"v": (("z", "y", "x"), VOLUME)}).chunk({"z": 8})


def _volume(tmp: Path) -> Any:
    return VOLUME


Call = tuple[Callable[[Path], Any], Callable[[Any, Path], Any]]
"""What a call reads (made before the counting begins), and the call given it and its target."""

CALLS: dict[str, Call] = {
    "to_sharded_zarr": (_volume, lambda arr, out: shardpipe.to_sharded_zarr(arr, out)),
    "prepare_write().execute": (
        _volume,
        lambda arr, out: shardpipe.prepare_write(arr, out).execute(),
    ),
    "rechunk": (_source, lambda src, out: shardpipe.rechunk(src, out, shards=(16,) * 3)),
    "plan_rechunk().execute": (
        _source,
        lambda src, out: shardpipe.plan_rechunk(src, out).execute(),
    ),
    "rechunk_group": (_group, lambda src, out: shardpipe.rechunk_group(src, out)),
    "plan_group_rechunk().execute": (
        _group,
        lambda src, out: shardpipe.plan_group_rechunk(src, out).execute(),
    ),
    "to_ome_zarr": (_volume, lambda arr, out: shardpipe.to_ome_zarr(arr, out, "zyx")),
    "prepare_ome_zarr().execute": (
        _volume,
        lambda arr, out: shardpipe.prepare_ome_zarr(arr, out, "zyx").execute(),
    ),
    "to_neuroglancer_precomputed": (
        _volume,
        lambda arr, out: shardpipe.to_neuroglancer_precomputed(
            arr, out, resolution=(1, 1, 1), chunk_size=(8, 8, 8)
        ),
    ),
    "ds.shard.to_zarr": (_dataset, lambda ds, out: ds.shard.to_zarr(out, shards={"z": 8})),
}


WITHOUT_COMMIT = {"to_neuroglancer_precomputed"}
"""Calls that take no ``commit`` (nor ``rebase``): nothing to check."""


@pytest.mark.parametrize("name", CALLS)
def test_the_run_options_are_checked_once_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    read, run = CALLS[name]
    source = read(tmp_path)
    progress = count_calls_by_module(monkeypatch, check_bool, when=lambda n, *_: n == "progress")
    commit = count_calls_by_module(monkeypatch, check_run)
    with dask.config.set(scheduler="threads"):
        run(source, tmp_path / "out.zarr")
    assert sum(progress.values()) == 1, progress
    assert sum(commit.values()) == (name not in WITHOUT_COMMIT), commit
