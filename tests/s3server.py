"""Pytest fixtures for a local moto S3 server (load with ``pytest_plugins``).

``s3_server`` (session) starts ``moto.server.ThreadedMotoServer`` on a free
port of 127.0.0.1 with fake credentials in the environment and yields its
endpoint URL. ``s3_bucket`` (function) creates a fresh bucket and yields
``(bucket_name, storage_options)`` for ``s3fs.S3FileSystem(**storage_options)``.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
_CREDENTIALS = {"key": "testing", "secret": "testing"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _client(endpoint_url: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=REGION,
        aws_access_key_id=_CREDENTIALS["key"],
        aws_secret_access_key=_CREDENTIALS["secret"],
    )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Run a moto S3 server for the session; yield its endpoint URL."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            mp.setenv(name, "testing")
        mp.setenv("AWS_SECURITY_TOKEN", "testing")
        mp.setenv("AWS_SESSION_TOKEN", "testing")
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        mp.setenv("AWS_REGION", REGION)
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        port = _free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_server: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Create a fresh bucket; yield ``(bucket_name, storage_options)``.

    ``storage_options`` build an ``s3fs.S3FileSystem`` on the moto server that
    neither shares cached instances nor caches listings. The bucket, its
    objects and its unfinished multipart uploads are removed afterwards.
    """
    client = _client(s3_server)
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=bucket)
    storage_options: dict[str, Any] = {
        **_CREDENTIALS,
        "client_kwargs": {"endpoint_url": s3_server, "region_name": REGION},
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }
    yield bucket, storage_options
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)
