"""A process that migrates a draft hierarchy in place slowly until it is killed.

Run as ``python -m tests.support.migrate_crash_child PATH PROGRESS PHASE``. With
PHASE ``copy`` every shard copy sleeps a little and appends a ``.`` to
PROGRESS first; with ``delete`` every deletion of a draft key does (the v3
hierarchy is then written, the draft's leftovers not yet gone). The test
(``test_migrate``) kills it with SIGKILL in that phase.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Any

import shardpipe
from shardpipe.storage.local.store import LocalShardStore

migrating = importlib.import_module("shardpipe.legacy.migration")  # the module, not the function


def main(path: str, progress: str, phase: str) -> None:
    def mark() -> None:
        with Path(progress).open("a") as out:
            out.write(".")
        time.sleep(0.2)

    if phase == "copy":
        copy = migrating.copy_shard

        def slow_copy(*args: Any) -> None:
            mark()
            copy(*args)

        migrating.copy_shard = slow_copy
    else:
        delete = LocalShardStore.delete

        def slow_delete(self: LocalShardStore, key: str) -> None:
            if "/root" in key:  # a key of the draft
                mark()
            delete(self, key)

        LocalShardStore.delete = slow_delete  # type: ignore[method-assign]
    shardpipe.migrate(path, workers=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
