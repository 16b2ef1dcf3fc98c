"""The writers of the rechunk sweep, each run in a fresh process (:func:`run_child`).

Every writer reads the case's Zarr v2 source from disk and writes the same
sharded target (:func:`benchmarks.rechunk_cases.create_target` or the same
metadata); ``budget`` is ``max_mem`` (``allowed_mem`` for cubed) for the
writers that take one, ``none`` for the others:

* ``limit``: :mod:`benchmarks.rechunk_limit` (its ``limit_s``, not its wall
  time, is the anchor);
* ``shardpipe``: ``shardpipe.plan_rechunk(src, dst, ..., max_mem=)`` and
  ``execute()``, Dask's threaded scheduler; ``shardpipe-temp``: the same with
  ``temp_store=`` beside the target;
* ``tensorstore``: ``dst.write(src)`` from the ``zarr`` driver to the
  ``zarr3`` one;
* ``dask``: ``da.from_zarr(src).rechunk(shards)`` + ``da.store`` (threaded);
* ``dask-p2p``: the same with ``method="p2p"`` on a LocalCluster of 2
  single-threaded worker processes; ``shardpipe-cluster``: shardpipe on it;
* ``rechunker``: ``rechunker.rechunk(src, shards, max_mem, dst, temp_store=)``;
* ``cubed``: ``cubed.from_zarr(src).rechunk(shards)`` + ``cubed.store``.

The child first writes the case's ``--small`` version once, untimed (a
warm-up), then times the writes (best of ``reps``, the target emptied and
``os.sync()`` before each), measures its peak RSS over its RSS before the
first (and the workers' likewise), then reads the target back and compares
it with the source.
"""

from __future__ import annotations

import gc
import os
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.child import MIB, MeasuredCluster, reset_peak, rss
from benchmarks.rechunk_cases import (
    CASES,
    SMALL_CASES,
    RechunkCase,
    compare,
    create_target,
    ensure_source,
)

BUDGETED = ("shardpipe", "shardpipe-temp", "shardpipe-cluster", "rechunker", "cubed")
"""Writers run once per budget; the others once per case."""
ON_CLUSTER = ("dask-p2p", "shardpipe-cluster")
WRITERS = ("limit", "tensorstore", "dask", "dask-p2p", *BUDGETED)


class Unsupported(RuntimeError):
    """The writer cannot write this target at all (reported, not a failure)."""


class Refused(RuntimeError):
    """The writer refuses the budget before it writes (reported, not a failure)."""


def plan_facts(job: Any) -> dict[str, Any]:
    """What shardpipe planned: passes, blocks, reads and read amplification per pass."""
    passes = []
    inter = getattr(job, "intermediate", None)
    shape = job.source.shape
    if inter is not None:
        passes.append(_pass(shape, inter.block_shape, inter.cost, into=list(inter.chunk_shape)))
    passes.append(_pass(shape, job.block_shape, job.cost))
    return {
        "passes": len(passes),
        "plan": passes,
        "reads": sum(p["reads"] for p in passes),
        "amplification": sum(p["amplification"] for p in passes),
        "plan_text": repr(job),
    }


def _pass(
    shape: tuple[int, ...], block: tuple[int, ...], cost: Any, **extra: Any
) -> dict[str, Any]:
    blocks = 1
    for n, b in zip(shape, block, strict=True):
        blocks *= -(-n // b)
    return {
        "block_shape": list(block),
        "blocks": blocks,
        "reads": cost.reads,
        "amplification": cost.amplification,
        **extra,
    }


def shardpipe_job(case: RechunkCase, source: Path, target: Path, budget: str, temp: bool) -> Any:
    """shardpipe's plan of the case (``temp``: with ``temp_store=`` beside the target)."""
    from zarr.codecs import ZstdCodec

    import shardpipe

    return shardpipe.plan_rechunk(
        str(source),
        str(target),
        shards=case.shards,
        chunks=case.chunks,
        max_mem=budget,
        compressors=ZstdCodec(level=1),
        chunk_checksums=True,
        overwrite=True,
        storage_options={"fsync": False},
        temp_store=f"{target}.tmp" if temp else None,
    )


def make_write(
    writer: str, case: RechunkCase, source: Path, target: Path, budget: str, facts: dict[str, Any]
) -> Callable[[], None]:
    """The timed write of ``writer``; it fills ``facts`` with what it planned or measured."""
    if writer == "limit":
        from benchmarks.rechunk_limit import rechunk_limit

        return lambda: facts.update(rechunk_limit(case, source, target))
    if writer.startswith("shardpipe"):
        import shardpipe  # noqa: F401  (imported before the baseline, as every writer's library)

        def run_shardpipe() -> None:
            job = shardpipe_job(case, source, target, budget, writer == "shardpipe-temp")
            facts.update(plan_facts(job))
            report = job.execute()
            facts["intermediate_bytes"] = getattr(report, "intermediate_nbytes", 0)

        return run_shardpipe
    if writer == "tensorstore":
        return tensorstore_write(case, source, target)
    if writer in ("dask", "dask-p2p"):
        import dask.array as da

        method = "p2p" if writer == "dask-p2p" else "tasks"

        def run_dask() -> None:
            blocks = da.from_zarr(str(source)).rechunk(case.shards, method=method)
            da.store(blocks, create_target(case, target), lock=False)

        return run_dask
    if writer == "rechunker":
        return rechunker_write(case, source, target, budget)
    if writer == "cubed":
        return cubed_write(case, source, target, budget)
    raise ValueError(f"unknown writer {writer!r}; one of {', '.join(WRITERS)}")


def tensorstore_write(case: RechunkCase, source: Path, target: Path) -> Callable[[], None]:
    """``dst.write(src)``: tensorstore copies the v2 array into the sharded one itself."""
    import tensorstore as ts

    from benchmarks.rechunk_cases import target_metadata

    metadata = {
        k: v
        for k, v in target_metadata(case).items()
        if k not in ("zarr_format", "node_type", "attributes")
    }
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(target)},
        "metadata": metadata,
        "context": {"file_io_sync": False},
    }

    def write() -> None:
        src = ts.open(
            {"driver": "zarr", "kvstore": {"driver": "file", "path": str(source)}}
        ).result()
        dst = ts.open(spec, create=True, delete_existing=True).result()
        dst.write(src).result()

    return write


def rechunker_write(
    case: RechunkCase, source: Path, target: Path, budget: str
) -> Callable[[], None]:
    """rechunker's plan and execute; :class:`Unsupported` where it cannot run on this zarr."""
    import rechunker  # type: ignore[import-untyped]
    import zarr

    def write() -> None:
        try:
            plan = rechunker.rechunk(
                zarr.open_array(source, mode="r"),
                case.shards,
                budget,
                str(target),
                temp_store=f"{target}.tmp",
            )
        except AttributeError as err:  # rechunker 0.5 reaches for zarr 2's modules
            raise Unsupported(
                f"rechunker {rechunker.__version__} cannot open a zarr {zarr.__version__} array "
                f"({err}); it cannot create a sharded target either (no shards option), and an "
                "unsharded target would not be like with like"
            ) from err
        plan.execute()

    return write


def cubed_write(case: RechunkCase, source: Path, target: Path, budget: str) -> Callable[[], None]:
    """``cubed.from_zarr(src).rechunk(shards)`` + ``cubed.store``, ``allowed_mem`` = budget."""
    import cubed
    from dask.utils import parse_bytes

    def write() -> None:
        spec = cubed.Spec(
            work_dir=f"{target}.cubed", allowed_mem=parse_bytes(budget), executor_name="threads"
        )
        array = cubed.from_zarr(str(source), spec=spec)
        try:
            cubed.store(array.rechunk(case.shards), create_target(case, target))
        except ValueError as err:  # its plan's projected memory exceeds allowed_mem
            if "allowed_mem" not in str(err):
                raise
            raise Refused(str(err)) from err

    return write


def warm_up(writer: str, name: str, work: Path, budget: str) -> None:
    """One untimed write of the ``--small`` version of case ``name``, before the baseline.

    So that neither the timed writes nor their peak RSS include what a first
    write costs once (imports inside the libraries, thread pools, event
    loops, codec contexts; on a cluster, the workers' too).
    """
    case = SMALL_CASES[name]
    source, _ = ensure_source(case, work)
    target = work / "targets" / f"warm-up-{name}-{writer}.zarr"
    clear(target)
    try:
        make_write(writer, case, source, target, budget, {})()
    except (Unsupported, Refused):
        pass  # the timed write says so
    finally:
        clear(target)


def clear(target: Path) -> None:
    """Delete the target and whatever scratch a writer left beside it."""
    for path in (target, Path(f"{target}.tmp"), Path(f"{target}.cubed")):
        shutil.rmtree(path, ignore_errors=True)


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one writer on one case as ``spec`` says; its record (see the module's docstring)."""
    case = (SMALL_CASES if spec["small"] else CASES)[spec["case"]]
    writer, budget, reps = spec["writer"], spec["budget"], spec["reps"]
    source, target = Path(spec["source"]), Path(spec["target"])
    record: dict[str, Any] = {"case": case.name, "writer": writer, "budget": budget}
    record |= {"nbytes": case.nbytes, "status": "ok", "message": ""}
    import dask
    import zarr  # noqa: F401  (the libraries are imported before the baseline)

    cluster = MeasuredCluster(2) if writer in ON_CLUSTER else None  # the default scheduler
    if cluster is None:
        dask.config.set(scheduler="threads")
    facts: dict[str, Any] = {}
    times: list[float] = []
    try:
        warm_up(writer, case.name, Path(spec["work"]), budget)
        write = make_write(writer, case, source, target, budget, facts)
        if cluster:
            cluster.reset()
        gc.collect()
        baseline = rss()
        reset_peak()
        try:
            for _ in range(reps):
                clear(target)
                os.sync()
                start = time.perf_counter()
                write()
                times.append(time.perf_counter() - start)
        except Unsupported as err:
            record |= {"status": "unsupported", "message": str(err)}
        except Refused as err:
            record |= {"status": "refused", "message": str(err)}
        except Exception as err:
            tail = traceback.format_exc().strip().splitlines()[-3:]
            record |= {"status": "error", "message": f"{type(err).__name__}: {err}"}
            record["traceback_tail"] = tail
        peak = rss("VmHWM")
        record |= {"baseline_rss_mib": baseline / MIB, "peak_delta_mib": (peak - baseline) / MIB}
        record |= cluster.read() if cluster else {}
    finally:
        if cluster:
            cluster.close()
    record |= facts | {"times_s": times, "seconds": min(times, default=None)}
    if record["status"] == "ok":
        problems = compare(case, source, target)
        if problems:
            record |= {"status": "mismatch", "message": "; ".join(problems)}
    return record
