"""Programs run in a process of their own: what a user's script leaves on stderr at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def rechunk_in_a_program(root: str, options: dict[str, Any], folder: Path) -> str:
    """Write, rechunk and verify under the URL ``root`` in a Python process of its own; its
    stderr (the program must have succeeded: it prints the check's ``True``)."""
    program = folder / "rechunk_program.py"
    program.write_text(RECHUNK_PROGRAM)
    done = subprocess.run(
        [sys.executable, str(program), root, json.dumps(options)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, HNS_VARIABLE: "false"},
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "True"), done.stderr
    return done.stderr
