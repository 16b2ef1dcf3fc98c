"""Opening an Icechunk repository from a location and fsspec-style options (the command line).

The command line names stores by path or URL. With ``--icechunk`` the
location is an Icechunk repository instead: a local directory, or
``s3://bucket/prefix`` with the same ``--storage-option`` names as s3fs
(``key``, ``secret``, ``client_kwargs={"endpoint_url": ..., "region_name": ...}``,
``endpoint_url``, ``anon``), translated to ``icechunk.s3_storage``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from shardpipe.errors import InvalidArgumentError
from shardpipe.storage.urls import check_location

if TYPE_CHECKING:
    from icechunk import Repository, Session, Storage


def quiet_logs() -> None:
    """Show only Icechunk's errors on stderr, unless ``ICECHUNK_LOG`` says otherwise (the CLI).

    Its local storage warns at every open that it is not safe for concurrent
    commits, which a command writing one commit does not need to repeat.
    """
    import icechunk

    if "ICECHUNK_LOG" not in os.environ:
        icechunk.set_logs_filter("error")


def repository_storage(location: str, storage_options: dict[str, Any] | None = None) -> Storage:
    """Icechunk storage for a local directory or an ``s3://bucket/prefix`` URL.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        For another URL scheme, or options that do not apply.
    """
    import icechunk

    options = dict(storage_options or {})
    scheme, sep, rest = check_location("store", location).partition("://")
    if not sep or scheme == "file":
        if options:
            raise InvalidArgumentError(
                "storage_options",
                f"{sorted(options)} do not apply to the local repository {location!r}",
                "Leave them out",
            )
        return icechunk.local_filesystem_storage(os.path.abspath(rest if sep else location))
    if scheme not in ("s3", "s3a"):
        raise InvalidArgumentError(
            "store",
            f"{location!r}: Icechunk repositories are opened here from a local path or s3:// URL",
            "Open other storage with icechunk in Python and pass the session",
        )
    bucket, _, prefix = rest.partition("/")
    client = dict(options.pop("client_kwargs", None) or {})
    endpoint = options.pop("endpoint_url", None) or client.pop("endpoint_url", None)
    region = client.pop("region_name", None) or options.pop("region_name", None)
    key, secret = options.pop("key", None), options.pop("secret", None)
    anonymous = bool(options.pop("anon", False))
    for ignored in ("skip_instance_cache", "use_listings_cache"):
        options.pop(ignored, None)
    if options or client:
        raise InvalidArgumentError(
            "storage_options",
            f"{sorted([*options, *client])} have no Icechunk equivalent here",
            "Use key, secret, endpoint_url (or client_kwargs.endpoint_url), region_name, anon",
        )
    return icechunk.s3_storage(
        bucket=bucket,
        prefix=prefix.strip("/") or None,
        endpoint_url=endpoint,
        region=region,
        allow_http=bool(endpoint and endpoint.startswith("http://")),
        force_path_style=endpoint is not None,
        access_key_id=key,
        secret_access_key=secret,
        anonymous=anonymous or None,
        from_env=None if key or anonymous else True,
    )


def open_session(
    location: str,
    storage_options: dict[str, Any] | None = None,
    *,
    branch: str | None = None,
    snapshot: str | None = None,
    writable: bool = False,
    create: bool = False,
) -> Session:
    """A session of the repository at ``location``: read-only, or writable on ``branch``.

    Icechunk's warnings are silenced (:func:`quiet_logs`).

    Parameters
    ----------
    location : str
        A local directory or ``s3://bucket/prefix``.
    storage_options : dict, optional
        s3fs-style options (see the module's docstring).
    branch, snapshot : str, optional
        What to read (default: branch ``main``); a writable session needs a branch.
    writable : bool
        Open a writable session on ``branch`` (``main`` when not given).
    create : bool
        Create the repository when there is none (writable sessions only).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        When nothing is at ``location`` (and ``create`` is off), or for a
        writable session on a snapshot.
    """
    import icechunk

    quiet_logs()
    storage = repository_storage(location, storage_options)
    repo: Repository
    if icechunk.Repository.exists(storage):
        repo = icechunk.Repository.open(storage)
    elif create:
        repo = icechunk.Repository.create(storage)
    else:
        raise InvalidArgumentError(
            "store",
            f"there is no Icechunk repository at {location!r}",
            "Check the location (and --storage-option for S3)",
        )
    if writable:
        if snapshot is not None:
            raise InvalidArgumentError(
                "snapshot", f"{snapshot!r}: snapshots are read-only", "Write to a branch"
            )
        return repo.writable_session(branch or "main")
    if snapshot is not None:
        if branch is not None:
            raise InvalidArgumentError(
                "snapshot", "given with a branch", "Pass either a branch or a snapshot"
            )
        return repo.readonly_session(snapshot_id=snapshot)
    return repo.readonly_session(branch=branch or "main")
