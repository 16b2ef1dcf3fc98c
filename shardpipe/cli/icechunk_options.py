"""Command-line options for Icechunk repositories: what to read, and a write as one commit.

``verify`` and ``info`` take :func:`add_reading` (a branch or a snapshot);
``rechunk`` and ``write-dataset`` take :func:`add_writing` (a branch, a
commit message, ``--rebase``) and write into :func:`writable_session`;
``rechunk`` plans against :func:`planning_session` first.
"""

from __future__ import annotations

import argparse
from typing import Any

from shardpipe.errors import InvalidArgumentError


def add_reading(command: argparse.ArgumentParser) -> None:
    """``--icechunk`` (the store is an Icechunk repository) and what to read of it."""
    command.add_argument(
        "--icechunk",
        action="store_true",
        help="the store is an Icechunk repository (local path or s3:// URL)",
    )
    command.add_argument("--branch", default=None, help="with --icechunk: branch to read (main)")
    command.add_argument("--snapshot", default=None, help="with --icechunk: snapshot id to read")


def add_writing(command: argparse.ArgumentParser, what: str) -> None:
    """``--icechunk`` (TARGET is a repository, the write one commit), ``--branch``, ``--commit``,
    ``--rebase``; ``what`` names the write in the help ("the rechunk")."""
    command.add_argument(
        "--icechunk",
        action="store_true",
        help="TARGET is an Icechunk repository (local path or s3:// URL; created if absent): "
        f"{what} is one commit on --branch",
    )
    command.add_argument("--branch", default="main", help="with --icechunk: branch (main)")
    command.add_argument(
        "--commit", default=None, help="with --icechunk: commit message (default: the command)"
    )
    command.add_argument(
        "--rebase",
        action="store_true",
        help="with --icechunk: rebase onto commits made meanwhile that changed other shards",
    )


def commit_arguments(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The ``commit=`` and ``rebase=`` of the write (none without ``--icechunk``).

    The default message is the command and its source: ``shardpipe rechunk SRC``.

    Raises
    ------
    shardpipe.errors.InvalidArgumentError
        For ``--commit`` or ``--rebase`` without ``--icechunk``.
    """
    if args.icechunk:
        message = args.commit or f"shardpipe {command} {args.source}"
        return {"commit": message, "rebase": args.rebase}
    if args.commit is not None or args.rebase:
        raise InvalidArgumentError(
            "--commit" if args.commit is not None else "--rebase",
            "applies to Icechunk targets only",
            "Add --icechunk (TARGET is then a repository), or leave it out",
        )
    return {}


def writable_session(args: argparse.Namespace, options: dict[str, Any] | None) -> Any:
    """The writable session on ``--branch`` of the repository at ``args.target`` (created if
    absent)."""
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
