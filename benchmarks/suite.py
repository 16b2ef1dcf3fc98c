"""Scheduling of benchmark cases: one fresh ``run_one`` subprocess per case."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from benchmarks.child import REPO_ROOT, run_child
from benchmarks.data import Layout
from benchmarks.writers import WRITERS

PACKAGES = ("numpy", "zarr", "dask", "distributed", "numcodecs", "tensorstore", "zarrs", "cubed")


@dataclass(frozen=True)
class Case:
    """One measurement: a writer, a codec setting and (for Dask writers) a block case."""

    writer: str
    codec: str
    blocks: str | None

    def describe(self) -> str:
        """Return a short human-readable name of the case."""
        return f"{self.writer} {self.codec} {self.blocks or 'numpy'}"


def build_cases(writers: list[str], codecs: list[str], blocks: list[str]) -> list[Case]:
    """List the cases to run, grouped by codec.

    The raw-write limit ignores the codec and runs once, under ``none``.

    Parameters
    ----------
    writers, codecs, blocks : list of str
        Selected writer names, codec settings and Dask block cases.

    Returns
    -------
    list of Case
        Cases in report order.
    """
    cases: list[Case] = []
    for codec in codecs:
        for name in WRITERS:
            if name not in writers or (name == "raw" and codec != "none"):
                continue
            if WRITERS[name].uses_blocks:
                cases.extend(Case(name, codec, b) for b in blocks)
            else:
                cases.append(Case(name, codec, None))
    return cases


def probe_shardpipe() -> str | None:
    """Return why ``shardpipe.to_sharded_zarr`` cannot be imported, or None if it can."""
    code = "from shardpipe import to_sharded_zarr"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        return None
    lines = proc.stderr.strip().splitlines()
    return "shardpipe not importable yet: " + (lines[-1] if lines else f"exit {proc.returncode}")


def stub_result(case: Case, status: str, message: str) -> dict[str, Any]:
    """Return a result record for a case that produced no measurement.

    Parameters
    ----------
    case : Case
        The case.
    status : str
        ``unavailable`` or ``error``.
    message : str
        Why there is no measurement.

    Returns
    -------
    dict
        Record with the same identifying keys as ``run_one`` results.
    """
    label = WRITERS[case.writer].label
    return {
        "writer": case.writer,
        "label": label,
        "codec": case.codec,
        "blocks": case.blocks,
        "status": status,
        "message": message,
        "notes": [],
    }


def run_case(case: Case, args: argparse.Namespace, shape: tuple[int, ...]) -> dict[str, Any]:
    """Run one case in a fresh subprocess and return its result record.

    Parameters
    ----------
    case : Case
        The case.
    args : argparse.Namespace
        Suite arguments (reps, seed, output directory, timeout).
    shape : tuple of int
        Volume shape.

    Returns
    -------
    dict
        The record written by ``run_one``, or an ``error`` record if the
        subprocess died without writing one.
    """
    options = {
        "--writer": case.writer,
        "--codec": case.codec,
        "--blocks": case.blocks or "none",
        "--seed": args.seed,
        "--reps": args.reps,
        "--out-dir": args.out_dir,
    }
    record = run_child("benchmarks.run_one", {"--shape": shape, **options}, args.timeout)
    if "writer" not in record:  # the subprocess died: say which case it was
        return stub_result(case, "error", record["message"])
    return record


def _git(*args: str) -> str:
    """Return the stripped output of a git command in the repository (empty on failure)."""
    cmd = ["git", "-C", str(REPO_ROOT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()


def run_meta(args: argparse.Namespace, layout: Layout) -> dict[str, Any]:
    """Describe the run: layout, machine and library versions.

    Parameters
    ----------
    args : argparse.Namespace
        Suite arguments.
    layout : Layout
        The benchmark layout.

    Returns
    -------
    dict
        JSON-compatible description.
    """
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = _git("rev-parse", "--short", "HEAD")
    changes = _git("status", "--porcelain", "--", "shardpipe")
    mem_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "shape": list(layout.shape),
        "shards": list(layout.shards),
        "chunks": list(layout.chunks),
        "nbytes": layout.nbytes,
        "reps": args.reps,
        "seed": args.seed,
        "cpu_count": os.cpu_count(),
        "mem_total_gib": mem_total / 2**30,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": versions,
        "git_commit": commit or None,
        "shardpipe_uncommitted_changes": bool(changes),
        "out_dir": str(args.out_dir),
    }
