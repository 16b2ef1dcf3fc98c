"""The storage contract against ``AzureShardStore`` on Azurite, and what only Azure does.

``leftovers`` counts what an unfinished write leaves in the container: the
markers under the staging prefix, and every blob (committed or not) that
still holds uncommitted blocks.
"""

from __future__ import annotations

import base64
import pickle
from pathlib import Path
from typing import Any

import pytest
from azure.storage.blob import BlobServiceClient, ContainerClient

from shardpipe.errors import ConditionFailedError, InvalidArgumentError, StorageAccessError
from shardpipe.storage.azure.blocks import block_id
from shardpipe.storage.azure.store import AzureShardStore
from shardpipe.storage.base import ShardStore
from shardpipe.testing.backends import STAGING, ShardStoreTests
from tests.support.programs import rechunk_group_in_a_program, rechunk_in_a_program

pytestmark = pytest.mark.azure


def _container(storage_options: dict[str, Any], container: str) -> ContainerClient:
    service = BlobServiceClient.from_connection_string(storage_options["connection_string"])
    return service.get_container_client(container)


def uncommitted_blobs(client: ContainerClient, prefix: str = "") -> list[str]:
    """Names of the blobs under ``prefix`` that hold uncommitted blocks."""
    names = [
        blob.name
        for blob in client.list_blobs(name_starts_with=prefix, include=["uncommittedblobs"])
    ]
    return [name for name in names if client.get_blob_client(name).get_block_list("uncommitted")[1]]


class TestAzure(ShardStoreTests):
    """Leftovers: markers, and blobs of uncommitted blocks only (those on a blob with
    content go with its next commit; see shardpipe.storage.azure.blocks)."""

    def make_store(self, tmp_path: Path, request: pytest.FixtureRequest) -> ShardStore:
        container, storage_options = request.getfixturevalue("azure_container")
        self.client = _container(storage_options, container)
        return AzureShardStore(storage_options, f"{container}/root")

    def leftovers(self, store: ShardStore) -> list[str]:
        markers = list(self.client.list_blob_names(name_starts_with=f"root/{STAGING}/"))
        blocks_only = [
            name
            for name in uncommitted_blobs(self.client, "root/")
            if not self.client.get_blob_client(name).exists()
        ]
        return sorted(markers + blocks_only)


# -- backend specifics ---------------------------------------------------------
def test_block_ids_have_one_length() -> None:
    ids = {block_id("0123456789abcdef", kind, n) for kind in "hpt" for n in (0, 9, 49_997)}
    assert len({len(i) for i in ids}) == 1
    assert base64.b64decode(block_id("0123456789abcdef", "p", 12)) == b"0123456789abcdefp000012"


def test_missing_container_is_a_clear_access_error(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    _, options = azure_container
    store = AzureShardStore(options, "no-such-container/x")
    with pytest.raises(StorageAccessError, match="container 'no-such-container' does not exist"):
        store.check_reachable()


def test_wrong_key_is_an_access_error(azure_container: tuple[str, dict[str, Any]]) -> None:
    container, options = azure_container
    wrong = options["connection_string"].replace("AccountKey=Eby8", "AccountKey=Xby8")
    store = AzureShardStore({"connection_string": wrong}, container)
    with pytest.raises(StorageAccessError, match="access denied: HTTP 403") as raised:
        store.check_reachable()
    assert "\n" not in str(raised.value)


def test_unreachable_endpoint_is_an_access_error() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    from shardpipe.testing.azure import storage_options_for

    store = AzureShardStore(storage_options_for(f"http://127.0.0.1:{port}/devstoreaccount1"), "c")
    with pytest.raises(StorageAccessError, match="cannot connect to"):
        store.check_reachable()


def test_conditions_on_parts_and_puts(azure_container: tuple[str, dict[str, Any]]) -> None:
    container, options = azure_container
    store = AzureShardStore(options, container)
    store.put("k", [b"one"], if_absent=True)
    with pytest.raises(ConditionFailedError, match="expected no blob"):
        store.put("k", [b"two"], if_absent=True)
    version = store.version("k")
    assert version is not None
    handle = store.begin_parts("k", STAGING)
    receipt = store.write_part(handle, 0, [b"three"])
    with pytest.raises(ConditionFailedError, match="Put Block List"):
        store.finish_parts(handle, [receipt], b"", b"", if_absent=True)
    store.finish_parts(handle, [receipt], b"", b"", if_version=version)
    assert store.get("k") == b"three"
    with pytest.raises(ConditionFailedError):
        store.put("absent", [b"x"], if_version=version)


def test_stale_blocks_do_not_confuse_a_later_write(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    """Blocks of a write given up (a kill) are not committed by the next one, then discarded."""
    container, options = azure_container
    store = AzureShardStore(options, container)
    killed = store.begin_parts("arr/c/0", ".shardpipe/staging/old")
    store.write_part(killed, 0, [b"stale" * 100])
    store.write_part(killed, 1, [b"stale tail"])
    later = store.begin_parts("arr/c/0", ".shardpipe/staging/new")
    assert later.upload != killed.upload
    receipt = store.write_part(later, 0, [b"fresh"])
    store.finish_parts(later, [receipt], b"head:", b":tail", if_absent=True)
    assert store.get("arr/c/0") == b"head:fresh:tail"
    client = _container(options, container)
    assert uncommitted_blobs(client) == []  # the commit discarded the stale blocks
    assert store.cleanup(".shardpipe/staging/old", "arr/c") == 1  # its marker
    assert list(store.list(".shardpipe/")) == []


def test_cleanup_leaves_committed_blobs_alone(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    """Blocks staged on a blob with content stay (until its next commit); it is not rewritten."""
    container, options = azure_container
    store = AzureShardStore(options, container)
    store.put("arr/c/0", [b"committed"])
    version = store.version("arr/c/0")
    for key in ("arr/c/0", "arr/c/1"):
        store.write_part(store.begin_parts(key, STAGING), 0, [b"never committed"])
    client = _container(options, container)
    assert uncommitted_blobs(client) == ["arr/c/0", "arr/c/1"]
    assert store.cleanup(STAGING, "arr/c") == 3  # two markers, one blob of blocks only
    assert uncommitted_blobs(client) == ["arr/c/0"]
    assert (store.get("arr/c/0"), store.version("arr/c/0")) == (b"committed", version)
    assert store.get("arr/c/1") is None
    again = store.begin_parts("arr/c/0", STAGING)
    store.finish_parts(again, [store.write_part(again, 0, [b"next"])], b"", b"")
    assert uncommitted_blobs(client) == []  # the next commit discarded them


def test_pickled_store_makes_its_own_client(azure_container: tuple[str, dict[str, Any]]) -> None:
    container, options = azure_container
    store = AzureShardStore(options, container)
    store.put("a", [b"x"])
    copy = pickle.loads(pickle.dumps(store))
    assert copy._client is None
    assert copy.get("a") == b"x"


def test_option_typo_names_the_closest() -> None:
    from shardpipe.storage.option_names import check_storage_options

    with pytest.raises(InvalidArgumentError, match="Did you mean 'connection_string'"):
        check_storage_options("storage_options", "az://c/x", {"conection_string": "x"})
    assert check_storage_options("storage_options", "az://c/x", {"anon": True}) == {"anon": True}


def test_a_program_rechunking_on_azure_ends_without_a_traceback(
    azure_container: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    """adlfs's finalizer of a file system zarr makes closes its client on ``fs.loop``, None
    then: run at exit, it could only raise "Loop is not running". Such finalizers now
    close their clients on zarr's loop, those of a rechunk's source too (which zarr
    opens, and Dask's naming of tasks unpickles into more file systems): nothing on
    stderr at exit, not even an unclosed session."""
    container, options = azure_container
    for stderr in (
        rechunk_in_a_program(f"az://{container}", options, tmp_path),
        rechunk_group_in_a_program(f"az://{container}", options, tmp_path),
    ):
        assert "Traceback" not in stderr and "Loop is not running" not in stderr, stderr
        assert "Unclosed" not in stderr, stderr


def test_a_rechunk_names_its_copy_with_the_scheme_the_user_wrote(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    """A rechunk between ``az://`` URLs that goes in two passes places its copy beside the
    target: the plan and the report named it ``abfs://`` (adlfs's own name), which the user
    never wrote (found by a new-user trial)."""
    import zarr

    import shardpipe

    container, options = azure_container
    source = f"az://{container}/slabs.zarr"
    zarr.create_array(  # never written: read as its fill value, cheap to copy
        source, shape=(64, 512, 512), chunks=(1, 512, 512), dtype="u2", storage_options=options
    )
    job = shardpipe.plan_rechunk(
        source,
        f"az://{container}/cubes.zarr",
        shards=(64, 256, 256),
        chunks=(64, 64, 64),
        max_mem="16MB",
        storage_options=options,
        source_storage_options=options,
    )
    assert job.intermediate is not None and job.intermediate.placed
    copy = f"az://{container}/.cubes.zarr.intermediate-"
    assert job.intermediate.store.startswith(copy)
    report = job.execute()
    for text in (repr(job), str(report), repr(report)):
        assert copy in text and "abfs" not in text, text
