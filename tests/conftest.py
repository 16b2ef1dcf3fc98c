"""Shared fixtures: hypothesis profiles, a Dask LocalCluster, the cloud emulators' servers,
the fork server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.support.fork_server import ForkServer

# the cloud plugins import their clients (boto3, moto, gcsfs, azure) only when a test starts a
# server: tests/core/test_no_cloud_clients.py checks that the core's tests import none
pytest_plugins = ["shardpipe.testing.s3", "shardpipe.testing.gcs", "shardpipe.testing.azure"]

# "ci", the default: the same examples on every run (derandomize, no example database), so a
# red seed shows on the machine that runs the suite first, never only on a user's. "thorough":
# random examples, ten times as many, to hunt for new failures by hand before a release:
# `pytest --hypothesis-profile thorough` (or HYPOTHESIS_PROFILE=thorough).
settings.register_profile(
    "ci",
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=500,
    derandomize=False,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def _cluster() -> Iterator[Any]:
    """A ``distributed.Client`` on a LocalCluster of two worker processes, shared by the
    session but the current client only inside the tests that ask for it."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            memory_limit="4GiB",
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


@pytest.fixture
def cluster_client(_cluster: Any) -> Iterator[Any]:
    """The shared cluster's client, current (Dask computes on it) for this test only: a
    test after it that writes into a ``MemoryStore`` still runs on threads."""
    with _cluster.as_current():
        yield _cluster


@pytest.fixture(scope="session")
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """A process that forks children with shardpipe imported, shared by this session's tests
    (:mod:`tests.support.fork_server`)."""
    server = ForkServer(tmp_path_factory.mktemp("forked"))
    yield server
    server.close()
