"""Fixtures of the documentation's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fork_server import ForkServer

LIBRARIES = ("numpy", "pandas", "dask.array", "zarr", "numcodecs", "xarray", "aiohttp")
"""What the pages' processes are forked with already imported: the libraries
``import shardpipe`` imports (about four fifths of its CPU), and nothing of shardpipe
(its import registers the ``.shard`` accessor, which a page must do itself) nor of the
cloud clients (gcsfs reads ``STORAGE_EMULATOR_HOST`` when it is imported)."""


@pytest.fixture(scope="session")
def page_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServer]:
    """A process that forks the guides' pages with :data:`LIBRARIES` imported."""
    server = ForkServer(tmp_path_factory.mktemp("pages"), preload=LIBRARIES)
    yield server
    server.close()
