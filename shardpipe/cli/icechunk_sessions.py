"""Icechunk repositories on the command line: the session to read, or to write one commit into.

``verify`` and ``info`` read :func:`store_to_read` (``--branch`` or
``--snapshot``); ``rechunk`` and ``write-dataset`` write into
:func:`writable_session` as one commit (:func:`commit_arguments`), and
``rechunk`` plans against :func:`planning_session` first. The options
themselves are defined in :mod:`shardpipe.cli.options`.
"""

from __future__ import annotations

import argparse
from typing import Any

from shardpipe.errors import InvalidArgumentError


def commit_arguments(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The ``commit=`` and ``rebase=`` of the write (none without ``--icechunk``).

    The default message is the command and its source: ``shardpipe rechunk SRC``.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        For ``--commit``, ``--rebase`` or ``--branch`` without ``--icechunk``.
    """
    if args.icechunk:
        message = args.commit or f"shardpipe {command} {args.source}"
        return {"commit": message, "rebase": args.rebase}
    check_icechunk_only(args, "TARGET")
    return {}


def check_icechunk_only(args: argparse.Namespace, where: str) -> None:
    """Refuse ``--branch``, ``--snapshot``, ``--commit`` and ``--rebase`` without ``--icechunk``
    (they would be ignored: ``where`` is then a plain store).

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        Naming the first of those flags given.
    """
    given = {
        "--branch": getattr(args, "branch", None) is not None,
        "--snapshot": getattr(args, "snapshot", None) is not None,
        "--commit": getattr(args, "commit", None) is not None,
        "--rebase": bool(getattr(args, "rebase", False)),
    }
    for flag, present in given.items():
        if present:
            raise InvalidArgumentError(
                flag,
                "applies to Icechunk repositories only",
                f"Add --icechunk ({where} is then a repository), or leave {flag} out",
            )


def store_to_read(
    args: argparse.Namespace, options: dict[str, Any] | None
) -> tuple[Any, dict[str, Any] | None]:
    """What a reading command reads, and the storage options left to pass with it.

    Without ``--icechunk``: ``args.store`` and ``options``. With it: the
    read-only session of ``--branch`` (main) or ``--snapshot`` of the
    repository at ``args.store`` (opened with ``options``), and None.
    """
    if not args.icechunk:
        check_icechunk_only(args, "STORE")
        return args.store, options
    from shardpipe.storage.icechunk.repository import open_session

    session = open_session(args.store, options, branch=args.branch, snapshot=args.snapshot)
    return session, None


def writable_session(args: argparse.Namespace, options: dict[str, Any] | None) -> Any:
    """The writable session on ``--branch`` (main) of the repository at ``args.target``
    (created if absent)."""
    from shardpipe.storage.icechunk.repository import open_session

    return open_session(args.target, options, branch=args.branch, writable=True, create=True)


def planning_session(args: argparse.Namespace, options: dict[str, Any] | None) -> tuple[Any, bool]:
    """A writable session to plan against, and whether the repository exists.

    When it does not, the session is on an empty in-memory repository: a
    plan (or a dry run) refused for bad input creates nothing at TARGET.
    """
    import icechunk

    from shardpipe.storage.icechunk.repository import open_session, quiet_logs, repository_storage

    quiet_logs()
    if icechunk.Repository.exists(repository_storage(args.target, options)):
        return open_session(args.target, options, branch=args.branch, writable=True), True
    return icechunk.Repository.create(icechunk.in_memory_storage()).writable_session("main"), False
