"""Checks of written OME-Zarr images: a NumPy reference pyramid and the community's readers.

The reference is computed here, window by window with plain NumPy (not
with :mod:`shardpipe.core.downsample`), so that a wrong downsampling in
shardpipe cannot agree with itself.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from tests.support.readers import assert_same, read_tensorstore


def reference_level(data: np.ndarray, step: Sequence[int], method: str) -> np.ndarray:
    """``data`` downsampled by ``step`` (partial windows at the far end).

    Integer means (of up to 32-bit values) and ``nearest`` a whole axis at a
    time, the rest window by window (:func:`window_by_window`, which
    ``tests/ome/test_reference_pyramid.py`` holds the fast paths to).
    """
    step = tuple(step) + (1,) * (data.ndim - len(step))
    if all(s == 1 for s in step):
        return data
    if method == "nearest":
        return data[tuple(slice(None, None, s) for s in step)].copy()
    if method == "mean" and data.dtype.kind in "iu" and data.dtype.itemsize <= 4:
        return integer_means(data, step)
    return window_by_window(data, step, method)


def window_by_window(data: np.ndarray, step: tuple[int, ...], method: str) -> np.ndarray:
    """``data`` downsampled by ``step`` (one per axis), one window at a time in Python."""
    out_shape = tuple(-(-n // s) for n, s in zip(data.shape, step, strict=True))
    out = np.empty(out_shape, dtype=data.dtype)
    for index in itertools.product(*(range(n) for n in out_shape)):
        window = data[tuple(slice(i * s, (i + 1) * s) for i, s in zip(index, step, strict=True))]
        values = window.reshape(-1)
        if method == "nearest":
            out[index] = values[0]
        elif method == "mode":
            counts = Counter(values.tolist())
            best = max(counts.values())
            out[index] = min(v for v, n in counts.items() if n == best)
        elif data.dtype.kind in "iu":
            total, n = sum(int(v) for v in values), len(values)
            quotient, remainder = divmod(total, n)
            up = 2 * remainder > n or (2 * remainder == n and quotient % 2 == 1)
            out[index] = quotient + up
        else:
            out[index] = values.astype(np.float64).mean()
    return out


def integer_means(data: np.ndarray, step: tuple[int, ...]) -> np.ndarray:
    """The windows' means rounded half to even, from exact sums (int64 holds them).

    What the window-by-window loop computes, a whole axis at a time: each
    window's sum (``np.add.reduceat``, partial windows at the far end) and
    its number of values, then the quotient and the remainder.
    """
    total = data.astype(np.int64)
    count = np.ones((1,) * data.ndim, dtype=np.int64)
    for axis, s in enumerate(step):
        starts = np.arange(0, data.shape[axis], s)
        total = np.add.reduceat(total, starts, axis=axis)
        lengths = np.minimum(starts + s, data.shape[axis]) - starts
        count = count * lengths.reshape([-1 if a == axis else 1 for a in range(data.ndim)])
    quotient, remainder = np.divmod(total, count)
    up = (2 * remainder > count) | ((2 * remainder == count) & (quotient % 2 == 1))
    return (quotient + up).astype(data.dtype)


def reference_pyramid(
    data: np.ndarray, factors: Sequence[Sequence[int]], method: str
) -> list[np.ndarray]:
    """Level 0 and one level per cumulative factor, each from the level before."""
    levels = [data]
    before = (1,) * data.ndim
    for factor in factors:
        step = tuple(f // b for f, b in zip(factor, before, strict=True))
        levels.append(reference_level(levels[-1], step, method))
        before = tuple(factor)
    return levels


def stored_factors(group: zarr.Group) -> list[tuple[int, ...]]:
    """The factors of the levels after level 0, from the stored scales."""
    datasets = group.attrs["ome"]["multiscales"][0]["datasets"]
    scales = [d["coordinateTransformations"][0]["scale"] for d in datasets]
    return [
        tuple(round(s / s0) for s, s0 in zip(scale, scales[0], strict=True)) for scale in scales[1:]
    ]


def check_image(
    path: Path | str | zarr.Group,
    expected: Sequence[np.ndarray],
    *,
    group: str = "",
    label: bool = False,
    kvstore: Callable[[str], dict[str, Any]] | None = None,
) -> None:
    """The image (or label image) at ``path``/``group``: valid 0.5 metadata, levels as expected.

    Validated by ome-zarr-models; every level read by zarr-python and by
    tensorstore and compared with ``expected``. ``path`` is a local folder
    or an open group (of any store); tensorstore reads a level of an open
    group through ``kvstore(level path)`` (skipped without it).
    """
    from ome_zarr_models.v05.image import Image
    from ome_zarr_models.v05.image_label import ImageLabel

    if isinstance(path, zarr.Group):
        node = path[group] if group else path
        where: Path | None = None
    else:
        where = Path(path) / group if group else Path(path)
        node = zarr.open_group(str(where), mode="r")
    assert isinstance(node, zarr.Group)
    model = ImageLabel.from_zarr(node) if label else Image.from_zarr(node)
    datasets = model.attributes.ome.multiscales[0].datasets
    assert len(datasets) == len(expected)
    for dataset, reference in zip(datasets, expected, strict=True):
        array = node[dataset.path]
        assert array.metadata.dimension_names == tuple(
            a.name for a in model.attributes.ome.multiscales[0].axes
        )
        got_all = [np.asarray(array[...])]
        if where is not None:
            got_all.append(read_tensorstore(str(where / dataset.path)))
        elif kvstore is not None:
            level = "/".join(p for p in (group, dataset.path) if p)
            got_all.append(read_tensorstore("", kvstore(level)))
        for got in got_all:
            if reference.dtype.kind == "f":  # sums in another order: the last bit may differ
                assert got.dtype == reference.dtype
                np.testing.assert_allclose(got, reference, rtol=1e-6)
            else:
                assert_same(got, reference)


def read_with_ome_zarr_py(path: Path | str) -> list[list[np.ndarray]]:
    """Every node's levels as ome-zarr-py's reader returns them (image, then labels)."""
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Reader

    location = parse_url(str(path))
    assert location is not None
    nodes = list(Reader(location)())
    return [[np.asarray(level) for level in node.data] for node in nodes if node.data]


def read_with_ngff_zarr(path: Path | str) -> list[np.ndarray]:
    """The image's levels as ngff-zarr's ``from_ngff_zarr`` returns them."""
    import ngff_zarr

    multiscales = ngff_zarr.from_ngff_zarr(str(path))
    return [np.asarray(image.data) for image in multiscales.images]


def read_with_napari(path: Path | str) -> list[tuple[Any, dict[str, Any], str]]:
    """The layers napari-ome-zarr's reader returns (no viewer)."""
    with warnings.catch_warnings():
        # napari's pydantic models warn on import under pydantic 2.12
        warnings.simplefilter("ignore", DeprecationWarning)
        from napari_ome_zarr import napari_get_reader

        reader = napari_get_reader(str(path))
        assert reader is not None
        return list(reader(str(path)))


def left_by_an_unfinished_write(problem: str) -> bool:
    """Whether ``verify`` reports ``problem`` of an image whose write did not finish: the
    write itself, or a level it had not written yet (the guide's "a missing level")."""
    return "unfinished" in problem or "is not a Zarr v3 array" in problem
