"""How the S3 file system that writes shards is configured: timeouts and retries.

Defaults that fit shardpipe's own retry layer
(:mod:`shardpipe.storage.retry`): botocore retries a little, s3fs not at
all, and what still fails is retried with backoff above them, so that a
silent server fails a call in seconds rather than minutes.
"""

from __future__ import annotations

import json
import os
import threading
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
bodies not hashed into the request's signature: each body carries a checksum
S3 verifies (a whole object's CRC32C, computed by shardpipe:
:func:`~shardpipe.storage.s3.bodies.put_body`), as botocore signs on HTTPS
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


_FILE_SYSTEMS_KEPT = 8
"""S3 file systems a process keeps for later writes (the oldest is dropped first)."""

_file_systems: dict[tuple[int, str], Any] = {}
_file_systems_lock = threading.Lock()


def s3_file_system(storage_options: dict[str, Any]) -> Any:
    """The S3 file system that writes shards with ``storage_options``, made once per process.

    Making one costs about 0.2 s of CPU (botocore reads its service
    description and builds its HTTP session), so writes with the same
    options in one process share it, with its open connections, as
    TensorStore's context and fsspec's instance cache share theirs. It is
    shardpipe's own (fsspec's cache is skipped): the backend sets its s3fs
    retry count to :data:`S3FS_RETRIES`, which is no business of other
    users of s3fs in the process. A forked child makes its own.
    """
    import s3fs

    options = {**s3_storage_options(storage_options), "skip_instance_cache": True}
    key = (os.getpid(), json.dumps(options, sort_keys=True, default=repr))
    with _file_systems_lock:
        fs = _file_systems.get(key)
        if fs is None:
            fs = s3fs.S3FileSystem(**options)
            while len(_file_systems) >= _FILE_SYSTEMS_KEPT:
                del _file_systems[next(iter(_file_systems))]
            _file_systems[key] = fs
        return fs
