"""Run one benchmark case in a fresh Python subprocess and collect its JSON record.

Used by the suite (:mod:`benchmarks.run_one`), :mod:`benchmarks.large_shard`
and :mod:`benchmarks.s3`: the case
module is run as ``python -m MODULE --result FILE OPTIONS...`` from the
repository root, so its peak RSS is its own, and the JSON it writes to
``FILE`` is returned. :func:`time_reps` is the timing loop those case
modules share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.cpu import CpuMeter

REPO_ROOT = Path(__file__).resolve().parent.parent


def option_list(options: dict[str, Any]) -> list[str]:
    """Turn ``{"--flag": value}`` into command-line words.

    Parameters
    ----------
    options : dict
        Option names to values: a tuple/list gives several words, True gives
        the bare flag, False or None leaves the option out.

    Returns
    -------
    list of str
        The words, in insertion order.
    """
    words: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        words.append(name)
        if isinstance(value, tuple | list):
            words.extend(map(str, value))
        elif value is not True:
            words.append(str(value))
    return words


def run_child(
    module: str, options: dict[str, Any], timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``python -m module`` with ``options`` and return the record it wrote.

    Parameters
    ----------
    module : str
        Module to run, e.g. ``"benchmarks.large_shard_run"``; it must accept
        ``--result PATH`` and write a JSON object there.
    options : dict
        Further options, see :func:`option_list`.
    timeout : float
        Seconds before the subprocess is killed.
    env : dict, optional
        Environment of the subprocess (this process's by default).

    Returns
    -------
    dict
        The record, or ``{"status": "error", "message": ...}`` if the
        subprocess timed out or exited without writing one.
    """
    with tempfile.TemporaryDirectory(prefix="shardpipe-bench-") as tmp:
        result_path = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", module, "--result", str(result_path), *option_list(options)]
        try:
            proc = subprocess.run(
                cmd,
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env=env,
            )
        except subprocess.TimeoutExpired:
            return {"status": "error", "message": f"timed out after {timeout:.0f} s"}
        if result_path.exists():
            return dict(json.loads(result_path.read_text()))
    tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
    return {"status": "error", "message": f"exit {proc.returncode} without a result: {tail}"}


def time_reps(
    write: Callable[[], object],
    reps: int,
    before: Callable[[], None],
    watched_cpu: Callable[[], float | None] | None = None,
) -> dict[str, Any]:
    """Time ``reps`` calls of ``write`` as ``run_one`` does, keeping the fastest.

    Parameters
    ----------
    write : callable
        The timed operation.
    reps : int
        Number of repetitions.
    before : callable
        Untimed preparation before each repetition (e.g. removing the last
        output); ``os.sync()`` follows it.
    watched_cpu : callable, optional
        Returns the CPU seconds used so far by another process of interest
        (e.g. a server); its use during the fastest repetition is reported.

    Returns
    -------
    dict
        ``times_s``, ``best_s``, ``best_cpu_s`` (this process, all threads)
        and ``best_others_cpu_share`` (other processes' share of all cores)
        of the fastest repetition, and ``best_watched_cpu_s`` with
        ``watched_cpu``.
    """
    meter = CpuMeter()
    probe = watched_cpu or (lambda: None)
    runs: list[tuple[float, float, float | None, float | None]] = []
    for _ in range(reps):
        before()
        os.sync()
        watched = probe()
        meter.start()
        start = time.perf_counter()
        write()
        wall = time.perf_counter() - start
        own, others = meter.stop(wall)
        after = probe()
        used = after - watched if after is not None and watched is not None else None
        runs.append((wall, own, others, used))
    best = min(runs, key=lambda run: run[0])
    record = {
        "times_s": [r[0] for r in runs],
        "best_s": best[0],
        "best_cpu_s": best[1],
        "best_others_cpu_share": best[2],
    }
    return record | ({"best_watched_cpu_s": best[3]} if watched_cpu else {})
