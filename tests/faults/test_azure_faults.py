"""Azure writes through a TCP proxy that resets and drops requests (Azurite behind it).

Checked against the emulator directly: the array reads back equal and
``verify`` is clean, nothing is left under the staging prefix and no blob
holds uncommitted blocks; a conditional request whose response was lost
counts as done; faults name the operation, the blob and the fix in one line.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.errors import ConditionFailedError, StorageAccessError
from shardpipe.storage.azure.store import AzureShardStore
from shardpipe.storage.resolve import retry_policy
from shardpipe.storage.retry import RetryingStore
from shardpipe.testing.azure import ACCOUNT, storage_options_for
from shardpipe.testing.fault_proxy import FaultProxy
from shardpipe.testing.store_kit import STAGING
from tests.write.test_azure_write import leftovers

pytestmark = pytest.mark.azure

FAST_RETRIES = {"shardpipe.retry.first-delay": 0.05, "shardpipe.retry.max-delay": 0.5}


def _proxied(proxy: FaultProxy) -> dict[str, Any]:
    return {**storage_options_for(f"{proxy.url}/{ACCOUNT}"), "read_timeout": 2}


@pytest.mark.parametrize("seed", range(2))
def test_writes_survive_five_percent_resets_and_drops(
    azure_container: tuple[str, dict[str, Any]], azure_fault_proxy: FaultProxy, seed: int
) -> None:
    container, direct = azure_container
    proxy = azure_fault_proxy
    proxy.drop_seconds = 3
    source = da.random.default_rng(seed).integers(
        0, 250, (16, 1024, 1024), chunks=(8, 128, 128), dtype="uint8"
    )
    url = f"az://{container}/x.zarr"
    proxy._rng.seed(seed)
    proxy.configure(reset_before=0.02, reset_after=0.02, drop=0.01)
    with dask.config.set(FAST_RETRIES, scheduler="threads", num_workers=4):
        report = shardpipe.prepare_write(
            source,
            url,
            shards=(16, 512, 512),
            chunks=(8, 128, 128),
            max_mem="3MB",  # four shards of 4 MiB, each in parts from several tasks
            storage_options=_proxied(proxy),
        ).execute()
    proxy.configure()
    assert proxy.counts.faults > 0, proxy.counts
    assert report.retries > 0
    stored = np.asarray(zarr.open_array(url, mode="r", storage_options=direct)[...])
    np.testing.assert_array_equal(stored, source.compute())
    assert shardpipe.verify(url, storage_options=direct).ok
    assert leftovers(container, direct) == []


@pytest.mark.parametrize("condition", ["if_absent", "if_version"])
def test_conditional_put_whose_answer_was_lost_succeeds(
    azure_container: tuple[str, dict[str, Any]], azure_fault_proxy: FaultProxy, condition: str
) -> None:
    container, _ = azure_container
    store = RetryingStore(AzureShardStore(_proxied(azure_fault_proxy), container), retry_policy())
    store.put("k", [b"before"])
    kwargs: dict[str, Any] = (
        {"if_absent": True} if condition == "if_absent" else {"if_version": store.version("k")}
    )
    if condition == "if_absent":
        store.delete("k")
    azure_fault_proxy.add_rule("reset_after", b"/k ", method=b"PUT")
    with dask.config.set(FAST_RETRIES):
        store.put("k", [b"mine"], **kwargs)
    assert azure_fault_proxy.counts.reset_after == 1
    assert store.get("k") == b"mine"
    with pytest.raises(ConditionFailedError):  # someone else's write still loses
        store.put("k", [b"again"], if_absent=True)


def test_commit_whose_answer_was_lost_succeeds(
    azure_container: tuple[str, dict[str, Any]], azure_fault_proxy: FaultProxy
) -> None:
    container, _ = azure_container
    store = RetryingStore(AzureShardStore(_proxied(azure_fault_proxy), container), retry_policy())
    handle = store.begin_parts("arr/c/0", STAGING)
    receipt = store.write_part(handle, 0, [b"part"])
    azure_fault_proxy.add_rule("reset_after", b"comp=blocklist", method=b"PUT")
    with dask.config.set(FAST_RETRIES):
        store.finish_parts(handle, [receipt], b"head", b"tail", if_absent=True)
    assert azure_fault_proxy.counts.reset_after == 1
    assert store.get("arr/c/0") == b"headparttail"
    assert list(store.list(STAGING)) == []


def test_missing_container_fails_the_write_before_it_starts(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    _, options = azure_container
    with pytest.raises(StorageAccessError, match="container 'absent' does not exist") as raised:
        shardpipe.to_sharded_zarr(
            da.zeros((8, 8), dtype="uint8"), "az://absent/x.zarr", storage_options=options
        )
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("command", ["verify", "info"])
def test_command_line_exit_status_for_a_missing_container(
    azure_container: tuple[str, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    from shardpipe.cli.exit_statuses import NO_ACCESS
    from shardpipe.cli.parser import main

    _, options = azure_container
    option = f"connection_string={options['connection_string']}"
    assert main([command, "az://absent/x.zarr", "--storage-option", option]) == NO_ACCESS
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "absent" in err, err


def test_option_typo_is_refused_before_anything_is_written(
    azure_container: tuple[str, dict[str, Any]],
) -> None:
    from shardpipe.errors import InvalidArgumentError

    container, options = azure_container
    typo = {"conection_string": options["connection_string"]}
    with pytest.raises(InvalidArgumentError, match="Did you mean 'connection_string'"):
        shardpipe.to_sharded_zarr(
            da.zeros((8, 8), dtype="uint8"), f"az://{container}/x.zarr", storage_options=typo
        )
    assert leftovers(container, options) == []


@pytest.mark.cluster
def test_parts_from_worker_processes(
    azure_container: tuple[str, dict[str, Any]], cluster_client: Any
) -> None:
    """The store travels pickled to two worker processes, which stage blocks of one shard."""
    container, options = azure_container
    source = da.random.default_rng(9).integers(
        0, 250, (16, 512, 512), chunks=(4, 256, 256), dtype="uint8"
    )
    url = f"az://{container}/cluster.zarr"
    job = shardpipe.prepare_write(
        source,
        url,
        shards=(16, 512, 512),
        chunks=(4, 128, 128),
        max_mem="2MB",
        storage_options=options,
    )
    assert job.plan.max_parts_per_shard > 1
    job.execute()
    stored = np.asarray(zarr.open_array(url, mode="r", storage_options=options)[...])
    np.testing.assert_array_equal(stored, source.compute())
    assert leftovers(container, options) == []
