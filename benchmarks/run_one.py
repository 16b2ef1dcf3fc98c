"""Measure one writer case in this (fresh) process and write its result as JSON.

Usage::

    python -m benchmarks.run_one --writer dask --codec zstd1 --blocks aligned \\
        --shape 512 1024 1024 --reps 2 --out-dir benchmarks/out --result r.json

The process imports the writer's libraries, generates the volume, prepares the
writer's input, resets the peak-RSS mark, then times ``reps`` writes (each into
a fresh directory, after ``os.sync()``; recording wall time, this process's CPU
time and the CPU share other processes took meanwhile), reads the peak RSS,
verifies the last output and deletes it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import memory
from benchmarks.base import VerificationError, WriterUnavailable, WriterUnsupported
from benchmarks.cpu import CpuMeter
from benchmarks.data import BLOCK_CASES, CODECS, Layout, block_shape, fingerprint, make_volume
from benchmarks.writers import WRITERS

EXIT_ERROR = 1
EXIT_MISMATCH = 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line of one benchmark case.

    Parameters
    ----------
    argv : list of str, optional
        Arguments; ``sys.argv[1:]`` by default.

    Returns
    -------
    argparse.Namespace
        Parsed arguments.
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run_one", description=__doc__)
    parser.add_argument("--writer", required=True, choices=sorted(WRITERS))
    parser.add_argument("--codec", required=True, choices=CODECS)
    parser.add_argument("--blocks", default="none", choices=(*BLOCK_CASES, "none"))
    parser.add_argument("--shape", type=int, nargs=3, required=True, metavar=("Z", "Y", "X"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True, help="JSON result file")
    parser.add_argument("--keep-output", action="store_true", help="do not delete the output")
    return parser.parse_args(argv)


def _remove(path: Path) -> None:
    """Delete a file or directory tree if it exists."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def case_paths(args: argparse.Namespace) -> tuple[Path, Path]:
    """Return the output path and the writer's scratch directory of a case.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed command line.

    Returns
    -------
    tuple of pathlib.Path
        ``(output, scratch)``, both under ``args.out_dir``.
    """
    blocks = args.blocks if WRITERS[args.writer].uses_blocks else "numpy"
    name = f"{args.writer}-{args.codec}-{blocks}"
    return args.out_dir / name, args.out_dir / f"{name}.scratch"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run the case described by ``args`` and return its result record.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed command line (see :func:`parse_args`).

    Returns
    -------
    dict
        Result record; ``status`` is one of ``ok``, ``unavailable``,
        ``unsupported``, ``error`` or ``mismatch``.
    """
    layout = Layout(tuple(args.shape))
    writer_cls = WRITERS[args.writer]
    blocks = block_shape(args.blocks, layout) if writer_cls.uses_blocks else None
    path, scratch = case_paths(args)
    result: dict[str, Any] = {
        "writer": args.writer,
        "label": writer_cls.label,
        "codec": args.codec,
        "blocks": args.blocks if blocks else None,
        "block_shape": list(blocks) if blocks else None,
        "shape": list(layout.shape),
        "shards": list(layout.shards),
        "chunks": list(layout.chunks),
        "nbytes": layout.nbytes,
        "reps": args.reps,
        "status": "error",
        "message": "",
        "notes": [],
    }
    writer = writer_cls(scratch)
    try:
        writer.load()
    except WriterUnavailable as exc:
        return result | {"status": "unavailable", "message": str(exc)}

    start = time.perf_counter()
    volume = make_volume(layout.shape, seed=args.seed)
    result["datagen_s"] = time.perf_counter() - start
    result["fingerprint"] = fingerprint(volume)
    source = writer.prepare(volume, layout, blocks)
    gc.collect()
    baseline = memory.current_rss()
    reset_ok = memory.reset_peak()

    times: list[float] = []
    cpu_times: list[float] = []
    others: list[float | None] = []
    meter = CpuMeter()
    try:
        for _ in range(args.reps):
            _remove(path)
            _remove(scratch)
            os.sync()
            meter.start()
            start = time.perf_counter()
            writer.write(source, path, layout, args.codec)
            times.append(time.perf_counter() - start)
            own_cpu, others_share = meter.stop(times[-1])
            cpu_times.append(own_cpu)
            others.append(others_share)
    except WriterUnsupported as exc:
        return result | {"status": "unsupported", "message": str(exc), "notes": writer.notes}
    except Exception as exc:
        tail = traceback.format_exc().strip().splitlines()[-3:]
        return result | {"message": f"{exc!r}", "traceback_tail": tail, "notes": writer.notes}
    finally:
        peak = memory.peak_rss()
        children_peak = memory.children_peak_rss()

    best = min(times)
    best_rep = times.index(best)
    result |= {
        "times_s": times,
        "best_s": best,
        "cpu_s": cpu_times,
        "best_cpu_s": cpu_times[best_rep],
        "others_cpu_share": others,
        "best_others_cpu_share": others[best_rep],
        "mb_per_s": layout.nbytes / 1e6 / best,
        "baseline_rss_mib": baseline / memory.MIB,
        "peak_rss_mib": peak / memory.MIB,
        "peak_delta_mib": (peak - baseline) / memory.MIB,
        "peak_source": "VmHWM reset after data generation" if reset_ok else "ru_maxrss",
        "children_peak_rss_mib": children_peak / memory.MIB,
        "notes": writer.notes,
    }
    try:
        result["output_bytes"] = writer.verify(path, volume, layout, args.codec)
    except VerificationError as exc:
        return result | {"status": "mismatch", "message": str(exc)}
    return result | {"status": "ok"}


def main(argv: list[str] | None = None) -> int:
    """Run one case, write its JSON result and return the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments.

    Returns
    -------
    int
        0 if the case ran (or its library is unavailable/unsupported),
        1 on an error, 2 if the output did not match the volume.
    """
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    try:
        result = measure(args)
    finally:
        path, scratch = case_paths(args)
        if not args.keep_output:
            _remove(path)
        _remove(scratch)
    args.result.write_text(json.dumps(result, indent=1))
    if result["status"] == "mismatch":
        print(f"VERIFICATION FAILED: {result['message']}", file=sys.stderr)
        return EXIT_MISMATCH
    if result["status"] == "error":
        print(f"ERROR: {result['message']}", file=sys.stderr)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
