"""One of two processes racing to write the same array (see ``test_update_race``).

``python -m tests.support.race_child PATH MODE VALUE GO_FILE``: says it is ready (imports
done) in :func:`ready_file`, waits for GO_FILE, then
writes VALUE everywhere (MODE ``overwrite``: a new array replacing the old;
``region``: a region write over the whole array). Exit 0 on success, 3 on a
clear conflict error, anything else is a failure of the test.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

SHAPE = (32, 64, 64)


def ready_file(go: str, value: str) -> str:
    """The file the child writing ``value`` creates once it only waits for ``go``."""
    return f"{go}.ready-{value}"


def main(path: str, mode: str, value: str, go: str) -> int:
    import dask
    import dask.array as da

    import shardpipe

    dask.config.set(scheduler="threads")
    data = da.from_array(np.full(SHAPE, int(value), dtype="uint16"), chunks=(8, 64, 64))
    open(ready_file(go, value), "w").close()
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        if mode == "overwrite":
            shardpipe.to_sharded_zarr(
                data,
                path,
                shards=(16, 32, 32),
                chunks=(8, 16, 16),
                overwrite=True,
                storage_options={"fsync": False},
            )
        else:
            shardpipe.to_sharded_zarr(
                data, path, region=(slice(None),) * 3, storage_options={"fsync": False}
            )
    except (shardpipe.JobConflictError, shardpipe.ShardConflictError) as err:
        print(type(err).__name__, err, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
