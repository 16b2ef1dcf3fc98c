"""A rechunk of slabs into cubes holds the whole process under twice ``max_mem``.

Slabs thinner than the target's inner chunks make one pass gather every part
from several blocks; the scheduler used to read every block of a wave before
the first shard was done and hold them all (issue 28: a rechunk of (1, 4096,
4096) slabs under ``max_mem="256MB"`` peaked at +899 MiB). Blocks are now read
in order, a few ahead of the written parts (:mod:`shardpipe.engine.read_gates`), and
where even that would hold more than 1.5 x ``max_mem`` the rechunk goes in two
passes through a copy beside the target (:mod:`shardpipe.rechunking.memory`).

Each case runs in a process of its own (forked from the fork server, which has done
the imports) on two threads; the peak is the kernel's
high-water mark (``VmHWM``), reset just before the rechunk, above the RSS then.
"""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import dask
import numpy as np
import pytest
import zarr

import shardpipe
from shardpipe.rechunking.memory import automatic_temp_store, one_pass_hold
from shardpipe.storage.resolve import resolve_store
from tests.support.fork_server import ForkServer
from tests.support.readers import assert_same, read_zarr
from tests.support.spies import count_calls

MiB = 2**20
SHAPE = (128, 1024, 1024)
"""256 MiB of (1, 1024, 1024) uint16 slabs."""
MAX_MEM = 128 * 10**6

CHILD = textwrap.dedent(
    """
    import json, sys
    import dask, numpy as np, zarr
    from numcodecs import Zstd
    import shardpipe

    source, target, warm, chunks, max_mem = sys.argv[1:6]
    shards = (128, 256, 256)
    # warm up (imports, thread pools) on a small copy of the same kind of array: a small
    # warm-up leaves less freed memory for the measured run to reuse than a large one
    small = zarr.create_array(warm + "/src.zarr", shape=(16, 1024, 1024), chunks=(1, 1024, 1024),
                              dtype="uint16", zarr_format=2, compressors=Zstd(level=1))
    small[...] = 1000
    del small

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(field)

    with dask.config.set(scheduler="threads", num_workers=2):
        shardpipe.rechunk(warm + "/src.zarr", warm + "/out.zarr", shards=(16, 64, 64),
                          chunks=(16, 32, 32), storage_options={"fsync": False})
        job = shardpipe.plan_rechunk(
            source, target, shards=shards,
            chunks=tuple(int(c) for c in chunks.split(",")), max_mem=int(max_mem),
            storage_options={"fsync": False},
        )
        baseline = status("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        job.execute()
        peak = status("VmHWM")
    print(json.dumps({"measured": peak - baseline, "held": job.held,
                      "passes": 1 if job.intermediate is None else 2,
                      "amplification": job.cost.amplification}))
    """
)


@pytest.fixture(scope="module")
def slab_source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The source, written once for the module's cases: SHAPE of noisy slabs, zstd-1."""
    from numcodecs import Zstd

    path = str(tmp_path_factory.mktemp("slabs") / "src.zarr")
    array = zarr.create_array(
        path,
        shape=SHAPE,
        chunks=(1, *SHAPE[1:]),
        dtype="uint16",
        zarr_format=2,
        compressors=Zstd(level=1),
    )
    rng = np.random.default_rng(0)
    for z in range(0, SHAPE[0], 16):
        array[z : z + 16] = 1000 + rng.integers(0, 64, (16, *SHAPE[1:]), dtype="uint16")
    return path


def _run(
    fork_server: ForkServer, source: str, tmp_path: Path, chunks: str, max_mem: int
) -> dict[str, Any]:
    (tmp_path / "warm").mkdir()
    env = dict(os.environ)
    if max_mem < MAX_MEM:  # a small budget: memory given back, at some speed
        env["DASK_SHARDPIPE__MEMORY__MMAP_THRESHOLD"] = "16MiB"
    args = [source, str(tmp_path / "out.zarr"), str(tmp_path / "warm"), chunks, str(max_mem)]
    done = fork_server.run(CHILD, args, env=env)
    assert done.returncode == 0, done.stderr()
    result: dict[str, Any] = json.loads(done.stdout().strip().splitlines()[-1])
    return result


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status (Linux only)")
@pytest.mark.parametrize(
    ("chunks", "max_mem", "passes"),
    [
        # a part needs 2 blocks of 16 slabs: one pass, blocks read in order (320.8 MiB
        # with the read gates taken out)
        ("32,64,64", MAX_MEM, 1),
        # a part needs 4 blocks: one pass would hold 192 MiB, so two
        ("64,64,64", MAX_MEM, 2),
        # the smallest budget of issue 42's sweep: two passes in thinner blocks, whose
        # freed memory glibc keeps in its threads' heaps (143.6 MiB) unless the write
        # fixes its mmap threshold (shardpipe.memory.mmap-threshold: 66.6 MiB)
        ("64,64,64", MAX_MEM // 2, 2),
    ],
)
def test_slabs_into_cubes_stay_under_twice_max_mem(
    fork_server: ForkServer,
    slab_source: str,
    tmp_path: Path,
    chunks: str,
    max_mem: int,
    passes: int,
) -> None:
    result = _run(fork_server, slab_source, tmp_path, chunks, max_mem)
    print(f"chunks {chunks}: {result['measured'] / MiB:.1f} MiB, {result['passes']} pass(es)")
    assert result["passes"] == passes, result
    assert result["measured"] <= 2 * max_mem, result
    assert result["measured"] >= max_mem // 4, result  # not vacuous
    # the copy of two passes was beside the target, and is gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.zarr", "warm"]
    back = zarr.open_array(str(tmp_path / "out.zarr"), mode="r")
    source = zarr.open_array(slab_source, mode="r")
    np.testing.assert_array_equal(back[::37, ::101, ::53], source[::37, ::101, ::53])


# -- the plan: when one pass, when two, and where the copy goes -----------------------------


@pytest.fixture
def slabs(tmp_path: Path) -> str:
    """A (64, 512, 512) uint16 array of (1, 512, 512) slabs, metadata only (planning reads none)."""
    path = str(tmp_path / "slabs.zarr")
    zarr.create_array(path, shape=(64, 512, 512), chunks=(1, 512, 512), dtype="uint16")
    return path


def test_one_pass_is_kept_while_what_it_holds_fits(tmp_path: Path, slabs: str) -> None:
    job = shardpipe.plan_rechunk(
        slabs, tmp_path / "out.zarr", shards=(64, 256, 256), chunks=(64, 64, 64), max_mem="64MB"
    )
    assert job.straddles and job.intermediate is None
    assert 0 < job.held <= 1.5 * 64 * 10**6
    assert job.held == one_pass_hold(job.write)
    assert "held until its parts are written" in repr(job)


def test_two_passes_are_chosen_when_one_would_hold_too_much(tmp_path: Path, slabs: str) -> None:
    target = tmp_path / "out.zarr"
    job = shardpipe.plan_rechunk(
        slabs, target, shards=(64, 256, 256), chunks=(64, 64, 64), max_mem="16MB"
    )
    assert job.intermediate is not None and job.one_pass is not None
    assert job.held > 1.5 * 16 * 10**6
    where = Path(job.intermediate.store)
    assert where.parent == tmp_path and where.name.startswith(".out.zarr.intermediate-")
    assert re.search(r"chosen because one pass, in blocks \(\d+, 512, 512\), would hold", repr(job))
    assert not where.exists() and not target.exists()  # planning writes nothing
    # compute=False cannot run two passes one after the other: the one pass is delayed
    delayed = shardpipe.rechunk(
        slabs, target, shards=(64, 256, 256), chunks=(64, 64, 64), max_mem="16MB", compute=False
    )
    assert delayed.compute().shards == 4
    assert shardpipe.verify(target).ok


def test_resume_and_given_temp_store_are_kept(tmp_path: Path, slabs: str) -> None:
    kwargs: dict[str, Any] = {"shards": (64, 256, 256), "chunks": (64, 64, 64), "max_mem": "16MB"}
    given = tmp_path / "scratch.zarr"
    job = shardpipe.plan_rechunk(slabs, tmp_path / "a.zarr", temp_store=given, **kwargs)
    assert job.intermediate is not None and job.one_pass is None
    assert job.intermediate.store == str(given)
    # a resumed rechunk goes in the same two passes as the run it resumes (placed the same
    # way), and delays its one pass only where nothing was written yet
    resumed = shardpipe.plan_rechunk(slabs, tmp_path / "b.zarr", resume=True, **kwargs)
    assert resumed.intermediate is not None and resumed.intermediate.placed
    assert resumed.intermediate.found is None and resumed.one_pass is not None


def test_the_automatic_copy_is_removed_when_the_rechunk_fails(
    tmp_path: Path, slabs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardpipe.rechunking.intermediate import Intermediate

    job = shardpipe.plan_rechunk(
        slabs, tmp_path / "out.zarr", shards=(64, 256, 256), chunks=(64, 64, 64), max_mem="16MB"
    )
    assert job.intermediate is not None
    written = Intermediate.write

    def fail_after_writing(self: Intermediate, blocks: Any, fill_value: Any, **kw: Any) -> Any:
        written(self, blocks, fill_value, **kw)
        raise OSError("injected")

    monkeypatch.setattr(Intermediate, "write", fail_after_writing)
    with pytest.raises(OSError, match="injected"):
        job.execute()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slabs.zarr"]


def test_automatic_copies_go_beside_local_and_url_targets_only(tmp_path: Path) -> None:
    local = automatic_temp_store(resolve_store(str(tmp_path / "a" / "vol.zarr")))
    assert local is not None and Path(local).parent == tmp_path / "a"
    memory = automatic_temp_store(resolve_store(zarr.storage.MemoryStore(), "vol"))
    assert memory is None


@pytest.mark.parametrize("scheme", ["az", "abfs", "abfss"])
def test_an_automatic_copy_keeps_the_scheme_its_target_was_written_with(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """adlfs answers to az://, abfs:// and abfss:// and calls itself abfs: the copy beside an
    ``az://`` target was named ``abfs://`` in the plan, the report and the messages (found by
    a new-user trial). No Azure is reached: the backend's check that it answers is skipped."""
    from shardpipe.storage import resolve
    from shardpipe.testing.azure import storage_options_for
    from shardpipe.testing.null_store import NullShardStore

    monkeypatch.setattr(resolve, "azure_backend", lambda options, root: NullShardStore())
    options = storage_options_for("http://127.0.0.1:9/devstoreaccount1")
    target = resolve_store(f"{scheme}://box/lab/vol.zarr", storage_options=options)
    place = automatic_temp_store(target)
    assert place is not None and place.startswith(f"{scheme}://box/lab/.vol.zarr.intermediate-")
    # a target resolved again (a group rechunk's member, by its path in the group) keeps it
    member = automatic_temp_store(resolve_store(target, "img"))
    assert member is not None and member.startswith(f"{scheme}://box/lab/vol.zarr/.img.")


def test_trying_smaller_blocks_does_not_check_the_options_again(
    tmp_path: Path, slabs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan halves its blocks until a write fits (here none does); the options are
    checked by the door only, not for the write nor at each try."""
    import shardpipe.rechunking.api as api

    calls = count_calls(monkeypatch, api, "check_array_options", "prepare_checked")
    with pytest.raises(shardpipe.MemoryBudgetError, match="max_mem"):
        shardpipe.plan_rechunk(
            slabs, tmp_path / "out.zarr", shards=(64, 256, 256), chunks=(64, 64, 64), max_mem="3MB"
        )
    assert calls["prepare_checked"] > 2, calls  # several block shapes were tried
    assert calls["check_array_options"] == 1, calls


@pytest.mark.parametrize("stage", ["planning", "writing"])
def test_an_interrupt_in_the_second_pass_says_the_copy_is_kept_for_resume(
    tmp_path: Path, slabs: str, stage: str
) -> None:
    """Interrupted while the second pass is planned on the copy (before the write holds the
    target) or while it writes: either way the error says the copy stays for ``resume``."""
    kwargs: dict[str, Any] = {"shards": (64, 256, 256), "chunks": (64, 64, 64), "max_mem": "16MB"}
    job = shardpipe.plan_rechunk(slabs, tmp_path / "out.zarr", **kwargs)
    assert job.intermediate is not None and job.replan is not None

    def interrupted(*args: Any, **kw: Any) -> Any:
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        if stage == "planning":
            object.__setattr__(job, "replan", interrupted)
        else:
            from shardpipe.write import job as write_job

            patch.setattr(write_job, "execute_together", interrupted)
        with pytest.raises(KeyboardInterrupt) as raised:
            job.execute()
    notes = "\n".join(getattr(raised.value, "__notes__", ()))
    assert str(job.intermediate.store) in notes and "resume=True" in notes, notes
    assert "overwrite=True" in notes  # a rerun without either is refused: the target exists
    assert Path(job.intermediate.store).exists()
    resumed = shardpipe.rechunk(slabs, tmp_path / "out.zarr", resume=True, **kwargs)
    assert resumed is not None and shardpipe.verify(tmp_path / "out.zarr").ok
    assert not Path(job.intermediate.store).exists()


def test_an_interrupt_in_the_first_pass_keeps_what_was_copied_for_resume(
    tmp_path: Path, slabs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C while the copy is made keeps the copy so far and its record, as a kill
    does (a failure removes a copy shardpipe placed); ``resume=True`` copies the rest."""
    from shardpipe.rechunking import raw_copy

    kwargs: dict[str, Any] = {"shards": (64, 256, 256), "chunks": (64, 64, 64), "max_mem": "16MB"}
    job = shardpipe.plan_rechunk(slabs, tmp_path / "out.zarr", **kwargs)
    assert job.intermediate is not None
    store_block, stored = raw_copy.store_block, []

    def interrupted_after_one(block: Any, store: Any, offset: Any, *rest: Any) -> None:
        if stored:
            raise KeyboardInterrupt
        store_block(block, store, offset, *rest)
        stored.append(offset)

    monkeypatch.setattr(raw_copy, "store_block", interrupted_after_one)
    with dask.config.set(scheduler="synchronous"), pytest.raises(KeyboardInterrupt) as raised:
        job.execute()
    monkeypatch.undo()
    notes = "\n".join(getattr(raised.value, "__notes__", ()))
    assert str(job.intermediate.store) in notes and "in part" in notes, notes
    assert "resume=True copies the rest" in notes and "overwrite=True" in notes, notes
    assert Path(job.intermediate.store, "zarr.json").exists()
    resumed = shardpipe.plan_rechunk(slabs, tmp_path / "out.zarr", resume=True, **kwargs)
    report = resumed.execute()
    assert report.passes[0].blocks_kept == 1  # the block copied before the interrupt
    assert shardpipe.verify(tmp_path / "out.zarr").ok
    assert_same(read_zarr(str(tmp_path / "out.zarr")), read_zarr(slabs))
    assert not Path(job.intermediate.store).exists()


def test_resuming_a_finished_two_pass_rechunk_is_refused_before_any_copy(
    tmp_path: Path, slabs: str
) -> None:
    """With no copy recorded, a resumed two-pass rechunk would copy the whole source, then
    find the target written from another copy: it is refused as it is planned."""
    kwargs: dict[str, Any] = {"shards": (64, 256, 256), "chunks": (64, 64, 64), "max_mem": "16MB"}
    job = shardpipe.plan_rechunk(slabs, tmp_path / "out.zarr", **kwargs)
    assert job.intermediate is not None
    job.execute()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(shardpipe.InvalidArgumentError, match=r"resume: .* another job") as raised:
        shardpipe.plan_rechunk(slabs, tmp_path / "out.zarr", resume=True, **kwargs)
    notes = "\n".join(getattr(raised.value, "__notes__", ()))
    assert "no copy of an interrupted first pass is recorded" in notes, notes
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing copied
    assert shardpipe.verify(tmp_path / "out.zarr", complete=True).ok
