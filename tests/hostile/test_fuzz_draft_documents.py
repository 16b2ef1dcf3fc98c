"""Untrusted bytes: the documents of the sharding storage-transformer draft meet mutations.

Parsers under test: the translation of a draft array's ``.array.json``
(``translate_array``), of a group's ``.group.json`` (``translate_group``),
the reading of a whole hierarchy (``read_draft``: the entry point
``zarr.json``, every document under ``meta/``, node names from the listing)
and, through them, ``migrate(dry_run=True)``, ``verify`` and ``info``.

The invariant checked after every mutation, as in ``test_fuzz_parsers``:
only a ``ShardpipeError`` subclass escapes (``UnsupportedLegacyError``,
``MetadataError``, ``UnsafeKeyError``...), never ``KeyError``,
``TypeError``, ``AttributeError``, ``OverflowError`` or a JSON error; and
what is accepted is a translation zarr-python reads.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardpipe
from shardpipe.errors import ShardpipeError
from shardpipe.internals.zarr_core import default_buffer_prototype, sync
from shardpipe.legacy.hierarchy import read_draft
from shardpipe.legacy.metadata import translate_array, translate_group
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.storage.zarr_store import ZarrShardStore
from shardpipe.stored.metadata import parse_array_metadata
from tests.support import DRAFT_FIXTURES
from tests.support.examples import scaled

FIXTURES = DRAFT_FIXTURES
MUTATIONS: Counter[str] = Counter()
"""Mutated inputs tried, by parser."""

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from([0, -1, 1, 2**31, 2**40, 2**63, 2**64, 10.5, "", "C", "F", "/", "."])
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
ABSURD = st.sampled_from(
    [
        [2**40] * 3,
        [2**63, 1],
        [2**64],
        [2**20, 2**20, 2**20],
        [0, 0],
        [-1, 2],
        [10.5, 12],
        [True, 2],
        ["12", 12],
        [2] * 65,
        [],
        "12,12",
        None,
        {"extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0"},
    ]
)


@pytest.fixture(scope="module", autouse=True)
def _report_mutations() -> Iterator[None]:
    yield
    total = sum(MUTATIONS.values())
    detail = ", ".join(f"{k} {v}" for k, v in sorted(MUTATIONS.items()))
    print(f"\ndraft document mutations run: {total} ({detail})")


def _documents(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """``(path, document)`` of every fixture document of ``kind`` (``array`` or ``group``)."""
    found = []
    for hierarchy in ("hierarchy", "edge", "root0d"):
        meta = FIXTURES / hierarchy / "meta"
        for file in sorted(meta.rglob(f"*.{kind}.json")):
            found.append((f"{hierarchy}:{file.relative_to(meta)}", json.loads(file.read_text())))
    return found


ARRAYS = _documents("array")
GROUPS = _documents("group")


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw: st.DrawFn, documents: list[tuple[str, dict[str, Any]]]) -> Any:
    """One of ``documents`` with one value replaced (anything JSON, absurd sizes) or deleted."""
    _, document = draw(st.sampled_from(documents))
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


def _translate(document: Any) -> None:
    """Translate an array document; what is accepted must be a v3 document zarr reads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zarr warns when it repairs a reading
        array = translate_array("x", document)
        parse_array_metadata(array.document, "x (again)")
    assert array.n_slots >= 1
    assert len(array.shard_grid) == len(array.document["shape"])
    assert array.shard_format.index_nbytes() == 16 * array.n_slots


def test_every_fixture_document_translates() -> None:
    for _, document in ARRAYS:
        _translate(document)
    for _, document in GROUPS:
        assert translate_group(document)["node_type"] == "group"


@settings(max_examples=scaled(400))
@given(mutated(ARRAYS))
def test_mutated_array_documents_raise_only_shardpipe_errors(document: Any) -> None:
    MUTATIONS["array.json (mutated)"] += 1
    try:
        _translate(document)
    except ShardpipeError as err:
        assert "'x'" in str(err)


@settings(max_examples=scaled(120))
@given(mutated(GROUPS))
def test_mutated_group_documents_raise_only_shardpipe_errors(document: Any) -> None:
    MUTATIONS["group.json (mutated)"] += 1
    try:
        translated = translate_group(document)
    except ShardpipeError:
        return
    json.dumps(translated)  # a JSON document: it is what gets written
    assert isinstance(translated["attributes"], dict)


# -- whole hierarchies in a store ---------------------------------------------------------------
def _hierarchy() -> dict[str, bytes]:
    root = FIXTURES / "hierarchy"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


HIERARCHY = _hierarchy()
DOCUMENT_KEYS = sorted(k for k in HIERARCHY if k.endswith(".json"))


def _store(files: dict[str, bytes]) -> ResolvedStore:
    """The files in a ``MemoryStore``, which holds any key (``meta/root/...array.json`` too)."""
    memory = zarr.storage.MemoryStore()
    for key, data in files.items():
        sync(memory.set(key, default_buffer_prototype().buffer.from_bytes(data)))
    return ResolvedStore(memory, ZarrShardStore(memory), "")


@st.composite
def damages(draw: st.DrawFn) -> tuple[str, str, bytes | str]:
    """One damage of one document: mutated, replaced by bytes, cut, or renamed."""
    key = draw(st.sampled_from(DOCUMENT_KEYS))
    how = draw(st.sampled_from(["mutate", "bytes", "cut", "rename"]))
    if how == "mutate":
        document = json.loads(HIERARCHY[key])
        return key, how, json.dumps(draw(mutated([(key, document)]))).encode()
    if how == "bytes":
        as_json = JSON_VALUES.map(lambda v: json.dumps(v).encode())
        return key, how, draw(st.binary(max_size=64) | as_json)
    if how == "cut":
        return key, how, HIERARCHY[key][: draw(st.integers(0, len(HIERARCHY[key]) - 1))]
    names = ["..", ".", "", "a/..", "a//b", "x\\y", "../../up", "meta", "data", "a/b/c"]
    return key, how, draw(st.sampled_from(names))


def damaged(damage: tuple[str, str, bytes | str]) -> dict[str, bytes]:
    """The golden hierarchy with ``damage`` done."""
    key, how, value = damage
    files = dict(HIERARCHY)
    if how != "rename":
        assert isinstance(value, bytes)
        files[key] = value
    elif key.startswith("meta/root/"):
        kind = ".array.json" if key.endswith(".array.json") else ".group.json"
        files[f"meta/root/{value}{kind}"] = files.pop(key)
    return files


@settings(max_examples=scaled(200))
@given(damages())
def test_damaged_hierarchies_raise_only_shardpipe_errors(damage: Any) -> None:
    MUTATIONS["draft hierarchy (damaged document)"] += 1
    target = _store(damaged(damage))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            draft = read_draft(target, strict=False)
    except ShardpipeError:
        return
    if draft is not None:
        for array in draft.arrays:
            parse_array_metadata(array.document, array.path or "/")
        json.dumps(draft.groups)


@pytest.fixture(scope="module")
def draft_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-draft")


@settings(
    max_examples=max(10, scaled(20)),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(damage=damages())
def test_public_functions_on_a_damaged_draft(draft_copy: Path, damage: Any) -> None:
    MUTATIONS["draft hierarchy (damaged, public API)"] += 3
    files = damaged(damage)
    where = draft_copy / "draft"
    if where.exists():
        shutil.rmtree(where)
    for key, data in files.items():
        if "\\" in key or any(part in ("", ".", "..") for part in key.split("/")):
            continue  # a name no local folder can hold (the store test covers it)
        (where / key).parent.mkdir(parents=True, exist_ok=True)
        (where / key).write_bytes(data)
    before = {p: p.read_bytes() for p in where.rglob("*") if p.is_file()}
    for call in (
        lambda: shardpipe.migrate(where, dry_run=True),
        lambda: shardpipe.verify(where),
        lambda: shardpipe.info(where),
    ):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                call()
        except ShardpipeError:
            pass
    assert {p: p.read_bytes() for p in where.rglob("*") if p.is_file()} == before
