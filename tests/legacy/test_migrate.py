"""Migrating arrays of the sharding storage-transformer draft to Zarr v3 (``shardpipe.migrate``).

The golden hierarchies under ``tests/legacy_fixtures`` were written by
zarr-python 2.18.3 (``make_fixtures.py`` there); the data they hold is in
``expected.npz``. Migrated arrays are read back by zarr-python 3 and
tensorstore.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
import tensorstore as ts
import zarr

import shardpipe
from shardpipe.cli.exit_statuses import exit_status
from shardpipe.cli.parser import main
from shardpipe.errors import (
    InvalidArgumentError,
    ShardFormatError,
    UnsafeKeyError,
    UnsupportedLegacyError,
)
from shardpipe.formats.legacy_sharding import legacy_format
from shardpipe.legacy.metadata import SHARDING, translate_array
from shardpipe.maintenance.array_info import GroupInfo
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.s3.store import S3ShardStore
from tests.support import DRAFT_FIXTURES, REPOSITORY
from tests.support.fork_server import ForkServer, wait_for_word

FIXTURES = DRAFT_FIXTURES
EXPECTED = {k.replace("__", "/"): v for k, v in np.load(FIXTURES / "expected.npz").items()}
EDGE = dict(np.load(FIXTURES / "edge.npz").items())  # in FIXTURES / "edge"; root0d holds 42
ZLIB = {"a/zlib_u2", "a/sparse"}  # numcodecs.zlib: zarr-python reads it, tensorstore cannot
V3_TOP = ["a", "flags", "scalar", "volume", "zarr.json"]  # what a migrated root folder holds
MIGRATING = importlib.import_module("shardpipe.legacy.migration")  # the module, not the function


class Killed(Exception):
    """Stands for a kill -9 in the middle of a run."""


def _draft(tmp_path: Path, name: str = "hierarchy") -> Path:
    path = tmp_path / "draft"
    shutil.copytree(FIXTURES / name, path)
    return path


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _draft_shards(path: Path) -> dict[str, bytes]:
    """Draft shard bytes by array path and shard coordinates, ``a/x:0,1``."""
    out = {}
    for array in EXPECTED:
        meta = json.loads((path / "meta/root" / f"{array}.array.json").read_text())
        fmt = translate_array(array, meta).shard_format
        folder = path / "data/root" / array
        for shard in folder.rglob("*"):
            if shard.is_file():
                coords = fmt.coords(str(shard.relative_to(folder)))
                assert coords is not None
                out[f"{array}:{','.join(map(str, coords))}"] = shard.read_bytes()
    return out


def _v3_shard(path: Path, name: str) -> bytes:
    """The bytes of the v3 shard named ``a/x:0,1`` (as :func:`_draft_shards` names them)."""
    array, coords = name.split(":")
    meta = json.loads((path / array / "zarr.json").read_text())
    separator = meta["chunk_key_encoding"]["configuration"]["separator"]
    return (path / array / separator.join(["c", *filter(None, coords.split(","))])).read_bytes()


def _check_migrated(path: Path, before: dict[str, bytes], *, crc: bool) -> None:
    """Every array equal (zarr-python, tensorstore), every shard's bytes the draft's."""
    for array, expected in EXPECTED.items():
        back = zarr.open_array(str(path), path=array, mode="r")[...]
        np.testing.assert_array_equal(back, expected)
        assert back.dtype == expected.dtype.newbyteorder("="), array  # big endian read native
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path / array)}}
        if array in ZLIB:
            with pytest.raises(ValueError, match=r"numcodecs\.zlib"):
                ts.open(spec).result()
        else:
            np.testing.assert_array_equal(
                np.asarray(ts.open(spec).result().read().result()), expected
            )
    for name, old in before.items():
        data = _v3_shard(path, name)
        assert (data[:-4] if crc else data) == old, name
    report = shardpipe.verify(path)
    assert report.ok, report


@pytest.mark.parametrize("add_crc32c", [False, True])
def test_a_copy_reads_back_with_payload_unchanged(tmp_path: Path, add_crc32c: bool) -> None:
    draft = _draft(tmp_path)
    before_tree = _tree(draft)
    shards = _draft_shards(draft)
    report = shardpipe.migrate(draft, tmp_path / "v3", add_crc32c=add_crc32c)
    assert (len(report.arrays), len(report.groups), report.shards) == (10, 3, 44)
    assert _tree(draft) == before_tree  # the source is untouched
    target = tmp_path / "v3"
    _check_migrated(target, shards, crc=add_crc32c)
    group = zarr.open_group(str(target), mode="r")
    assert group.attrs["title"] == "legacy fixtures" and group["a"].attrs["level"] == 1
    codecs = json.loads((target / "a/blosc_i4/zarr.json").read_text())["codecs"][0]
    index_codecs = [c["name"] for c in codecs["configuration"]["index_codecs"]]
    assert index_codecs == (["bytes", "crc32c"] if add_crc32c else ["bytes"])
    if add_crc32c:  # the CRC32C covers the index: the draft shard's last 16 bytes per slot
        for name, old in shards.items():
            meta = json.loads((target / name.split(":")[0] / "zarr.json").read_text())
            inner = meta["codecs"][0]["configuration"]["chunk_shape"]
            outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
            slots = int(np.prod([o // c for o, c in zip(outer, inner, strict=True)]))
            crc = crc32c.crc32c(old[-16 * slots :]).to_bytes(4, "little")
            assert _v3_shard(target, name) == old + crc, name


def test_zlib_chunks_rewrapped_as_gzip_read_with_tensorstore(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    shards = _draft_shards(draft)
    report = shardpipe.migrate(draft, tmp_path / "v3", zlib_as_gzip=True)
    assert report.rebuilt == 4 + 5 and "9 zlib shard(s) rebuilt" in str(report)
    target = tmp_path / "v3"
    for array, expected in EXPECTED.items():
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(target / array)}}
        np.testing.assert_array_equal(np.asarray(ts.open(spec).result().read().result()), expected)
        np.testing.assert_array_equal(zarr.open_array(str(target / array), mode="r")[...], expected)
    fmt = legacy_format((2, 2), ".")  # a/zlib_u2
    for name, old in shards.items():
        array, coords = name.split(":")
        if array not in ZLIB:
            assert _v3_shard(target, name) == old, name  # copied byte for byte
            continue
        if array != "a/zlib_u2":
            continue
        new = _v3_shard(target, name)
        shard = tuple(int(c) for c in filter(None, coords.split(",")))
        old_index, _ = fmt.read_index(lambda a, b, o=old: o[a:b], len(old), shard=shard)
        new_index, _ = fmt.read_index(lambda a, b, n=new: n[a:b], len(new), shard=shard)
        for slot in np.flatnonzero(old_index.stored()):
            (a, n), (b, m) = old_index.entries[slot].tolist(), new_index.entries[slot].tolist()
            assert new[b + 10 : b + m - 8] == old[a + 2 : a + n - 4]  # the same DEFLATE data
    assert shardpipe.verify(target).ok


def test_in_place_leaves_only_the_v3_hierarchy(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    shards = _draft_shards(draft)
    inode = (draft / "data/root/volume/c1/0/1").stat().st_ino
    report = shardpipe.migrate(draft)
    assert (draft / "volume/c/1/0/1").stat().st_ino == inode  # a hard link: no byte copied
    assert report.in_place and report.shards == 44
    assert sorted(p.name for p in draft.iterdir()) == V3_TOP
    _check_migrated(draft, shards, crc=False)
    again = shardpipe.migrate(draft)  # nothing left to migrate: nothing to do
    assert again.finished_earlier and again.leftovers == 0
    assert sorted(p.name for p in draft.iterdir()) == V3_TOP


def test_a_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = _draft(tmp_path)
    before = _tree(draft)
    report = shardpipe.migrate(draft, tmp_path / "v3", dry_run=True)
    assert report.dry_run and report.shards == 44 and "would migrate 10 array(s)" in str(report)
    assert main(["migrate", str(draft), "--dry-run"]) == 0
    assert "would migrate" in capsys.readouterr().out
    assert _tree(draft) == before and not (tmp_path / "v3").exists()


def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    draft = _draft(tmp_path)
    shards = _draft_shards(draft)
    assert main(["migrate", str(draft), str(tmp_path / "v3"), "--add-crc32c"]) == 0
    assert "migrated 10 array(s) and 3 group(s) to the target" in capsys.readouterr().out
    _check_migrated(tmp_path / "v3", shards, crc=True)
    assert main(["migrate", str(draft), str(tmp_path / "v3")]) == 2  # not empty now
    assert "is not empty" in capsys.readouterr().err


def test_verify_and_info_read_draft_hierarchies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = _draft(tmp_path)
    report = shardpipe.verify(draft)
    assert report.ok and report.shards_present == 44 and report.chunks_stored == 120, report
    described = shardpipe.info(draft)
    assert "volume: shape (10, 9, 8), uint16, shards (6, 6, 6)" in str(described)
    assert main(["verify", str(draft)]) == 0 and main(["info", str(draft)]) == 0
    capsys.readouterr()
    shard = draft / "data/root/a/blosc_i4/c1/1"
    shard.write_bytes(shard.read_bytes()[:-20])  # the index cut
    assert not shardpipe.verify(draft).ok
    before = _tree(draft)
    with pytest.raises(ShardFormatError, match="c1/1"):
        shardpipe.migrate(draft, tmp_path / "v3")
    assert _tree(draft) == before and not (tmp_path / "v3").exists()


def test_what_v3_cannot_express_is_refused_before_any_write(tmp_path: Path) -> None:
    draft = _draft(tmp_path, "unsupported")
    before = _tree(draft)
    with pytest.raises(UnsupportedLegacyError, match=r"array 'filtered': filters \['delta'\]"):
        shardpipe.migrate(draft)
    assert _tree(draft) == before
    info = shardpipe.info(draft)
    assert "filtered: skipped" in str(info)


BASE: dict[str, Any] = {
    "attributes": {},
    "chunk_grid": {"chunk_shape": [2], "separator": "/", "type": "regular"},
    "chunk_memory_layout": "C",
    "data_type": "<i4",
    "extensions": [],
    "fill_value": 0,
    "shape": [8],
    "storage_transformers": [
        {
            "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
            "type": "indexed",
            "configuration": {"chunks_per_shard": [2]},
        }
    ],
}


def _blosc(shuffle: int) -> dict[str, Any]:
    config = {"cname": "lz4", "clevel": 5, "shuffle": shuffle, "blocksize": 0}
    return {"codec": "https://purl.org/zarr/spec/codec/blosc/1.0", "configuration": config}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"data_type": "<M8[ns]"}, "no Zarr v3 name"),
        ({"data_type": "|S4"}, "no Zarr v3 name"),
        ({"extensions": [{"x": 1}]}, "extensions"),
        ({"chunk_grid": {"type": "rectilinear", "chunk_shape": [2]}}, "chunk grid"),
        ({"storage_transformers": []}, "no sharding storage transformer"),
        ({"storage_transformers": [{"extension": "https://example.org/other"}]}, "transformers"),
        ({"compressor": {"codec": "https://purl.org/zarr/spec/codec/lz4/1.0"}}, "compressor"),
        ({"chunk_memory_layout": "K"}, "chunk_memory_layout"),
        ({"dimension_names": ["x"]}, "members v3 has no place for"),
        ({"shape": None}, "malformed document"),
        ({"chunk_grid": {"type": "regular"}}, "malformed document .missing member 'chunk_shape'"),
        ({"chunk_grid": {"type": "regular", "chunk_shape": [0]}}, "chunk shape"),
        ({"chunk_grid": {"type": "regular", "chunk_shape": [2, 2]}}, "chunk shape"),
        ({"storage_transformers": BASE["storage_transformers"] * 2}, "2 sharding storage"),
        ({"compressor": _blosc(shuffle=7)}, "blosc shuffle 7"),
        (
            {
                "compressor": {
                    "codec": "https://purl.org/zarr/spec/codec/gzip/1.0",
                    "configuration": {"level": "x"},
                }
            },
            "malformed",
        ),
        ({"fill_value": "not a number"}, "translation zarr refuses"),
        (
            {"data_type": {"extension": "https://example.org/datetime-dtypes", "type": "<M8"}},
            "extension",
        ),
    ],
)
def test_translation_refusals_name_the_array(change: dict[str, Any], words: str) -> None:
    with pytest.raises(UnsupportedLegacyError, match=words) as caught:
        translate_array("g/x", {**BASE, **change})
    assert "array 'g/x'" in str(caught.value) and caught.value.path == "g/x"


@pytest.mark.parametrize(("dtype", "shuffle"), [("|u1", "bitshuffle"), ("<i4", "shuffle")])
def test_blosc_autoshuffle_is_what_numcodecs_chose(dtype: str, shuffle: str) -> None:
    document = {**BASE, "data_type": dtype, "compressor": _blosc(shuffle=-1)}
    codecs = translate_array("x", document).document["codecs"][0]["configuration"]["codecs"]
    assert codecs[-1]["configuration"]["shuffle"] == shuffle


@pytest.mark.parametrize(
    ("node", "words"),
    [("volume.group.json", "both an array and a group"), ("volume/inner.group.json", "under")],
)
def test_nodes_a_v3_hierarchy_cannot_hold_are_refused(
    tmp_path: Path, node: str, words: str
) -> None:
    draft = _draft(tmp_path)
    (draft / "meta/root" / node).parent.mkdir(exist_ok=True)
    (draft / "meta/root" / node).write_text(json.dumps({"attributes": {}}))
    before = _tree(draft)
    with pytest.raises(UnsupportedLegacyError, match=words):
        shardpipe.migrate(draft)
    assert _tree(draft) == before
    info = shardpipe.info(draft)  # verify and info skip them, naming why
    assert isinstance(info, GroupInfo)
    assert words in info.skipped[node.removesuffix(".group.json")]


def test_in_place_refuses_strays_it_would_delete(tmp_path: Path) -> None:
    for stray in ["data/root/orphan/c0", "data/root/a/blosc_i4/notes.txt", "meta/x.array.json.bak"]:
        draft = tmp_path / stray.replace("/", "_")
        shutil.copytree(FIXTURES / "hierarchy", draft)
        (draft / stray).parent.mkdir(parents=True, exist_ok=True)
        (draft / stray).write_text("keep me")
        before = _tree(draft)
        with pytest.raises(InvalidArgumentError, match="no document or shard"):
            shardpipe.migrate(draft)
        assert _tree(draft) == before, stray
        shardpipe.migrate(draft, tmp_path / f"{draft.name}-v3")  # a copy deletes nothing


def test_files_with_other_links_are_copied_not_linked(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    shard = draft / "data/root/volume/c1/0/1"
    os.link(shard, tmp_path / "backup")  # a backup sharing the file (cp -al, rsync)
    shardpipe.migrate(draft)
    assert (draft / "volume/c/1/0/1").stat().st_ino != (tmp_path / "backup").stat().st_ino
    assert not list(draft.rglob("*.shardpipe-tmp"))


def test_a_target_that_is_not_empty_is_refused(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    (tmp_path / "v3").mkdir()
    (tmp_path / "v3" / "precious.txt").write_text("keep")
    with pytest.raises(InvalidArgumentError, match="is not empty"):
        shardpipe.migrate(draft, tmp_path / "v3")
    assert [p.name for p in (tmp_path / "v3").iterdir()] == ["precious.txt"]


def test_a_target_inside_the_source_is_refused(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    before = _tree(draft)
    with pytest.raises(shardpipe.SourceOverlapsTargetError, match="lies inside") as caught:
        shardpipe.migrate(draft, draft / "v3")
    assert caught.value.parameter == "target"
    assert _tree(draft) == before


def test_a_marker_half_written_does_not_block_the_target(tmp_path: Path) -> None:
    draft, target = _draft(tmp_path), tmp_path / "v3"
    (target / ".shardpipe").mkdir(parents=True)  # killed while the first run wrote its marker
    (target / ".shardpipe" / ".migrate.json.1234.shardpipe-tmp").write_text('{"sour')
    shardpipe.migrate(draft, target)
    assert sorted(p.name for p in target.iterdir()) == V3_TOP


def _write_draft_array(
    root: Path, path: str, data: np.ndarray, chunks: int, per_shard: int
) -> None:
    """A one-dimensional uncompressed draft array, its shards laid out as the draft says."""
    meta = {
        **BASE,
        "shape": [len(data)],
        "data_type": data.dtype.str,
        "chunk_grid": {"chunk_shape": [chunks], "separator": "/", "type": "regular"},
    }
    meta["storage_transformers"] = [
        {**BASE["storage_transformers"][0], "configuration": {"chunks_per_shard": [per_shard]}}
    ]
    (root / "meta/root").mkdir(parents=True, exist_ok=True)
    (root / "zarr.json").write_text(
        json.dumps({"zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0"})
    )
    (root / "meta/root" / f"{path}.array.json").write_text(json.dumps(meta))
    shard_len = chunks * per_shard
    for s in range(-(-len(data) // shard_len)):
        body, index = b"", []
        for c in range(per_shard):
            piece = data[s * shard_len + c * chunks : s * shard_len + (c + 1) * chunks]
            if len(piece) < chunks:
                piece = np.concatenate([piece, np.zeros(chunks - len(piece), data.dtype)])
            index.append((len(body), piece.nbytes))
            body += piece.tobytes()
        key = root / "data/root" / path / f"c{s}"
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(body + np.array(index, dtype="<u8").tobytes())


def test_large_shards_are_copied_server_side_on_s3(
    s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    copied: list[tuple[int, int]] = []
    copy_part = S3ShardStore.copy_part

    def counted(self: S3ShardStore, handle: Any, n: int, source: str, a: int, b: int) -> Any:
        copied.append((a, b))
        return copy_part(self, handle, n, source, a, b)

    monkeypatch.setattr(S3ShardStore, "copy_part", counted)

    bucket, options = s3_bucket
    data = np.arange(3 << 20, dtype="<u4")  # 12 MiB: shards of 6 MiB, copied server side
    _write_draft_array(tmp_path / "big", "big", data, chunks=1 << 19, per_shard=3)
    fs = s3fs.S3FileSystem(**options)
    fs.put(str(tmp_path / "big") + "/", f"{bucket}/draft/", recursive=True)
    shutil.copytree(FIXTURES / "hierarchy", tmp_path / "fixture")
    (tmp_path / "fixture" / "zarr.json").unlink()
    fs.put(str(tmp_path / "fixture") + "/", f"{bucket}/draft/", recursive=True)
    url = f"s3://{bucket}/draft"
    report = shardpipe.migrate(url, storage_options=options, add_crc32c=True)
    assert report.shards == 44 + 2
    assert copied == [(0, (6 << 20) + 48)] * 2  # one part per big shard
    back = zarr.open_array(url, path="big", mode="r", storage_options=options)[...]
    np.testing.assert_array_equal(back, data)
    for array, expected in EXPECTED.items():
        got = zarr.open_array(url, path=array, mode="r", storage_options=options)[...]
        np.testing.assert_array_equal(got, expected)
    assert not fs.find(f"{bucket}/draft/meta") and not fs.find(f"{bucket}/draft/data")
    assert shardpipe.verify(url, storage_options=options).ok


def test_a_local_draft_migrates_to_s3_in_parts(
    s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    bucket, options = s3_bucket
    data = np.arange(3 << 20, dtype="<u4")[::-1].copy()  # one 12 MiB shard: 2 parts of 6 MiB
    _write_draft_array(tmp_path / "d", "x", data, chunks=1 << 20, per_shard=3)
    url = f"s3://{bucket}/v3"
    report = shardpipe.migrate(tmp_path / "d", url, target_storage_options=options, add_crc32c=True)
    assert report.shards == 1 and not report.in_place
    back = zarr.open_array(url, path="x", mode="r", storage_options=options)[...]
    np.testing.assert_array_equal(back, data)
    assert shardpipe.verify(url, storage_options=options).ok


@pytest.mark.parametrize(
    ("size", "most", "least", "max_parts", "pieces"),
    [
        (9, 8, 5, None, [0, 9]),
        (16, 8, 5, None, [0, 8, 16]),
        (17, 8, 5, None, [0, 5, 11, 17]),
        (3, 8, 5, None, [0, 3]),
        (0, 8, 5, None, [0, 0]),
        (100, 8, 5, 4, [0, 25, 50, 75, 100]),  # pieces grow past most rather than outnumber
    ],
)
def test_copies_are_cut_into_parts_the_store_takes(
    size: int, most: int, least: int, max_parts: int | None, pieces: list[int]
) -> None:
    from shardpipe.legacy.copy import _bounds

    assert _bounds(size, most, least, max_parts) == pieces


def test_local_in_place_copies_large_shards(tmp_path: Path) -> None:
    data = np.arange(1 << 16, dtype="<u2")
    _write_draft_array(tmp_path / "d", "x", data, chunks=1 << 12, per_shard=4)
    shardpipe.migrate(tmp_path / "d", add_crc32c=True)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "d"), path="x")[...], data)
    assert shardpipe.verify(tmp_path / "d").ok


@pytest.mark.parametrize("phase", ["copy", "delete"])
def test_an_interrupted_migration_finishes_when_run_again(
    tmp_path: Path, phase: str, fork_server: ForkServer
) -> None:
    draft = _draft(tmp_path)
    shards = _draft_shards(draft)
    draft_docs = {k: v for k, v in _tree(draft).items() if k.startswith("meta/")}
    progress = tmp_path / "progress"
    child = fork_server.start(
        "tests.support.migrate_crash_child", [str(draft), str(progress), phase], cwd=REPOSITORY
    )
    try:
        wait_for_word(progress, "...", child)  # three copies (or deletions) under way
    finally:
        child.kill()
        child.wait()
    entry = json.loads((draft / "zarr.json").read_text())
    if phase == "copy":  # the draft is untouched: the old tool still reads it
        assert entry["zarr_format"] == "https://purl.org/zarr/spec/protocol/core/3.0"
        assert {k: v for k, v in _tree(draft).items() if k.startswith("meta/")} == draft_docs
        assert shardpipe.verify(draft).ok
    else:  # the v3 hierarchy is written; the draft's leftovers remain
        assert entry["zarr_format"] == 3
        assert (draft / ".shardpipe" / "migrate.json").exists()
        before = _tree(draft)
        dry = shardpipe.migrate(draft, dry_run=True)
        assert dry.finished_earlier and "would be deleted" in str(dry) and _tree(draft) == before
    report = shardpipe.migrate(draft)
    assert not list(draft.rglob("*.shardpipe-tmp"))  # re-linking leaves no temporary file
    assert report.finished_earlier == (phase == "delete")
    assert sorted(p.name for p in draft.iterdir()) == V3_TOP
    _check_migrated(draft, shards, crc=False)


def _interrupt_copies(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Make ``migrate`` stop (as if killed) after ``after`` shard copies (run with one worker)."""
    copy, done = MIGRATING.copy_shard, []

    def copy_then_stop(*args: Any) -> None:
        if len(done) == after:
            raise Killed
        copy(*args)
        done.append(1)

    monkeypatch.setattr(MIGRATING, "copy_shard", copy_then_stop)


def test_a_rerun_deletes_what_the_interrupted_run_wrote_and_the_draft_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft = _draft(tmp_path)
    put = LocalShardStore.put

    def put_but_not_the_root(self: LocalShardStore, key: str, pieces: Any) -> None:
        if key == "zarr.json":
            raise Killed  # every shard copied, every document but the root's written
        put(self, key, pieces)

    with monkeypatch.context() as patch:
        patch.setattr(LocalShardStore, "put", put_but_not_the_root)
        with pytest.raises(Killed):
            shardpipe.migrate(draft)
    assert (draft / "volume/c/1/0/1").exists() and (draft / "a/b/gzip_u1/zarr.json").exists()
    # before the rerun, the old tool deletes a shard and an array
    (draft / "data/root/volume/c1/0/1").unlink()
    (draft / "meta/root/a/b/gzip_u1.array.json").unlink()
    shutil.rmtree(draft / "data/root/a/b/gzip_u1")
    shardpipe.migrate(draft)
    assert not (draft / "volume/c/1/0/1").exists() and not (draft / "a/b/gzip_u1").exists()
    volume = zarr.open_array(str(draft), path="volume", mode="r")
    expected = EXPECTED["volume"].copy()
    shard = tuple(
        slice(k * n, (k + 1) * n) for k, n in zip((1, 0, 1), volume.shards or (), strict=True)
    )
    expected[shard] = volume.fill_value
    np.testing.assert_array_equal(volume[...], expected)
    for array in set(EXPECTED) - {"volume", "a/b/gzip_u1"}:
        np.testing.assert_array_equal(zarr.open_array(str(draft), path=array)[...], EXPECTED[array])
    assert shardpipe.verify(draft).ok


def test_a_rerun_may_change_the_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    draft = _draft(tmp_path)
    shards = _draft_shards(draft)
    with monkeypatch.context() as patch:
        _interrupt_copies(patch, after=20)
        with pytest.raises(Killed):
            shardpipe.migrate(draft, add_crc32c=True, workers=1)
    shardpipe.migrate(draft)  # without CRC32C: no shard keeps one
    _check_migrated(draft, shards, crc=False)


def test_a_chunk_zlib_as_gzip_cannot_rewrap_stops_before_the_v3_hierarchy_appears(
    tmp_path: Path,
) -> None:
    draft = _draft(tmp_path)
    shard = draft / "data/root/a/zlib_u2/c0.0"
    data = bytearray(shard.read_bytes())
    n_slots = 2 * 2
    first = int.from_bytes(data[-16 * n_slots : -16 * n_slots + 8], "little")
    data[first] = 0  # no longer a zlib header
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardFormatError, match="without zlib_as_gzip"):
        shardpipe.migrate(draft, zlib_as_gzip=True)
    entry = json.loads((draft / "zarr.json").read_text())
    assert entry["zarr_format"] == "https://purl.org/zarr/spec/protocol/core/3.0"
    report = shardpipe.migrate(draft)  # copied unchanged
    assert report.rebuilt == 0 and not (draft / ".shardpipe").exists()
    np.testing.assert_array_equal(
        zarr.open_array(str(draft), path="volume")[...], EXPECTED["volume"]
    )


def test_a_target_holding_another_sources_migration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft, other, target = _draft(tmp_path), tmp_path / "other", tmp_path / "v3"
    shutil.copytree(FIXTURES / "hierarchy", other)
    with monkeypatch.context() as patch:
        _interrupt_copies(patch, after=5)
        with pytest.raises(Killed):
            shardpipe.migrate(draft, target, workers=1)
    before = _tree(target)
    with pytest.raises(InvalidArgumentError, match="holds an interrupted migration of"):
        shardpipe.migrate(other, target)
    assert _tree(target) == before
    shardpipe.migrate(draft, target)
    _check_migrated(target, _draft_shards(draft), crc=False)


@pytest.mark.parametrize("key", ["volume/c/0/0/0", "a/b/zarr.json", "scalar/c"])
def test_in_place_refuses_keys_where_the_v3_hierarchy_goes(tmp_path: Path, key: str) -> None:
    draft = _draft(tmp_path)
    (draft / key).parent.mkdir(parents=True, exist_ok=True)
    (draft / key).write_text("keep me")
    before = _tree(draft)
    with pytest.raises(InvalidArgumentError, match="where the v3 hierarchy would be written"):
        shardpipe.migrate(draft)
    assert _tree(draft) == before


def test_a_rerun_aborts_the_uploads_an_interrupted_run_left_open_on_s3(
    s3_bucket: tuple[str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    bucket, options = s3_bucket
    data = np.arange(3 << 20, dtype="<u4")  # two 6 MiB shards: copied server side
    _write_draft_array(tmp_path / "d", "x", data, chunks=1 << 19, per_shard=3)
    fs = s3fs.S3FileSystem(**options)
    fs.put(str(tmp_path / "d") + "/", f"{bucket}/d/", recursive=True)
    url = f"s3://{bucket}/d"

    def killed(*args: Any, **kwargs: Any) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(S3ShardStore, "finish_parts", killed)
        patch.setattr(S3ShardStore, "abort_parts", lambda *args: None)  # no time to abort
        with pytest.raises(Killed):
            shardpipe.migrate(url, storage_options=options)
    assert len(fs.list_multipart_uploads(bucket)) == 2
    fs.rm(f"{bucket}/d/data/root/x/c1")  # the rerun does not copy that shard again
    shardpipe.migrate(url, storage_options=options)
    assert not fs.list_multipart_uploads(bucket)
    back = zarr.open_array(url, path="x", storage_options=options)[...]
    np.testing.assert_array_equal(back[: len(data) // 2], data[: len(data) // 2])
    assert not back[len(data) // 2 :].any()  # the fill value


@pytest.mark.parametrize("add_crc32c", [False, True])
def test_complex_autoshuffle_and_fortran_edges_read_back(tmp_path: Path, add_crc32c: bool) -> None:
    draft = _draft(tmp_path, "edge")
    before = {
        str(p.relative_to(draft)): p.read_bytes()
        for p in (draft / "data").rglob("*")
        if p.is_file()
    }
    report = shardpipe.migrate(draft, tmp_path / "v3", add_crc32c=add_crc32c)
    assert sorted(report.arrays) == sorted(EDGE)
    for array, expected in EDGE.items():
        back = zarr.open_array(str(tmp_path / "v3"), path=array, mode="r")[...]
        np.testing.assert_array_equal(back, expected)
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(tmp_path / "v3" / array)},
        }
        if array != "c16_zlib":  # numcodecs.zlib: tensorstore has no zlib codec
            np.testing.assert_array_equal(
                np.asarray(ts.open(spec).result().read().result()), expected
            )
    assert len(before) == report.shards
    assert shardpipe.verify(tmp_path / "v3").ok


def test_a_root_array_owns_only_its_shard_keys_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft = _draft(tmp_path, "root0d")
    (draft / "calibration.txt").write_text("keep me")  # starts with c, as the shard key "c"
    (draft / "config").mkdir()
    (draft / "config" / "settings.yaml").write_text("keep me too")
    with monkeypatch.context() as patch:
        _interrupt_copies(patch, after=0)
        with pytest.raises(Killed):
            shardpipe.migrate(draft, workers=1)
    (draft / "c").write_bytes(b"a shard left by the interrupted run")
    shardpipe.migrate(draft)
    assert (draft / "calibration.txt").read_text() == "keep me"
    assert (draft / "config" / "settings.yaml").read_text() == "keep me too"
    assert zarr.open_array(str(draft), mode="r")[...] == 42
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(draft)}}
    assert ts.open(spec).result().read().result() == 42


def test_an_in_place_rerun_refuses_keys_where_nodes_added_since_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft = _draft(tmp_path)
    with monkeypatch.context() as patch:
        _interrupt_copies(patch, after=3)
        with pytest.raises(Killed):
            shardpipe.migrate(draft, workers=1)
    # the old tool adds an array where the user keeps a folder of the same name
    shutil.copy(draft / "meta/root/flags.array.json", draft / "meta/root/labels.array.json")
    (draft / "labels").mkdir()
    (draft / "labels" / "zarr.json").write_text("{}")
    before = _tree(draft)
    with pytest.raises(InvalidArgumentError, match="where the v3 hierarchy would be written"):
        shardpipe.migrate(draft)
    assert _tree(draft) == before


def test_leftovers_are_deleted_only_after_an_in_place_run_of_this_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    draft, target = _draft(tmp_path), tmp_path / "v3"
    put = LocalShardStore.put

    def put_but_not_the_marker_drop(self: LocalShardStore, key: str, pieces: Any) -> None:
        put(self, key, pieces)
        if key == "zarr.json" and self.root == str(target):
            raise Killed  # the target's root written, its marker left

    with monkeypatch.context() as patch:
        patch.setattr(LocalShardStore, "put", put_but_not_the_marker_drop)
        with pytest.raises(Killed):
            shardpipe.migrate(draft, target)
    (target / "data").mkdir()  # a v3 group named data, which a target may hold
    (target / "data" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    with pytest.raises(InvalidArgumentError, match="holds no hierarchy of the sharding"):
        shardpipe.migrate(target)  # the marker is a target's: nothing to finish in place
    assert (target / "data" / "zarr.json").exists()


# -- hostile markers, node names and links: nothing outside is touched (issue 28) -------------
def _outside(tmp_path: Path) -> dict[str, bytes]:
    """A file and a folder beside the draft (the victims of a forged marker), and their bytes."""
    (tmp_path / "victim.txt").write_text("not the migration's")
    (tmp_path / "sibling" / "c" / "0").mkdir(parents=True)
    (tmp_path / "sibling" / "c" / "0" / "0").write_text("not the migration's either")
    (tmp_path / "sibling" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    return _beside(tmp_path)


def _beside(tmp_path: Path) -> dict[str, bytes]:
    return {k: v for k, v in _tree(tmp_path).items() if not k.startswith("draft")}


def _forge_marker(draft: Path, **members: Any) -> None:
    marker = {
        "source": os.path.abspath(draft),
        "in_place": True,
        "documents": ["a/zarr.json"],
        "arrays": ["volume"],
        **members,
    }
    (draft / ".shardpipe").mkdir(exist_ok=True)
    (draft / ".shardpipe" / "migrate.json").write_text(json.dumps(marker))


@pytest.mark.parametrize(
    ("members", "words"),
    [
        ({"documents": ["../victim.txt"], "arrays": ["../sibling"]}, "'../victim.txt'"),
        ({"arrays": ["../sibling"]}, "'../sibling'"),
        ({"documents": ["/etc/zarr.json"]}, "'/etc/zarr.json'"),
        ({"documents": ["volume/c/0/0/0"]}, "'volume/c/0/0/0'"),
        ({"documents": "zarr.json"}, "documents"),
        ({"arrays": [None]}, "arrays"),
        ({"source": "/somewhere/else"}, "'/somewhere/else'"),
        ({"in_place": False}, "not in place"),
        ({"in_place": "yes"}, "in_place"),
    ],
)
def test_a_forged_or_foreign_marker_is_refused_and_nothing_is_deleted(
    tmp_path: Path, members: dict[str, Any], words: str
) -> None:
    draft = _draft(tmp_path)
    outside = _outside(tmp_path)
    (draft / "volume" / "c" / "7" / "7").mkdir(parents=True)  # a shard key no run plans
    (draft / "volume" / "c" / "7" / "7" / "7").write_text("the user's")
    _forge_marker(draft, **members)
    before = _tree(draft)
    with pytest.raises(shardpipe.ShardpipeError, match=re.escape(words)) as info:
        shardpipe.migrate(draft)
    assert "migrate.json" in str(info.value)
    assert _tree(draft) == before and _beside(tmp_path) == outside
    with pytest.raises(shardpipe.ShardpipeError):
        shardpipe.migrate(draft, dry_run=True)
    assert main(["migrate", str(draft)]) != 0
    assert _tree(draft) == before and _beside(tmp_path) == outside


def test_a_forged_marker_of_a_finished_migration_deletes_nothing_outside(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    shardpipe.migrate(draft)
    outside = _outside(tmp_path)
    _forge_marker(draft, documents=["../victim.txt"], arrays=["../sibling"])
    before = _tree(draft)
    with pytest.raises(shardpipe.ShardpipeError, match=re.escape("'../victim.txt'")):
        shardpipe.migrate(draft)
    assert _tree(draft) == before and _beside(tmp_path) == outside


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ("meta/root/...array.json", ".."),
        ("meta/root/a/...group.json", "a/.."),
        ("meta/root/..array.json", "."),
    ],
)
def test_a_draft_node_named_dot_dot_is_refused_by_name(
    tmp_path: Path, document: str, path: str
) -> None:
    draft = _draft(tmp_path)
    shutil.copy(draft / "meta/root/flags.array.json", draft / document)
    (draft / "data/root/flags/c0").rename(draft / "data/c0")  # shards under data/root/..
    outside = _beside(tmp_path)
    before = _tree(draft)
    for run in (
        lambda: shardpipe.migrate(draft, tmp_path / "v3"),
        lambda: shardpipe.migrate(draft),
        lambda: shardpipe.migrate(draft, dry_run=True),
        lambda: shardpipe.verify(draft),
        lambda: shardpipe.info(draft),
    ):
        with pytest.raises(UnsafeKeyError, match=re.escape(document)) as info:
            run()
        assert info.value.key == path
        assert _tree(draft) == before and _beside(tmp_path) == outside


def test_a_draft_shard_that_is_a_link_is_refused_not_migrated(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    shard = draft / "data/root/volume/c0/0/0"
    kept = tmp_path / "kept-shard"
    shutil.move(shard, kept)
    shard.symlink_to(kept)  # points outside the draft
    before, outside = _tree(draft), kept.read_bytes()
    with pytest.raises(UnsafeKeyError, match=r"'data/root/volume/c0/0/0'.*symbolic link"):
        shardpipe.migrate(draft)
    assert _tree(draft) == before and kept.read_bytes() == outside
    assert shard.is_symlink()


@pytest.mark.parametrize("unsafe", ["dot-dot node", "linked shard", "forged marker"])
def test_the_command_exits_with_the_bad_input_status_on_an_unsafe_key(
    tmp_path: Path, unsafe: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An UnsafeKeyError ends ``shardpipe migrate`` as the exit-status table says (2), not 1."""
    draft = _draft(tmp_path)
    if unsafe == "dot-dot node":
        shutil.copy(draft / "meta/root/flags.array.json", draft / "meta/root/...array.json")
        key = "'..'"
    elif unsafe == "linked shard":
        shard = draft / "data/root/volume/c0/0/0"
        shutil.move(shard, tmp_path / "kept-shard")
        shard.symlink_to(tmp_path / "kept-shard")
        key = "'data/root/volume/c0/0/0'"
    else:
        _forge_marker(draft, documents=["../victim.txt"])
        key = "'../victim.txt'"
    before = _tree(draft)
    capsys.readouterr()
    assert main(["migrate", str(draft)]) == exit_status(UnsafeKeyError("k", "", "")) == 2
    err = capsys.readouterr().err
    assert err.startswith("shardpipe migrate: ") and "UnsafeKeyError" in err and key in err, err
    assert _tree(draft) == before


@pytest.mark.parametrize("draft_shape", [[10.5, 12], [12, "12"], [True, 12], [12, 1e3]])
def test_draft_sizes_must_be_whole_numbers(tmp_path: Path, draft_shape: list[Any]) -> None:
    draft = _draft(tmp_path)
    document = draft / "meta/root/flags.array.json"
    meta = json.loads(document.read_text())
    meta["shape"] = draft_shape
    document.write_text(json.dumps(meta))
    before = _tree(draft)
    with pytest.raises(UnsupportedLegacyError, match=r"'flags'.*shape.*whole number"):
        shardpipe.migrate(draft)
    assert _tree(draft) == before


@pytest.mark.parametrize(
    ("member", "value"),
    [
        ("chunk_grid", {"type": "regular", "chunk_shape": [4.0, 4], "separator": "/"}),
        (
            "storage_transformers",
            [{"extension": SHARDING, "configuration": {"chunks_per_shard": [2, 2.5]}}],
        ),
        (
            "compressor",
            {"codec": "https://purl.org/zarr/spec/codec/gzip/1.0", "configuration": {"level": 5.5}},
        ),
        (
            "compressor",
            {
                "codec": "https://purl.org/zarr/spec/codec/blosc/1.0",
                "configuration": {"cname": "lz4", "clevel": "5"},
            },
        ),
    ],
)
def test_draft_members_that_must_be_integers_are(member: str, value: Any) -> None:
    meta = json.loads((FIXTURES / "hierarchy/meta/root/flags.array.json").read_text())
    meta[member] = value
    with pytest.raises(UnsupportedLegacyError, match="whole number"):
        translate_array("flags", meta)


def test_a_rerun_after_the_last_instant_of_an_in_place_migration_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    draft = _draft(tmp_path)
    shards = _draft_shards(draft)
    delete = LocalShardStore.delete

    def delete_then_die_after_the_marker(self: LocalShardStore, key: str) -> None:
        delete(self, key)
        if key == ".shardpipe/migrate.json":
            raise Killed  # the last instant: the marker gone, its folder not yet

    with monkeypatch.context() as patch:
        patch.setattr(LocalShardStore, "delete", delete_then_die_after_the_marker)
        with pytest.raises(Killed):
            shardpipe.migrate(draft)
    assert (draft / ".shardpipe").is_dir()
    dry = shardpipe.migrate(draft, dry_run=True)
    assert dry.finished_earlier and (draft / ".shardpipe").is_dir()
    report = shardpipe.migrate(draft)
    assert report.finished_earlier and "nothing" in str(report)
    assert sorted(p.name for p in draft.iterdir()) == V3_TOP
    _check_migrated(draft, shards, crc=False)
    capsys.readouterr()
    assert main(["migrate", str(draft), "--no-progress"]) == 0  # and again: nothing to do
    assert "nothing to migrate" in capsys.readouterr().out
    assert sorted(p.name for p in draft.iterdir()) == V3_TOP


def test_only_an_in_place_source_holding_zarr_v3_counts_as_migrated(tmp_path: Path) -> None:
    v3 = tmp_path / "v3"
    shardpipe.to_sharded_zarr(np.arange(8), str(v3), shards=(4,), chunks=(2,))
    assert shardpipe.migrate(v3).finished_earlier  # nothing of a draft: nothing to do
    with pytest.raises(InvalidArgumentError, match="holds no hierarchy of the sharding"):
        shardpipe.migrate(v3, tmp_path / "copy")  # nothing to copy from
    assert not (tmp_path / "copy").exists()
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / ".zgroup").write_text('{"zarr_format": 2}')
    with pytest.raises(InvalidArgumentError, match="holds no hierarchy of the sharding"):
        shardpipe.migrate(tmp_path / "v2")
    draft = _draft(tmp_path)  # a v3 root over draft documents, with no marker: not ours
    (draft / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    before = _tree(draft)
    with pytest.raises(InvalidArgumentError, match="holds no hierarchy of the sharding"):
        shardpipe.migrate(draft)
    assert _tree(draft) == before


def test_files_where_folders_go_are_refused_by_parameter(tmp_path: Path) -> None:
    draft = _draft(tmp_path)
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    before = _tree(tmp_path)
    cases = [
        ("source", lambda: shardpipe.migrate(a_file)),
        ("source", lambda: shardpipe.migrate(a_file / "below")),
        ("source", lambda: shardpipe.migrate(a_file, tmp_path / "v3")),
        ("target", lambda: shardpipe.migrate(draft, a_file)),
        ("target", lambda: shardpipe.migrate(draft, a_file / "below")),
        ("target", lambda: shardpipe.migrate(draft, 5)),
        ("source", lambda: shardpipe.migrate(5)),
        (
            "target_storage_options",
            lambda: shardpipe.migrate(
                draft, tmp_path / "v3", target_storage_options={"fsync": "no"}
            ),
        ),
    ]
    for parameter, run in cases:
        with pytest.raises(InvalidArgumentError) as info:
            run()
        assert info.value.parameter == parameter, str(info.value)
    assert _tree(tmp_path) == before and not (tmp_path / "v3").exists()


def test_a_plain_v3_array_is_not_reported_as_migrated(tmp_path: Path) -> None:
    """An array that never was a draft: nothing to migrate, said so (the report said a
    migration had written it and deleted the draft)."""
    zarr.create_array(tmp_path / "plain.zarr", shape=(4, 4), chunks=(2, 2), dtype="u1")
    report = shardpipe.migrate(str(tmp_path / "plain.zarr"), dry_run=True)
    assert str(report).startswith("nothing to migrate") and "never" in str(report)
