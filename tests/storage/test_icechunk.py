"""Writes into Icechunk sessions: one task per shard through forks, merged, committed.

Everything is read back by zarr-python from Icechunk's own sessions (a
read-only session of the branch or of a snapshot), never from shardpipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dask.array as da
import icechunk  # in the test extra: a missing one must fail, not skip
import numpy as np
import pytest
import xarray as xr
import zarr

import shardpipe
from shardpipe.errors import InvalidArgumentError, TransactionConflictError
from tests.support.fork_server import ForkServer, wait_for_word
from tests.support.readers import assert_same

icechunk.set_logs_filter("error")  # its warnings about local storage go to stderr


def _repo(tmp_path: Path) -> Any:
    return icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))


def _read(repo: Any, path: str, **ref: Any) -> np.ndarray:
    session = repo.readonly_session(**(ref or {"branch": "main"}))
    return np.asarray(zarr.open_array(session.store, path=path, mode="r")[...])


def _data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 300, shape) * rng.integers(0, 2, shape)).astype("uint16")


@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("dask_chunks", [(13, 21, 40), (32, 32, 32), (60, 70, 50)])
def test_write_commit_and_read_back(
    tmp_path: Path, index_location: str, dask_chunks: tuple[int, ...]
) -> None:
    repo = _repo(tmp_path)
    data = _data((60, 70, 50))
    session = repo.writable_session("main")
    first = session.snapshot_id
    with pytest.warns(FutureWarning, match=r"prepare_write\(...\).execute\(commit=...\)") as w:
        snapshot = shardpipe.to_sharded_zarr(  # deprecated: the id, not the array
            da.from_array(data, chunks=dask_chunks),
            session,
            path="g/a",
            shards=(32, 32, 32),
            chunks=(8, 16, 16),
            index_location=index_location,
            commit="first write",
        )
    assert w[0].filename == __file__  # the warning names the caller's line
    assert isinstance(snapshot, str)
    assert repo.lookup_branch("main") == snapshot
    assert_same(_read(repo, "g/a"), data)
    array = zarr.open_array(repo.readonly_session("main").store, path="g/a", mode="r")
    sharding = array.metadata.codecs[0]
    assert type(sharding).__name__ == "ShardingCodec"
    assert str(getattr(sharding.index_location, "value", sharding.index_location)) == index_location
    # one Icechunk chunk per shard: 2 x 3 x 2 shards
    assert (
        len(repo.diff(from_snapshot_id=first, to_snapshot_id=snapshot).updated_chunks["/g/a"]) == 12
    )


def test_without_commit_the_session_holds_the_changes(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    data = _data((40, 40))
    session = repo.writable_session("main")
    first = session.snapshot_id
    out = shardpipe.to_sharded_zarr(
        da.from_array(data, chunks=9), session, path="a", shards=(16, 16), chunks=(8, 8)
    )
    assert isinstance(out, zarr.Array)
    assert_same(np.asarray(out[...]), data)  # the session sees its own changes
    assert repo.lookup_branch("main") == first  # nobody else does yet
    assert session.status().updated_chunks["/a"]
    snapshot = session.commit("by hand")
    assert_same(_read(repo, "a"), data)
    assert repo.lookup_branch("main") == snapshot


def test_shards_in_parts_are_joined_on_a_worker(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    data = _data((64, 64, 64), seed=3)
    job = shardpipe.prepare_write(
        da.from_array(data, chunks=(23, 40, 64)),
        repo.writable_session("main"),
        path="p",
        shards=(32, 64, 64),
        chunks=(8, 16, 16),
        max_mem="200KB",
        compressors=None,
    )
    assert job.plan.max_parts_per_shard > 1
    report = job.execute(commit="parts")
    assert report.shards_written == 2 and report.snapshot_id == repo.lookup_branch("main")
    assert_same(_read(repo, "p"), data)


def test_region_append_and_time_travel(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    data = _data((48, 40))
    first = (
        shardpipe.prepare_write(
            da.from_array(data, chunks=13),
            repo.writable_session("main"),
            path="a",
            shards=(16, 16),
            chunks=(8, 8),
        )
        .execute(commit="create")
        .snapshot_id
    )
    patch = np.full((10, 12), 999, dtype="uint16")
    report = shardpipe.prepare_write(
        da.from_array(patch, chunks=5),
        repo.writable_session("main"),
        path="a",
        region=(slice(5, 15), slice(14, 26)),
    ).execute(commit="patch")
    assert report.strategies == {"rewrite": 2}  # inside a transaction, shards are rewritten
    second = report.snapshot_id
    more = _data((20, 40), seed=9)
    third = (
        shardpipe.prepare_write(
            da.from_array(more, chunks=7),
            repo.writable_session("main"),
            path="a",
            append_dim=0,
        )
        .execute(commit="append")
        .snapshot_id
    )
    patched = data.copy()
    patched[5:15, 14:26] = 999
    assert_same(_read(repo, "a", snapshot_id=first), data)
    assert_same(_read(repo, "a", snapshot_id=second), patched)
    assert_same(_read(repo, "a", snapshot_id=third), np.concatenate([patched, more]))
    diff = repo.diff(from_snapshot_id=first, to_snapshot_id=second)
    assert sorted(map(tuple, diff.updated_chunks["/a"])) == [(0, 0), (0, 1)]


def _shared_array(repo: Any) -> str:
    return str(
        shardpipe.prepare_write(
            da.zeros((32, 32), chunks=16, dtype="uint16"),
            repo.writable_session("main"),
            path="a",
            shards=(16, 16),
            chunks=(8, 8),
            write_empty_chunks=True,
        )
        .execute(commit="zeros")
        .snapshot_id
    )


def _patch(session: Any, value: int, region: tuple[slice, ...], **kw: Any) -> Any:
    """Write ``value`` into ``region`` of ``a``; the snapshot id with ``commit=``."""
    shape = tuple(s.stop - s.start for s in region)
    source = da.full(shape, value, dtype="uint16", chunks=8)
    job = shardpipe.prepare_write(source, session, path="a", region=region)
    return job.execute(**kw).snapshot_id


def test_a_conflict_on_one_shard_names_it_and_commits_nothing(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    base = _shared_array(repo)
    one, two = repo.writable_session("main"), repo.writable_session("main")
    winner = _patch(one, 1, (slice(0, 4), slice(0, 4)), commit="one")
    with pytest.raises(TransactionConflictError) as caught:
        _patch(two, 2, (slice(2, 6), slice(2, 6)), commit="two", rebase=True)
    message = str(caught.value)
    assert "'a'" in message and "(0, 0)" in message, message
    assert caught.value.shards == {"a": [(0, 0)]}
    assert repo.lookup_branch("main") == winner
    assert two.has_uncommitted_changes  # the losing session keeps its changes
    expected = np.zeros((32, 32), dtype="uint16")
    expected[0:4, 0:4] = 1
    assert_same(_read(repo, "a"), expected)
    assert_same(_read(repo, "a", snapshot_id=base), np.zeros((32, 32), dtype="uint16"))


def test_disjoint_shards_rebase_and_both_changes_land(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _shared_array(repo)
    one, two = repo.writable_session("main"), repo.writable_session("main")
    _patch(one, 1, (slice(0, 4), slice(0, 4)), commit="one")
    with pytest.raises(TransactionConflictError, match="rebase=True") as caught:
        _patch(two, 2, (slice(20, 24), slice(20, 24)), commit="two")
    assert "array 'a' shards (1, 1)" in str(caught.value)
    snapshot = two.commit("two, rebased", rebase_with=icechunk.ConflictDetector())
    three = repo.writable_session("main")
    _patch(one_more := three, 3, (slice(0, 4), slice(20, 24)))
    _patch(repo.writable_session("main"), 4, (slice(20, 24), slice(0, 4)), commit="four")
    final = (
        shardpipe.prepare_write(
            da.full((1, 1), 3, dtype="uint16", chunks=1),
            one_more,
            path="a",
            region=(slice(31, 32), slice(31, 32)),
        )
        .execute(commit="three", rebase=True)
        .snapshot_id
    )
    assert repo.lookup_branch("main") == final != snapshot
    expected = np.zeros((32, 32), dtype="uint16")
    expected[0:4, 0:4] = 1
    expected[20:24, 20:24] = 2
    expected[0:4, 20:24] = 3
    expected[20:24, 0:4] = 4
    expected[31, 31] = 3
    assert_same(_read(repo, "a"), expected)


@pytest.mark.s3
def test_icechunk_on_s3(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    bucket, options = s3_bucket
    endpoint = options["client_kwargs"]["endpoint_url"]
    storage = icechunk.s3_storage(
        bucket=bucket,
        prefix="repo",
        endpoint_url=endpoint,
        allow_http=True,
        force_path_style=True,
        region="us-east-1",
        access_key_id=options["key"],
        secret_access_key=options["secret"],
    )
    repo = icechunk.Repository.create(storage)
    data = _data((50, 40, 30), seed=5)
    snapshot = (
        shardpipe.prepare_write(
            da.from_array(data, chunks=(17, 13, 30)),
            repo.writable_session("main"),
            path="v",
            shards=(32, 32, 32),
            chunks=(16, 16, 16),
        )
        .execute(commit="on s3")
        .snapshot_id
    )
    assert_same(_read(repo, "v", snapshot_id=snapshot), data)


@pytest.mark.cluster
def test_icechunk_on_a_local_cluster(tmp_path: Path, cluster_client: Any) -> None:
    repo = _repo(tmp_path)
    data = _data((64, 48, 40), seed=7)
    snapshot = (
        shardpipe.prepare_write(
            da.from_array(data, chunks=(21, 17, 40)),
            repo.writable_session("main"),
            path="c",
            shards=(16, 16, 40),
            chunks=(8, 8, 8),
        )
        .execute(commit="cluster")
        .snapshot_id
    )
    assert_same(_read(repo, "c", snapshot_id=snapshot), data)
    report = shardpipe.prepare_write(
        da.from_array(data, chunks=(21, 17, 40)),
        repo.writable_session("main"),
        path="parts",
        shards=(64, 48, 40),
        chunks=(8, 8, 8),
        max_mem="400KB",
        compressors=None,
    ).execute(commit="cluster, parts")
    assert report.shards_written == 1
    assert_same(_read(repo, "parts"), data)


def test_xarray_accessor_commits_a_dataset(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    values = np.random.default_rng(0).random((30, 20, 10))
    ds = xr.Dataset(
        {
            "t": (("time", "y", "x"), da.from_array(values, chunks=(7, 11, 10))),
            "u": (("y",), da.arange(20, chunks=7)),
        },
        coords={"time": np.arange(30)},
        attrs={"title": "demo"},
    )
    reports = ds.shard.to_zarr(repo.writable_session("main"), shards={"time": 16}, commit="ds")
    snapshot = reports["t"].snapshot_id
    assert snapshot == repo.lookup_branch("main")
    back = xr.open_zarr(repo.readonly_session("main").store, consolidated=False)
    xr.testing.assert_identical(back.load(), ds.compute())
    more = ds.isel(time=slice(0, 5)).assign_coords(time=np.arange(30, 35))
    more.shard.to_zarr(repo.writable_session("main"), append_dim="time", commit="append")
    grown = xr.open_zarr(repo.readonly_session("main").store, consolidated=False)
    assert grown.sizes["time"] == 35
    old = xr.open_zarr(repo.readonly_session(snapshot_id=snapshot).store, consolidated=False)
    assert old.sizes["time"] == 30


def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    source = da.zeros((8, 8), chunks=4, dtype="uint8")
    first = repo.lookup_branch("main")
    read_only = repo.readonly_session("main")
    with pytest.raises(InvalidArgumentError, match="read-only") as caught:
        shardpipe.to_sharded_zarr(source, read_only, path="a")
    assert caught.value.parameter == "store"
    writable = repo.writable_session("main")
    with pytest.raises(InvalidArgumentError, match="ForkSession"):
        shardpipe.to_sharded_zarr(source, writable.fork(), path="a")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"compute": False}, "compute"),
        ({"resume": True}, "resume"),
        ({"storage_options": {"anon": True}}, "storage_options"),
        ({"commit": ""}, "commit"),
        ({"rebase": True}, "rebase"),
        ({"region": (slice(0, 8), slice(0, 8))}, "region"),  # no array there yet
    ]
    for kwargs, parameter in cases:
        with pytest.raises(InvalidArgumentError) as caught:
            shardpipe.to_sharded_zarr(source, writable, path="a", **kwargs)
        assert caught.value.parameter == parameter, (kwargs, caught.value)
    with pytest.raises(InvalidArgumentError, match="not an Icechunk session") as caught:
        shardpipe.to_sharded_zarr(source, str(tmp_path / "plain.zarr"), commit="no")
    assert caught.value.parameter == "commit"
    assert not (tmp_path / "plain.zarr").exists()
    assert not writable.has_uncommitted_changes
    assert repo.lookup_branch("main") == first
    # an array of another shape at the path: the region does not fit, nothing changes
    shardpipe.prepare_write(source, writable, path="a", shards=(4, 4)).execute(commit="a")
    after = repo.writable_session("main")
    with pytest.raises(InvalidArgumentError, match="region"):
        shardpipe.to_sharded_zarr(
            da.zeros((9, 9), chunks=4, dtype="uint8"), after, path="a", region=(slice(0, 9),) * 2
        )
    assert not after.has_uncommitted_changes


def test_a_killed_write_leaves_the_last_commit(tmp_path: Path, fork_server: ForkServer) -> None:
    repo = _repo(tmp_path)
    data = _data((256, 256))
    base = (
        shardpipe.prepare_write(
            da.from_array(data, chunks=64),
            repo.writable_session("main"),
            path="a",
            shards=(32, 32),
            chunks=(16, 16),
        )
        .execute(commit="base")
        .snapshot_id
    )
    chunks = tmp_path / "repo" / "chunks"  # shard objects (none is small enough to inline)
    stored = len(list(chunks.iterdir()))
    progress = tmp_path / "progress"
    child = fork_server.start(
        "tests.support.icechunk_crash_child", [str(tmp_path / "repo"), str(progress)]
    )
    try:
        wait_for_word(progress, "......", child)  # six of 64 blocks computed, shards being stored
    finally:
        child.kill()
        child.wait()
    # the kill came after some shards were stored: objects no snapshot refers to
    assert len(list(chunks.iterdir())) > stored
    reopened = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    assert reopened.lookup_branch("main") == base
    assert_same(_read(reopened, "a"), data)
    # and the repository takes the next write
    shardpipe.prepare_write(
        da.full((256, 256), 5, dtype="uint16", chunks=64),
        reopened.writable_session("main"),
        path="a",
        region=(slice(0, 256), slice(0, 256)),
    ).execute(commit="after the kill")
    assert_same(_read(reopened, "a"), np.full((256, 256), 5, dtype="uint16"))


def test_rechunk_into_a_session(tmp_path: Path) -> None:
    source = zarr.create_array(tmp_path / "src.zarr", shape=(60, 50), chunks=(7, 50), dtype="u2")
    data = _data((60, 50), seed=11)
    source[...] = data
    repo = _repo(tmp_path)
    with pytest.warns(FutureWarning, match=r"plan_rechunk\(...\).execute\(commit=...\)"):
        snapshot = shardpipe.rechunk(  # deprecated: the id, not the array
            str(tmp_path / "src.zarr"),
            repo.writable_session("main"),
            path="r",
            shards=(32, 32),
            chunks=(8, 8),
            commit="rechunked",
        )
    assert snapshot == repo.lookup_branch("main")
    assert_same(_read(repo, "r"), data)
    report = shardpipe.verify(repo.readonly_session("main"), "r")
    assert report.ok and report.shards_present == 4, report


@pytest.mark.s3
def test_command_line_rechunk_into_s3(
    tmp_path: Path, s3_bucket: tuple[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    from shardpipe.cli.parser import main
    from shardpipe.storage.icechunk.repository import open_session

    bucket, options = s3_bucket
    source = zarr.create_array(tmp_path / "src.zarr", shape=(30, 30), chunks=(7, 7), dtype="u2")
    data = _data((30, 30), seed=13)
    source[...] = data
    endpoint = options["client_kwargs"]["endpoint_url"]
    url = f"s3://{bucket}/repo"
    given = [
        f"--storage-option=key={options['key']}",
        f"--storage-option=secret={options['secret']}",
        f"--storage-option=endpoint_url={endpoint}",
        "--storage-option=region_name=us-east-1",
    ]
    argv = ["rechunk", str(tmp_path / "src.zarr"), url, "--icechunk", "--shards", "16,16"]
    assert main([*argv, "--no-progress", *given]) == 0, capsys.readouterr().err
    named = {"key": options["key"], "secret": options["secret"], "endpoint_url": endpoint}
    session = open_session(url, {**named, "region_name": "us-east-1"})
    assert_same(np.asarray(zarr.open_array(session.store, mode="r")[...]), data)


def test_a_failed_write_merges_no_shard_into_the_session(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    first = repo.lookup_branch("main")

    def fail_on_one(block: np.ndarray, block_info: Any = None) -> np.ndarray:
        if block_info[None]["chunk-location"] == (1, 1):
            raise RuntimeError("a block that cannot be computed")
        return block + 1

    source = da.zeros((64, 64), chunks=16, dtype="uint16").map_blocks(fail_on_one, dtype="uint16")
    session = repo.writable_session("main")
    with pytest.raises(RuntimeError, match="cannot be computed"):
        shardpipe.to_sharded_zarr(
            source, session, path="a", shards=(16, 16), chunks=(8, 8), commit="never"
        )
    assert repo.lookup_branch("main") == first
    assert not session.status().updated_chunks  # the shards that were written stay out
    assert session.status().new_arrays == {"/a"}  # the metadata is in it: discard it
    session.discard_changes()
    assert not session.has_uncommitted_changes


@pytest.mark.parametrize("key", ["../outside", "g/../../x", "/abs", "g//a", "a\0b"])
def test_the_icechunk_backend_refuses_unsafe_keys(tmp_path: Path, key: str) -> None:
    from shardpipe.errors import UnsafeKeyError
    from shardpipe.storage.icechunk.store import icechunk_backend

    session = _repo(tmp_path).writable_session("main")
    _, backend = icechunk_backend(session)
    calls = {
        "put": lambda: backend.put(key, [b"x"]),
        "get": lambda: backend.get(key),
        "get_range": lambda: backend.get_range(key, 0, 1),
        "size": lambda: backend.size(key),
        "delete": lambda: backend.delete(key),
        "list": lambda: list(backend.list(key + "/")),
        "begin_parts": lambda: backend.begin_parts(key, ".shardpipe/staging"),
    }
    for name, call in calls.items():
        with pytest.raises(UnsafeKeyError, match="refused the key"):
            call()
        assert not session.has_uncommitted_changes, name


@pytest.mark.parametrize("key", ["info", "r/info", "r/zarr.json.bak"])
def test_keys_a_repository_cannot_hold_are_absent(tmp_path: Path, key: str) -> None:
    """Icechunk holds only Zarr keys: asking after any other finds nothing, never an error
    (verify asks for a precomputed ``info`` before it looks for ``zarr.json``)."""
    from shardpipe.storage.icechunk.store import icechunk_backend

    _, backend = icechunk_backend(_repo(tmp_path).writable_session("main"))
    assert backend.get(key) is None
    assert backend.size(key) is None
    assert backend.version(key) is None


def test_get_within_reads_a_replaced_object_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Icechunk refuses a range past an object's end, so its get_within reads the object
    in one get: a replacement in the session between the size and the bytes comes whole,
    never as a prefix taken for the object."""
    from shardpipe.storage.icechunk.store import IcechunkShardStore

    session = _repo(tmp_path).writable_session("main")
    zarr.create_array(session.store, name="arr", shape=(2,), chunks=(1,), dtype="u1")
    store = IcechunkShardStore(session)
    assert not store.abilities.ranges_past_the_end
    old, new = b"x" * 1_000, b"y" * 3_000
    store.put("arr/c/0", [old])
    size = store.size

    def size_then_replace(key: str) -> int | None:
        found = size(key)
        store.put(key, [new])
        return found

    monkeypatch.setattr(store, "size", size_then_replace)
    assert store.get_within("arr/c/0", 10_000) in [(1_000, old), (3_000, new)]
    store.put("arr/c/1", [old])
    assert store.get_within("arr/c/1", 2_000) in [(1_000, old), (3_000, None)]


@pytest.mark.parametrize("failing", ["copy", "write"])
def test_a_failed_two_pass_rechunk_into_a_session_can_be_run_again(
    tmp_path: Path, failing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy's record goes into the session and is lost with it: the copy at the given
    temp_store is removed, so that the same call can run again (it was refused: the path
    existed)."""
    from shardpipe.rechunking.intermediate import Intermediate

    source = zarr.create_array(
        tmp_path / "s.zarr", shape=(64, 64, 64), chunks=(1, 64, 64), dtype="u2"
    )
    data = _data((64, 64, 64))
    source[...] = data
    repo = _repo(tmp_path)
    kwargs: dict[str, Any] = {"shards": (64, 32, 32), "chunks": (64, 16, 16), "max_mem": "1MB"}
    kwargs["temp_store"] = str(tmp_path / "t.zarr")
    broken = "write" if failing == "copy" else "source"
    original = getattr(Intermediate, broken)

    def fails(*args: Any, **kw: Any) -> Any:
        if failing == "copy":  # once the copy is written
            original(*args, **kw)
        raise OSError("the disk went away")

    monkeypatch.setattr(Intermediate, broken, fails)
    with pytest.raises(OSError, match="went away") as raised:
        shardpipe.plan_rechunk(
            tmp_path / "s.zarr", repo.writable_session("main").store, **kwargs
        ).execute(commit="x")
    assert not (tmp_path / "t.zarr").exists()
    if failing == "write":
        assert "was removed" in "\n".join(raised.value.__notes__)
    monkeypatch.setattr(Intermediate, broken, original)
    session = repo.writable_session("main")
    shardpipe.plan_rechunk(tmp_path / "s.zarr", session.store, **kwargs).execute(commit="y")
    assert_same(_read(repo, ""), data)
