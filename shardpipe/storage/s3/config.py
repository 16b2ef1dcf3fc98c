"""How the S3 file system that writes shards is configured: timeouts and retries.

Defaults that fit shardpipe's own retry layer
(:mod:`shardpipe.storage.retry`): botocore retries a little, s3fs not at
all, and what still fails is retried with backoff above them, so that a
silent server fails a call in seconds rather than minutes.
"""

from __future__ import annotations

from typing import Any

DEFAULT_CONFIG: dict[str, Any] = {
    "connect_timeout": 5,
    "read_timeout": 15,
    "retries": {"total_max_attempts": 3, "mode": "standard"},
    "max_pool_connections": 64,
    "s3": {"payload_signing_enabled": False},
}
"""botocore ``Config`` of the file systems shardpipe writes shards with.

Overridden key by key by ``storage_options["config_kwargs"]``. Three
attempts in botocore's standard mode (retries of connection errors,
timeouts, HTTP 500/502/503/504 and throttling, with jittered exponential
backoff); a 5 s connect timeout; a 15 s read timeout (s3fs's own default:
the longest S3 may stay silent before a response, not a bound on the
transfer); 64 connections kept open (botocore's default is 10, fewer than
the uploads a process keeps in flight: :mod:`shardpipe.storage.uploads`);
bodies not hashed into the request's signature: each body carries the CRC32
checksum botocore computes, which S3 verifies, as botocore signs on HTTPS
(on plain HTTP it would hash every body with SHA-256 as well, which costs
about as much CPU as encoding the shards; ``{"s3":
{"payload_signing_enabled": True}}`` brings it back).
:class:`~shardpipe.storage.retry.RetryingStore` retries what still fails,
so one call costs at most 3 x 15 s plus backoff before it does.
"""

S3FS_RETRIES = 1
"""Tries s3fs makes of each call on top of botocore's (1: it adds none).

s3fs's default, 5, nests (reads retry around calls that retry), so with
botocore's attempts one GET could be tried more than a hundred times.
"""


def s3_storage_options(storage_options: dict[str, Any]) -> dict[str, Any]:
    """``storage_options`` for the S3 file system shards are written with, with the defaults.

    :data:`DEFAULT_CONFIG` fills in what ``config_kwargs`` leaves out (a
    ``retries`` given there replaces the default whole).
    """
    options = {k: v for k, v in storage_options.items() if k != "asynchronous"}
    config = dict(DEFAULT_CONFIG)
    config.update(options.get("config_kwargs") or {})
    options["config_kwargs"] = config
    return options
