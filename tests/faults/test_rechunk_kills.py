"""kill -9 during either pass of a two-pass rechunk, then the same call with ``resume=True``.

The copy shardpipe placed beside the target stays, named by its record in the
target's job folder; the resumed rechunk finds it there, keeps what the killed run
copied (all of it, or the blocks whose chunks are all stored) and the shards it
published, writes the rest, reads back equal and leaves no copy behind.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from pathlib import Path

import pytest

import shardpipe
from shardpipe.errors import InvalidArgumentError
from tests.support import REPOSITORY
from tests.support.fork_server import ForkServer, wait_for_word
from tests.support.readers import assert_same, read_tensorstore, read_zarr
from tests.support.rechunk_crash_child import LAYOUT, slabs

COPY_CHUNKS_PER_BLOCK = 8
"""Pass 1 copies blocks of (d, 128, 256) slabs into chunks of (d, 64, 64)."""


def _files(folder: Path) -> int:
    """Chunks (or shards) under ``folder``: keys of digits, not the temporary files beside them."""
    return sum(name.isdigit() for _, _, names in os.walk(folder) for name in names)


def _record(target: Path) -> dict[str, object] | None:
    try:
        record: dict[str, object] = json.loads(
            (target / ".shardpipe" / "intermediate.json").read_bytes()
        )
    except (OSError, ValueError):  # not there yet, or being replaced
        return None
    return record


def _kill_when(
    server: ForkServer, source: Path, target: Path, progress: Path, moment: str
) -> dict[str, object]:
    """Run the child; SIGKILL it once ``moment`` is reached; return the copy's record.

    The child holds its reads from that moment on and says so (``held``); the
    kill waits for that word too, so a child whose hook misses the reads fails
    here rather than racing the test's polling (under load such a child had
    copied three blocks, or all four, before the kill).
    """
    args = (source, target, progress, moment)
    proc = server.start("tests.support.rechunk_crash_child", list(map(str, args)), cwd=REPOSITORY)
    try:
        wait_for_word(progress, "started", proc)
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stderr() or "the child ended: it held no read"
            assert time.monotonic() < deadline
            record = _record(target)
            if record is not None and "held" in progress.read_text():
                copied = _files(Path(str(record["store"])) / "c")
                if moment == "copying" and copied >= 2 * COPY_CHUNKS_PER_BLOCK:
                    break  # the two blocks the child copies before it stops
                if moment == "copied" and record["state"] == "copied" and _files(target / "c"):
                    break
            time.sleep(0.002)
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    record = _record(target)
    assert record is not None
    return record


@pytest.mark.parametrize("moment", ["copying", "copied"])
def test_a_killed_two_pass_rechunk_resumes(
    tmp_path: Path, moment: str, fork_server: ForkServer
) -> None:
    source, target = tmp_path / "src.zarr", tmp_path / "out.zarr"
    data = slabs(source)
    record = _kill_when(fork_server, source, target, tmp_path / "progress", moment)
    copy = Path(str(record["store"]))
    # killed in the pass waited for: the copy shardpipe placed is kept, with its record
    assert record["state"] == moment and record["placed"] is True
    assert copy.parent == tmp_path and copy.name.startswith(".out.zarr.intermediate-")
    published = _files(target / "c")
    assert (published > 0) == (moment == "copied")
    if moment == "copied":  # whatever the kill left, no shard is torn
        assert shardpipe.verify(target).ok

    job = shardpipe.plan_rechunk(source, target, resume=True, **LAYOUT)
    assert job.intermediate is not None
    assert (job.intermediate.store, job.intermediate.found) == (str(copy), moment)
    assert "resumed: the earlier run's copy is" in repr(job)
    report = job.execute()
    copied, rewritten = report.passes
    assert rewritten.nbytes_stored == report.nbytes
    depth = job.intermediate.block_shape[0]  # slabs per block of pass 1
    blocks = -(-32 // depth)
    if moment == "copying":  # the blocks the killed run stored whole are kept
        assert (copied.blocks_kept, copied.blocks) == (2, blocks - 2)
        sizes = [min(depth, 32 - i * depth) for i in range(blocks)]  # slabs of each block
        others = {sum(c) for c in itertools.combinations(sizes, blocks - 2)}
        assert copied.reads in others  # only the other blocks' slabs were read
    else:  # pass 1 is skipped, the complete shards are kept
        assert (copied.blocks, copied.blocks_kept, copied.reads) == (0, blocks, 0)
        assert report.shards_skipped == published
        assert report.shards_written == 8 - published
        # pass 2 read only the copy's chunks of the shards it wrote (it counted them all)
        assert rewritten.reads < job.cost.reads
    assert_same(read_zarr(str(target)), data)
    assert_same(read_tensorstore(str(target)), data)
    assert shardpipe.verify(target, complete=True).ok
    # no copy left, nor its record
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr", "progress", "src.zarr"]
    assert not (target / ".shardpipe" / "intermediate.json").exists()


def test_resuming_from_a_copy_of_another_source_or_place_is_refused(
    tmp_path: Path, fork_server: ForkServer
) -> None:
    source, target = tmp_path / "src.zarr", tmp_path / "out.zarr"
    data = slabs(source)
    record = _kill_when(fork_server, source, target, tmp_path / "progress", "copying")
    other = tmp_path / "other.zarr"
    shutil.copytree(source, other)  # the same data under another name: another source
    with pytest.raises(
        InvalidArgumentError,
        match=r"resume: the intermediate copy at .* was made "
        r"by another rechunk: its source .* differs",
    ) as caught:
        shardpipe.plan_rechunk(other, target, resume=True, **LAYOUT)
    assert "Run the same call as the interrupted one" in str(caught.value)
    with pytest.raises(InvalidArgumentError, match=r"temp_store: .* kept its copy at"):
        shardpipe.plan_rechunk(
            source, target, resume=True, temp_store=tmp_path / "elsewhere.zarr", **LAYOUT
        )
    # started again without resume: the old copy goes, a new one is made and removed
    report = shardpipe.plan_rechunk(source, target, **LAYOUT).execute()
    assert report.passes[0].blocks_kept == 0
    assert not Path(str(record["store"])).exists()
    assert_same(read_zarr(str(target)), data)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.zarr",
        "out.zarr",
        "progress",
        "src.zarr",
    ]
