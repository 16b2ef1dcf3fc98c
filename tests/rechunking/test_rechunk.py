"""shardpipe.rechunk: Zarr v2/v3 and Dask sources into sharded Zarr v3, read back independently."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from numcodecs import Blosc as V2Blosc
from numcodecs import GZip, Zstd
from zarr.codecs import ZstdCodec

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.errors import (
    ArrayExistsError,
    ChunkDecodeError,
    InvalidArgumentError,
    MemoryBudgetError,
)
from tests.support.fork_server import ForkServer
from tests.support.readers import assert_same, read_tensorstore, read_zarr


@pytest.fixture(autouse=True)
def _threads() -> Any:
    with dask.config.set(scheduler="threads"):
        yield


def _data(shape: tuple[int, ...], dtype: str = "int16") -> np.ndarray:
    rng = np.random.default_rng(sum(shape))
    return (rng.integers(0, 300, shape) * rng.integers(0, 2, shape)).astype(dtype)


def _v2(path: Path, data: np.ndarray, **kwargs: Any) -> Path:
    array = zarr.create_array(path, shape=data.shape, dtype=data.dtype, zarr_format=2, **kwargs)
    array[...] = data
    return path


V2_SOURCES = {
    "blosc, '.' keys": {"chunks": (1, 50, 60), "compressors": V2Blosc(cname="lz4")},
    "zstd, '/' keys": {
        "chunks": (7, 13, 60),
        "compressors": Zstd(level=1),
        "chunk_key_encoding": {"name": "v2", "separator": "/"},
    },
    "gzip, F order": {"chunks": (10, 25, 30), "compressors": GZip(level=1), "order": "F"},
}


@pytest.mark.parametrize("kind", sorted(V2_SOURCES))
def test_zarr_v2_sources(tmp_path: Path, kind: str) -> None:
    data = _data((45, 50, 60))
    source = _v2(
        tmp_path / "v2.zarr",
        data,
        fill_value=-1,
        attributes={"_ARRAY_DIMENSIONS": ["z", "y", "x"], "units": "counts"},
        **V2_SOURCES[kind],
    )
    target = tmp_path / "v3.zarr"
    out = shardpipe.rechunk(source, target, shards=(16, 32, 32), chunks=(8, 16, 16))
    assert isinstance(out, zarr.Array)
    assert_same(read_zarr(str(target)), data)
    assert_same(read_tensorstore(str(target)), data)
    # what carries over: fill value, dimension names, attributes (not the codecs)
    assert out.metadata.fill_value == -1
    assert out.metadata.dimension_names == ("z", "y", "x")
    assert dict(out.attrs) == {"units": "counts"}
    codecs = out.metadata.codecs[0].codecs
    assert [c.to_dict()["name"] for c in codecs] == ["bytes", "zstd", "crc32c"]
    assert shardpipe.verify(target).ok


@pytest.mark.parametrize(
    ("source_kwargs", "shards", "chunks"),
    [
        ({"chunks": (10, 10, 10)}, (20, 20, 20), (10, 10, 10)),  # unsharded, units divide shards
        ({"chunks": (6, 6, 6), "shards": (18, 18, 18)}, (16, 16, 16), (8, 8, 8)),  # other shards
        ({"chunks": (1, 33, 47)}, (12, 16, 16), (4, 8, 8)),  # slabs; shape divisible by nothing
    ],
    ids=["v3 unsharded", "v3 sharded differently", "v3 slabs"],
)
def test_zarr_v3_sources(
    tmp_path: Path, source_kwargs: dict[str, Any], shards: tuple[int, ...], chunks: tuple[int, ...]
) -> None:
    data = _data((37, 33, 47), "float32")
    source = zarr.create_array(
        tmp_path / "src.zarr",
        shape=data.shape,
        dtype=data.dtype,
        dimension_names=("t", "y", "x"),
        fill_value=np.nan,
        **source_kwargs,
    )
    source[...] = data
    target = tmp_path / "out.zarr"
    out = shardpipe.rechunk(source, target, shards=shards, chunks=chunks, max_mem="4MB")
    assert isinstance(out, zarr.Array)
    assert_same(read_tensorstore(str(target)), data)
    assert np.isnan(out.metadata.fill_value)
    assert out.metadata.dimension_names == ("t", "y", "x")
    assert shardpipe.verify(target).ok


def test_reads_align_to_source_chunks_and_large_shards_go_in_parts(tmp_path: Path) -> None:
    data = _data((64, 128, 128), "uint16")
    source = _v2(tmp_path / "slabs.zarr", data, chunks=(1, 128, 128))
    job = shardpipe.plan_rechunk(
        source, tmp_path / "out.zarr", shards=(64, 128, 128), chunks=(16, 32, 32), max_mem="1.5MB"
    )
    assert job.cost.amplification == 1.0  # every slab read once
    assert job.cost.reads == 64
    assert all(b % u == 0 for b, u in zip(job.block_shape, (1, 128, 128), strict=True))
    assert job.write.plan.max_parts_per_shard > 1  # a 2 MiB shard over a 1.5 MB budget
    assert "read amplification 1.00x" in repr(job)
    job.execute()
    assert_same(read_tensorstore(str(tmp_path / "out.zarr")), data)


def test_a_dask_source_is_read_as_it_is_blocked(tmp_path: Path) -> None:
    data = _data((30, 40))
    source = da.from_array(data, chunks=(7, 9))
    job = shardpipe.plan_rechunk(source, tmp_path / "out.zarr", shards=(16, 16), chunks=(8, 8))
    assert job.block_shape == (7, 9)
    job.execute()
    assert_same(read_zarr(str(tmp_path / "out.zarr")), data)


def test_overrides_win_over_the_source(tmp_path: Path) -> None:
    data = _data((20, 20))
    source = _v2(tmp_path / "v2.zarr", data, chunks=(5, 5), fill_value=7, attributes={"a": 1})
    out = shardpipe.rechunk(
        source,
        tmp_path / "out.zarr",
        shards=(10, 10),
        chunks=(5, 5),
        fill_value=0,
        attributes={"b": 2},
        dimension_names=("r", "c"),
    )
    assert isinstance(out, zarr.Array)
    assert out.metadata.fill_value == 0 and dict(out.attrs) == {"b": 2}
    assert out.metadata.dimension_names == ("r", "c")


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def test_bad_input_writes_nothing(tmp_path: Path) -> None:
    data = _data((20, 20))
    source = _v2(tmp_path / "v2.zarr", data, chunks=(5, 5))
    target = tmp_path / "out.zarr"
    with pytest.raises(InvalidArgumentError, match="shards"):
        shardpipe.rechunk(source, target, shards=(10, 10), chunks=(4, 4))
    with pytest.raises(InvalidArgumentError, match="source: cannot open a Zarr array"):
        shardpipe.rechunk(tmp_path / "missing.zarr", target)
    (tmp_path / "bad.zarr").mkdir()
    (tmp_path / "bad.zarr" / "zarr.json").write_text("{not json")
    with pytest.raises(InvalidArgumentError, match="source"):
        shardpipe.rechunk(tmp_path / "bad.zarr", target)
    with pytest.raises(MemoryBudgetError, match="max_mem"):
        shardpipe.rechunk(source, target, shards=(20, 20), chunks=(20, 20), max_mem=100)
    assert _tree(target) == []
    shardpipe.rechunk(source, target, shards=(10, 10), chunks=(5, 5))
    before = {p: (target / p).read_bytes() for p in _tree(target) if (target / p).is_file()}
    with pytest.raises(ArrayExistsError):
        shardpipe.rechunk(source, target, shards=(10, 10), chunks=(5, 5))
    after = {p: (target / p).read_bytes() for p in _tree(target) if (target / p).is_file()}
    assert after == before


def test_command_dry_run_then_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data((40, 64, 64), "uint16")
    source = _v2(tmp_path / "slabs.zarr", data, chunks=(1, 64, 64))
    target = tmp_path / "out.zarr"
    common = [str(source), str(target), "--shards", "20,32,32", "--chunks", "10,16,16"]
    assert main(["rechunk", *common, "--max-mem", "2MB", "--dry-run"]) == 0
    assert "read amplification 1.00x" in capsys.readouterr().out
    assert _tree(target) == []
    assert main(["rechunk", *common, "--no-progress", "--compressor", "gzip:1"]) == 0
    assert "shard(s) written" in capsys.readouterr().out
    assert_same(read_tensorstore(str(target)), data)
    assert main(["rechunk", *common]) == 2
    assert "exists" in capsys.readouterr().err


def test_a_two_pass_dry_run_names_the_flags_of_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _v2(tmp_path / "series.zarr", _data((120, 64, 64), "float32"), chunks=(1, 64, 64))
    args = [str(source), str(tmp_path / "out.zarr"), "--shards", "120,32,32"]
    assert main(["rechunk", *args, "--chunks", "120,8,8", "--max-mem", "1MB", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "two passes" in out and "(pass --temp-store to place it)" in out
    assert "temp_store" not in out


@pytest.mark.cluster
def test_command_on_worker_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data((20, 30, 30))
    source = _v2(tmp_path / "v2.zarr", data, chunks=(4, 30, 30))
    target = tmp_path / "out.zarr"
    args = ["rechunk", str(source), str(target), "--shards", "10,15,15", "--chunks", "5,15,15"]
    assert main([*args, "--workers", "2", "--no-progress"]) == 0
    assert_same(read_zarr(str(target)), data)


# -- resume -------------------------------------------------------------------------


def _interrupted(tmp_path: Path) -> tuple[Path, Path, np.ndarray, dict[str, Any]]:
    """A rechunk that failed midway: one source chunk does not decode."""
    data = _data((80, 40, 40), "uint16")
    source = _v2(tmp_path / "v2.zarr", data, chunks=(10, 40, 40), compressors=Zstd(level=1))
    chunk = source / "7.0.0"
    good = chunk.read_bytes()
    chunk.write_bytes(b"not zstd at all")
    target = tmp_path / "out.zarr"
    kwargs: dict[str, Any] = {"shards": (10, 20, 20), "chunks": (10, 10, 10)}
    with pytest.raises(Exception, match=r"(?i)zstd|decompress|frame|unknown"):
        shardpipe.rechunk(source, target, **kwargs)
    chunk.write_bytes(good)
    return source, target, data, kwargs


def test_resume_keeps_complete_shards_and_writes_the_rest(tmp_path: Path) -> None:
    source, target, data, kwargs = _interrupted(tmp_path)
    shards = sorted((target / "c").rglob("*"))
    written = {p: p.stat().st_mtime_ns for p in shards if p.is_file()}
    assert 0 < len(written) < 8 * 2 * 2  # some shards, not all
    victim = next(iter(written))  # a torn shard is not complete: it is written again
    victim.write_bytes(victim.read_bytes()[:-2])
    job = shardpipe.plan_rechunk(source, target, resume=True, **kwargs)
    assert len(job.write.skip) == len(written) - 1
    assert f"{len(written) - 1} complete already, skipped" in repr(job)
    report = job.execute()
    assert report.shards == 32 - (len(written) - 1)
    assert_same(read_tensorstore(str(target)), data)
    assert shardpipe.verify(target).ok
    for path, mtime in written.items():
        if path != victim:
            assert path.stat().st_mtime_ns == mtime, f"{path} was rewritten"


def test_resume_refuses_another_job(tmp_path: Path) -> None:
    source, target, _, kwargs = _interrupted(tmp_path)
    with pytest.raises(
        InvalidArgumentError,
        match=r"resume: .*another job: its target metadata \(chunk_grid\) differs",
    ):
        shardpipe.rechunk(source, target, resume=True, shards=(20, 20, 20), chunks=(10, 10, 10))
    with pytest.raises(  # named as what changed, not as the document's "codecs"
        InvalidArgumentError,
        match=r"target metadata \(inner chunk shape: recorded \[10, 10, 10\], this write "
        r"\[10, 5, 5\]\) differs",
    ):
        shardpipe.rechunk(source, target, resume=True, shards=(10, 20, 20), chunks=(10, 5, 5))
    with pytest.raises(InvalidArgumentError) as raised:  # the codec that differs, in full
        shardpipe.rechunk(source, target, resume=True, compressors=ZstdCodec(level=7), **kwargs)
    assert "inner chunks' codecs [1]: recorded {" in str(raised.value)
    assert '"level": 7' in str(raised.value), raised.value
    other = _v2(tmp_path / "other.zarr", _data((80, 40, 40), "uint16"), chunks=(10, 40, 40))
    with pytest.raises(InvalidArgumentError, match=r"its source \(recorded .*\) differs"):
        shardpipe.rechunk(other, target, resume=True, **kwargs)
    with pytest.raises(InvalidArgumentError, match="resume"):
        shardpipe.rechunk(source, target, resume=True, overwrite=True, **kwargs)


def test_resume_without_a_target_starts_afresh(tmp_path: Path) -> None:
    data = _data((20, 20))
    source = _v2(tmp_path / "v2.zarr", data, chunks=(5, 5))
    shardpipe.rechunk(source, tmp_path / "out.zarr", shards=(10, 10), chunks=(5, 5), resume=True)
    assert_same(read_zarr(str(tmp_path / "out.zarr")), data)


def test_command_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data((80, 40, 40), "uint16")
    source = _v2(tmp_path / "v2.zarr", data, chunks=(10, 40, 40), compressors=Zstd(level=1))
    chunk = source / "7.0.0"
    good = chunk.read_bytes()
    chunk.write_bytes(b"not zstd at all")
    target = tmp_path / "out.zarr"
    args = ["rechunk", str(source), str(target), "--shards", "10,20,20", "--chunks", "10,10,10"]
    assert main([*args, "--no-progress"]) == 1
    assert "run the same command with --resume" in capsys.readouterr().err
    chunk.write_bytes(good)
    assert main([*args, "--no-progress"]) == 2  # the target exists
    capsys.readouterr()
    assert main([*args, "--no-progress", "--resume"]) == 0
    assert "complete already, skipped" in capsys.readouterr().out
    assert_same(read_zarr(str(target)), data)


# -- groups -------------------------------------------------------------------------


def _v2_group(path: Path) -> dict[str, np.ndarray]:
    root = zarr.open_group(path, mode="w", zarr_format=2)
    root.attrs["title"] = "an acquisition"
    data = {
        "raw": _data((64, 128, 128), "uint16"),  # 2 MiB: rechunked
        "labels/cells": _data((64, 128, 128), "uint16") // 100,
        "labels/tiny": _data((3, 4), "int8"),
    }
    root.create_group("labels").attrs["kind"] = "segmentation"
    for name, values in data.items():
        array = root.create_array(
            name, shape=values.shape, dtype=values.dtype, chunks=(1, *values.shape[1:])
        )
        array.attrs["_ARRAY_DIMENSIONS"] = ["z", "y", "x"][-values.ndim :]
        array[...] = values
    return data


def test_a_small_array_of_a_group_is_read_within_bounds(tmp_path: Path) -> None:
    """The arrays a group rechunk copies whole (too small to shard) are read as the others."""
    import zlib

    from numcodecs import Zlib

    _v2_group(tmp_path / "acq.zarr")
    tiny = zarr.open_array(
        tmp_path / "acq.zarr" / "labels" / "tiny",
        mode="w",
        shape=(3, 4),
        chunks=(1, 4),
        dtype="int8",
        zarr_format=2,
        compressor=Zlib(1),
    )
    tiny[...] = np.ones((3, 4), dtype="int8")
    bomb = zlib.compress(bytes(512 << 10), 9)  # 512 KiB in a chunk of 4 bytes
    (tmp_path / "acq.zarr" / "labels" / "tiny" / "1.0").write_bytes(bomb)
    words = f"labels/tiny/1.0: {len(bomb):,} bytes of zlib data inflate to more than the 4 bytes"
    with pytest.raises(ChunkDecodeError, match=words):
        shardpipe.rechunk_group(tmp_path / "acq.zarr", tmp_path / "out.zarr", shards=(32, 64, 64))


def test_group_rechunk_keeps_the_hierarchy(tmp_path: Path) -> None:
    data = _v2_group(tmp_path / "acq.zarr")
    target = tmp_path / "out.zarr"
    report = shardpipe.rechunk_group(
        tmp_path / "acq.zarr",
        target,
        shards=(32, 64, 64),
        chunks=(16, 32, 32),
        arrays={"labels/cells": {"shards": (64, 128, 128), "chunks": (32, 64, 64)}},
        max_mem="4MB",
    )
    assert set(report.rechunked) == {"raw", "labels/cells"}
    assert report.copied == ["labels/tiny"]
    out = zarr.open_group(target, mode="r")
    assert out.attrs["title"] == "an acquisition"
    assert out["labels"].attrs["kind"] == "segmentation"
    assert out["raw"].shards == (32, 64, 64)
    assert out["labels/cells"].shards == (64, 128, 128)
    assert out["labels/tiny"].shards is None
    assert out["labels/cells"].metadata.dimension_names == ("z", "y", "x")
    for name, values in data.items():
        assert_same(np.asarray(out[name][...]), values)
    assert_same(read_tensorstore(str(target / "raw")), data["raw"])
    assert shardpipe.verify(target).ok


def test_group_command_with_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _v2_group(tmp_path / "acq.zarr")
    config = tmp_path / "shapes.json"
    config.write_text('{"arrays": {"raw": {"shards": [64, 64, 64], "chunks": [32, 32, 32]}}}')
    target = tmp_path / "out.zarr"
    args = ["rechunk", str(tmp_path / "acq.zarr"), str(target), "--recursive", "--no-progress"]
    assert main([*args, "--config", str(config), "--dry-run"]) == 0
    assert "labels/tiny: copied unsharded" in capsys.readouterr().out
    assert not target.exists()
    assert main([*args, "--config", str(config)]) == 0
    assert "total: 2 array(s) rechunked" in capsys.readouterr().out
    assert zarr.open_group(target, mode="r")["raw"].shards == (64, 64, 64)
    assert_same(read_zarr(str(target / "labels/cells")), data["labels/cells"])


# -- memory -------------------------------------------------------------------------

RSS_CHILD = """
import json, sys
import dask, numpy as np, zarr
from numcodecs import Zstd
import shardpipe

source, target, max_mem = sys.argv[1:4]
shape = (128, 256, 256)
array = zarr.create_array(source, shape=shape, chunks=(1, 256, 256), dtype="uint16",
                          zarr_format=2, compressors=Zstd(level=1))
rng = np.random.default_rng(0)
for z in range(0, shape[0], 16):
    array[z:z + 16] = rng.integers(0, 4000, (16, 256, 256), dtype="uint16")

def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

with dask.config.set(scheduler="sync"):  # one task at a time: a worker with one thread
    shardpipe.rechunk(source, target + "-warm", shards=(32, 64, 64), chunks=(16, 32, 32))
    job = shardpipe.plan_rechunk(source, target, shards=(128, 128, 128), chunks=(32, 64, 64),
                                 max_mem=max_mem)
    del array, rng
    baseline = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    job.execute()
    peak = status("VmHWM")
print(json.dumps({"measured": peak - baseline, "block": job.write.plan.block_nbytes,
                  "parts": job.write.plan.max_parts_per_shard,
                  "amplification": job.cost.amplification}))
"""

SLACK = 24 << 20
"""Interpreter, allocator and library noise allowed above max_mem (as in test_memory_model)."""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status (Linux only)")
def test_peak_rss_of_a_rechunk_stays_under_max_mem(tmp_path: Path, fork_server: ForkServer) -> None:
    max_mem = 12 << 20  # 16 MiB of 128 KiB slabs into 4 MiB shards
    args = [str(tmp_path / "src.zarr"), str(tmp_path / "out.zarr"), str(max_mem)]
    done = fork_server.run(RSS_CHILD, args, timeout=300)
    assert done.returncode == 0, done.stderr()
    result = json.loads(done.stdout().strip().splitlines()[-1])
    print(f"rechunk peak above baseline: {result['measured'] / 2**20:.1f} MiB, max_mem 12 MiB")
    assert result["amplification"] == 1.0
    # what a task holds is under max_mem; the scheduler may keep one more block for later
    assert result["measured"] <= max_mem + result["block"] + SLACK, result
    assert result["measured"] >= max_mem // 4, result  # the measurement is not vacuous


@pytest.mark.s3
def test_s3_source_and_target(s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    bucket, options = s3_bucket
    data = _data((30, 40, 50))
    local = _v2(tmp_path / "v2.zarr", data, chunks=(1, 40, 50), fill_value=-1)
    source_url = f"s3://{bucket}/src.zarr"
    copy = zarr.create_array(
        source_url,
        shape=data.shape,
        dtype=data.dtype,
        chunks=(1, 40, 50),
        zarr_format=2,
        fill_value=-1,
        storage_options=options,
    )
    copy[...] = np.asarray(zarr.open_array(local, mode="r")[...])
    target_url = f"s3://{bucket}/out.zarr"
    out = shardpipe.rechunk(
        source_url,
        target_url,
        shards=(16, 20, 25),
        chunks=(8, 10, 25),
        storage_options=options,
        source_storage_options=options,
    )
    assert isinstance(out, zarr.Array)
    back = zarr.open_array(target_url, mode="r", storage_options=options)
    assert_same(np.asarray(back[...]), data)
    assert back.metadata.fill_value == -1
    assert shardpipe.verify(target_url, storage_options=options).ok


# -- two passes through an intermediate copy ----------------------------------------


def test_thin_blocks_go_through_an_intermediate_copy(tmp_path: Path) -> None:
    data = _data((64, 128, 128), "uint16")
    source = _v2(tmp_path / "v2.zarr", data, chunks=(1, 128, 128))
    target, temp = tmp_path / "out.zarr", tmp_path / "scratch.zarr"
    kwargs: dict[str, Any] = {"shards": (64, 128, 128), "chunks": (16, 32, 32), "max_mem": "1MB"}
    one_pass = shardpipe.plan_rechunk(source, target, **kwargs)
    assert one_pass.straddles and one_pass.intermediate is None
    # what one pass holds between tasks (1 MiB here) is within 1.5 x max_mem: it stays one pass
    assert "held until its parts are written: 1.0 MiB between tasks" in repr(one_pass)
    job = shardpipe.plan_rechunk(source, target, temp_store=temp, **kwargs)
    assert job.intermediate is not None
    assert job.intermediate.block_shape[0] < 16  # pass 1: thinner than an inner chunk
    assert all(b % c == 0 for b, c in zip(job.block_shape, (16, 32, 32), strict=True))
    assert "deleted afterwards" in repr(job)
    assert not target.exists() and not temp.exists()  # planning writes nothing
    job.execute()
    assert_same(read_tensorstore(str(target)), data)
    assert not temp.exists()
    assert shardpipe.verify(target).ok
    with pytest.raises(InvalidArgumentError, match="compute"):
        shardpipe.rechunk(source, tmp_path / "b.zarr", temp_store=temp, compute=False, **kwargs)


def test_command_with_a_temp_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _data((64, 128, 128), "uint16")
    source = _v2(tmp_path / "v2.zarr", data, chunks=(1, 128, 128))
    target = tmp_path / "out.zarr"
    args = ["rechunk", str(source), str(target), "--shards", "64,128,128", "--chunks", "16,32,32"]
    args += ["--max-mem", "1MB", "--temp-store", str(tmp_path / "tmp.zarr"), "--no-progress"]
    assert main(args) == 0
    assert "pass 1 reads the source" in capsys.readouterr().out
    assert_same(read_zarr(str(target)), data)
    assert not (tmp_path / "tmp.zarr").exists()
