"""The local backend never follows a symbolic link out of its root.

A file at a key that is a link is refused by name (``UnsafeKeyError``),
wherever it points; a folder on a key's path may be a link only when it
resolves inside the root. Every test checks that the files outside the root
are exactly as they were.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shardpipe.errors import UnsafeKeyError
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.parts import PartReceipt, PartsHandle

STAGING = "arr/.shardpipe/staging/run1"


def _outside(tmp_path: Path) -> Path:
    """A folder beside the root holding a file and a subfolder."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "secret").write_bytes(b"secret bytes, never to be read or changed")
    (outside / "sub" / "c").write_bytes(b"another secret")
    return outside


def _state(folder: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``folder``: a hash of its bytes (files) and its modification time."""
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder",
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def linked(tmp_path: Path) -> tuple[LocalShardStore, Path]:
    """A store whose shard ``arr/c/0`` links to a file outside, ``arr/out`` to a folder outside."""
    outside = _outside(tmp_path)
    root = tmp_path / "root"
    (root / "arr" / "c").mkdir(parents=True)
    (root / "arr" / "c" / "0").symlink_to(outside / "secret")
    (root / "arr" / "out").symlink_to(outside / "sub", target_is_directory=True)
    (root / "arr" / "c" / "1").write_bytes(b"an honest shard")
    return LocalShardStore(root), outside


FILE_LINK_CALLS: dict[str, Callable[[LocalShardStore], Any]] = {
    "get": lambda s: s.get("arr/c/0"),
    "get_range": lambda s: s.get_range("arr/c/0", 0, 4),
    "get_into": lambda s: s.get_into("arr/c/0", bytearray(41)),  # the secret's size
    "size": lambda s: s.size("arr/c/0"),
    "version": lambda s: s.version("arr/c/0"),
    "write_at": lambda s: s.write_at("arr/c/0", 0, [b"X"]),
    "write_ranges": lambda s: s.write_ranges("arr/c/0", [(0, [b"X"])]),
    "append": lambda s: s.append("arr/c/0", [b"X"]),
    "truncate": lambda s: s.truncate("arr/c/0", 0),
    "make_durable": lambda s: s.make_durable(["arr/c/0"]),
    "link from": lambda s: s.link("arr/c/0", "arr/c/2"),
    "copy_part from": lambda s: s.copy_part(s.begin_parts("arr/c/3", STAGING), 0, "arr/c/0", 0, 4),
}

FOLDER_LINK_CALLS: dict[str, Callable[[LocalShardStore], Any]] = {
    "get": lambda s: s.get("arr/out/c"),
    "get_range": lambda s: s.get_range("arr/out/c", 0, 4),
    "get_into": lambda s: s.get_into("arr/out/c", bytearray(14)),
    "size": lambda s: s.size("arr/out/c"),
    "version": lambda s: s.version("arr/out/c"),
    "put": lambda s: s.put("arr/out/c", [b"X"]),
    "put new": lambda s: s.put("arr/out/new/c", [b"X"]),
    "put_streamed": lambda s: s.put_streamed("arr/out/c", iter([b"X"])),
    "write_at": lambda s: s.write_at("arr/out/c", 0, [b"X"]),
    "append": lambda s: s.append("arr/out/c", [b"X"]),
    "truncate": lambda s: s.truncate("arr/out/c", 0),
    "delete": lambda s: s.delete("arr/out/c"),
    "list": lambda s: list(s.list("arr/out/")),
    "list in": lambda s: list(s.list("arr/out/c")),
    "prune": lambda s: s.prune("arr/out"),
    "link to": lambda s: s.link("arr/c/1", "arr/out/c"),
    "link from": lambda s: s.link("arr/out/c", "arr/c/2"),
    "begin_parts": lambda s: s.begin_parts("arr/c/4", "arr/out"),
    "write_part": lambda s: s.write_part(PartsHandle("arr/c/4", "arr/out", STAGING), 0, [b"X"]),
    "finish_parts": lambda s: s.finish_parts(
        PartsHandle("arr/c/4", "arr/out", STAGING), [PartReceipt(0, 1)], b"", b""
    ),
    "abort_parts": lambda s: s.abort_parts(PartsHandle("arr/c/4", "arr/out/sub2", STAGING)),
    "discard_staging": lambda s: s.discard_staging("arr/out/x"),
    "cleanup": lambda s: s.cleanup("arr/out", "arr/c"),
}


@pytest.mark.parametrize("call", FILE_LINK_CALLS.values(), ids=FILE_LINK_CALLS)
def test_a_key_that_is_a_link_is_refused(
    linked: tuple[LocalShardStore, Path], call: Callable[[LocalShardStore], Any]
) -> None:
    store, outside = linked
    before = _state(outside)
    with pytest.raises(UnsafeKeyError, match=r"'arr/c/0'.*symbolic link"):
        call(store)
    assert _state(outside) == before
    assert os.path.islink(os.path.join(store.root, "arr/c/0"))


@pytest.mark.parametrize("call", FOLDER_LINK_CALLS.values(), ids=FOLDER_LINK_CALLS)
def test_a_folder_that_links_outside_is_refused(
    linked: tuple[LocalShardStore, Path], call: Callable[[LocalShardStore], Any]
) -> None:
    store, outside = linked
    before = _state(outside)
    with pytest.raises(UnsafeKeyError, match=r"arr/out.*outside the store's root"):
        call(store)
    assert _state(outside) == before


def test_a_link_at_a_key_is_replaced_or_deleted_never_written_through(
    linked: tuple[LocalShardStore, Path],
) -> None:
    store, outside = linked
    before = _state(outside)
    store.put("arr/c/0", [b"a new shard"])
    assert not os.path.islink(os.path.join(store.root, "arr/c/0"))
    assert store.get("arr/c/0") == b"a new shard"
    (Path(store.root) / "arr/c/5").symlink_to(outside / "secret")
    store.delete("arr/c/5")
    assert not os.path.lexists(os.path.join(store.root, "arr/c/5"))
    assert _state(outside) == before


def test_listing_does_not_enter_linked_folders(linked: tuple[LocalShardStore, Path]) -> None:
    store, _ = linked
    assert list(store.list("arr/")) == ["arr/c/0", "arr/c/1"]  # the link is listed, not followed


def test_folders_that_link_inside_the_root_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "alias").symlink_to(root / "real", target_is_directory=True)
    store = LocalShardStore(root)
    store.put("alias/c/0", [b"through an inner link"])
    assert (root / "real/c/0").read_bytes() == b"through an inner link"
    assert store.get("alias/c/0") == b"through an inner link"
    assert list(store.list("alias/")) == ["alias/c/0"]


def test_a_root_that_is_a_link_is_fine(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "root").symlink_to(tmp_path / "real", target_is_directory=True)
    store = LocalShardStore(tmp_path / "root")
    store.put("arr/c/0", [b"x"])
    assert store.get("arr/c/0") == b"x" and (tmp_path / "real/arr/c/0").exists()


def test_a_staged_part_that_is_a_link_is_not_written_through(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    store = LocalShardStore(tmp_path / "root")
    handle = store.begin_parts("arr/c/0", STAGING)
    Path(store.root, handle.upload, "part-00000").symlink_to(outside / "secret")
    before = _state(outside)
    with pytest.raises(UnsafeKeyError, match="symbolic link"):
        store.write_part(handle, 0, [b"X"])
    assert _state(outside) == before


def test_the_checks_survive_pickling(linked: tuple[LocalShardStore, Path]) -> None:
    import pickle

    store, _ = linked
    store.get("arr/c/1")  # a folder checked and remembered
    copy = pickle.loads(pickle.dumps(store))
    with pytest.raises(UnsafeKeyError):
        copy.get("arr/out/c")
    assert copy.get("arr/c/1") == b"an honest shard"


# -- zarr's side of a local path: ContainedLocalStore ----------------------------------------
def test_zarr_reads_no_linked_shard_or_folder_through_a_local_path(tmp_path: Path) -> None:
    import numpy as np
    import zarr

    import shardpipe
    from shardpipe.storage.resolve import resolve_store

    outside = _outside(tmp_path)
    root = tmp_path / "root"
    shardpipe.to_sharded_zarr(np.arange(64).reshape(8, 8), str(root), shards=(4, 4), chunks=(2, 2))
    (outside / "c0").write_bytes((root / "c/0/0").read_bytes())
    (root / "c/0/0").unlink()
    (root / "c/0/0").symlink_to(outside / "c0")
    (root / "c/1").rename(outside / "c1")
    (root / "c/1").symlink_to(outside / "c1", target_is_directory=True)
    before = _state(outside)
    store = resolve_store(str(root)).zarr_store
    array = zarr.open_array(store, mode="r+")
    for box in [(slice(0, 4), slice(0, 4)), (slice(4, 8), slice(0, 4))]:
        with pytest.raises(UnsafeKeyError):
            array[box]
    with pytest.raises(UnsafeKeyError):
        array[0:2, 0:2] = 1  # a part of the linked shard: read, merged, written
    with pytest.raises(UnsafeKeyError):
        array[4:8, 4:8] = 1  # a whole shard in the linked folder
    assert _state(outside) == before
    np.testing.assert_array_equal(array[0:4, 4:8], np.arange(64).reshape(8, 8)[0:4, 4:8])


def test_contained_stores_keep_unsafe_keys_out(tmp_path: Path) -> None:
    from shardpipe.internals.zarr_core import default_buffer_prototype, sync
    from shardpipe.storage.local.contained import ContainedLocalStore, contained

    outside = _outside(tmp_path)
    (tmp_path / "root").mkdir()
    store = ContainedLocalStore(tmp_path / "root")
    prototype = default_buffer_prototype()
    before = _state(outside)
    for key in ["../outside/secret", "a/../../outside/secret", "/etc/hostname"]:
        with pytest.raises(UnsafeKeyError):
            sync(store.get(key, prototype))
        with pytest.raises(UnsafeKeyError):
            sync(store.set(key, prototype.buffer.from_bytes(b"x")))
        with pytest.raises(UnsafeKeyError):
            sync(store.delete(key))
    assert _state(outside) == before
    assert isinstance(contained(str(tmp_path)), ContainedLocalStore)
    assert contained("s3://bucket/x") == "s3://bucket/x"
