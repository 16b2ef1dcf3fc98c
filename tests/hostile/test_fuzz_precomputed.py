"""Untrusted bytes of precomputed volumes: ``info`` files, shard indexes, minishard indexes.

In the style of ``tests/hostile/test_fuzz_parsers.py`` (whose JSON mutations this
reuses): after every mutation only a ``ShardpipeError`` escapes (never a
``KeyError``, ``TypeError``, ``OverflowError``, ``MemoryError``...), what
is accepted is what a valid volume can hold (checked against an oracle in
Python integers), and ``verify``/``info`` end in a report or a
``ShardpipeError``.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import shutil
import struct
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardpipe
from shardpipe.core.morton import morton_ids
from shardpipe.core.precomputed_plan import ScaleGrid
from shardpipe.errors import MetadataError, ShardFormatError, ShardpipeError, UnsafeKeyError
from shardpipe.formats.base import read_checked_index
from shardpipe.formats.precomputed import PrecomputedSharding
from shardpipe.formats.precomputed_info import parse_info
from shardpipe.formats.precomputed_shards import listed_shard_format
from tests.hostile.test_fuzz_parsers import JSON_VALUES, MUTATIONS, SPECIAL, mutated_documents
from tests.support.examples import scaled

SPEC = {
    "@type": "neuroglancer_uint64_sharded_v1",
    "preshift_bits": 1,
    "hash": "identity",
    "minishard_bits": 2,
    "shard_bits": 2,
    "minishard_index_encoding": "gzip",
    "data_encoding": "gzip",
}
SIZE, CHUNK = (24, 16, 16), (4, 4, 4)
SCALE = ScaleGrid(SIZE, CHUNK)  # 6 x 4 x 4 chunks, ids of 3 + 2 + 2 bits


@pytest.fixture(scope="module", autouse=True)
def _report_mutations() -> Iterator[None]:
    yield
    mine = {k: v for k, v in MUTATIONS.items() if k.startswith("precomputed")}
    print(f"\nprecomputed mutations run: {sum(mine.values())} ({mine})")


@pytest.fixture(scope="module")
def volume(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz-precomputed") / "vol"
    data = np.arange(np.prod(SIZE), dtype="uint16").reshape(SIZE)
    shardpipe.to_neuroglancer_precomputed(
        data, path, resolution=(1, 1, 1), chunk_size=CHUNK, sharding=SPEC
    )
    return path


@pytest.fixture(scope="module")
def info_document(volume: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((volume / "info").read_text())
    return document


# -- info files -----------------------------------------------------------------------------------
def _use(info: Any) -> None:
    """Compute with a parsed info what verify computes, before reading any file."""
    if info is None:
        return
    for scale in info.scales:
        grid = scale.grid
        assert grid.id_bits <= 64
        assert 1 <= max(grid.grid) <= 2**53
        if scale.sharding is not None:
            scale.sharding.index_nbytes  # noqa: B018
            scale.sharding.shard_key(0)


@settings(
    max_examples=scaled(400),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_mutated_info_files_parse_or_raise_metadata_errors(
    info_document: dict[str, Any], data: st.DataObject
) -> None:
    document = data.draw(mutated_documents(info_document))
    MUTATIONS["precomputed info (mutated document)"] += 1
    try:
        _use(parse_info(json.dumps(document).encode(), "vol/info"))
    except MetadataError as err:
        assert "vol/info" in str(err)
    except UnsafeKeyError as err:
        assert "vol/info" in str(err)


@settings(max_examples=scaled(200))
@given(
    st.one_of(
        st.binary(max_size=64),
        JSON_VALUES.map(lambda v: json.dumps(v).encode()),
        st.just(b"[" * 100_000 + b"]" * 100_000),
        st.just(b'{"scales":' * 50_000 + b"1" + b"}" * 50_000),
        st.just(b"\xff\xfe\x00"),
    )
)
def test_random_info_bytes_are_no_volume_or_a_metadata_error(raw: bytes) -> None:
    MUTATIONS["precomputed info (random bytes)"] += 1
    try:
        _use(parse_info(raw, "vol/info"))
    except (MetadataError, UnsafeKeyError) as err:
        assert "vol/info" in str(err)


@settings(
    max_examples=max(10, scaled(20)),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(data=st.data())
def test_verify_and_info_on_a_mutated_info(
    volume: Path,
    tmp_path_factory: pytest.TempPathFactory,
    info_document: dict[str, Any],
    data: st.DataObject,
) -> None:
    document = data.draw(mutated_documents(info_document))
    path = tmp_path_factory.getbasetemp() / "mutated-info"
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(volume, path)
    (path / "info").write_text(json.dumps(document))
    for name in ("verify", "info"):
        MUTATIONS["precomputed info (public API)"] += 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.suppress(ShardpipeError):  # else: a report
                getattr(shardpipe, name)(path)


# -- shard files: shard index and minishard indexes -----------------------------------------------
SPECS = [
    PrecomputedSharding(1, 2, 2, "identity", "gzip", "gzip"),  # boxes
    PrecomputedSharding(0, 1, 1, "identity", "raw", "raw"),  # scattered identity
    PrecomputedSharding(0, 2, 1, "murmurhash3_x86_128", "gzip", "raw"),
]


def _shard_files(spec: PrecomputedSharding) -> dict[int, bytes]:
    """Every shard file of ``SCALE`` under ``spec``, each chunk's bytes made up."""
    coords = np.stack(
        [a.reshape(-1) for a in np.meshgrid(*map(np.arange, SCALE.grid), indexing="ij")], axis=1
    )
    ids = morton_ids(coords, SCALE.grid)
    shards, _ = spec.locate(ids)
    files = {}
    for number in np.unique(shards).tolist():
        mine = np.sort(ids[shards == number])
        data = [spec.encode_data(bytes([int(i) % 251]) * (1 + int(i) % 5)) for i in mine]
        sizes = np.array([len(bytes(d)) for d in data], dtype=np.uint64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.uint64)
        body = b"".join(bytes(d) for d in data)
        head, tail = spec.encode_indexes(mine, starts, sizes, data_stop=len(body))
        files[int(number)] = head + body + tail
    return files


FILES = {k: _shard_files(spec) for k, spec in enumerate(SPECS)}


def read_shard(spec: PrecomputedSharding, number: int, raw: bytes) -> Any:
    """What verify does with a shard file: its own listing, then every entry checked."""

    def read(a: int, b: int) -> bytes:
        return raw[a:b]

    try:
        shard_format = listed_shard_format(SCALE, spec, number, read, len(raw))
    except ShardFormatError as err:
        raise ShardFormatError(f"shard 'x.shard': {err}") from err
    index, _ = read_checked_index(shard_format, read, len(raw), "x.shard", shard=(number,))
    slots = np.flatnonzero(index.stored())
    return shard_format.ids((number,), slots), index.entries[slots]


def listing_ok(spec: PrecomputedSharding, number: int, raw: bytes, ids: Any, entries: Any) -> None:
    """An independent oracle: accepted chunks are chunks of this shard, once, apart, inside."""
    head = spec.index_nbytes
    grid_ids = set(morton_ids(_all_coords(), SCALE.grid).tolist())
    shards, _ = spec.locate(np.array(sorted(grid_ids), dtype=np.uint64))
    mine = {i for i, s in zip(sorted(grid_ids), shards.tolist(), strict=True) if s == number}
    spans = []
    for chunk_id, (start, nbytes) in zip(ids.tolist(), entries.tolist(), strict=True):
        assert chunk_id in mine
        assert head <= start and start + nbytes <= len(raw)
        spans.append((start, start + nbytes))
    assert len(set(ids.tolist())) == len(ids)
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def _all_coords() -> np.ndarray:
    axes = np.meshgrid(*map(np.arange, SCALE.grid), indexing="ij")
    return np.stack([a.reshape(-1) for a in axes], axis=1)


@st.composite
def mutated_shard_files(draw: st.DrawFn) -> tuple[int, int, bytes, str]:
    """A valid shard file cut short, extended, bit-flipped or with bytes replaced."""
    which = draw(st.sampled_from(sorted(FILES)))
    number = draw(st.sampled_from(sorted(FILES[which])))
    data = FILES[which][number]
    kind = draw(st.sampled_from(["truncate", "extend", "flip", "overwrite", "prefix"]))
    if kind == "truncate":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif kind == "extend":
        data = data + draw(st.binary(min_size=1, max_size=64))
    elif kind == "prefix":
        data = draw(st.binary(min_size=1, max_size=64)) + data
    elif kind == "flip":
        buf = bytearray(data)
        for bit in draw(st.lists(st.integers(0, 8 * len(buf) - 1), min_size=1, max_size=8)):
            buf[bit // 8] ^= 1 << (bit % 8)
        data = bytes(buf)
    else:
        start = draw(st.integers(0, len(data) - 1))
        patch = draw(st.binary(min_size=1, max_size=16))
        data = data[:start] + patch + data[start + len(patch) :]
    return which, number, data, kind


@settings(max_examples=scaled(400), deadline=None)
@given(mutated_shard_files())
def test_mutated_shard_files_raise_only_shard_format_errors(case: Any) -> None:
    which, number, raw, kind = case
    MUTATIONS[f"precomputed shard file ({kind})"] += 1
    spec = SPECS[which]
    try:
        ids, entries = read_shard(spec, number, raw)
    except ShardFormatError as err:
        assert "x.shard" in str(err)
        return
    listing_ok(spec, number, raw, ids, entries)


VALUES = st.one_of(st.sampled_from(SPECIAL), st.integers(0, 400))


@st.composite
def forged_minishards(draw: st.DrawFn) -> tuple[int, int, bytes]:
    """A shard file whose minishard indexes are forged (ids, gaps and sizes of any uint64,
    2**63 and 2**64-1 included), raw or gzip'd, behind a shard index that points at them."""
    which = draw(st.sampled_from(sorted(FILES)))
    spec = SPECS[which]
    number = draw(st.sampled_from(sorted(FILES[which])))
    body = draw(st.binary(min_size=0, max_size=200))
    head = spec.index_nbytes
    index = np.zeros((1 << spec.minishard_bits, 2), dtype="<u8")
    tails = []
    position = len(body)
    for minishard in range(1 << spec.minishard_bits):
        n = draw(st.integers(0, 4))
        if not n:
            continue
        table = [[draw(VALUES) for _ in range(n)] for _ in range(3)]
        raw = struct.pack(f"<{3 * n}Q", *(v % 2**64 for row in table for v in row))
        if draw(st.booleans()):
            raw = raw[: draw(st.integers(0, len(raw)))]  # not a multiple of 24
        if spec.minishard_index_encoding == "gzip":
            raw = gzip.compress(raw, mtime=0)
        index[minishard] = (position, position + len(raw))
        tails.append(raw)
        position += len(raw)
    if draw(st.booleans()):  # and a forged shard index entry
        index[draw(st.integers(0, len(index) - 1))] = (draw(VALUES), draw(VALUES))
    file = index.tobytes() + body + b"".join(tails)
    assert len(index.tobytes()) == head
    return which, number, file


@settings(max_examples=scaled(1000), deadline=None)
@given(forged_minishards())
def test_forged_minishard_indexes_are_refused_or_valid(case: Any) -> None:
    which, number, raw = case
    MUTATIONS["precomputed minishard index (forged)"] += 1
    spec = SPECS[which]
    try:
        ids, entries = read_shard(spec, number, raw)
    except ShardFormatError as err:
        assert "x.shard" in str(err)
        return
    listing_ok(spec, number, raw, ids, entries)


@settings(
    max_examples=max(10, scaled(20)),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
)
@given(data=st.data())
def test_verify_and_info_on_damaged_shard_files(
    volume: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    path = tmp_path_factory.getbasetemp() / "damaged-shards"
    if path.exists():
        shutil.rmtree(path)
    shutil.copytree(volume, path)
    shards = sorted((path / "1_1_1").glob("*.shard"))
    target = data.draw(st.sampled_from(shards))
    raw = bytearray(target.read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    target.write_bytes(bytes(raw))
    for name in ("verify", "info"):
        MUTATIONS["precomputed shard file (public API)"] += 1
        report = getattr(shardpipe, name)(path)  # a report: a damaged shard is a problem
        assert str(report)
