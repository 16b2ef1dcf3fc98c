"""An OME-Zarr image with labels on GCS (fake-gcs-server): written, appended, a region updated."""

from __future__ import annotations

from typing import Any

import pytest
import zarr

import shardpipe
from tests.ome.test_backends import FACTORS, _write_append_region
from tests.support.ome_checks import check_image, reference_pyramid

pytestmark = pytest.mark.gcs


def test_an_image_on_gcs(
    gcs_bucket: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket, options = gcs_bucket
    url = f"gs://{bucket}/img.ome.zarr"
    data, labels = _write_append_region(url, storage_options=options)
    group = zarr.open_group(url, mode="r", storage_options=options)
    monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", options["endpoint_url"])
    monkeypatch.setenv("GCE_METADATA_ROOT", "127.0.0.1:1")  # no metadata server: anonymous

    def kvstore(level: str) -> dict[str, Any]:
        return {"driver": "gcs", "bucket": bucket, "path": f"img.ome.zarr/{level}/"}

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
