"""An OME-Zarr image with labels on Azure Blob Storage (Azurite): write, append, region.

Read back with zarr-python on adlfs and validated by ome-zarr-models;
tensorstore has no Azure driver, so it does not read it here.
"""

from __future__ import annotations

from typing import Any

import pytest
import zarr

import shardpipe
from tests.ome.test_backends import FACTORS, _write_append_region
from tests.support.ome_checks import check_image, reference_pyramid

pytestmark = pytest.mark.azure


def test_an_image_on_azure(azure_container: tuple[str, dict[str, Any]]) -> None:
    container, options = azure_container
    url = f"az://{container}/img.ome.zarr"
    data, labels = _write_append_region(url, storage_options=options)
    group = zarr.open_group(url, mode="r", storage_options=options)
    check_image(group, reference_pyramid(data, FACTORS, "mean"))
    check_image(group, reference_pyramid(labels, FACTORS, "mode"), group="labels/seg", label=True)
    report = shardpipe.verify(url, storage_options=options, complete=True)
    assert report.ok, str(report)
