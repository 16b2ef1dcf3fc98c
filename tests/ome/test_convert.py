"""convert_ome_zarr and the CLI: OME-Zarr 0.4 (Zarr v2, written by ome-zarr-py) to sharded 0.5."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import struct
import subprocess
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zarr

import shardpipe
from shardpipe.cli import main
from shardpipe.ome.convert import convert_ome_zarr, prepare_ome_conversion
from shardpipe.write.options import check_array_options
from tests.support.ome_checks import check_image, reference_pyramid
from tests.support.spies import count_calls_by_module

IMAGE = np.random.default_rng(5).integers(0, 4000, (2, 20, 48, 40), dtype=np.uint16)
MASK = (IMAGE[0] > 2000).astype(np.uint8)


def _write_v04(root: Path, compressor: Any, filters: Any = None) -> zarr.Group:
    """An OME-Zarr 0.4 image with a label image, written by ome-zarr-py."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image, write_labels

    group = zarr.open_group(str(root), mode="w", zarr_format=2)
    options: dict[str, Any] = {"chunks": (1, 8, 16, 16), "compressor": compressor}
    if filters is not None:
        options["filters"] = filters
    write_image(
        IMAGE, group, axes="czyx", fmt=FormatV04(), storage_options=options, scale_factors=(2, 4)
    )
    write_labels(
        MASK,
        group,
        name="mask",
        axes="zyx",
        fmt=FormatV04(),
        scale_factors=(2, 4),
        storage_options={"chunks": (8, 16, 16)},
        label_metadata={"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]},
    )
    return group


def _inner_chunks(shard: Path, grid: tuple[int, ...]) -> dict[tuple[int, ...], bytes]:
    """The stored bytes of every inner chunk of a shard, as tensorstore's kvstore reads them."""
    kv = ts.KvStore.open(
        {
            "driver": "zarr3_sharding_indexed",
            "base": {"driver": "file", "path": str(shard)},
            "grid_shape": list(grid),
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                             {"name": "crc32c"}],
        }
    ).result()  # fmt: skip
    out = {}
    for key in kv.list().result():
        position = struct.unpack(f">{len(grid)}I", key)
        out[position] = bytes(kv.read(key).result().value)
    return out


@pytest.mark.parametrize(
    ("name", "compressor", "filters", "carried"),
    [
        ("blosc", numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE), None, True),
        ("zstd", numcodecs.Zstd(level=3), None, True),
        ("gzip", numcodecs.GZip(level=4), None, True),
        ("zlib", numcodecs.Zlib(level=2), None, True),
        ("none", None, None, True),
        ("filters", numcodecs.Zstd(), [numcodecs.Delta(dtype="<u2")], False),
    ],
)
def test_a_v04_image_converts_with_its_labels(
    tmp_path: Path, name: str, compressor: Any, filters: Any, carried: bool
) -> None:
    source = tmp_path / "v04.zarr"
    _write_v04(source, compressor, filters)
    target = tmp_path / "v05.ome.zarr"
    job = prepare_ome_conversion(str(source), str(target), shards=(1, 16, 32, 32))
    assert ("chunks copied as they are" in repr(job)) == carried or name == "filters"
    convert_ome_zarr(str(source), str(target), shards=(1, 16, 32, 32))
    old = zarr.open_group(str(source), mode="r")
    paths = [d["path"] for d in old.attrs["multiscales"][0]["datasets"]]
    check_image(target, [np.asarray(old[p][...]) for p in paths])
    label_paths = [d["path"] for d in old["labels/mask"].attrs["multiscales"][0]["datasets"]]
    check_image(
        target,
        [np.asarray(old["labels/mask"][p][...]) for p in label_paths],
        group="labels/mask",
        label=True,
    )
    new = zarr.open_group(str(target), mode="r")
    assert new.attrs["ome"]["version"] == "0.5"
    assert "version" not in new.attrs["ome"]["multiscales"][0]
    assert new["labels/mask"].attrs["ome"]["image-label"]["colors"][0]["rgba"] == [255, 0, 0, 255]
    assert new["labels"].attrs["ome"]["labels"] == ["mask"]
    assert shardpipe.verify(str(target), complete=True).ok
    if not carried or name == "zlib":
        return
    # the v2 chunk files are the inner chunks, byte for byte (then their CRC32C)
    zarray = json.loads((source / paths[0] / ".zarray").read_text())
    separator = zarray.get("dimension_separator") or "."
    inner = _inner_chunks(target / paths[0] / "c" / "1" / "0" / "0" / "0", (1, 2, 2, 2))
    assert len(inner) == 8
    for (a, b, c, d), stored in inner.items():
        chunk = (1 + a, b, c, d)
        v2 = (source / paths[0] / separator.join(map(str, chunk))).read_bytes()
        assert stored[:-4] == v2


@pytest.mark.parametrize("at_once", [True, False], ids=["object store", "file system"])
def test_a_carried_shard_reads_its_chunks_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_once: bool
) -> None:
    """Where each read waits out a round trip (a store declaring ``reads_at_once``), a task
    carrying a shard has ``READS_AT_ONCE`` reads in flight, not one after another; on a
    file system, where threads would only contend, one at a time."""
    from shardpipe.ome import carry_tasks
    from shardpipe.storage.local.store import LocalShardStore

    source = tmp_path / "v04.zarr"
    _write_v04(source, numcodecs.Zstd(level=3))
    monkeypatch.setattr(carry_tasks, "READS_AT_ONCE", 4)  # a shard holds 8 chunks
    abilities = dataclasses.replace(LocalShardStore.abilities, reads_at_once=at_once)
    monkeypatch.setattr(LocalShardStore, "abilities", abilities)
    under_way, most, lock = [0], [0], threading.Lock()
    all_started = threading.Event()
    read = carry_tasks.read_at_most

    def read_in_turn(*args: Any) -> bytes | None:
        with lock:
            under_way[0] += 1
            most[0] = max(most[0], under_way[0])
            if under_way[0] == 4:
                all_started.set()
        try:
            # a round trip, in which the other reads start (however late their threads)
            all_started.wait(5 if at_once else 0.02)
            return read(*args)
        finally:
            with lock:
                under_way[0] -= 1

    monkeypatch.setattr(carry_tasks, "read_at_most", read_in_turn)
    target = tmp_path / "v05.ome.zarr"
    with dask.config.set(scheduler="synchronous"):  # one task at a time
        convert_ome_zarr(str(source), str(target), shards=(1, 16, 32, 32))
    assert most[0] == (4 if at_once else 1)  # never more than READS_AT_ONCE
    old = zarr.open_group(str(source), mode="r")
    paths = [d["path"] for d in old.attrs["multiscales"][0]["datasets"]]
    check_image(target, [np.asarray(old[p][...]) for p in paths])


def test_a_carried_shard_holds_its_chunks_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task carrying a shard lets go of each chunk read as it lays it into the shard
    (it held every chunk twice, the chunks read and their checksummed copies)."""
    from ome_zarr.format import FormatV04
    from ome_zarr.writer import write_image

    from shardpipe.ome import carry_tasks

    source = tmp_path / "v04.zarr"
    image = np.random.default_rng(0).integers(0, 255, size=(1, 16, 256, 256), dtype="uint8")
    write_image(  # 1 MiB that zstd cannot shrink, in 16 chunks
        image,
        zarr.open_group(str(source), mode="w", zarr_format=2),
        axes="czyx",
        fmt=FormatV04(),
        storage_options={"chunks": (1, 4, 64, 64), "compressor": numcodecs.Zstd(level=1)},
        scale_factors=(),
    )
    peaks: list[int] = []
    carry = carry_tasks.carry_shard

    def traced(*args: Any) -> Any:
        tracemalloc.start()
        try:
            return carry(*args)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    monkeypatch.setattr(shardpipe.ome.convert, "carry_shard", traced)
    with dask.config.set(scheduler="synchronous"):
        convert_ome_zarr(str(source), str(tmp_path / "v05.ome.zarr"), shards=(1, 16, 256, 256))
    assert len(peaks) == 1
    assert image.nbytes < peaks[0] < 1.5 * image.nbytes  # was 2.0x


def test_the_levels_written_again_share_options_checked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six levels decoded and written again (three of the image, three of its labels): the
    conversion's options are checked once, not again for each level's write."""
    _write_v04(tmp_path / "v04.zarr", numcodecs.Zstd())
    calls = count_calls_by_module(monkeypatch, check_array_options)
    job = prepare_ome_conversion(
        str(tmp_path / "v04.zarr"),
        str(tmp_path / "v05.ome.zarr"),
        shards=(1, 16, 32, 32),
        max_mem="64MB",
        chunk_checksums=False,
        reencode=True,
    )
    assert sum(level.job is not None for level in job.levels) == 6
    assert calls == {"shardpipe.ome.convert": 1}, calls
    for level in job.levels:  # each level's write has the options as given
        assert level.job is not None
        assert level.job.plan.max_mem == 64_000_000
        (sharding,) = level.job.metadata.codecs
        assert "crc32c" not in str(sharding.to_dict()["configuration"]["codecs"])


def test_a_v05_image_is_not_converted(tmp_path: Path) -> None:
    shardpipe.to_ome_zarr(da.zeros((8, 8), dtype="uint8"), tmp_path / "a.ome.zarr", "yx")
    with pytest.raises(shardpipe.InvalidArgumentError) as caught:
        convert_ome_zarr(str(tmp_path / "a.ome.zarr"), str(tmp_path / "b"))
    assert caught.value.parameter == "source"
    assert not (tmp_path / "b").exists()


def test_shards_that_are_not_whole_chunks_are_refused(tmp_path: Path) -> None:
    _write_v04(tmp_path / "v04.zarr", numcodecs.Zstd())
    with pytest.raises(shardpipe.InvalidArgumentError) as caught:
        convert_ome_zarr(str(tmp_path / "v04.zarr"), str(tmp_path / "b"), shards=(1, 12, 32, 32))
    assert caught.value.parameter == "shards"
    assert not (tmp_path / "b").exists()


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``shardpipe *argv`` in folder ``cwd``, through the CLI's ``main`` in this process
    (``tests/cli`` runs the installed entry point; a new interpreter costs seconds)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return subprocess.CompletedProcess(argv, status, out.getvalue(), err.getvalue())


def test_the_cli_converts_and_writes_from_a_tiff_stack(tmp_path: Path) -> None:
    import tifffile

    _write_v04(tmp_path / "v04.zarr", numcodecs.Blosc())
    done = _cli("convert-ome-zarr", "v04.zarr", "v05.ome.zarr", "--no-progress", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "chunks copied as they are (blosc)" in done.stdout
    assert shardpipe.verify(str(tmp_path / "v05.ome.zarr"), complete=True).ok
    # the TIFF recipe: tifffile's Zarr view of the stack, read by Dask, one page per block
    stack = IMAGE[0].astype(np.uint16)
    tifffile.imwrite(tmp_path / "stack.tif", stack)
    zarr.create_array(str(tmp_path / "mask.zarr"), data=MASK, chunks=(8, 16, 16))
    done = _cli(
        "write-ome-zarr", "stack.tif", "stack.ome.zarr", "--axes", "zyx",
        "--scale", "2,0.5,0.5", "--units", "z=micrometer,y=micrometer,x=micrometer",
        "--scale-factors", "y=2,x=2:z=2,y=4,x=4", "--shards", "8,32,32", "--chunks", "4,16,16",
        "--labels", "mask=mask.zarr", "--no-progress", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    factors = [(1, 2, 2), (2, 4, 4)]
    check_image(tmp_path / "stack.ome.zarr", reference_pyramid(stack, factors, "mean"))
    check_image(
        tmp_path / "stack.ome.zarr",
        reference_pyramid(MASK, factors, "mode"),
        group="labels/mask",
        label=True,
    )
    # bad input: exit status 2, the parameter named, nothing written
    done = _cli("write-ome-zarr", "stack.tif", "bad.ome.zarr", "--axes", "zxq", cwd=tmp_path)
    assert done.returncode == 2
    assert "axes:" in done.stderr
    assert not (tmp_path / "bad.ome.zarr").exists()


def test_a_tiff_stack_through_dask_is_read_lazily(tmp_path: Path) -> None:
    """The guide's recipe: tifffile's Zarr view, wrapped by Dask, one block per page."""
    import tifffile

    pages = np.random.default_rng(1).integers(0, 255, (12, 64, 48), dtype=np.uint8)
    tifffile.imwrite(tmp_path / "stack.tif", pages)
    store = tifffile.imread(tmp_path / "stack.tif", aszarr=True)
    view = zarr.open(store, mode="r")
    assert isinstance(view, zarr.Array)
    image = da.from_zarr(view)
    assert image.chunks[0] == (1,) * 12  # a page per block: nothing read yet
    shardpipe.to_ome_zarr(image, tmp_path / "stack.ome.zarr", "zyx", scale_factors=[2])
    check_image(tmp_path / "stack.ome.zarr", reference_pyramid(pages, [(2, 2, 2)], "mean"))
    store.close()


def test_the_progress_bar_counts_the_shards_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_v04(tmp_path / "v04.zarr", numcodecs.Zstd())
    job = prepare_ome_conversion(
        str(tmp_path / "v04.zarr"), str(tmp_path / "v05.ome.zarr"), shards=(1, 16, 32, 32)
    )
    total = sum(level.n_shards for level in job.levels)
    job.execute(progress=True)
    stderr = capsys.readouterr().err
    assert re.findall(rf"shardpipe: .*{total}/{total} \[", stderr), stderr  # shardpipe's bar
    assert "MB written" in stderr


@pytest.mark.parametrize("where", ["itself", "its folder", "inside it"])
def test_a_conversion_over_its_own_source_is_refused_before_anything_is_written(
    tmp_path: Path, where: str
) -> None:
    source = tmp_path / "image.zarr"
    _write_v04(source, numcodecs.Zstd(level=1))
    before = sorted((p.relative_to(tmp_path), p.stat().st_size) for p in tmp_path.rglob("*"))
    target = {"itself": source, "its folder": tmp_path, "inside it": source / "v05"}[where]
    with pytest.raises(shardpipe.SourceOverlapsTargetError, match="in place") as caught:
        convert_ome_zarr(source, target, overwrite=True)
    assert caught.value.parameter == "target"
    after = sorted((p.relative_to(tmp_path), p.stat().st_size) for p in tmp_path.rglob("*"))
    assert after == before
    np.testing.assert_array_equal(zarr.open_array(source / "s0", mode="r")[...], IMAGE)
