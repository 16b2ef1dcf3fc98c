"""Temporary files beside their keys: names that say who writes them, and whether it still runs.

A file-system backend publishes an object by writing a temporary file beside its key and
renaming it (:mod:`shardpipe.storage.local.store`). A process killed meanwhile leaves
the temporary file behind, and a later cleanup removes it; but the same folder also
holds the temporary files of jobs that are running (the marker a job is creating, its
undo records, its shards), which a cleanup must never remove under them. So the name
says who writes the file: ``.<name>.<random>-<pid>@<host>`` and
:data:`~shardpipe.storage.keys.TEMPORARY_SUFFIX`, ``<host>`` being 8 hex digits of a
hash of the machine's name, and :func:`writer_may_run` tells whether that process may
still be writing it.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
import uuid

from shardpipe.storage.keys import TEMPORARY_SUFFIX

FOREIGN_TEMPORARY_AGE = 3600.0
"""Seconds after which another machine's temporary file, unchanged, counts as left behind."""

_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
"""This machine, as temporary file names say it."""

_WRITER = re.compile(r"\.[0-9a-f]{32}-([0-9]+)@([0-9a-f]{8})" + re.escape(TEMPORARY_SUFFIX) + "$")
"""The end of a temporary file's name: the process and the machine writing it."""

ZARR_TEMPORARY = re.compile(r"zarr\.[0-9a-f]{32}\.partial")
"""The name of zarr-python's temporary file of a ``zarr.json``.

zarr's ``LocalStore`` writes a document to ``zarr.<uuid>.partial`` beside
its key, then renames it; a process killed in between leaves it, and zarr
then warns of an object it does not recognise whenever it lists the node
(and shardpipe refuses the node as not empty). The name says nothing of
its writer: only a job that holds the node removes one
(:func:`is_zarr_temporary`).
"""


def is_zarr_temporary(key: str, folder: str) -> bool:
    """Whether ``key`` is zarr's temporary file of the ``zarr.json`` in ``folder`` (a key)."""
    parent, _, name = key.rpartition("/")
    return parent == folder.rstrip("/") and ZARR_TEMPORARY.fullmatch(name) is not None


def temporary_name(name: str) -> str:
    """A fresh name for a temporary file of ``name``, saying which process writes it."""
    return f".{name}.{uuid.uuid4().hex}-{os.getpid()}@{_HOST}{TEMPORARY_SUFFIX}"


def writer_may_run(path: str) -> bool:
    """Whether the process writing the temporary file at ``path`` may still be writing it.

    A name without a writer (made by an older shardpipe) counts as left behind.
    """
    found = _WRITER.search(os.path.basename(path))
    if found is None:
        return False
    pid, host = int(found[1]), found[2]
    if host != _HOST:
        try:
            unchanged = time.time() - os.stat(path).st_mtime
        except FileNotFoundError:
            return True  # gone already: nothing to remove
        return unchanged < FOREIGN_TEMPORARY_AGE
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    return True
