"""A local Azure Blob service for tests: pytest fixtures on the Azurite emulator.

Load with ``pytest_plugins = ["shardpipe.testing.azure"]`` in a ``conftest.py``.
``azurite_server`` (session) starts ``azurite-blob`` on a free port of
127.0.0.1 with its data in a temporary folder and yields the account's blob
endpoint (``http://127.0.0.1:<port>/devstoreaccount1``). ``azure_container``
(function) creates a fresh container and yields ``(container, storage_options)``:
options for adlfs (and so for
``shardpipe.to_sharded_zarr("az://container/...", storage_options=...)``)
with the emulator's published account key. ``azure_fault_proxy`` (function)
puts a :class:`~shardpipe.testing.fault_proxy.FaultProxy` in front of the
emulator, injecting nothing until told to; reach it with
``storage_options_for(proxy.url + "/devstoreaccount1")``. Outside pytest,
:func:`azurite` does what ``azurite_server`` does, as a context manager.

The emulator comes from npm (``./dev.sh test`` installs it into
``.venv/azurite``); the ``SHARDPIPE_AZURITE`` environment variable may name
another ``azurite-blob``. Needs the ``test`` extra (adlfs, azure-storage-blob), the
SDK imported only when a fixture makes or deletes a container.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from shardpipe.testing.fault_proxy import FaultProxy

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
"""The emulator's well-known account key (published by Microsoft; not a secret)."""


def azurite_binary() -> str:
    """Where ``azurite-blob`` is: ``$SHARDPIPE_AZURITE``, ``.venv/azurite`` or the ``PATH``.

    Raises
    ------
    FileNotFoundError
        If it is nowhere, saying how to install it.
    """
    named = os.environ.get("SHARDPIPE_AZURITE")
    if named:
        return named
    repository = Path(__file__).resolve().parents[2]
    local = repository / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    found = shutil.which("azurite-blob")
    if found:
        return found
    raise FileNotFoundError(
        f"the Azurite emulator (azurite-blob) is not installed at {local} nor on the PATH; "
        "run ./dev.sh test (it installs it from npm), or npm install --prefix .venv/azurite "
        "azurite, or set SHARDPIPE_AZURITE to its azurite-blob"
    )


def connection_string(endpoint: str) -> str:
    """The connection string of the emulator account at ``endpoint`` (``.../devstoreaccount1``)."""
    return (
        f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
        f"BlobEndpoint={endpoint};"
    )


def storage_options_for(endpoint: str) -> dict[str, Any]:
    """adlfs options that reach the emulator's account at ``endpoint``."""
    return {
        "connection_string": connection_string(endpoint),
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for(port: int, process: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"azurite-blob exited with status {process.returncode}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"azurite-blob did not listen on 127.0.0.1:{port} within {seconds} s")


@contextmanager
def azurite() -> Iterator[str]:
    """Run Azurite's blob service on 127.0.0.1; yield the account's blob endpoint."""
    binary = azurite_binary()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="shardpipe-azurite-") as location:
        command = [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port)]
        command += ["--location", location, "--skipApiVersionCheck", "--loose", "--silent"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait_for(port, process)
            yield f"http://127.0.0.1:{port}/{ACCOUNT}"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
            if process.stderr is not None:
                process.stderr.close()


def _blob_service(endpoint: str) -> Any:
    """A client of the emulator's blob service (the SDK imported only now, when used)."""
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string(endpoint))


def make_container(endpoint: str, name: str | None = None) -> str:
    """Create a container on the emulator at ``endpoint``; return its name."""
    container = name or f"test-{uuid.uuid4().hex[:16]}"
    _blob_service(endpoint).create_container(container)
    return container


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[str]:
    """Run Azurite for the session; yield the account's blob endpoint."""
    try:
        binary = azurite_binary()
    except FileNotFoundError as err:
        pytest.fail(str(err), pytrace=False)
    os.environ.setdefault("SHARDPIPE_AZURITE", binary)
    with azurite() as endpoint:
        yield endpoint


@pytest.fixture
def azure_container(azurite_server: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Create a fresh container; yield ``(container, storage_options)``; delete it afterwards."""
    container = make_container(azurite_server)
    yield container, storage_options_for(azurite_server)
    _blob_service(azurite_server).delete_container(container)


@pytest.fixture
def azure_fault_proxy(azurite_server: str) -> Iterator[FaultProxy]:
    """A :class:`~shardpipe.testing.fault_proxy.FaultProxy` in front of the emulator.

    It forwards faithfully until configured; ``storage_options_for(proxy.url +
    "/devstoreaccount1")`` reaches the emulator through it. Stopped afterwards.
    """
    with FaultProxy(azurite_server.rsplit("/", 1)[0]) as proxy:
        yield proxy
