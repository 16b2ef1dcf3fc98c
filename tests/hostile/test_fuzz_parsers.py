"""Untrusted bytes: every parser of stored bytes meets mutated and forged input.

Parsers under test: the shard index (``decode_index``, ``read_index``, and
``read_checked_index`` that updates, compaction and ``info`` slice chunks
by), ``zarr.json`` (``shardpipe.metadata``, and through ``verify``, ``info``,
``repair``, ``compact``, region writes, groups and the dataset reader), the
job marker and undo records (``shardpipe.journal``).

The invariant checked after every mutation: only a ``ShardpipeError``
subclass escapes (never ``KeyError``, ``TypeError``, ``struct.error``,
``MemoryError``, ``OverflowError`` or a json error), its message names the
file, an entry that is accepted is one a valid shard can have, and nothing
is allocated in proportion to sizes a document merely declares.

``MUTATIONS`` counts the mutated inputs each test tried; the module prints
the totals at its end (``pytest -s``).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import re
import shutil
import struct
import time
import tracemalloc
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardpipe
from shardpipe.errors import JobConflictError, MetadataError, ShardFormatError, ShardpipeError
from shardpipe.formats.base import ShardIndex, assemble_shard
from shardpipe.formats.zarr_sharding import ZarrShardingFormat, decode_index
from shardpipe.journal.markers import JobKeys, read_marker
from shardpipe.journal.undo import UndoRecord
from shardpipe.storage.keys import JOB_DIR
from tests.support.examples import scaled
from tests.support.fork_server import ForkServer

MUTATIONS: Counter[str] = Counter()
"""Mutated inputs tried, by parser."""

EMPTY_INT = 2**64 - 1
KEY = "arr/c/0/1"
JSON_KEY = "arr/zarr.json"
SHAPE, SHARDS, CHUNKS = (4, 4, 4), (2, 2, 2), (1, 1, 2)


@pytest.fixture(scope="module", autouse=True)
def _report_mutations() -> Iterator[None]:
    yield
    total = sum(MUTATIONS.values())
    detail = ", ".join(f"{k} {v}" for k, v in sorted(MUTATIONS.items()))
    print(f"\nparser mutations run: {total} ({detail})")


@pytest.fixture(scope="module")
def base_array(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small sharded array: 8 shards of 4 inner chunks, zstd inside."""
    path = tmp_path_factory.mktemp("fuzz") / "base.zarr"
    data = np.arange(64, dtype="u2").reshape(SHAPE)
    shardpipe.to_sharded_zarr(data, str(path), shards=SHARDS, chunks=CHUNKS)
    return path


def _copy(base: Path, where: Path) -> Path:
    if where.exists():
        shutil.rmtree(where)
    shutil.copytree(base, where)
    return where


# -- shard indexes --------------------------------------------------------------------------------
FORMATS = [
    ZarrShardingFormat((2, 2), "end"),
    ZarrShardingFormat((2, 2), "start"),
    ZarrShardingFormat((3,), "end"),
    ZarrShardingFormat((1,), "start"),
]


@st.composite
def valid_shards(draw: st.DrawFn) -> tuple[ZarrShardingFormat, bytes]:
    """A shard format and the bytes of a valid shard of it."""
    fmt = draw(st.sampled_from(FORMATS))
    slots = draw(st.lists(st.integers(0, fmt.n_slots - 1), unique=True))
    encoded = [(slot, draw(st.binary(min_size=1, max_size=24))) for slot in slots]
    return fmt, b"".join(bytes(b) for b in assemble_shard(fmt, encoded, shard=(0, 0)))


def stamp(entries: list[tuple[int, int]]) -> bytes:
    """An index of ``entries`` with a valid CRC32C (made with the ``crc32c`` package)."""
    body = struct.pack(f"<{2 * len(entries)}Q", *itertools.chain.from_iterable(entries))
    return body + crc32c.crc32c(body).to_bytes(4, "little")


def splice_index(fmt: ZarrShardingFormat, shard: bytes, index: bytes) -> bytes:
    """``shard`` with its index replaced by ``index`` (of the same size)."""
    n = fmt.index_nbytes()
    return index + shard[n:] if fmt.index_location == "start" else shard[:-n] + index


def entries_ok(entries: list[tuple[int, int]], size: int, index_range: tuple[int, int]) -> bool:
    """An independent oracle, in Python integers: could a valid shard have these entries?"""
    spans = []
    for offset, nbytes in entries:
        if offset == EMPTY_INT and nbytes == EMPTY_INT:
            continue
        if EMPTY_INT in (offset, nbytes) or offset + nbytes > size:
            return False
        if offset < index_range[1] and offset + nbytes > index_range[0]:
            return False
        spans.append((offset, offset + nbytes))
    spans.sort()
    return all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def read_checked(fmt: ZarrShardingFormat, data: bytes) -> tuple[ShardIndex, tuple[int, int]]:
    from shardpipe.formats.base import read_checked_index

    return read_checked_index(fmt, lambda a, b: data[a:b], len(data), KEY, shard=(0, 0))


def _entries(index: ShardIndex) -> list[tuple[int, int]]:
    return [(int(o), int(n)) for o, n in index.entries]


@st.composite
def mutated_shards(draw: st.DrawFn) -> tuple[ZarrShardingFormat, bytes, str]:
    """A valid shard cut short, extended, bit-flipped or with bytes replaced."""
    fmt, data = draw(valid_shards())
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
    return fmt, data, kind


@settings(max_examples=scaled(400))
@given(mutated_shards())
def test_mutated_shards_raise_only_shard_format_errors(case: Any) -> None:
    fmt, data, kind = case
    MUTATIONS[f"shard bytes ({kind})"] += 1
    try:
        index, where = read_checked(fmt, data)
    except ShardFormatError as err:
        assert KEY in str(err)
        return
    assert entries_ok(_entries(index), len(data), where)


SPECIAL = [0, 1, 2, 3, 7, 8, 16, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 2, EMPTY_INT]


@st.composite
def forged_shards(draw: st.DrawFn) -> tuple[ZarrShardingFormat, bytes, list[tuple[int, int]]]:
    """A shard whose index is forged (offsets past the end, overlaps, 2**63 and 2**64-2
    lengths, half-empty entries) and re-stamped with a valid CRC32C."""
    fmt, data = draw(valid_shards())
    n = fmt.index_nbytes()
    size = len(data)
    value = st.one_of(
        st.sampled_from(SPECIAL),
        st.sampled_from([size - 1, size, size + 1, n, size - n]).filter(lambda v: v >= 0),
        st.integers(0, size + 8),
    )
    entries = [(draw(value), draw(value)) for _ in range(fmt.n_slots)]
    return fmt, splice_index(fmt, data, stamp(entries)), entries


@settings(max_examples=scaled(1000))
@given(forged_shards())
def test_forged_indexes_with_a_valid_crc_are_refused_exactly_when_wrong(case: Any) -> None:
    fmt, data, entries = case
    MUTATIONS["shard index (forged, valid CRC)"] += 1
    where = fmt.index_range(len(data))
    index, _ = fmt.read_index(lambda a, b: data[a:b], len(data), shard=(0, 0))  # the CRC is valid
    assert _entries(index) == entries
    if entries_ok(entries, len(data), where):
        assert _entries(read_checked(fmt, data)[0]) == entries
    else:
        with pytest.raises(ShardFormatError, match=re.escape(KEY)):
            read_checked(fmt, data)


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ([(0, 2**63), (EMPTY_INT,) * 2], "lie outside"),
        ([(4, 2**64 - 2), (EMPTY_INT,) * 2], "lie outside"),
        ([(2**63, 4), (EMPTY_INT,) * 2], "lie outside"),
        ([(0, EMPTY_INT), (EMPTY_INT,) * 2], "only one of offset"),
        ([(EMPTY_INT, 0), (EMPTY_INT,) * 2], "only one of offset"),
        ([(0, 6), (4, 4)], "overlaps the bytes"),
        ([(0, 4), (8, 20)], "overlap the index"),
    ],
)
def test_forged_entries_are_named(entries: list[tuple[int, int]], problem: str) -> None:
    MUTATIONS["shard index (forged, valid CRC)"] += 1
    fmt = ZarrShardingFormat((2,), "end")
    data = bytes(8) + stamp(entries)
    with pytest.raises(ShardFormatError, match=problem) as caught:
        read_checked(fmt, data)
    assert KEY in str(caught.value)


def test_huge_slot_counts_are_refused_without_reading_or_allocating() -> None:
    reads: list[tuple[int, int]] = []

    def read(a: int, b: int) -> bytes:
        reads.append((a, b))
        return b""

    tracemalloc.start()
    try:
        for per_axis in ([2**20] * 3, [2**32, 2**32], [2**62]):
            MUTATIONS["shard index (huge slot count)"] += 1
            fmt = ZarrShardingFormat(tuple(per_axis))
            with pytest.raises(ShardFormatError, match="too short"):
                fmt.read_index(read, 10_000, shard=(0, 0))
            with pytest.raises(ShardFormatError, match="expected"):
                decode_index(bytes(100), fmt.n_slots)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not reads
    assert peak < 1 << 20


def test_a_million_forged_entries_are_checked_fast() -> None:
    """Vectorised: 2**20 entries, every one wrong, checked in well under a second."""
    from shardpipe.formats.base import check_entries

    n = 2**20
    entries = np.zeros((n, 2), dtype=np.uint64)
    entries[:, 1] = 2**63
    MUTATIONS["shard index (huge slot count)"] += 1
    start = time.perf_counter()
    with pytest.raises(ShardFormatError, match="and 1048573 more"):
        check_entries(ShardIndex(entries), 16 * n + 4, (16 * n, 16 * n + 4))
    assert time.perf_counter() - start < 5


# -- zarr.json ------------------------------------------------------------------------------------
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from([0, -1, 1, 2**31, 2**40, 2**63, 2**64, "NaN", "", "regular", "bytes"])
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
ABSURD = st.sampled_from(
    [
        [2**40] * 3,
        [2**63] * 3,
        [2**64] * 3,
        [2**20, 2**20, 2**20],
        [0, 0, 0],
        [-1, 2, 2],
        [1.5, 2, 2],
        [True, 2, 2],
        [2] * 65,
        [],
        "2,2,2",
        None,
    ]
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated_documents(draw: st.DrawFn, document: dict[str, Any]) -> Any:
    """``document`` with one value replaced (by anything JSON, or an absurd shape), or deleted."""
    doc = json.loads(json.dumps(document))
    path = draw(st.sampled_from(list(_paths(doc))))
    if not path:
        return draw(JSON_VALUES)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    if draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = draw(ABSURD | JSON_VALUES)
    return doc


def _parse(data: bytes, key: str = JSON_KEY) -> Any:
    from shardpipe.stored.metadata import parse_node_metadata

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr warns when it repairs a reading
        return parse_node_metadata(data, key)


def _check_parsed(node: Any) -> None:
    """Whatever a parsed document says, shardpipe computes with it without a stray exception."""
    from shardpipe.stored.array_document import MAX_SHARD_SLOTS
    from shardpipe.stored.metadata import format_of, is_sharded, layout_of

    if hasattr(node, "shape") and is_sharded(node):
        layout = layout_of(node)
        assert layout.n_chunks_per_shard <= MAX_SHARD_SLOTS
        format_of(node).index_nbytes()


@pytest.fixture(scope="module")
def array_document(base_array: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((base_array / "zarr.json").read_bytes())
    return document


def test_the_valid_document_still_parses(array_document: dict[str, Any]) -> None:
    node = _parse(json.dumps(array_document).encode())
    assert tuple(node.shape) == SHAPE
    _check_parsed(node)


@settings(
    max_examples=scaled(400),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_mutated_zarr_json_raises_only_metadata_errors(
    array_document: dict[str, Any], data: st.DataObject
) -> None:
    doc = data.draw(mutated_documents(array_document))
    MUTATIONS["zarr.json (mutated document)"] += 1
    try:
        _check_parsed(_parse(json.dumps(doc).encode()))
    except MetadataError as err:
        assert JSON_KEY in str(err)
    except ShardFormatError:
        pass  # parsed, but not sharded the way shardpipe reads (said so by format_of)


@settings(
    max_examples=scaled(200),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_and_broken_json_bytes_raise_only_metadata_errors(
    array_document: dict[str, Any], data: st.DataObject
) -> None:
    text = json.dumps(array_document).encode()
    raw = data.draw(
        st.one_of(
            st.binary(max_size=64),
            JSON_VALUES.map(lambda v: json.dumps(v).encode()),
            st.integers(0, len(text) - 1).map(lambda n: text[:n]),
            st.just(b"[" * 100_000 + b"]" * 100_000),
            st.just(b'{"a":' * 50_000 + b"1" + b"}" * 50_000),
            st.just(b"\xff\xfe\x00"),
        )
    )
    MUTATIONS["zarr.json (random bytes)"] += 1
    with pytest.raises(MetadataError, match=re.escape(JSON_KEY)):
        _parse(raw)


ABSURD_DOCUMENTS = {
    "shape 2**40 x3": {"shape": [2**40] * 3},
    "shape 2**40 x3, one shard of 2**60 chunks": {
        "shape": [2**40] * 3,
        "chunk_grid": [2**40] * 3,
        "inner": [2**20] * 3,
    },
    "shape 2**40 x3, one chunk of 2**121 bytes": {
        "shape": [2**40] * 3,
        "chunk_grid": [2**40] * 3,
        "inner": [2**40] * 3,
    },
    "shape 2**40 x3 in shards of 2**13": {
        "shape": [2**40] * 3,
        "chunk_grid": [2**13] * 3,
        "inner": [2**13] * 3,
    },
}

VAST_GRIDS = frozenset({"shape 2**40 x3"})
"""A valid document of a vast, nearly empty grid (2**120 shards): verify, info, repair and
compact look at the shards present (found by listing) and succeed; the other cases are refused
as broken."""


def absurd(document: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    doc = json.loads(json.dumps(document))
    doc["shape"] = change["shape"]
    if "chunk_grid" in change:
        doc["chunk_grid"]["configuration"]["chunk_shape"] = change["chunk_grid"]
        doc["codecs"][0]["configuration"]["chunk_shape"] = change["inner"]
    return doc


def _call(name: str, store: Path) -> str:
    """Run a public function on ``store``; return what it gave or raised (not a ShardpipeError:
    the test fails)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if name == "update":
                shardpipe.to_sharded_zarr(
                    np.ones((1, 1, 1), dtype="u2"), str(store), region=(slice(0, 1),) * 3
                )
                return "written"
            if name == "compact":
                return str(shardpipe.compact(str(store), threshold=0.0))
            result = getattr(shardpipe, name)(str(store))
        except ShardpipeError as err:
            return f"{type(err).__name__}: {err}"
    if isinstance(result, shardpipe.ArrayInfo):  # a description, with what it could not read
        return "problem reported" if result.problems else "ok"
    return "ok" if getattr(result, "ok", True) else "problem reported"


PUBLIC = ["verify", "info", "repair", "compact", "update"]


@pytest.mark.parametrize("case", sorted(ABSURD_DOCUMENTS))
def test_absurd_shapes_fail_fast_without_allocating(
    base_array: Path, tmp_path: Path, array_document: dict[str, Any], case: str
) -> None:
    store = _copy(base_array, tmp_path / "a.zarr")
    doc = absurd(array_document, ABSURD_DOCUMENTS[case])
    (store / "zarr.json").write_text(json.dumps(doc))
    for name in PUBLIC:
        MUTATIONS["zarr.json (absurd shape, public API)"] += 1
        tracemalloc.start()
        start = time.perf_counter()
        try:
            outcome = _call(name, store)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        if name == "update" and outcome == "written":
            # a region write into a huge sparse array of small shards is valid: it touches one
            assert case == "shape 2**40 x3"
        elif name != "update" and case in VAST_GRIDS:
            expected = "0 of 8 shard(s) rewritten" if name == "compact" else "ok"
            assert outcome.startswith(expected), (name, outcome)
        else:
            assert outcome.startswith("MetadataError") and "zarr.json" in outcome, (name, outcome)
        assert peak < 16 << 20, (name, peak)
        assert time.perf_counter() - start < 30, name


CHILD = """
import resource, sys, warnings
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
warnings.simplefilter("ignore")
import shardpipe
from shardpipe.errors import ShardpipeError
for store in sys.argv[1:]:
    for name in ("verify", "info", "repair", "compact"):
        try:
            getattr(shardpipe, name)(store)
            print(name, "returned")
        except ShardpipeError as err:
            print(name, type(err).__name__)
"""


def test_absurd_shape_under_an_address_space_limit(
    base_array: Path, tmp_path: Path, array_document: dict[str, Any], fork_server: ForkServer
) -> None:
    """In a process limited to 3 GiB of address space: no MemoryError; vast grids are checked,
    the other absurd documents refused with a MetadataError."""
    stores = []
    for i, case in enumerate(sorted(ABSURD_DOCUMENTS)):
        store = _copy(base_array, tmp_path / f"{i}.zarr")
        (store / "zarr.json").write_text(json.dumps(absurd(array_document, ABSURD_DOCUMENTS[case])))
        stores.append(str(store))
    MUTATIONS["zarr.json (absurd shape, public API)"] += 4 * len(stores)
    child = fork_server.start(None, stores, code=CHILD)  # forked: shardpipe already imported
    assert child.wait(timeout=240) == 0, child.stderr()[-3000:]
    outcomes = child.stdout().split("\n")
    expected = [
        "returned" if case in VAST_GRIDS else "MetadataError"
        for case in sorted(ABSURD_DOCUMENTS)
        for _ in range(4)
    ]
    assert [o.split()[1] for o in outcomes if o] == expected, child.stdout()


@settings(
    max_examples=max(5, scaled(20)),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_public_functions_on_a_damaged_zarr_json(
    base_array: Path,
    tmp_path_factory: pytest.TempPathFactory,
    array_document: dict[str, Any],
    data: st.DataObject,
) -> None:
    doc = data.draw(mutated_documents(array_document))
    store = _copy(base_array, tmp_path_factory.getbasetemp() / "damaged.zarr")
    (store / "zarr.json").write_text(json.dumps(doc))
    for name in ("verify", "info", "repair"):
        MUTATIONS["zarr.json (mutated, public API)"] += 1
        start = time.perf_counter()
        _call(name, store)  # a report, or a ShardpipeError; anything else fails the test
        assert time.perf_counter() - start < 30, name


def test_a_broken_zarr_json_inside_a_group_is_named(base_array: Path, tmp_path: Path) -> None:
    root = tmp_path / "g.zarr"
    zarr.open_group(str(root), mode="w")
    _copy(base_array, root / "a")
    for text in ("{", "[]", '{"zarr_format": 3, "node_type": "array"}'):
        MUTATIONS["zarr.json (group member)"] += 2
        (root / "a" / "zarr.json").write_text(text)
        for name in ("verify", "info"):
            with pytest.raises(MetadataError, match=r"a/zarr\.json"):
                getattr(shardpipe, name)(str(root))


@pytest.mark.parametrize("text", ["{", "[1, 2]", "null", '{"zarr_format": 3, "node_type": 7}'])
def test_a_broken_root_document_is_not_missing_consolidated_metadata(
    tmp_path: Path, text: str
) -> None:
    from shardpipe.dataset.existing import consolidated_metadata
    from shardpipe.storage.resolve import resolve_store

    MUTATIONS["zarr.json (consolidated metadata)"] += 1
    zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    (tmp_path / "d.zarr" / "zarr.json").write_text(text)
    with pytest.raises(MetadataError, match=r"zarr\.json"):
        consolidated_metadata(resolve_store(str(tmp_path / "d.zarr")))


# -- forged shards through the public functions ---------------------------------------------------
def _forge(store: Path, shard: str, change: Any) -> bytes:
    """Rewrite the index of ``shard`` with ``change(entries, size)`` and a valid CRC32C."""
    path = store / shard
    data = path.read_bytes()
    fmt = ZarrShardingFormat((2, 2, 1), "end")
    index, _ = fmt.read_index(lambda a, b: data[a:b], len(data), shard=(0, 0))
    entries = _entries(index)
    change(entries, len(data))
    forged = splice_index(fmt, data, stamp(entries))
    path.write_bytes(forged)
    return forged


FORGERIES = {
    "length 2**63": lambda e, size: e.__setitem__(0, (0, 2**63)),
    "length 2**64-2": lambda e, size: e.__setitem__(0, (e[0][0], 2**64 - 2)),
    "offset past the end": lambda e, size: e.__setitem__(0, (size + 100, 4)),
    "half empty": lambda e, size: e.__setitem__(0, (EMPTY_INT, e[0][1])),
    "overlapping chunks": lambda e, size: e.__setitem__(1, (e[0][0], e[1][1])),
    "chunk over the index": lambda e, size: e.__setitem__(0, (size - 70, 4)),
}


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_public_functions_on_a_forged_shard(base_array: Path, tmp_path: Path, forgery: str) -> None:
    shard = "c/0/0/0"
    for name in PUBLIC:
        MUTATIONS["shard index (forged, public API)"] += 1
        store = _copy(base_array, tmp_path / f"{name}.zarr")
        forged = _forge(store, shard, FORGERIES[forgery])
        tracemalloc.start()
        try:
            outcome = _call(name, store)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 16 << 20, (name, peak)
        if name in ("verify", "repair", "info"):  # info reports it too (issue 39)
            assert outcome == "problem reported", (name, outcome)
        else:
            assert outcome.startswith("ShardFormatError") and shard in outcome, (name, outcome)
            assert (store / shard).read_bytes() == forged, name  # left as it was


def test_lengths_adding_up_to_2_64_are_an_impossible_total(
    base_array: Path, tmp_path: Path
) -> None:
    """Four lengths of 2**62 add up to 2**64: summed in uint64 they wrapped to 0, and verify
    called every byte of the shard unused (issue 39)."""
    store = _copy(base_array, tmp_path / "a.zarr")
    shard = "c/0/0/0"

    def lengths_of_2_62(entries: list[tuple[int, int]], size: int) -> None:
        entries[:] = [(0, 2**62)] * len(entries)

    _forge(store, shard, lengths_of_2_62)
    MUTATIONS["shard index (forged, lengths past 2**64)"] += 1
    report = shardpipe.verify(str(store))
    assert report.unused_nbytes == 0  # a fresh array: no shard has unused bytes
    [check] = [c for c in report.shards if c.key == shard]
    assert check.unused_bytes == 0
    total = [p for p in check.problems if "add up to" in p]
    assert total == [
        f"the stored chunks' lengths add up to {2**64:,} bytes, more than the "
        f"{check.nbytes - 68:,} bytes the {check.nbytes:,}-byte shard holds besides its index"
    ]


def _zstd_frame(declared: int, payload: bytes) -> bytes:
    """A zstd frame of one raw block whose header declares ``declared`` bytes of content."""
    header = struct.pack("<IB", 0xFD2FB528, 0b1110_0000) + struct.pack("<Q", declared)
    block = (1 | len(payload) << 3).to_bytes(3, "little")
    return header + block + payload


def test_a_zstd_chunk_declaring_2_40_bytes_is_reported_without_allocating_them(
    base_array: Path, tmp_path: Path
) -> None:
    store = _copy(base_array, tmp_path / "z.zarr")
    document = json.loads((store / "zarr.json").read_bytes())
    names = [c["name"] for c in document["codecs"][0]["configuration"]["codecs"]]
    assert "zstd" in names
    chunk = _zstd_frame(2**40, bytes(4))
    if names[-1] == "crc32c":  # chunk checksums: the frame sits under a valid CRC32C
        chunk += crc32c.crc32c(chunk).to_bytes(4, "little")
    fmt = ZarrShardingFormat((2, 2, 1), "end")
    (store / "c/0/0/0").write_bytes(
        b"".join(bytes(b) for b in assemble_shard(fmt, [(0, chunk)], shard=(0, 0, 0)))
    )
    MUTATIONS["zstd frame (declared 2**40 bytes)"] += 1
    tracemalloc.start()
    try:
        report = shardpipe.verify(str(store))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not report.ok
    assert [key for key, _ in report.problems] == ["c/0/0/0"]
    assert peak < 64 << 20


# -- job markers and undo records -----------------------------------------------------------------
class _OneObject:
    """A store holding one object (all ``read_marker`` reads)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def get(self, key: str) -> bytes | None:
        return self.data


MARKER = {"job": "a" * 32, "action": "write", "host": "h", "pid": 12345, "started": 1.7e9}
KEYS = JobKeys("arr/")


@settings(max_examples=scaled(200))
@given(
    st.one_of(
        mutated_documents(MARKER),
        st.binary(max_size=40).map(lambda b: {"raw": b.hex()}),
        st.sampled_from(
            [
                {**MARKER, "pid": 2**70},
                {**MARKER, "pid": -5},
                {**MARKER, "pid": True},
                {**MARKER, "started": 1e300},
                {**MARKER, "started": float("nan")},
                {**MARKER, "started": "yesterday"},
                {**MARKER, "host": 5},
                [MARKER],
            ]
        ),
    )
)
def test_job_markers_read_or_raise_a_conflict_naming_the_marker(document: Any) -> None:
    MUTATIONS["job marker"] += 1
    try:
        marker = read_marker(_OneObject(json.dumps(document).encode()), KEYS)  # type: ignore[arg-type]
    except JobConflictError as err:
        assert KEYS.marker in str(err)
        return
    assert marker is not None
    marker.describe()  # whatever it says, a marker read is one shardpipe can use
    marker.is_stale()


def _record(shard: str = "arr/c/0/0/0") -> tuple[str, bytes]:
    record = UndoRecord(shard, 100, ((0, b"abcd"), (60, b"xyz")))
    key = KEYS.undo_key("job1", shard)
    return key, record.encode()


@st.composite
def mutated_records(draw: st.DrawFn) -> bytes:
    _, data = _record()
    kind = draw(st.sampled_from(["truncate", "extend", "flip", "header"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "extend":
        return data + draw(st.binary(min_size=1, max_size=16))
    if kind == "flip":
        buf = bytearray(data)
        for bit in draw(st.lists(st.integers(0, 8 * len(buf) - 1), min_size=1, max_size=4)):
            buf[bit // 8] ^= 1 << (bit % 8)
        return bytes(buf)
    header = {"key": "arr/c/0/0/0", "size": 100, "ranges": [[0, 4], [60, 3]]}
    forged = draw(mutated_documents(header))
    body = json.dumps(forged).encode()
    length = draw(st.sampled_from([len(body), len(body) + 1, 2**32 - 1, 0]))
    return struct.pack("<I", length) + body + b"abcdxyz"


@settings(max_examples=scaled(400))
@given(mutated_records())
def test_undo_records_decode_or_raise_metadata_errors(data: bytes) -> None:
    key, _ = _record()
    MUTATIONS["undo record"] += 1
    try:
        record = UndoRecord.decode(data, key, KEYS.array)
    except MetadataError as err:
        assert key in str(err)
        return
    assert record.key == "arr/c/0/0/0"
    assert all(o >= 0 and o + len(b) <= record.size for o, b in record.ranges)


@pytest.mark.parametrize(
    "shard", ["arr/../victim.bin", "../victim.bin", "arr/./../victim.bin", "arr/zarr.json"]
)
def test_a_forged_undo_record_never_writes_outside_the_array(
    base_array: Path, tmp_path: Path, shard: str
) -> None:
    MUTATIONS["undo record"] += 1
    root = tmp_path / "root"
    store = _copy(base_array, root / "arr")
    victim = root / "victim.bin"
    victim.write_bytes(b"precious" * 4)
    zarr_json = (store / "zarr.json").read_bytes()
    record = UndoRecord(shard, 4, ((0, b"GONE"),))
    job = "deadbeef"
    name = hashlib.sha1(shard.encode()).hexdigest()
    where = store / JOB_DIR / "undo" / job / name
    where.parent.mkdir(parents=True)
    where.write_bytes(record.encode())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shardpipe.repair(str(root), "arr")
    assert victim.read_bytes() == b"precious" * 4
    assert (store / "zarr.json").read_bytes() == zarr_json
    assert not where.exists()


IDENTITY = {"source": {"dask": "abc"}, "target": {"shape": [4, 4]}}


@settings(max_examples=scaled(200))
@given(
    st.one_of(
        mutated_documents({**IDENTITY, "state": "running"}).map(lambda d: json.dumps(d).encode()),
        st.binary(max_size=40),
        st.just(b"[" * 100_000 + b"]" * 100_000),
        st.just(b'{"source": ' * 50_000 + b"1" + b"}" * 50_000),
    )
)
def test_job_records_read_or_raise_a_shardpipe_error(data: bytes) -> None:
    """The record a resumed write (or rechunk) compares itself with (``.shardpipe/write.json``)."""
    from shardpipe.journal.job_record import read_record
    from shardpipe.storage.keys import WRITE_RECORD
    from shardpipe.storage.resolve import ResolvedStore
    from shardpipe.write.resume import check_same_job

    MUTATIONS["job record"] += 1
    target = ResolvedStore(None, _OneObject(data), "arr")  # type: ignore[arg-type]
    try:
        record = read_record(target)
    except MetadataError as err:
        assert f"arr/{WRITE_RECORD}" in str(err)
        return
    assert isinstance(record, dict)
    with contextlib.suppress(ShardpipeError):
        check_same_job(target, IDENTITY, True)
