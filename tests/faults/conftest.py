"""Fixtures of the fault tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fork_server import ForkServer


@pytest.fixture(scope="session")
def fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """A process that forks children with shardpipe imported, shared by this session's tests."""
    server = ForkServer(tmp_path_factory.mktemp("forked"))
    yield server
    server.close()
