"""Programs run in a process of their own: what a user's script leaves on stderr at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import zarr

from shardpipe.testing.gcs import HNS_VARIABLE

RECHUNK_PROGRAM = """
import json, sys
import dask.array as da
import shardpipe
root, options = sys.argv[1], json.loads(sys.argv[2])
volume = da.ones((8, 8), chunks=4, dtype="u1")
shardpipe.to_sharded_zarr(volume, f"{root}/exit.zarr", shards=(8, 8), chunks=(4, 4),
                          storage_options=options)
# the source opened by zarr (a file system of zarr's, on zarr's event loop)
shardpipe.rechunk(f"{root}/exit.zarr", f"{root}/rechunked.zarr", shards=(8, 4), chunks=(8, 4),
                  storage_options=options, source_storage_options=options)
print(shardpipe.verify(f"{root}/rechunked.zarr", storage_options=options).ok)
"""

GROUP_PROGRAM = """
import json, sys
import zarr
import shardpipe
source, options, target = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
# the group opened by zarr before any store of shardpipe's, the target on a local disk
shardpipe.rechunk_group(source, target, shards=(8, 4), chunks=(8, 4),
                        source_storage_options=options)
print((zarr.open_array(target, path="a")[...] == 1).all())  # small: copied unsharded
"""


def _run(program: str, arguments: list[str], folder: Path) -> str:
    """Run ``program`` with ``arguments``; its stderr (it must print ``True``)."""
    path = folder / "program.py"
    path.write_text(program)
    done = subprocess.run(
        [sys.executable, str(path), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, HNS_VARIABLE: "false"},
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
    return done.stderr


def rechunk_in_a_program(root: str, options: dict[str, Any], folder: Path) -> str:
    """Write, rechunk and verify under the URL ``root`` in a Python process of its own; its
    stderr (the program must have succeeded: it prints the check's ``True``)."""
    return _run(RECHUNK_PROGRAM, [root, json.dumps(options)], folder)


def rechunk_group_in_a_program(root: str, options: dict[str, Any], folder: Path) -> str:
    """Rechunk a group under the URL ``root`` (made here) into a local folder, in a Python
    process of its own; its stderr."""
    group = zarr.open_group(f"{root}/group.zarr", mode="w", storage_options=options)
    group.create_array("a", shape=(8, 8), chunks=(4, 4), dtype="u1")[...] = 1
    target = str(folder / "group.zarr")
    return _run(GROUP_PROGRAM, [f"{root}/group.zarr", json.dumps(options), target], folder)
