"""S3-compatible endpoints (MinIO, moto, Ceph...): ``endpoint_url`` at the top level of
``storage_options``, several ``--storage-option`` pairs per flag, misspelt options refused.

Runs against the real moto server of ``shardpipe.testing.s3``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3fs
import zarr

import shardpipe
from shardpipe.cli.parser import main
from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.option_names import check_storage_options

pytestmark = pytest.mark.s3


def _objects(bucket: str, endpoint: str) -> list[str]:
    fs = s3fs.S3FileSystem(
        key="testing", secret="testing", endpoint_url=endpoint, skip_instance_cache=True
    )
    return [str(p) for p in fs.find(bucket)]


def test_the_guide_example_writes_to_an_s3_compatible_server(
    s3_server: str, s3_bucket: tuple[str, dict[str, Any]]
) -> None:
    """What the storage_options entry of to_sharded_zarr's docstring shows, as written there."""
    bucket, _ = s3_bucket
    endpoint = s3_server  # e.g. "http://localhost:9000" for a MinIO server
    volume = np.arange(64 * 64, dtype="uint16").reshape(64, 64)
    storage_options = {"key": "testing", "secret": "testing", "endpoint_url": endpoint}
    shardpipe.to_sharded_zarr(
        volume,
        f"s3://{bucket}/volume.zarr",
        shards=(32, 32),
        chunks=(16, 16),
        storage_options=storage_options,
    )
    report = shardpipe.verify(f"s3://{bucket}/volume.zarr", storage_options=storage_options)
    assert report.ok
    back = zarr.open_array(f"s3://{bucket}/volume.zarr", storage_options=storage_options)
    np.testing.assert_array_equal(back[:], volume)


def test_endpoint_url_moves_into_client_kwargs() -> None:
    options = check_storage_options(
        "storage_options", "s3://b/x", {"endpoint_url": "http://h:9000", "anon": True}
    )
    assert options == {"client_kwargs": {"endpoint_url": "http://h:9000"}, "anon": True}
    kept = {"client_kwargs": {"endpoint_url": "http://h:9000", "region_name": "eu"}}
    assert check_storage_options("storage_options", "s3://b/x", kept) == kept


def test_two_different_endpoints_are_refused() -> None:
    given = {"endpoint_url": "http://a:9000", "client_kwargs": {"endpoint_url": "http://b:9000"}}
    with pytest.raises(InvalidArgumentError, match="endpoint_url") as err:
        check_storage_options("storage_options", "s3://b/x", given)
    assert err.value.parameter == "storage_options"


@pytest.mark.parametrize(
    ("name", "closest"),
    [("endpoint", "endpoint_url"), ("secrets", "secret"), ("annon", "anon")],
)
def test_a_misspelt_option_is_refused_before_any_byte_is_written(
    s3_server: str, s3_bucket: tuple[str, dict[str, Any]], name: str, closest: str
) -> None:
    bucket, options = s3_bucket
    with pytest.raises(InvalidArgumentError) as err:
        shardpipe.to_sharded_zarr(
            np.zeros((8, 8), "uint8"),
            f"s3://{bucket}/a.zarr",
            shards=(4, 4),
            chunks=(2, 2),
            storage_options={**options, name: "s3cr3t-value"},
        )
    assert err.value.parameter == "storage_options"
    text = str(err.value)
    assert repr(name) in text and repr(closest) in text, text
    assert "s3cr3t-value" not in text  # a misspelt name may hold a secret: never echoed
    assert "AioSession" not in text
    assert _objects(bucket, s3_server) == []


def test_a_botocore_client_option_is_pointed_to_client_kwargs() -> None:
    with pytest.raises(InvalidArgumentError, match="client_kwargs") as err:
        check_storage_options("storage_options", "s3://b/x", {"region_name": "eu-west-1"})
    assert "'region_name'" in str(err.value) and "'eu-west-1'" in str(err.value)


def test_the_common_fsspec_options_are_accepted() -> None:
    common = {"skip_instance_cache": True, "use_listings_cache": False, "asynchronous": False}
    assert check_storage_options("storage_options", "s3://b/x", common) == common


def test_source_storage_options_are_checked_too(
    s3_server: str, s3_bucket: tuple[str, dict[str, Any]], tmp_path: Any
) -> None:
    bucket, options = s3_bucket
    with pytest.raises(InvalidArgumentError) as err:
        shardpipe.rechunk(
            f"s3://{bucket}/src.zarr",
            str(tmp_path / "out.zarr"),
            shards=(4, 4),
            chunks=(2, 2),
            source_storage_options={**options, "endpoint": s3_server},
        )
    assert err.value.parameter == "source_storage_options"
    assert "'endpoint_url'" in str(err.value)
    assert not (tmp_path / "out.zarr").exists()


def test_cli_takes_several_pairs_per_flag(
    s3_server: str, s3_bucket: tuple[str, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    bucket, options = s3_bucket
    url = f"s3://{bucket}/volume.zarr"
    shardpipe.to_sharded_zarr(
        np.ones((8, 8), "uint8"), url, shards=(4, 4), chunks=(2, 2), storage_options=options
    )
    pairs = ["key=testing", "secret=testing", f"endpoint_url={s3_server}"]
    assert main(["verify", url, "--storage-option", *pairs]) == 0, capsys.readouterr().err
    assert "OK" in capsys.readouterr().out
    repeated = [item for pair in pairs for item in ("--storage-option", pair)]
    assert main(["info", url, *repeated]) == 0, capsys.readouterr().err
    mixed = ["--storage-option", *pairs[:2], "--storage-option", pairs[2]]
    assert main(["info", url, *mixed]) == 0, capsys.readouterr().err


def test_cli_names_a_misspelt_option_in_flag_terms(
    s3_server: str,
    s3_bucket: tuple[str, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    bucket, _ = s3_bucket
    url = f"s3://{bucket}/volume.zarr"
    source = str(tmp_path / "in.zarr")
    shardpipe.to_sharded_zarr(np.ones((8, 8), "uint8"), source, shards=(4, 4), chunks=(2, 2))
    argv = ["rechunk", source, url, "--shards", "4,4", "--chunks", "2,2", "--storage-option"]
    assert main([*argv, "key=testing", f"endpoint={s3_server}"]) == 2
    err = capsys.readouterr().err
    assert "--storage-option" in err and "'endpoint'" in err and "endpoint_url" in err, err
    assert "storage_options" not in err, err
    assert _objects(bucket, s3_server) == []


def test_cli_a_pair_without_a_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["info", "--storage-option", "anon=true", "store"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "NAME=VALUE" in err and "'store'" in err and "before" in err, err


def test_writes_in_one_process_share_the_s3_client_of_their_options(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    from shardpipe.storage.resolve import resolve_store

    bucket, options = s3_bucket
    first = resolve_store(f"s3://{bucket}/a.zarr", storage_options=options).shards
    second = resolve_store(f"s3://{bucket}/b.zarr", storage_options=options).shards
    other = {**options, "config_kwargs": {"read_timeout": 7}}
    third = resolve_store(f"s3://{bucket}/c.zarr", storage_options=other).shards
    fs_of = lambda store: store.inner.fs  # noqa: E731  (inside the retry layer)
    assert fs_of(first) is fs_of(second)
    assert fs_of(third) is not fs_of(first)
    assert fs_of(first).retries == 1


@pytest.mark.parametrize("extra", [-1, 0, 1, 2 * 2**20 + 3])
def test_a_whole_object_is_read_in_one_get_when_small_and_in_pieces_when_long(
    s3_bucket: tuple[str, dict[str, Any]], extra: int
) -> None:
    from shardpipe.storage.resolve import resolve_store
    from shardpipe.storage.s3.object_reads import WHOLE_GET_PIECE

    bucket, options = s3_bucket
    backend = resolve_store(f"s3://{bucket}/reads", storage_options=options).shards.inner
    small, long = b"", np.random.default_rng(1).bytes(WHOLE_GET_PIECE + extra)
    backend.put("empty", [small])
    backend.put("long", [long])
    backend.put("doc", [b'{"a": 1}'])
    calls: list[str] = []
    call_s3 = backend.fs._call_s3

    async def counting(method: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(method)
        return await call_s3(method, *args, **kwargs)

    backend.fs._call_s3 = counting
    assert backend.get("doc") == b'{"a": 1}'
    assert calls == ["get_object"]  # no HeadObject first
    assert backend.get("empty") == b""
    assert backend.get("absent") is None
    calls.clear()
    assert backend.get("long") == long
    pieces = -(-len(long) // WHOLE_GET_PIECE)
    assert calls.count("get_object") == pieces


def test_a_long_object_replaced_while_it_is_read_is_read_again_whole(
    s3_bucket: tuple[str, dict[str, Any]],
) -> None:
    """Its pieces after the first are asked of the first's version (If-Match): a
    replacement between them is read again from the start, not pieced onto the old."""
    from shardpipe.errors import StorageError
    from shardpipe.storage.resolve import resolve_store
    from shardpipe.storage.s3.object_reads import READ_ATTEMPTS, WHOLE_GET_PIECE

    bucket, options = s3_bucket
    backend = resolve_store(f"s3://{bucket}/reads", storage_options=options).shards.inner
    versions = [bytes([n]) * (WHOLE_GET_PIECE + 100) for n in range(READ_ATTEMPTS + 2)]
    backend.put("long", [versions[0]])
    first_piece = backend._first_piece
    replaced: list[int] = []  # the version each replacement put

    def then_replaced(key: str, nbytes: int) -> Any:
        got = first_piece(key, nbytes)
        if len(replaced) < replacements:  # replaced between the first piece and the rest
            replaced.append(len(replaced) + 1)
            backend.put(key, [versions[replaced[-1]]])  # another version: another ETag
        return got

    backend._first_piece = then_replaced
    replacements = 1
    assert backend.get("long") == versions[1]  # the new version, whole: read twice
    assert replaced == [1]
    replacements = 1 + READ_ATTEMPTS
    with pytest.raises(StorageError, match="replaced while it was read, 3 times"):
        backend.get("long")


def test_verify_reads_each_small_shard_with_one_get(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    """A shard's size and bytes come in one GET (``get_within``), not a HEAD and a GET."""
    import dask.array as da

    from shardpipe.storage.resolve import resolve_store

    bucket, options = s3_bucket
    url = f"s3://{bucket}/v.zarr"
    source = da.arange(4 * 64, dtype="uint16", chunks=64).reshape(4, 64)
    shardpipe.to_sharded_zarr(source, url, shards=(1, 64), chunks=(1, 16), storage_options=options)
    fs = resolve_store(url, storage_options=options).shards.inner.fs
    calls: list[tuple[str, str]] = []
    call_async, call_sync = fs._call_s3, fs.call_s3  # the backend makes calls both ways

    async def counting_async(method: str, *args: Any, **kwargs: Any) -> Any:
        calls.append((method, str(kwargs.get("Key", ""))))
        return await call_async(method, *args, **kwargs)

    def counting_sync(method: str, *args: Any, **kwargs: Any) -> Any:
        calls.append((method, str(kwargs.get("Key", ""))))
        return call_sync(method, *args, **kwargs)

    fs._call_s3, fs.call_s3 = counting_async, counting_sync
    try:
        report = shardpipe.verify(url, storage_options=options)
    finally:
        fs._call_s3, fs.call_s3 = call_async, call_sync
    assert report.ok and report.shards_present == 4, str(report)
    on_shards = [method for method, key in calls if "/c/" in key]
    assert sorted(on_shards) == ["get_object"] * 4, calls


def test_messages_name_an_s3_store_by_its_url(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    """Not as zarr's store prints itself (``<FsspecStore(S3FileSystem, ...)>``)."""
    from shardpipe.errors import ArrayExistsError

    bucket, options = s3_bucket
    url = f"s3://{bucket}/named.zarr"
    data = np.zeros((4, 4), "u1")
    shardpipe.to_sharded_zarr(data, url, chunks=(2, 2), storage_options=options)
    with pytest.raises(ArrayExistsError) as raised:
        shardpipe.to_sharded_zarr(data, url, chunks=(2, 2), storage_options=options)
    assert f"s3://{bucket}/named.zarr" in str(raised.value), raised.value
    assert "FsspecStore" not in str(raised.value)


def test_a_plan_names_an_s3_target_by_its_url(s3_bucket: tuple[str, dict[str, Any]]) -> None:
    """The plan's "target" row: the URL, not zarr's ``<FsspecStore(S3FileSystem, ...)>``."""
    bucket, options = s3_bucket
    url = f"s3://{bucket}/planned.zarr"
    job = shardpipe.prepare_write(
        np.zeros((4, 4), "u1"), url, chunks=(2, 2), storage_options=options
    )
    (row,) = [value for label, value in job.summary_rows() if label == "target"]
    assert row == f"s3://{bucket}/planned.zarr at '/'", row
