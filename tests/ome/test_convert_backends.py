"""convert_ome_zarr with the source or the target on S3 (a moto server), into an Icechunk
session, and on a LocalCluster of processes: the same image as on local files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import icechunk  # in the test extra: a missing one must fail, not skip
import numcodecs
import numpy as np
import pytest
import s3fs
import zarr

import shardpipe
from shardpipe.ome.convert import convert_ome_zarr
from shardpipe.testing.s3 import make_bucket, storage_options_for
from tests.ome.test_convert import IMAGE, MASK, _write_v04
from tests.support.ome_checks import check_image

icechunk.set_logs_filter("error")
SHARDS = (1, 16, 32, 32)


def _levels(group: zarr.Group) -> list[np.ndarray]:
    paths = [d["path"] for d in group.attrs["multiscales"][0]["datasets"]]
    return [np.asarray(group[p][...]) for p in paths]


def _check(new: Any, old: zarr.Group) -> None:
    """Every level of the image and of its label image as in the 0.4 source."""
    check_image(new, _levels(old))
    check_image(new, _levels(old["labels/mask"]), group="labels/mask", label=True)


@pytest.fixture(scope="module")
def v04_on_s3(s3_server: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """An OME-Zarr 0.4 image with a label image on S3, written by ome-zarr-py once for the
    module's cases, which only read it: ``(url, storage_options)``."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_labels

    options = storage_options_for(s3_server)
    bucket = make_bucket(s3_server)
    source = f"s3://{bucket}/v04.zarr"
    group = zarr.open_group(source, mode="w", zarr_format=2, storage_options=options)
    chunks = {"chunks": (1, 8, 16, 16), "compressor": numcodecs.Zstd(level=3)}
    write_image(IMAGE, group, axes="czyx", fmt=FormatV04(), storage_options=chunks,
                scale_factors=(2, 4))  # fmt: skip
    write_labels(MASK, group, name="mask", axes="zyx", fmt=FormatV04(), scale_factors=(2, 4),
                 storage_options={"chunks": (8, 16, 16)})  # fmt: skip
    yield source, options
    s3fs.S3FileSystem(**options).rm(bucket, recursive=True)


@pytest.mark.s3
@pytest.mark.parametrize("reencode", [False, True], ids=["carried", "reencoded"])
def test_a_v04_image_on_s3_converts_to_s3(
    v04_on_s3: tuple[str, dict[str, Any]], s3_bucket: tuple[str, dict[str, Any]], reencode: bool
) -> None:
    """Chunks carried (one bounded GET each, 16 at once per shard) or read through zarr
    (bounded ranged reads)."""
    source, options = v04_on_s3
    bucket, _ = s3_bucket
    target = f"s3://{bucket}/v05-{reencode}.ome.zarr"
    report = convert_ome_zarr(
        source,
        target,
        shards=SHARDS,
        source_storage_options=options,
        storage_options=options,
        reencode=reencode,
    )
    assert all(r.shards > 0 for r in report.levels.values())
    old = zarr.open_group(source, mode="r", storage_options=options)
    _check(zarr.open_group(target, mode="r", storage_options=options), old)
    assert shardpipe.verify(target, storage_options=options, complete=True).ok


@pytest.mark.s3
def test_a_local_v04_image_converts_to_s3(
    tmp_path: Path, s3_bucket: tuple[str, dict[str, Any]]
) -> None:
    bucket, options = s3_bucket
    old = _write_v04(tmp_path / "v04.zarr", numcodecs.Blosc())
    target = f"s3://{bucket}/v05.ome.zarr"
    convert_ome_zarr(str(tmp_path / "v04.zarr"), target, shards=SHARDS, storage_options=options)
    _check(zarr.open_group(target, mode="r", storage_options=options), old)
    assert shardpipe.verify(target, storage_options=options, complete=True).ok


def test_a_v04_image_converts_into_an_icechunk_session(tmp_path: Path) -> None:
    old = _write_v04(tmp_path / "v04.zarr", numcodecs.Zstd(level=3))
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    base = repo.lookup_branch("main")
    session = repo.writable_session("main")
    job = shardpipe.prepare_ome_conversion(str(tmp_path / "v04.zarr"), session, path="img",
                                           shards=SHARDS)  # fmt: skip
    assert "chunks copied as they are (zstd)" in repr(job)
    report = job.execute(commit="converted")
    assert report.snapshot_id == repo.lookup_branch("main") != base
    group = zarr.open_group(repo.readonly_session("main").store, path="img", mode="r")
    _check(group, old)
    assert group.attrs["ome"]["version"] == "0.5"


@pytest.mark.cluster
@pytest.mark.parametrize("reencode", [False, True], ids=["carried", "reencoded"])
def test_a_v04_image_converts_on_a_local_cluster(
    tmp_path: Path, cluster_client: Any, reencode: bool
) -> None:
    """Re-encoded, the source is read on the workers through the bounded store (pickled)."""
    old = _write_v04(tmp_path / "v04.zarr", numcodecs.GZip(level=4))
    convert_ome_zarr(
        str(tmp_path / "v04.zarr"), str(tmp_path / "v05.ome.zarr"), shards=SHARDS, reencode=reencode
    )
    _check(tmp_path / "v05.ome.zarr", old)
    assert shardpipe.verify(str(tmp_path / "v05.ome.zarr"), complete=True).ok
