"""Sharded Neuroglancer precomputed volumes: written by shardpipe, read by tensorstore; and back.

tensorstore's ``neuroglancer_precomputed`` driver is the independent reader
(and writer, for the golden volumes decoded by shardpipe's own index reader).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given, settings
from hypothesis import strategies as st

import shardpipe
from shardpipe.core.morton import morton_ids
from shardpipe.core.precomputed_plan import ScaleGrid, shards_of
from shardpipe.errors import InvalidArgumentError, MemoryBudgetError
from shardpipe.formats.base import ShardFormat, assemble_shard
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_shards import ScatteredShard, listed_shard_format
from shardpipe.precomputed.auto_sharding import auto_sharding
from tests.support.examples import scaled
from tests.support.fork_server import ForkServer, wait_for_word

SPEC = "neuroglancer_uint64_sharded_v1"


def _read_ts(path: Path) -> np.ndarray:
    store = ts.open(
        {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": str(path)}}
    ).result()
    return np.asarray(store.read().result())


def _volume(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(0, min(info.max, 2**62), shape, dtype=dtype, endpoint=True)


def _shard_chunks(
    raw: bytes, file: Path, scale: ScaleGrid, sharding: PrecomputedSharding
) -> dict[int, tuple[int, int]]:
    """Chunk id to ``(start, stop)`` of every chunk of the shard ``file``, by shardpipe's reader."""
    number = int(file.stem, 16)
    shard_format = listed_shard_format(scale, sharding, number, lambda a, b: raw[a:b], len(raw))
    index, _ = shard_format.read_index(lambda a, b: raw[a:b], len(raw), shard=(number,))
    slots = np.flatnonzero(index.stored())
    ids = shard_format.ids((number,), slots)
    return {
        int(i): (int(a), int(a + n)) for i, (a, n) in zip(ids, index.entries[slots], strict=True)
    }


def _sharding(
    hash_: str, encoding: str, preshift: int = 1, minishard: int = 2, shard: int = 3
) -> dict[str, Any]:
    return {
        "@type": SPEC,
        "preshift_bits": preshift,
        "hash": hash_,
        "minishard_bits": minishard,
        "shard_bits": shard,
        "minishard_index_encoding": encoding,
        "data_encoding": encoding,
    }


@pytest.mark.parametrize(
    ("dtype", "channels"),
    [("uint8", 1), ("uint16", 2), ("uint32", 3), ("uint64", 1), ("float32", 4)],
)
@pytest.mark.parametrize("sharding", ["auto", "murmurhash-gzip", "identity-raw"])
def test_written_volumes_read_back_with_tensorstore(
    tmp_path: Path, dtype: str, channels: int, sharding: str
) -> None:
    data = _volume((45, 38, 21, channels), dtype)
    spec: Any = "auto"
    if sharding != "auto":
        hash_, encoding = sharding.split("-")
        spec = _sharding("murmurhash3_x86_128" if hash_ == "murmurhash" else "identity", encoding)
    source = da.from_array(data, chunks=(17, 13, 21, channels))  # straddling the chunks
    report = shardpipe.to_neuroglancer_precomputed(
        source,
        tmp_path / "vol",
        resolution=(4, 4, 40),
        chunk_size=(16, 16, 8),
        voxel_offset=(3, 0, 7),
        sharding=spec,
    )
    assert isinstance(report, shardpipe.WriteReport)
    assert report.chunks_stored == 3 * 3 * 3  # every chunk, edge chunks truncated
    info = json.loads((tmp_path / "vol" / "info").read_text())
    assert info["scales"][0]["voxel_offset"] == [3, 0, 7]
    assert info["num_channels"] == channels and info["data_type"] == dtype
    np.testing.assert_array_equal(_read_ts(tmp_path / "vol"), data, strict=True)
    np.testing.assert_array_equal(_read_cloudvolume(tmp_path / "vol"), data, strict=True)


def _read_cloudvolume(path: Path, mip: int = 0) -> np.ndarray:
    from cloudvolume import CloudVolume

    volume = CloudVolume(f"file://{path}", mip=mip, progress=False, fill_missing=False)
    return np.asarray(volume[:, :, :])


def test_channels_in_separate_blocks(tmp_path: Path) -> None:
    data = _volume((30, 20, 10, 3), "uint8", seed=16)
    shardpipe.to_neuroglancer_precomputed(
        da.from_array(data, chunks=(16, 16, 10, 1)),  # one Dask block per channel
        tmp_path / "vol",
        resolution=(1, 1, 1),
        chunk_size=(8, 8, 8),
    )
    np.testing.assert_array_equal(_read_ts(tmp_path / "vol"), data, strict=True)


def test_a_three_dimensional_source_and_a_zyx_volume(tmp_path: Path) -> None:
    zyx = _volume((20, 30, 40), "uint8")
    shardpipe.to_neuroglancer_precomputed(
        da.from_array(zyx, chunks=9).transpose(2, 1, 0),
        tmp_path / "vol",
        resolution=(8, 8, 8),
        chunk_size=(8, 8, 8),
    )
    back = _read_ts(tmp_path / "vol")
    assert back.shape == (40, 30, 20, 1)
    np.testing.assert_array_equal(back[..., 0], zyx.transpose(2, 1, 0))


def test_volumes_written_by_tensorstore_decode_with_shardpipe(tmp_path: Path) -> None:
    data = _volume((37, 29, 19, 2), "uint16", seed=4)
    for n, (hash_, encoding) in enumerate(
        [("identity", "raw"), ("identity", "gzip"), ("murmurhash3_x86_128", "gzip")]
    ):
        path = tmp_path / f"ts{n}"
        spec = _sharding(hash_, encoding, preshift=0, minishard=2, shard=2)
        store = ts.open(
            {
                "driver": "neuroglancer_precomputed",
                "kvstore": {"driver": "file", "path": str(path)},
                "multiscale_metadata": {"type": "image", "data_type": "uint16", "num_channels": 2},
                "scale_metadata": {
                    "size": [37, 29, 19],
                    "resolution": [1, 1, 1],
                    "encoding": "raw",
                    "chunk_size": [8, 8, 8],
                    "sharding": spec,
                },
                "create": True,
            }
        ).result()
        store.write(data).result()
        sharding = PrecomputedSharding.from_json(spec)
        scale = ScaleGrid((37, 29, 19), (8, 8, 8))
        seen = 0
        for shard_file in sorted((path / "1_1_1").iterdir()):
            raw = shard_file.read_bytes()
            chunks = _shard_chunks(raw, shard_file, scale, sharding)
            ids = np.array(sorted(chunks), dtype=np.uint64)
            assert (sharding.locate(ids)[0] == int(shard_file.stem, 16)).all()
            for chunk_id, (start, stop) in chunks.items():
                coords = _coords_of(chunk_id, scale)
                box = scale.chunk_box(coords)
                expected = data[(*box, slice(None))]
                stored = sharding.decode_chunk(raw[start:stop], 1 << 30)
                assert stored == expected.tobytes(order="F"), (hash_, chunk_id)
                seen += 1
        assert seen == 5 * 4 * 3


def _coords_of(chunk_id: int, scale: ScaleGrid) -> tuple[int, ...]:
    coords = scale.all_coords()
    ids = morton_ids(coords, scale.grid)
    return tuple(int(v) for v in coords[int(np.flatnonzero(ids == chunk_id)[0])])


@settings(max_examples=scaled(30), deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**40), st.binary(max_size=40)),
        max_size=30,
        unique_by=lambda t: t[0],
    ),
    st.integers(0, 4),
    st.sampled_from(["raw", "gzip"]),
    st.sampled_from(["identity", "murmurhash3_x86_128"]),
)
def test_shard_files_round_trip(
    chunks: list[tuple[int, bytes]], minishard_bits: int, encoding: str, hash_: str
) -> None:
    sharding = PrecomputedSharding(
        preshift_bits=0,
        minishard_bits=minishard_bits,
        shard_bits=0,
        hash=hash_,
        minishard_index_encoding=encoding,
        data_encoding=encoding,
    )
    members = np.array(sorted(i for i, _ in chunks), dtype=np.uint64)
    shard_format: ShardFormat = ScatteredShard(sharding, (1, 1, 1), 0, members)
    by_id = dict(chunks)
    stored = [(k, sharding.encode_data(by_id[int(i)])) for k, i in enumerate(members)]
    raw = b"".join(bytes(b) for b in assemble_shard(shard_format, stored, shard=(0,)))
    index, _ = shard_format.read_index(lambda a, b: raw[a:b], len(raw), shard=(0,))
    assert index.stored().all()
    for k, (start, nbytes) in enumerate(index.entries.tolist()):
        assert sharding.decode_chunk(raw[start : start + nbytes], 1 << 30) == by_id[int(members[k])]


def test_auto_shards_are_boxes_within_the_budget() -> None:
    scale = ScaleGrid((1000, 700, 300), (64, 64, 64))
    chunk_nbytes = 64**3
    spec = auto_sharding(scale, chunk_nbytes, 32 * 2**20)
    assert spec.hash == "identity" and spec.preshift_bits <= 6
    assert spec.index_nbytes <= 8192
    shards = list(shards_of(scale, spec))
    assert all(s.box is not None for s in shards)
    assert max(len(s.ids) for s in shards) * chunk_nbytes <= 32 * 2**20
    assert len({s.shard for s in shards}) == len(shards)  # one box per shard
    assert sum(len(s.ids) for s in shards) == math.prod(scale.grid)
    large = auto_sharding(ScaleGrid((2**14,) * 3, (16, 16, 16)), 4096, 2**40)
    assert large.minishard_bits == 9 and large.index_nbytes == 8192  # capped
    assert large.preshift_bits + large.minishard_bits + large.shard_bits == 30


@pytest.mark.cluster
def test_on_a_local_cluster(tmp_path: Path, cluster_client: Any) -> None:
    data = _volume((64, 48, 40, 1), "uint16", seed=8)
    shardpipe.to_neuroglancer_precomputed(
        da.from_array(data, chunks=(21, 17, 40, 1)),
        tmp_path / "vol",
        resolution=(1, 1, 1),
        chunk_size=(16, 16, 16),
        sharding=_sharding("murmurhash3_x86_128", "gzip"),
    )
    np.testing.assert_array_equal(_read_ts(tmp_path / "vol"), data)


def test_bad_input_writes_nothing(tmp_path: Path) -> None:
    source = da.zeros((20, 20, 20), dtype="uint16", chunks=10)
    good: dict[str, Any] = {"resolution": (1, 1, 1), "chunk_size": (8, 8, 8)}
    cases: list[tuple[dict[str, Any], str, type[Exception]]] = [
        ({"chunk_size": (8, 0, 8)}, "chunk_size", InvalidArgumentError),
        ({"chunk_size": (8, 8)}, "chunk_size", InvalidArgumentError),
        ({"resolution": (1, -1, 1)}, "resolution", InvalidArgumentError),
        ({"scales": [(1, 1, 1), (3, 2, 1), (2, 2, 1)]}, "scales", InvalidArgumentError),
        ({"scales": [(2, 2, 1)]}, "scales", InvalidArgumentError),
        ({"scales": [(1, 1, 1), (1.5, 2, 1)]}, "scales", InvalidArgumentError),
        ({"downsample": "median"}, "downsample", InvalidArgumentError),
        ({"encoding": "jpeg"}, "encoding", InvalidArgumentError),  # uint16
        ({"volume_type": "mesh"}, "volume_type", InvalidArgumentError),
        (
            {
                "sharding": {
                    "@type": SPEC,
                    "preshift_bits": 0,
                    "hash": "identity",
                    "minishard_bits": 40,
                    "shard_bits": 30,
                }
            },
            "sharding",
            InvalidArgumentError,
        ),
        (
            {
                "sharding": {
                    "@type": SPEC,
                    "preshift_bits": 0,
                    "hash": "md5",
                    "minishard_bits": 1,
                    "shard_bits": 1,
                }
            },
            "sharding",
            InvalidArgumentError,
        ),
        ({"max_mem": 1000}, "max_mem", MemoryBudgetError),
        (  # one shard of 2**12 chunk ids: its index alone passes max_mem
            {
                "chunk_size": (1, 1, 1),
                "max_mem": 100_000,
                "sharding": {
                    "@type": SPEC,
                    "preshift_bits": 9,
                    "hash": "identity",
                    "minishard_bits": 3,
                    "shard_bits": 1,
                },
            },
            "index alone",
            MemoryBudgetError,
        ),
    ]
    for kwargs, parameter, error in cases:
        with pytest.raises(error) as caught:
            shardpipe.to_neuroglancer_precomputed(source, tmp_path / "vol", **{**good, **kwargs})
        assert parameter in str(caught.value), (kwargs, caught.value)
        assert not (tmp_path / "vol").exists(), kwargs
    with pytest.raises(InvalidArgumentError, match="dtype int16"):
        shardpipe.to_neuroglancer_precomputed(source.astype("int16"), tmp_path / "vol", **good)
    shardpipe.to_neuroglancer_precomputed(source, tmp_path / "vol", **good)
    with pytest.raises(shardpipe.errors.ArrayExistsError):
        shardpipe.to_neuroglancer_precomputed(source + 1, tmp_path / "vol", **good)
    np.testing.assert_array_equal(_read_ts(tmp_path / "vol")[..., 0], np.zeros((20, 20, 20)))


@pytest.mark.parametrize(("volume_type", "dtype"), [("image", "uint8"), ("segmentation", "uint64")])
def test_a_pyramid_from_one_graph(tmp_path: Path, volume_type: str, dtype: str) -> None:
    from shardpipe.core.downsample import downsample_block

    data = _volume((70, 45, 22, 1), dtype, seed=5)
    if volume_type == "segmentation":
        data = (data % 7).astype(dtype)  # few labels, so that modes matter
    calls = []

    def counted(block: np.ndarray) -> np.ndarray:
        calls.append(block.shape)
        return block

    source = da.from_array(data, chunks=(19, 23, 22, 1)).map_blocks(counted, dtype=data.dtype)
    factors = [(1, 1, 1), (2, 2, 1), (4, 4, 2)]
    with dask.config.set(scheduler="threads"):  # counted in this process
        shardpipe.to_neuroglancer_precomputed(
            source,
            tmp_path / "vol",
            resolution=(4, 4, 40),
            chunk_size=(8, 8, 8),
            volume_type=volume_type,
            scales=factors,
        )
    computed = [shape for shape in calls if 0 not in shape]  # not Dask's meta probe
    assert len(computed) == source.npartitions  # every block computed once for all scales
    info = json.loads((tmp_path / "vol" / "info").read_text())
    assert [s["key"] for s in info["scales"]] == ["4_4_40", "8_8_40", "16_16_80"]
    method = "mode" if volume_type == "segmentation" else "mean"
    expected = data
    previous = (1, 1, 1)
    for scale, factor in zip(info["scales"], factors, strict=True):
        step = tuple(f // p for f, p in zip(factor, previous, strict=True))
        expected, previous = downsample_block(expected, step, method), factor
        store = ts.open(
            {
                "driver": "neuroglancer_precomputed",
                "kvstore": {"driver": "file", "path": str(tmp_path / "vol")},
                "scale_index": info["scales"].index(scale),
            }
        ).result()
        assert scale["size"] == list(expected.shape[:3])
        np.testing.assert_array_equal(np.asarray(store.read().result()), expected, strict=True)
        mip = info["scales"].index(scale)
        np.testing.assert_array_equal(_read_cloudvolume(tmp_path / "vol", mip), expected)


def test_verify_and_info_read_precomputed_volumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardpipe.cli.parser import main

    data = _volume((40, 40, 24, 1), "uint16", seed=9)
    path = tmp_path / "vol"
    shardpipe.to_neuroglancer_precomputed(
        da.from_array(data, chunks=20),
        path,
        resolution=(1, 1, 1),
        chunk_size=(8, 8, 8),
        sharding=_sharding("identity", "gzip", preshift=2, minishard=2, shard=4),
        scales=[(1, 1, 1), (2, 2, 2)],
    )
    report = shardpipe.verify(path)
    assert report.ok, report
    assert [s.chunks_present for s in report.scales] == [5 * 5 * 3, 3 * 3 * 2]
    assert main(["verify", str(path)]) == 0
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1_1_1: size [40, 40, 24]" in out and "2_2_2: size [20, 20, 12]" in out
    shards = sorted((path / "1_1_1").iterdir())
    # a shard renamed to another shard's number: its chunks hash elsewhere
    shards[0].rename(path / "1_1_1" / "f.shard")
    # a chunk's gzip'd bytes damaged
    damaged = bytearray(shards[1].read_bytes())
    spec = PrecomputedSharding.from_json(_sharding("identity", "gzip", 2, 2, 4))
    chunks = spec.read_minishards(lambda a, b: bytes(damaged[a:b]), len(damaged))
    _, start, _ = next(iter(chunks.values()))[0]
    damaged[start + 10 : start + 14] = b"\xff\xff\xff\xff"
    shards[1].write_bytes(bytes(damaged))
    shards[2].write_bytes(shards[2].read_bytes()[:40])  # cut inside its shard index
    (path / "1_1_1" / "notes.txt").write_text("stray")
    report = shardpipe.verify(path)
    assert not report.ok
    problems = "\n".join(report.scales[0].problems)
    assert "is not a chunk of this shard" in problems, problems
    assert "does not decode" in problems or "bytes, its box holds" in problems, problems
    assert "shorter than its" in problems, problems
    assert "notes.txt: not a shard file" in problems, problems
    assert report.scales[1].n_problems == 0
    assert main(["verify", str(path)]) == 1


def test_volumes_written_by_cloudvolume_verify_and_decode(tmp_path: Path) -> None:
    from cloudvolume import CloudVolume

    data = _volume((64, 64, 32), "uint8", seed=10)
    spec = _sharding("identity", "gzip", preshift=3, minishard=3, shard=2)
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type="image",
        data_type="uint8",
        encoding="raw",
        resolution=[1, 1, 1],
        voxel_offset=[0, 0, 0],
        chunk_size=[8, 8, 8],
        volume_size=[64, 64, 32],
    )
    info["scales"][0]["sharding"] = spec
    volume = CloudVolume(f"file://{tmp_path / 'cv'}", info=info, progress=False)
    volume.commit_info()
    for x in (0, 32):
        for y in (0, 32):  # shard boxes: 2^6 chunks = 4 x 4 x 4 chunks of 8
            volume[x : x + 32, y : y + 32, 0:32] = data[x : x + 32, y : y + 32, 0:32]
    report = shardpipe.verify(tmp_path / "cv")
    assert report.ok and report.scales[0].chunks_present == 8 * 8 * 4, report
    sharding = PrecomputedSharding.from_json(spec)
    scale = ScaleGrid((64, 64, 32), (8, 8, 8))
    for shard_file in (tmp_path / "cv" / "1_1_1").iterdir():
        raw = shard_file.read_bytes()
        for chunk_id, (start, stop) in _shard_chunks(raw, shard_file, scale, sharding).items():
            box = scale.chunk_box(_coords_of(chunk_id, scale))
            assert sharding.decode_chunk(raw[start:stop], 1 << 30) == data[box].tobytes(order="F")


def test_unsharded_scales_written_by_cloudvolume_are_checked(tmp_path: Path) -> None:
    from cloudvolume import CloudVolume

    data = _volume((40, 24, 16), "uint16", seed=12)
    info = CloudVolume.create_new_info(
        num_channels=1,
        layer_type="image",
        data_type="uint16",
        encoding="raw",
        resolution=[1, 1, 1],
        voxel_offset=[8, 0, 4],
        chunk_size=[16, 16, 16],
        volume_size=[40, 24, 16],
    )
    volume = CloudVolume(f"file://{tmp_path / 'cv'}", info=info, progress=False)
    volume.commit_info()
    volume[8:48, 0:24, 4:20] = data  # gzip'd chunk files (.gz), named with the offset
    report = shardpipe.verify(tmp_path / "cv")
    assert report.ok and report.scales[0].chunks_present == 3 * 2 * 1, report
    assert "unsharded" in str(report)
    scale = tmp_path / "cv" / "1_1_1"
    files = sorted(scale.iterdir())
    assert files[0].name.endswith(".gz")
    files[0].write_bytes(files[0].read_bytes()[:20])  # cut
    (scale / "0-16_0-16_0-16.gz").write_bytes(b"")  # a chunk the offset grid does not have
    report = shardpipe.verify(tmp_path / "cv")
    problems = "\n".join(report.scales[0].problems)
    assert report.scales[0].n_problems == 2, problems
    assert "does not gunzip" in problems and "not a chunk file" in problems


@pytest.mark.parametrize(
    ("encoding", "dtype", "channels"),
    [
        ("compressed_segmentation", "uint32", 1),
        ("compressed_segmentation", "uint64", 1),
        ("compressed_segmentation", "uint32", 2),
        ("compressed_segmentation", "uint64", 4),
        ("jpeg", "uint8", 1),
        ("jpeg", "uint8", 3),
    ],
)
def test_jpeg_and_compressed_segmentation_chunks(
    tmp_path: Path, encoding: str, dtype: str, channels: int
) -> None:
    rng = np.random.default_rng(11)
    if encoding == "jpeg":  # smooth, so that the lossy round trip stays close
        x = np.linspace(0, 3, 45)[:, None, None, None]
        y = np.linspace(0, 2, 38)[None, :, None, None]
        z = np.linspace(0, 1, 21)[None, None, :, None]
        c = np.arange(channels)[None, None, None, :]
        data = (120 + 60 * np.sin(x + y + z + c)).astype(dtype)
    else:
        data = (rng.integers(0, 5, (45, 38, 21, channels)) * 1_000_003).astype(dtype)
        data += np.arange(channels, dtype=dtype) * 7  # channels differ
    path = tmp_path / "vol"
    shardpipe.to_neuroglancer_precomputed(
        da.from_array(data, chunks=(17, 13, 21, channels)),
        path,
        resolution=(4, 4, 40),
        chunk_size=(16, 16, 8),
        encoding=encoding,
        volume_type="segmentation" if encoding != "jpeg" else "image",
        sharding=_sharding("murmurhash3_x86_128", "gzip"),
    )
    by_tensorstore = _read_ts(path)
    if channels == 1 or encoding != "jpeg":  # cloud-volume 12.15 reads 3-channel jpeg chunks
        # in another pixel order
        np.testing.assert_array_equal(by_tensorstore, _read_cloudvolume(path))
    if encoding == "jpeg":
        assert np.abs(by_tensorstore.astype(int) - data.astype(int)).mean() < 3
    else:
        np.testing.assert_array_equal(by_tensorstore, data, strict=True)
    report = shardpipe.verify(path)
    assert report.ok, report


def test_encodings_the_data_cannot_take_are_refused(tmp_path: Path) -> None:
    good: dict[str, Any] = {"resolution": (1, 1, 1), "chunk_size": (8, 8, 8)}
    for dtype, channels, encoding, words in [
        ("uint16", 1, "jpeg", "uint8 images of 1 or 3 channels"),
        ("uint8", 2, "jpeg", "uint8 images of 1 or 3 channels"),
        ("uint8", 1, "compressed_segmentation", "uint32 or uint64"),
        ("uint8", 1, "png", "not a precomputed chunk encoding"),
    ]:
        source = da.zeros((16, 16, 16, channels), dtype=dtype, chunks=8)
        with pytest.raises(InvalidArgumentError, match=words) as caught:
            shardpipe.to_neuroglancer_precomputed(
                source, tmp_path / "vol", encoding=encoding, **good
            )
        assert caught.value.parameter == "encoding"
        assert not (tmp_path / "vol").exists()


def test_command_line_write_precomputed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import zarr

    from shardpipe.cli.parser import main

    zyx = _volume((21, 38, 45), "uint16", seed=12)
    source = zarr.create_array(
        tmp_path / "src.zarr", shape=zyx.shape, chunks=(7, 20, 45), dtype="u2"
    )
    source[...] = zyx
    out = tmp_path / "vol"
    argv = ["write-precomputed", str(tmp_path / "src.zarr"), str(out), "--resolution", "4,4,40"]
    assert main([*argv, "--chunk-size", "0,16,8"]) == 2
    assert "chunk_size" in capsys.readouterr().err and not out.exists()
    assert main([*argv, "--chunk-size", "16,16,8", "--sharding", "{nope"]) == 2
    assert "--sharding" in capsys.readouterr().err and not out.exists()
    done = [*argv, "--chunk-size", "16,16,8", "--zyx", "--scales", "1,1,1:2,2,1", "--no-progress"]
    assert main(done) == 0, capsys.readouterr().err
    assert "shard(s) written" in capsys.readouterr().out
    np.testing.assert_array_equal(_read_ts(out)[..., 0], zyx.transpose(2, 1, 0))
    assert main(["verify", str(out)]) == 0
    assert main(done) == 2  # the volume exists: --overwrite replaces it
    assert "overwrite" in capsys.readouterr().err


IDENTITY_PARTS = _sharding("identity", "gzip", preshift=3, minishard=3, shard=2)


def _part_written(
    path: Path | str, data: np.ndarray, sharding: dict[str, Any] = IDENTITY_PARTS, **kwargs: Any
) -> Any:
    return shardpipe.to_neuroglancer_precomputed(
        da.from_array(data, chunks=(40, 24, 64, 1)),
        path,
        resolution=(1, 1, 1),
        chunk_size=(16, 16, 16),
        sharding=sharding,
        max_mem="600KB",  # a shard (about 64 chunks of 8 KiB, held 3 times) does not fit
        **kwargs,
    )


@pytest.mark.parametrize(
    "sharding",
    [IDENTITY_PARTS, _sharding("murmurhash3_x86_128", "gzip", preshift=0, minishard=2, shard=1)],
    ids=["identity-boxes", "murmurhash-scattered"],
)
def test_shards_larger_than_max_mem_are_written_in_parts(
    tmp_path: Path, sharding: dict[str, Any]
) -> None:
    data = _volume((128, 64, 64, 1), "uint16", seed=13)
    names: list[str] = []

    def record(key: Any, *args: Any) -> None:
        names.append(str(key[0] if isinstance(key, tuple) else key))

    from dask.callbacks import Callback

    with dask.config.set(scheduler="threads"), Callback(pretask=record):
        report = _part_written(tmp_path / "vol", data, sharding)
    assert report.shards == 2 and report.chunks_stored == 128
    spec = PrecomputedSharding.from_json(sharding)
    shards = list(shards_of(ScaleGrid((128, 64, 64), (16, 16, 16)), spec))
    runs = sum(-(-len(s.ids) // 16) for s in shards)  # runs of 16 chunks: 24 KiB each in 600 KB
    assert sum(n.startswith("write-precomputed-part") for n in names) == runs >= 2 * 4
    assert sum(n.startswith("stamp-precomputed-shard") for n in names) == 2
    np.testing.assert_array_equal(_read_ts(tmp_path / "vol"), data, strict=True)
    np.testing.assert_array_equal(_read_cloudvolume(tmp_path / "vol"), data)
    assert shardpipe.verify(tmp_path / "vol").ok
    assert not (tmp_path / "vol" / ".shardpipe").exists() or not any(
        (tmp_path / "vol" / ".shardpipe").rglob("*")
    )


@pytest.mark.s3
def test_parts_on_s3_are_padded_to_its_minimum(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, options = s3_bucket
    data = _volume((64, 64, 64, 1), "uint16", seed=14)
    url = f"s3://{bucket}/vol"
    report = _part_written(url, data, storage_options=options)
    assert report.shards == 1
    endpoint = options["client_kwargs"]["endpoint_url"]
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "s3", "bucket": bucket, "path": "vol/", "endpoint": endpoint},
        }
    ).result()
    np.testing.assert_array_equal(np.asarray(store.read().result()), data, strict=True)
    assert shardpipe.verify(url, storage_options=options).ok


def test_scattered_shards_receive_encoded_chunks(tmp_path: Path) -> None:
    from dask.callbacks import Callback

    from shardpipe.precomputed.tasks import BlockChunks

    data = _volume((64, 64, 48, 1), "uint16", seed=15)
    shares: list[BlockChunks] = []

    def keep(key: Any, result: Any, *args: Any) -> None:
        if str(key).startswith("pick-precomputed-chunks"):
            shares.append(result)

    for blocks, straddling in [((32, 32, 16, 1), False), ((24, 40, 16, 1), True)]:
        shares.clear()
        with dask.config.set(scheduler="threads"), Callback(posttask=keep):
            shardpipe.to_neuroglancer_precomputed(
                da.from_array(data, chunks=blocks),
                tmp_path / f"vol{straddling}",
                resolution=(1, 1, 1),
                chunk_size=(16, 16, 16),
                sharding=_sharding("murmurhash3_x86_128", "gzip"),
            )
        encoded = sum(len(v) for s in shares for v in s.encoded.values())
        pieces = sum(len(v) for s in shares for v in s.pieces.values())
        assert shares
        if not straddling:  # blocks made of whole chunks: only encoded bytes travel
            assert pieces == 0 and encoded == 4 * 4 * 3
        else:
            assert pieces > 0 and encoded < 4 * 4 * 3
        np.testing.assert_array_equal(_read_ts(tmp_path / f"vol{straddling}"), data)


def test_a_killed_write_leaves_complete_shards(tmp_path: Path, fork_server: ForkServer) -> None:
    import time

    from tests.support.precomputed_crash_child import volume

    path, progress = tmp_path / "vol", tmp_path / "progress"
    child = fork_server.start("tests.support.precomputed_crash_child", [str(path), str(progress)])
    try:
        wait_for_word(progress, ".", child)  # the write has started
        deadline = time.monotonic() + 60
        while not list((path / "1_1_1").glob("*.shard")):  # the first shard is out
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
    finally:
        child.kill()
        child.wait()
    report = shardpipe.verify(path)
    assert not report.ok and len(report.problems) == 1, report  # the volume is unfinished,
    assert "unfinished write" in report.problems[0], report
    assert report.scales[0].n_problems == 0, report  # but every shard file present is complete
    present = report.scales[0].shards_present
    assert 0 < present < 4, report  # killed mid-write: some of the 4 shards out, not all
    data, back = volume(), _read_ts(path)
    complete = 0
    for x, y in itertools.product((0, 64), (0, 64)):  # each shard: 4 x 4 x 4 chunks of 16
        got, want = back[x : x + 64, y : y + 64], data[x : x + 64, y : y + 64]
        if got.any():
            np.testing.assert_array_equal(got, want)  # a shard present is complete
            complete += 1
    assert complete == present


def _read_scale(path: Path, scale: int) -> np.ndarray:
    store = ts.open(
        {
            "driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(path)},
            "scale_index": scale,
        }
    ).result()
    return np.asarray(store.read().result())


@pytest.mark.parametrize(
    ("dtype", "value"),
    [("uint64", 2**63), ("uint64", 2**64 - 1), ("uint32", 2**32 - 1), ("float32", np.inf)],
)
def test_a_pyramid_at_the_top_of_the_range(tmp_path: Path, dtype: str, value: Any) -> None:
    """Issue 32: a uint64 volume of 2**63 raised a raw OverflowError mid-write."""
    data = np.full((64, 64, 64), value, dtype=dtype)
    shardpipe.to_neuroglancer_precomputed(
        data,
        tmp_path / "vol",
        resolution=(1, 1, 1),
        chunk_size=(32, 32, 32),
        scales=[(1, 1, 1), (2, 2, 2)],
    )
    for scale, size in ((0, 64), (1, 32)):
        back = _read_scale(tmp_path / "vol", scale)
        np.testing.assert_array_equal(back, np.full((size, size, size, 1), value, dtype=dtype))
    assert shardpipe.verify(tmp_path / "vol").ok


@pytest.mark.parametrize(
    ("hash_", "shard_bits"), [("murmurhash3_x86_128", 4), ("identity", 4), ("identity", 1)]
)
def test_scattered_shards_of_more_chunks_than_a_plan_lists_are_refused(
    tmp_path: Path, hash_: str, shard_bits: int
) -> None:
    """2**21 chunks in shards that are not boxes: every chunk would be hashed and listed in the
    graph (about 256 bytes each); refused by name, fast, before anything is written."""
    import time
    import tracemalloc

    source = da.zeros((128 * 4,) * 3, dtype="uint8", chunks=128)
    sharding = _sharding(hash_, "gzip", preshift=0, minishard=4, shard=shard_bits)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(InvalidArgumentError, match="2,097,152 chunks") as caught:
            shardpipe.to_neuroglancer_precomputed(
                source,
                tmp_path / "vol",
                resolution=(1, 1, 1),
                chunk_size=(4, 4, 4),
                sharding=sharding,
                compute=False,
            )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.parameter == "sharding" and "sharding='auto'" in str(caught.value)
    assert time.perf_counter() - start < 5 and peak < 32 << 20
    assert not (tmp_path / "vol").exists()
    # boxes (the "auto" rule) plan the same grid without a per-chunk list
    shardpipe.to_neuroglancer_precomputed(
        source, tmp_path / "vol", resolution=(1, 1, 1), chunk_size=(4, 4, 4), compute=False
    )


def test_a_pyramid_that_fails_mid_write_is_never_called_clean(tmp_path: Path) -> None:
    """Issue 32: a pyramid that failed mid-write left its info and some shards, which verify
    called OK. Now the error is a ShardpipeError, and verify reports the unfinished write
    until the volume is written again."""
    import time

    from shardpipe.cli.parser import main

    data = _volume((64, 64, 64, 1), "uint16", seed=3)
    path = tmp_path / "vol"

    def fails_late(block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info is not None and block_info[0]["chunk-location"][:3] == (1, 1, 1):
            deadline = time.monotonic() + 30  # fail once another block's shard is out
            while not list((path / "1_1_1").glob("*.shard")) and time.monotonic() < deadline:
                time.sleep(0.01)
            raise ValueError("a source block could not be read")
        return block

    source = da.from_array(data, chunks=(32, 32, 32, 1)).map_blocks(fails_late, dtype=data.dtype)
    kwargs: dict[str, Any] = {
        "resolution": (1, 1, 1),
        "chunk_size": (16, 16, 16),
        "scales": [(1, 1, 1), (2, 2, 2)],
        "sharding": _sharding("identity", "gzip", preshift=3, minishard=0, shard=3),
    }
    threads = dask.config.set(scheduler="threads", num_workers=4)
    with threads, pytest.raises(shardpipe.ShardpipeError) as caught:
        shardpipe.to_neuroglancer_precomputed(source, path, **kwargs)
    assert "a source block could not be read" in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)
    assert list((path / "1_1_1").glob("*.shard")), "some shards were published before the error"
    for report in (shardpipe.verify(path), shardpipe.info(path)):
        assert not report.ok
        assert "unfinished write" in str(report) and "overwrite=True" in str(report)
    assert main(["verify", str(path)]) == 1
    with pytest.raises(shardpipe.errors.ArrayExistsError, match="unfinished write"):
        shardpipe.to_neuroglancer_precomputed(data, path, **kwargs)
    shardpipe.to_neuroglancer_precomputed(data, path, overwrite=True, **kwargs)
    assert shardpipe.verify(path).ok
    np.testing.assert_array_equal(_read_ts(path), data)


@pytest.mark.parametrize(
    ("volume_type", "dtype", "encoding", "data_encoding"),
    [
        ("image", "uint8", "raw", "gzip"),
        ("image", "float32", "raw", "gzip"),
        ("segmentation", "uint64", "raw", "gzip"),
        ("segmentation", "uint32", "compressed_segmentation", "gzip"),
        ("image", "uint8", "jpeg", "raw"),  # compressed already: gzip would only cost time
    ],
)
def test_volumes_are_compressed_by_default_for_every_reader(
    tmp_path: Path, volume_type: str, dtype: str, encoding: str, data_encoding: str
) -> None:
    """Issue 32: precomputed volumes were written uncompressed by default (671 MB for 512 MB
    of uint8). ``sharding="auto"`` now gzips the chunks in their shards (lossless, decoded by
    every reader of the format); the chunk encoding stays ``raw`` unless asked otherwise."""
    from cloudvolume import CloudVolume

    data = np.zeros((64, 64, 64), dtype=dtype)  # compressible: blocks of a few values
    data[:32] = 7
    data[:, :16] = 3
    kwargs: dict[str, Any] = {"volume_type": volume_type}
    if encoding != "raw":
        kwargs["encoding"] = encoding
    path = tmp_path / "vol"
    shardpipe.to_neuroglancer_precomputed(
        data, path, resolution=(4, 4, 40), chunk_size=(32, 32, 32), **kwargs
    )
    scale = json.loads((path / "info").read_text())["scales"][0]
    assert scale["encoding"] == encoding
    assert scale["sharding"]["data_encoding"] == data_encoding
    stored = sum(f.stat().st_size for f in (path / scale["key"]).iterdir())
    if data_encoding == "gzip":
        assert stored < data.nbytes / 10, stored
    back = _read_ts(path)[..., 0]
    cloud = np.asarray(CloudVolume(f"file://{path}", progress=False)[:, :, :])[..., 0]
    if encoding == "jpeg":  # lossy, but these blocks of one value survive it
        np.testing.assert_allclose(back, data, atol=2)
    else:
        np.testing.assert_array_equal(back, data)
        np.testing.assert_array_equal(cloud, data)
    assert shardpipe.verify(path).ok
