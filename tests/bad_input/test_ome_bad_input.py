"""Bad input to `to_ome_zarr`: an error naming the parameter, and nothing written."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest

import shardpipe
from shardpipe.errors import InvalidArgumentError, ShardpipeError

IMAGE = da.zeros((4, 16, 32, 32), dtype="uint16", chunks=(1, 8, 16, 16))
GOOD: dict[str, Any] = {"axes": "czyx", "shards": (1, 8, 16, 16), "chunks": (1, 4, 8, 8)}


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


ROWS = [
    # axes: in the spec's order, of known types, one per dimension
    ({"axes": "zcyx"}, "axes", "not in the spec's order"),
    ({"axes": "ytx", "image": IMAGE[0]}, "axes", "not in the spec's order"),
    ({"axes": "czyq"}, "axes", "no known type"),
    ({"axes": [{"name": "c", "type": "channel"}, {"name": "z", "type": "depth"}, "y", "x"]},
     "axes", "not one of"),
    ({"axes": "zyx"}, "axes", "3 axes"),
    ({"axes": "czyy"}, "axes", "repeat"),
    ({"axes": "cy", "image": IMAGE[:, 0, 0]}, "axes", "space axes"),
    ({"axes": 5}, "axes", "string"),
    ({"image": IMAGE[0, 0, 0, :4].reshape(4)}, "axes", "4 axes"),
    # scale and translation: one positive (finite) number per axis
    ({"scale": (1.0, 2.0, 0.5)}, "scale", "3 values"),
    ({"scale": (1.0, 2.0, 0.5, -1.0)}, "scale", "positive"),
    ({"scale": {"q": 1.0}}, "scale", "not axes"),
    ({"scale": (1.0, 2.0, "0.5", 1.0)}, "scale", "not a number"),
    ({"translation": (0.0, 0.0, float("nan"), 0.0)}, "translation", "finite"),
    ({"translation": (0.0, 0.0)}, "translation", "2 values"),
    # units from the spec's lists, and none on channels
    ({"axes_units": {"z": "micron"}}, "axes_units", "not one of the spec's space units"),
    ({"axes_units": {"z": "second"}}, "axes_units", "space units"),
    ({"axes_units": {"c": "micrometer"}}, "axes_units", "channels have none"),
    ({"axes_units": {"t": "second"}}, "axes_units", "not axes"),
    ({"axes": ["c", {"name": "z", "type": "space", "unit": "parsecs"}, "y", "x"]},
     "axes", "not one of the spec's space units"),
    # shards and chunks: one whole size per axis, shards whole chunks
    ({"shards": (1, 8, 16, 12)}, "shards", "multiple"),
    ({"shards": (1, 8, 16)}, "shards", "dimensions"),
    ({"chunks": (1, 4, 8, 0)}, "chunks", "zero or negative"),
    ({"shards": {"z": 8}}, "shards", "leaves out"),
    # scale factors: a chain of multiples over space axes
    ({"scale_factors": [2, 3]}, "scale_factors", "not a multiple"),
    ({"scale_factors": [{"c": 2}]}, "scale_factors", "not space axes"),
    ({"scale_factors": [0]}, "scale_factors", "below 1"),
    ({"scale_factors": [2, 2]}, "scale_factors", "repeats"),
    ({"scale_factors": "2,4"}, "scale_factors", "list of factors"),
    ({"scale_factors": [{"w": 2}]}, "scale_factors", "not axes"),
    # bounded (issue 39): a window within the level it downsamples, at most 64 levels
    ({"scale_factors": [2**40]}, "scale_factors", "wider than the 16 voxels"),
    ({"scale_factors": [2, 4, 8, 16, 32]}, "scale_factors", "axis 'z' is wider than the 1"),
    ({"scale_factors": [{"x": 2**k} for k in range(1, 1001)]}, "scale_factors", "1000 levels"),
    # methods
    ({"method": "gaussian"}, "method", "not one of"),
    ({"label_method": "mean", "labels": {"a": IMAGE[0].astype("uint8")}}, "label_method", "mode"),
    # labels: integer images of the image's shape
    ({"labels": {"a": IMAGE[0, :, :16]}}, "labels", "not the image's"),
    ({"labels": {"a": IMAGE.astype("float32")}}, "labels", "integer ids"),
    ({"labels": {"a/b": IMAGE}}, "labels", "label name"),
    # label names: groups of their own beside the labels group's zarr.json (issue 39)
    ({"labels": {"zarr.json": IMAGE}}, "labels", "the labels group's own metadata"),
    ({"labels": {"Zarr.JSON": IMAGE}}, "labels", "the labels group's own metadata"),
    ({"labels": {".shardpipe": IMAGE}}, "labels", "starts with '.'"),
    ({"labels": {"": IMAGE}}, "labels", "empty"),
    ({"labels": {"__cells": IMAGE}}, "labels", "'__'"),
    ({"labels": {"a\\b": IMAGE}}, "labels", "backslash"),
    ({"labels": {"a\0b": IMAGE}}, "labels", "NUL"),
    ({"labels": {3: IMAGE}}, "labels", "not a str"),
    ({"labels": {"a": {"data": IMAGE, "colors": {1: [255, 0, 0]}}}}, "labels", "rgba"),
    ({"labels": {"a": {"data": IMAGE, "colours": {}}}}, "labels", "keys"),
    ({"labels": [IMAGE]}, "labels", "mapping"),
    # metadata
    ({"omero": {"channels": [{}]}}, "omero", "channel"),
    ({"channel_names": ["a", "b"]}, "channel_names", "4 channels"),
    ({"omero": {"a": object()}}, "omero", "JSON"),
    ({"name": 3}, "name", "string"),
    # the image itself, and the usual arguments
    ({"image": IMAGE.astype(bool)}, "image", "integer or float"),
    ({"image": [[1, 2], [3, 4]], "axes": "yx"}, "image", "Dask array"),
    ({"max_mem": "lots"}, "max_mem", "byte size"),
    ({"overwrite": "yes"}, "overwrite", "True or False"),
    ({"resume": True, "overwrite": True}, "resume", "overwrite"),
    ({"resume": "force"}, "resume", "always compares its group's record"),
    ({"write_strategy": "sideways", "region": (slice(0, 1),)}, "write_strategy", "sideways"),
    ({"append_dim": "w"}, "append_dim", "not an axis"),
    ({"append_dim": "c", "image": IMAGE[:, :, :8]}, "append_dim", "differs"),
    ({"region": (slice(0, 1),), "scale_factors": [2]}, "scale_factors", "update keeps"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "parameter", "words"), ROWS, ids=[f"{r[1]}-{i}" for i, r in enumerate(ROWS)]
)
def test_bad_argument_is_named_and_nothing_is_written(
    tmp_path: Path, kwargs: dict[str, Any], parameter: str, words: str
) -> None:
    target = tmp_path / "img.ome.zarr"
    updating = "append_dim" in kwargs or "region" in kwargs
    arguments = dict(kwargs) if updating else {**GOOD, **kwargs}
    image = arguments.pop("image", IMAGE)
    if updating:
        shardpipe.to_ome_zarr(IMAGE, target, **GOOD)  # an image to update
    before = _tree(target) if target.exists() else None
    with pytest.raises(InvalidArgumentError) as caught:
        shardpipe.to_ome_zarr(image, target, **arguments)
    assert caught.value.parameter == parameter, str(caught.value)
    assert words in str(caught.value), str(caught.value)
    assert (_tree(target) if target.exists() else None) == before


def test_an_image_that_is_there_is_not_replaced(tmp_path: Path) -> None:
    target = tmp_path / "img.ome.zarr"
    shardpipe.to_ome_zarr(IMAGE, target, **GOOD)
    before = _tree(target)
    with pytest.raises(ShardpipeError, match="overwrite=True"):
        shardpipe.to_ome_zarr(IMAGE + 1, target, **GOOD)
    assert _tree(target) == before


def test_an_update_of_something_that_is_no_image_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "plain.zarr"
    shardpipe.to_sharded_zarr(np.zeros((4, 4), dtype="uint8"), str(target))
    before = _tree(target)
    with pytest.raises(InvalidArgumentError) as caught:
        shardpipe.to_ome_zarr(np.zeros((1, 4), dtype="uint8"), target, append_dim=0)
    assert caught.value.parameter == "store"
    assert _tree(target) == before


def test_labels_of_another_shape_for_a_stored_image_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "img.ome.zarr"
    shardpipe.to_ome_zarr(IMAGE, target, **GOOD)
    before = _tree(target)
    with pytest.raises(InvalidArgumentError) as caught:
        shardpipe.to_ome_zarr(None, target, labels={"a": np.zeros((16, 32, 31), dtype="uint8")})
    assert caught.value.parameter == "labels"
    assert _tree(target) == before
