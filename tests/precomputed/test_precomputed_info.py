"""Hostile precomputed ``info`` files: every one refused by name, fast, before anything is read.

Issue 28 found 8 of 30 hostile ``info`` files ending in tracebacks
(``ArrayMemoryError``, ``ZeroDivisionError``, ``IndexError``, ``TypeError``)
and ``key: null`` or ``size: 64.5`` passing as OK. Each row below mutates
one member of a valid volume's ``info``; ``verify``, ``info`` and the
command line must end in a :class:`~shardpipe.errors.ShardpipeError` naming
the file and the member, within a second and a few MB.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardpipe
from shardpipe.errors import MetadataError, ShardpipeError, UnsafeKeyError

SPEC = "neuroglancer_uint64_sharded_v1"
Mutation = Callable[[dict[str, Any]], Any]


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small sharded volume (gzip'd chunks and minishard indexes), two scales."""
    path = tmp_path_factory.mktemp("info") / "vol"
    data = np.arange(32 * 32 * 16, dtype="uint16").reshape(32, 32, 16)
    shardpipe.to_neuroglancer_precomputed(
        data,
        path,
        resolution=(1, 1, 1),
        chunk_size=(8, 8, 8),
        scales=[(1, 1, 1), (2, 2, 2)],
        sharding={
            "@type": SPEC,
            "preshift_bits": 2,
            "hash": "identity",
            "minishard_bits": 2,
            "shard_bits": 3,
            "minishard_index_encoding": "gzip",
            "data_encoding": "gzip",
        },
    )
    return path


def _set(*path: Any, value: Any) -> Mutation:
    def change(info: dict[str, Any]) -> None:
        node = info
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value

    return change


def _del(*path: Any) -> Mutation:
    def change(info: dict[str, Any]) -> None:
        node = info
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]

    return change


def _scale(name: str, value: Any) -> Mutation:
    return _set("scales", 0, name, value=value)


def _sharding(name: str, value: Any) -> Mutation:
    return _set("scales", 0, "sharding", name, value=value)


def _both(*changes: Mutation) -> Mutation:
    def change(info: dict[str, Any]) -> None:
        for one in changes:
            one(info)

    return change


def _duplicate_key(info: dict[str, Any]) -> None:
    info["scales"][1]["key"] = info["scales"][0]["key"]


def _many_scales(info: dict[str, Any]) -> None:
    info["scales"] = [dict(info["scales"][0], key=f"s{i}") for i in range(65)]


# (name, mutation, the member the message names)
HOSTILE: list[tuple[str, Mutation, str]] = [
    ("key null", _scale("key", None), "scales[0].key"),
    ("key missing", _del("scales", 0, "key"), "scales[0].key"),
    ("key ../../secret", _scale("key", "../../secret"), "../../secret"),
    ("key zoneinfo", _scale("key", "../../../../../usr/share/zoneinfo"), "zoneinfo"),
    ("key absolute", _scale("key", "/etc"), "/etc"),
    ("key empty", _scale("key", ""), "scales[0].key"),
    ("key number", _scale("key", 5), "scales[0].key"),
    ("key NUL", _scale("key", "a\x00b"), "NUL"),
    ("key duplicate", _duplicate_key, "scales[1].key"),
    ("size 64.5", _scale("size", [64.5, 32, 16]), "scales[0].size"),
    ("size 64.0", _scale("size", [64.0, 32, 16]), "scales[0].size"),
    ("size true", _scale("size", [True, 32, 16]), "scales[0].size"),
    ("size string", _scale("size", ["32", 32, 16]), "scales[0].size"),
    ("size zero", _scale("size", [0, 32, 16]), "scales[0].size"),
    ("size negative", _scale("size", [-5, 32, 16]), "scales[0].size"),
    ("size two dims", _scale("size", [32, 16]), "scales[0].size"),
    ("size four dims", _scale("size", [32, 32, 16, 1]), "scales[0].size"),
    ("size 2**62", _scale("size", [2**62] * 3), "scales[0].size"),
    ("size null", _scale("size", None), "scales[0].size"),
    (
        "ids past 64 bits",
        _both(_scale("size", [2**23] * 3), _scale("chunk_sizes", [[1, 1, 1]])),
        "chunk ids of 69 bits",
    ),
    ("chunk_sizes empty", _scale("chunk_sizes", []), "scales[0].chunk_sizes"),
    ("chunk_sizes zero", _scale("chunk_sizes", [[0, 8, 8]]), "scales[0].chunk_sizes[0]"),
    ("chunk_sizes flat", _scale("chunk_sizes", [8, 8, 8]), "scales[0].chunk_sizes[0]"),
    ("chunk_sizes float", _scale("chunk_sizes", [[8.5, 8, 8]]), "scales[0].chunk_sizes[0]"),
    (
        "chunk of 8 TiB",
        _both(_scale("size", [2**14] * 3), _scale("chunk_sizes", [[2**14] * 3])),
        "scales[0].chunk_sizes[0]",
    ),
    ("second chunk size", _scale("chunk_sizes", [[8, 8, 8], [8, -8, 8]]), "chunk_sizes[1]"),
    ("voxel_offset float", _scale("voxel_offset", [0.5, 0, 0]), "scales[0].voxel_offset"),
    ("voxel_offset string", _scale("voxel_offset", "x"), "scales[0].voxel_offset"),
    ("voxel_offset 2**60", _scale("voxel_offset", [2**60, 0, 0]), "scales[0].voxel_offset"),
    ("resolution string", _scale("resolution", ["a", 1, 1]), "scales[0].resolution"),
    ("resolution zero", _scale("resolution", [0, 1, 1]), "scales[0].resolution"),
    ("resolution true", _scale("resolution", [True, 1, 1]), "scales[0].resolution"),
    ("resolution two", _scale("resolution", [1, 1]), "scales[0].resolution"),
    ("resolution missing", _del("scales", 0, "resolution"), "scales[0].resolution"),
    ("encoding unknown", _scale("encoding", "bmp"), "scales[0].encoding"),
    ("encoding null", _scale("encoding", None), "scales[0].encoding"),
    (
        "segmentation block missing",
        _scale("encoding", "compressed_segmentation"),
        "compressed_segmentation_block_size",
    ),
    (
        "segmentation block zero",
        _both(
            _scale("encoding", "compressed_segmentation"),
            _scale("compressed_segmentation_block_size", [0, 8, 8]),
        ),
        "compressed_segmentation_block_size",
    ),
    ("data_type complex", _set("data_type", value="complex128"), "data_type"),
    ("data_type object", _set("data_type", value="O"), "data_type"),
    ("data_type int64", _set("data_type", value="int64"), "data_type"),
    ("data_type missing", _del("data_type"), "data_type"),
    ("num_channels zero", _set("num_channels", value=0), "num_channels"),
    ("num_channels string", _set("num_channels", value="1"), "num_channels"),
    ("num_channels float", _set("num_channels", value=1.0), "num_channels"),
    ("num_channels true", _set("num_channels", value=True), "num_channels"),
    ("num_channels 2**40", _set("num_channels", value=2**40), "chunk_sizes[0]"),
    ("type number", _set("type", value=5), "type"),
    ("type mesh", _set("type", value="mesh"), "type"),
    ("@type skeletons", _set("@type", value="neuroglancer_skeletons"), "@type"),
    ("scales null", _set("scales", value=None), "scales"),
    ("scales object", _set("scales", value={"a": 1}), "scales"),
    ("scales empty", _set("scales", value=[]), "scales"),
    ("scale string", _set("scales", value=["x"]), "scales[0]"),
    ("scale null", _set("scales", value=[None]), "scales[0]"),
    ("65 scales", _many_scales, "scales"),
    ("sharding string", _scale("sharding", "yes"), "scales[0].sharding"),
    ("sharding list", _scale("sharding", []), "scales[0].sharding"),
    ("shard_bits 65", _sharding("shard_bits", 65), "shard_bits"),
    ("preshift_bits 2.0", _sharding("preshift_bits", 2.0), "preshift_bits"),
    ("minishard_bits -1", _sharding("minishard_bits", -1), "minishard_bits"),
    ("minishard_bits true", _sharding("minishard_bits", True), "minishard_bits"),
    ("bits past 64", _sharding("minishard_bits", 62), "minishard_bits + shard_bits"),
    ("hash md5", _sharding("hash", "md5"), "hash"),
    ("hash missing", _del("scales", 0, "sharding", "hash"), "hash"),
    ("index encoding zstd", _sharding("minishard_index_encoding", "zstd"), "minishard_index"),
    ("data encoding number", _sharding("data_encoding", 5), "data_encoding"),
    ("sharding @type", _sharding("@type", "neuroglancer_uint64_sharded_v2"), "sharding"),
    ("sharding extra member", _sharding("shards", 4), "shards"),
]


def _write(volume: Path, where: Path, change: Mutation) -> Path:
    shutil.copytree(volume, where)
    info = json.loads((volume / "info").read_text())
    document = copy.deepcopy(info)
    change(document)
    (where / "info").write_text(json.dumps(document))
    return where


@pytest.mark.parametrize(("name", "change", "member"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_info_files_are_refused_by_name(
    volume: Path, tmp_path: Path, name: str, change: Mutation, member: str
) -> None:
    path = _write(volume, tmp_path / "vol", change)
    for function in (shardpipe.verify, shardpipe.info):
        tracemalloc.start()
        start = time.perf_counter()
        try:
            with pytest.raises(ShardpipeError) as caught:
                function(path)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert isinstance(caught.value, MetadataError | UnsafeKeyError), repr(caught.value)
        message = str(caught.value)
        assert "info" in message and member in message, message
        assert time.perf_counter() - start < 2, name
        assert peak < 8 << 20, (name, peak)


@pytest.mark.parametrize("name", ["key ../../secret", "size 64.5", "chunk_sizes zero"])
def test_the_command_line_names_a_hostile_info_in_one_line(
    volume: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    from shardpipe.cli.parser import main

    change = next(h[1] for h in HOSTILE if h[0] == name)
    path = _write(volume, tmp_path / "vol", change)
    for command in ("verify", "info"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in err[0] and "info" in err[0], err


def test_members_shardpipe_does_not_use_are_left_alone(volume: Path, tmp_path: Path) -> None:
    """cloud-volume's infos: no ``@type``, ``mesh``, ``hidden``, voxel_offset null."""

    def cloudvolume_like(info: dict[str, Any]) -> None:
        del info["@type"]
        info["mesh"] = "mesh"
        info["segment_properties"] = "props"
        info["scales"][0]["hidden"] = False
        info["scales"][0]["voxel_offset"] = None

    path = _write(volume, tmp_path / "vol", cloudvolume_like)
    assert shardpipe.verify(path).ok


def test_an_info_file_too_large_is_refused_before_it_is_read(volume: Path, tmp_path: Path) -> None:
    path = tmp_path / "vol"
    shutil.copytree(volume, path)
    text = (path / "info").read_text()
    (path / "info").write_text(text[:-1] + " " * (17 << 20) + "}")
    with pytest.raises(MetadataError, match="more than the 16,777,216"):
        shardpipe.verify(path)


def test_an_encoding_shardpipe_does_not_decode_is_noted(volume: Path, tmp_path: Path) -> None:
    path = _write(volume, tmp_path / "vol", _scale("encoding", "png"))
    report = shardpipe.verify(path)
    assert report.ok, report
    assert report.scales[0].notes == ["chunks encoded as 'png' are not decoded"]
    assert "note: chunks encoded as 'png'" in str(report)


def test_a_chunk_larger_than_the_volume_is_stored_clipped(volume: Path) -> None:
    """The chunk limit applies to the box a chunk holds: clipped to the scale's size."""
    from shardpipe.formats.precomputed_info import parse_info

    info = json.loads((volume / "info").read_text())
    info["scales"][0]["chunk_sizes"] = [[2**14] * 3]  # 8 TiB unclipped, 32 KiB clipped
    parsed = parse_info(json.dumps(info).encode(), "vol/info")
    assert parsed is not None and parsed.scales[0].chunk_size == (2**14,) * 3


@pytest.mark.parametrize(
    "marker",
    [
        b"",
        b"\xff\xfe",
        b"[1, 2]",
        b'{"started": 1e300}',
        b'{"started": "today"}',
        b"[" * 10**5,
        b'{"started": 1700000000}',
        b" " * 10_000,
    ],
)
def test_any_unfinished_write_marker_is_reported(
    volume: Path, tmp_path: Path, marker: bytes
) -> None:
    """The marker's bytes are untrusted too: whatever they hold, the volume is unfinished."""
    path = tmp_path / "vol"
    shutil.copytree(volume, path)
    (path / ".shardpipe").mkdir(exist_ok=True)
    (path / ".shardpipe" / "precomputed-write.json").write_bytes(marker)
    for report in (shardpipe.verify(path), shardpipe.info(path)):
        assert not report.ok
        assert report.problems[0].startswith(".shardpipe/precomputed-write.json: an unfinished")
    if marker == b'{"started": 1700000000}':
        assert "(started 2023-11-14 22:13:20 UTC)" in str(report)
