"""The memory model against measured RSS, in a worker process of its own per case
(forked from the fork server, which has done the imports).

Each case writes a volume generated inside the Dask graph (so the data is
not part of the baseline) with Dask's synchronous scheduler, which runs one
task at a time: the process's peak RSS above its baseline is then what the
largest task held, plus whatever blocks the scheduler keeps for later tasks
(at most one block here) and interpreter noise. The peak is read from the
kernel's high-water mark (``VmHWM``), reset just before the write.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.support.fork_server import ForkServer

CHILD = textwrap.dedent(
    """
    import json, sys
    import dask, dask.array as da, numpy as np
    from zarr.codecs import ZstdCodec
    import shardpipe

    case = json.loads(sys.argv[1])

    def noise(block_info=None):
        loc = block_info[None]["array-location"]
        shape = tuple(b - a for a, b in loc)
        seed = sum(a * 7919 ** i for i, (a, _) in enumerate(loc))
        return np.random.default_rng(seed).integers(0, 65535, shape, dtype="uint16")

    def volume(shape, blocks):
        chunks = da.core.normalize_chunks(blocks, shape)
        meta = np.empty((0, 0, 0), "uint16")
        return da.map_blocks(noise, dtype="uint16", chunks=chunks, meta=meta)

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(field)

    def write(path, shape, blocks, **kw):
        job = shardpipe.prepare_write(
            volume(shape, blocks), path, compressors=ZstdCodec(level=1), overwrite=True, **kw
        )
        return job

    with dask.config.set(scheduler="sync"):
        # warm up: imports, codec set-up, allocator pools
        write(case["out"] + "-warm", (32, 64, 64), (16, 64, 64), shards=(32, 64, 64),
              chunks=(16, 32, 32)).execute()
        job = write(case["out"], tuple(case["shape"]), tuple(case["blocks"]),
                    shards=tuple(case["shards"]), chunks=tuple(case["chunks"]),
                    max_mem=case["max_mem"])
        baseline = status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak-RSS high-water mark
        job.execute()
        peak = status("VmHWM")
    print(json.dumps({
        "measured": peak - baseline,
        "projected": job.plan.max_projected_mem,
        "block": job.plan.block_nbytes,
        "multipart": job.plan.n_multipart_shards,
        "gathered": job.plan.num_tasks != job.plan.n_parts + 2 * job.plan.n_multipart_shards,
    }))
    """
)

MiB = 2**20
SLACK = 24 * MiB
"""Interpreter, allocator and library noise allowed above the model."""

CASES = {
    # whole shards, each in one block: direct write-shard tasks
    "aligned": dict(
        shape=(256, 256, 256),
        blocks=(64, 256, 256),
        shards=(64, 256, 256),
        chunks=(32, 64, 64),
        max_mem="64MB",
    ),
    # misaligned blocks: parts gathered in their task or from pieces
    "misaligned": dict(
        shape=(200, 256, 256),
        blocks=(50, 100, 100),
        shards=(64, 128, 128),
        chunks=(32, 64, 64),
        max_mem="48MB",
    ),
    # one 32 MiB shard per 256^3 block-column under a 16 MB budget: parts and a stamp
    "parts": dict(
        shape=(256, 256, 256),
        blocks=(16, 256, 256),
        shards=(256, 256, 256),
        chunks=(16, 64, 64),
        max_mem="16MB",
    ),
}


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status (Linux only)")
@pytest.mark.parametrize("name", sorted(CASES))
def test_model_bounds_measured_peak(name: str, tmp_path, fork_server: ForkServer) -> None:
    case = {**CASES[name], "out": str(tmp_path / name)}
    done = fork_server.run(CHILD, [json.dumps(case)], timeout=300)
    assert done.returncode == 0, done.stderr()
    result = json.loads(done.stdout().strip().splitlines()[-1])
    measured, projected, block = result["measured"], result["projected"], result["block"]
    print(f"{name}: measured {measured / MiB:.1f} MiB, projected {projected / MiB:.1f} MiB")
    # the model is an upper bound of what a task holds; the scheduler may keep one
    # more block for a later task
    assert measured <= projected + block + SLACK, result
    # and it is not vacuous: the measurement reaches a good share of the projection
    assert measured >= projected // 4, result
    if name == "parts":
        assert result["multipart"] > 0


UPDATE_CHILD = textwrap.dedent(
    """
    import json, sys
    import dask, dask.array as da, numpy as np
    import shardpipe

    out, max_mem = sys.argv[1], sys.argv[2]
    shape, shards, chunks = (192, 512, 512), (96, 512, 512), (16, 128, 128)

    def noise(block_info=None):
        loc = block_info[None]["array-location"]
        seed = sum(a * 7919 ** i for i, (a, _) in enumerate(loc))
        shape = tuple(b - a for a, b in loc)
        return np.random.default_rng(seed).integers(0, 4000, shape, dtype="uint16")

    def volume(shape, blocks):
        chunks = da.core.normalize_chunks(blocks, shape)
        meta = np.empty((0, 0, 0), "uint16")
        return da.map_blocks(noise, dtype="uint16", chunks=chunks, meta=meta)

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(field)

    local = {"fsync": False}
    with dask.config.set(scheduler="sync"):  # one task at a time
        # uncompressed: every new chunk fits its old room, so the update goes in place
        shardpipe.to_sharded_zarr(volume(shape, shards), out, shards=shards, chunks=chunks,
                                  compressors=None, storage_options=local)
        small = tuple(slice(0, 16) for _ in shape)  # warm up: an update of one chunk
        shardpipe.to_sharded_zarr(volume((16, 16, 16), (16, 16, 16)), out, region=small,
                                  storage_options=local)
        job = shardpipe.prepare_write(volume(shape, shards) + 1, out, region=(slice(None),) * 3,
                                      max_mem=max_mem, storage_options=local,
                                      write_strategy="in_place")
        baseline = status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        report = job.execute()
        peak = status("VmHWM")
    print(json.dumps({"measured": peak - baseline, "projected": job.plan.max_projected_mem,
                      "block": job.plan.block_nbytes, "strategies": report.strategies}))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status (Linux only)")
def test_an_update_in_place_stays_within_the_stated_margin(
    tmp_path, fork_server: ForkServer
) -> None:
    """A one-thread region update in place: projected + one block + 24 MiB, as the README says.

    Its undo record keeps the old bytes of every range it overwrites (48 MiB
    here, uncompressed); that copy was neither counted nor single (joined
    into one more copy to be written): 191 MiB measured under 110 MB, where
    the model projected 98 MiB and the stated margin allowed 170 MiB.
    """
    done = fork_server.run(UPDATE_CHILD, [str(tmp_path / "update.zarr"), "160MB"], timeout=300)
    assert done.returncode == 0, done.stderr()
    result = json.loads(done.stdout().strip().splitlines()[-1])
    measured, projected, block = result["measured"], result["projected"], result["block"]
    print(f"update: measured {measured / MiB:.1f} MiB, projected {projected / MiB:.1f} MiB")
    assert result["strategies"] == {"in_place": 2}, result
    assert measured <= projected + block + SLACK, result
    assert measured >= projected // 2, result  # not vacuous
