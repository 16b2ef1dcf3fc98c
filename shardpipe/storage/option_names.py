"""Check the names of ``storage_options`` for S3 before anything is opened or written.

s3fs passes options it does not know on to aiobotocore, which fails on the
first request with ``AioSession.__init__() got an unexpected keyword
argument 'endpoint'``: far from the typo, and after the write started.
:func:`check_storage_options` refuses an unknown name up front, naming the
parameter, the option, its value and the closest valid option. The valid
ones are the parameters of ``s3fs.S3FileSystem`` (read from its signature,
so a newer s3fs's options are accepted) and those fsspec's file systems all
take (:data:`~shardpipe.storage.option_checks.FSSPEC_OPTIONS`).

``endpoint_url`` (an S3-compatible server: MinIO, Ceph, moto...) is taken at
the top level, as s3fs spells it, and moved into ``client_kwargs``, where
botocore and every reader of the options (the shard backend, Icechunk) look
for it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from shardpipe import advice
from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.azure.schemes import AZURE_SCHEMES, check_azure_options
from shardpipe.storage.gcs.options import GCS_SCHEMES, check_gcs_options
from shardpipe.storage.option_checks import (
    check_option_types,
    closest_option,
    filesystem_options,
    may_be_secret,
)

CLIENT_OPTIONS = frozenset(
    (
        "region_name",
        "api_version",
        "verify",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "config",
    )
)
"""botocore client options: they go in ``client_kwargs``, not at the top level."""

S3_SCHEMES = ("s3://", "s3a://")


@functools.cache
def s3fs_options() -> frozenset[str]:
    """The names ``s3fs.S3FileSystem`` takes, and fsspec's common ones."""
    import s3fs  # only for S3 URLs

    return filesystem_options(s3fs.S3FileSystem)


def check_storage_options(
    parameter: str, location: Any, options: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Return ``options`` for ``location`` checked, ``endpoint_url`` in ``client_kwargs``.

    S3 URLs (``s3://``, ``s3a://``) and GCS URLs (``gs://``, ``gcs://``:
    :func:`~shardpipe.storage.gcs.options.check_gcs_options`) are checked; the
    options of other locations are returned as they are.

    Parameters
    ----------
    parameter : str
        The parameter that gave them (``"storage_options"``, ``"source_storage_options"``).
    location : Any
        Where they apply: a URL, a path, a store.
    options : dict or None
        The options.

    Returns
    -------
    dict or None
        ``options``, with a top-level ``endpoint_url`` moved into ``client_kwargs``.

    Raises
    ------
    InvalidArgumentError
        If a name is not an option of s3fs (the message names the closest
        valid one), or two different endpoints are given.

    Examples
    --------
    >>> check_storage_options("storage_options", "s3://b/v.zarr", {"endpoint_url": "http://h:9000"})
    {'client_kwargs': {'endpoint_url': 'http://h:9000'}}
    """
    check_option_types(parameter, options)
    is_url = isinstance(location, str | os.PathLike)
    if is_url and os.fspath(location).startswith(GCS_SCHEMES):
        return check_gcs_options(parameter, options)
    if is_url and os.fspath(location).startswith(AZURE_SCHEMES):
        return check_azure_options(parameter, options)
    is_s3 = is_url and os.fspath(location).startswith(S3_SCHEMES)
    if not options or not is_s3:
        return options
    valid = s3fs_options()
    for key, value in options.items():
        if key not in valid:
            raise InvalidArgumentError(parameter, *_unknown(parameter, key, value, valid))
    checked = dict(options)
    endpoint = checked.pop("endpoint_url", None)
    if endpoint is not None:
        client = dict(checked.get("client_kwargs") or {})
        if client.setdefault("endpoint_url", endpoint) != endpoint:
            raise InvalidArgumentError(
                parameter,
                f"two endpoints: endpoint_url={endpoint!r} and client_kwargs "
                f"endpoint_url={client['endpoint_url']!r}",
                "Give endpoint_url once",
            )
        checked["client_kwargs"] = client
    return checked


def _unknown(parameter: str, key: str, value: Any, valid: frozenset[str]) -> tuple[str, str]:
    """What is wrong with the option ``key``, and the fix."""
    problem = f"{key!r} is not an option of s3fs.S3FileSystem"
    if key in CLIENT_OPTIONS:
        shown = "..." if may_be_secret(key) else value
        example = advice.setting(parameter, {"client_kwargs": {key: shown}})
        return problem, f"It is a botocore client option: put it in client_kwargs, {example}"
    return problem, closest_option(key, valid)
