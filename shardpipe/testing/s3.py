"""A local S3 server for tests: pytest fixtures on moto's standalone server.

Load with ``pytest_plugins = ["shardpipe.testing.s3"]`` in a ``conftest.py``.
``s3_server`` (session) starts moto's standalone server (``python -m
moto.server``) in a process of its own on a free port of 127.0.0.1, with fake
credentials in the environment, and yields its endpoint URL. In its own
process the server does not take turns with the test for Python's
interpreter lock, as a real store would not (shardpipe's own S3 tests ran
10% longer with moto's threaded server inside the test's process, a test
writing hundreds of small objects a third longer). ``s3_bucket`` (function)
creates a fresh bucket and yields ``(bucket_name, storage_options)`` for
``s3fs.S3FileSystem(**storage_options)`` (and so for
``shardpipe.to_sharded_zarr("s3://bucket/...", storage_options=...)``).
Outside pytest, :func:`moto_server` does the same as a context manager.
``s3_fault_proxy`` (function) puts a :class:`~shardpipe.testing.fault_proxy.FaultProxy`
in front of the server, injecting nothing until told to; point a client at it
with ``storage_options_for(proxy.url)``.

Needs the ``test`` extra (moto[server], boto3), imported only when a fixture starts
the server or makes a bucket: loading the plugin costs neither.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from shardpipe.testing.fault_proxy import FaultProxy

REGION = "us-east-1"
_CREDENTIALS = {"key": "testing", "secret": "testing"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _client(endpoint_url: str) -> Any:
    import boto3  # here, not at the top: a suite that loads this plugin imports boto3 only if used

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=_CREDENTIALS["key"],
        aws_secret_access_key=_CREDENTIALS["secret"],
    )


STORAGE_OPTIONS_BASE: dict[str, Any] = {
    **_CREDENTIALS,
    "skip_instance_cache": True,
    "use_listings_cache": False,
}


def storage_options_for(endpoint_url: str) -> dict[str, Any]:
    """s3fs options that reach the server at ``endpoint_url`` with the fake credentials."""
    return {
        **STORAGE_OPTIONS_BASE,
        "client_kwargs": {"endpoint_url": endpoint_url, "region_name": REGION},
    }


@contextmanager
def moto_server() -> Iterator[str]:
    """Run a moto S3 server on 127.0.0.1 with fake credentials; yield its endpoint URL."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            mp.setenv(name, "testing")
        mp.setenv("AWS_SECURITY_TOKEN", "testing")
        mp.setenv("AWS_SESSION_TOKEN", "testing")
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.setenv("AWS_REGION", REGION)
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        port, server = _start_server()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


SERVER_START_SECONDS = 60.0
"""How long the server may take to answer on its port (it imports moto first)."""


def _start_server() -> tuple[int, subprocess.Popen[bytes]]:
    """Start ``python -m moto.server`` on a free port; return the port once it answers.

    The port is free when chosen but another process may take it before the
    server binds it: then the server exits, and another port is tried.
    """
    for _ in range(3):
        port = _free_port()
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        # its request log goes nowhere: a pipe nobody reads would stop it once full
        server = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + SERVER_START_SECONDS
        while server.poll() is None and time.monotonic() < deadline:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return port, server
            time.sleep(0.05)
        if server.poll() is None:  # still starting after the deadline
            server.kill()
            server.wait()
            raise RuntimeError(
                f"moto's S3 server did not answer on port {port} within "
                f"{SERVER_START_SECONDS:.0f} s"
            )
    raise RuntimeError(
        f"moto's S3 server exited at once three times (status {server.returncode}); "
        f"run {' '.join(command)} to see why"
    )


def make_bucket(endpoint_url: str, name: str | None = None) -> str:
    """Create a bucket on the server (s3fs's ``mkdir`` is refused by moto); return its name."""
    bucket = name or f"test-{uuid.uuid4().hex[:16]}"
    _client(endpoint_url).create_bucket(Bucket=bucket)
    return bucket


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Run a moto S3 server for the session; yield its endpoint URL."""
    with moto_server() as endpoint_url:
        yield endpoint_url


@pytest.fixture
def s3_bucket(s3_server: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Create a fresh bucket; yield ``(bucket_name, storage_options)``.

    ``storage_options`` build an ``s3fs.S3FileSystem`` on the moto server that
    neither shares cached instances nor caches listings. The bucket, its
    objects and its unfinished multipart uploads are removed afterwards.
    """
    client = _client(s3_server)
    bucket = make_bucket(s3_server)
    yield bucket, storage_options_for(s3_server)
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)


@pytest.fixture
def s3_fault_proxy(s3_server: str) -> Iterator[FaultProxy]:
    """A :class:`~shardpipe.testing.fault_proxy.FaultProxy` in front of the moto server.

    It forwards faithfully until configured (``proxy.configure(reset_after=0.1)``,
    ``proxy.add_rule("reset_after", b"?uploads ")``); ``storage_options_for(proxy.url)``
    reaches the server through it. Stopped afterwards.
    """
    with FaultProxy(s3_server) as proxy:
        yield proxy
