"""OME-Zarr images on S3 (a moto server), in an Icechunk session, on a LocalCluster of processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import icechunk  # in the test extra: a missing one must fail, not skip
import numpy as np
import pytest
import zarr

import shardpipe
from tests.support.ome_checks import check_image, reference_pyramid

icechunk.set_logs_filter("error")

FACTORS = [(1, 1, 2, 2), (1, 2, 4, 4)]
KWARGS: dict[str, Any] = dict(
    scale_factors=[{"y": 2, "x": 2}, {"z": 2, "y": 4, "x": 4}],
    shards=(1, 8, 32, 32),
    chunks=(1, 4, 16, 16),
)


def _image(t: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 5000, (t, 12, 64, 56), dtype=np.uint16)


def _write_append_region(store: Any, **options: Any) -> tuple[np.ndarray, np.ndarray]:
    """Write an image with labels, append a time point, write a region; return the models."""
    data = _image(2, 1)
    labels = (data // 1700).astype(np.uint8)
    shardpipe.to_ome_zarr(
        da.from_array(data, chunks=(1, 5, 30, 25)),
        store,
        "tzyx",
        labels={"seg": da.from_array(labels, chunks=(2, 12, 33, 56))},
        **KWARGS,
        **options,
    )
    extra = {k: v for k, v in options.items() if k == "storage_options"}
    new = _image(1, 2)
    shardpipe.to_ome_zarr(da.from_array(new, chunks=(1, 7, 64, 20)), store, append_dim="t", **extra)
    data = np.concatenate([data, new])
    patch = _image(2, 3)[:, 2:9, 10:40, 5:50]
    region = (slice(1, 3), slice(2, 9), slice(10, 40), slice(5, 50))
    shardpipe.to_ome_zarr(
        da.from_array(patch, chunks=(1, 7, 15, 20)), store, region=region, **extra
    )
    data[region] = patch
    return data, labels


@pytest.mark.s3
def test_an_image_on_s3(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, options = s3_bucket
    url = f"s3://{bucket}/img.ome.zarr"
    data, labels = _write_append_region(url, storage_options=options)
    group = zarr.open_group(url, mode="r", storage_options=options)
    endpoint = options["client_kwargs"]["endpoint_url"]

    def kvstore(level: str) -> dict[str, Any]:
        return {
            "driver": "s3",
            "bucket": bucket,
            "path": f"img.ome.zarr/{level}/",
            "endpoint": endpoint,
            "aws_region": "us-east-1",
            "aws_credentials": {"type": "environment"},
        }

    check_image(group, reference_pyramid(data, FACTORS, "mean"), kvstore=kvstore)
    check_image(
        group,
        reference_pyramid(labels, FACTORS, "mode"),
        group="labels/seg",
        label=True,
        kvstore=kvstore,
    )
    report = shardpipe.verify(url, storage_options=options, complete=True)
    assert report.ok, str(report)


def test_an_image_in_an_icechunk_session(tmp_path: Path) -> None:
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    data = _image(2, 4)
    snapshot = shardpipe.to_ome_zarr(
        da.from_array(data, chunks=(1, 5, 30, 25)),
        repo.writable_session("main"),
        "tzyx",
        path="img",
        commit="an image",
        **KWARGS,
    )
    assert isinstance(snapshot, str)
    new = _image(1, 5)
    session = repo.writable_session("main")
    shardpipe.to_ome_zarr(new, session, path="img", append_dim="t", commit="a time point")
    data = np.concatenate([data, new])
    patch = _image(1, 6)[:, :4, :20, :30]
    session = repo.writable_session("main")
    shardpipe.to_ome_zarr(
        patch, session, path="img", region=(slice(2, 3), slice(0, 4), slice(0, 20), slice(0, 30))
    )
    session.commit("a region")
    data[2:3, :4, :20, :30] = patch
    group = zarr.open_group(repo.readonly_session("main").store, path="img", mode="r")
    check_image(group, reference_pyramid(data, FACTORS, "mean"))


@pytest.mark.cluster
def test_an_image_on_a_local_cluster(tmp_path: Path, cluster_client: Any) -> None:
    root = tmp_path / "img.ome.zarr"
    data, labels = _write_append_region(str(root))
    check_image(root, reference_pyramid(data, FACTORS, "mean"))
    check_image(root, reference_pyramid(labels, FACTORS, "mode"), group="labels/seg", label=True)
    assert shardpipe.verify(str(root), complete=True).ok
