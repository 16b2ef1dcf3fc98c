"""A ``distributed.LocalCluster`` whose worker processes' peak memory is measured.

Each worker's peak RSS is read exactly from its own ``VmHWM`` (reset, like
:mod:`benchmarks.memory` does in a single process, right before the timed
region) and, as a cross-check that needs no cooperation from the worker,
sampled from outside with psutil every 20 ms.
"""

from __future__ import annotations

import contextlib
import os
import threading
from types import TracebackType
from typing import Any

from benchmarks import memory
from benchmarks.cpu import process_cpu_seconds


class RssSampler(threading.Thread):
    """Poll the RSS of some processes with psutil and keep each one's maximum.

    Parameters
    ----------
    pids : list of int
        Processes to watch.
    interval : float, optional
        Seconds between polls.
    """

    def __init__(self, pids: list[int], interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        import psutil

        self.procs = [psutil.Process(pid) for pid in pids]
        self.peaks = {p.pid: 0 for p in self.procs}
        self.interval = interval
        self.done = threading.Event()

    def run(self) -> None:
        """Poll until :meth:`stop` is called."""
        while not self.done.wait(self.interval):
            for proc in self.procs:
                # A worker that died is reported by the computation itself.
                with contextlib.suppress(Exception):
                    self.peaks[proc.pid] = max(self.peaks[proc.pid], proc.memory_info().rss)

    def stop(self) -> dict[int, int]:
        """Stop polling and return the maximum RSS seen per pid, in bytes."""
        self.done.set()
        self.join()
        return self.peaks


def warm_up() -> None:
    """Import on a worker what shardpipe writes use, so its baseline RSS includes it."""
    import zarr  # noqa: F401

    import benchmarks.synth  # noqa: F401
    import shardpipe  # noqa: F401


class MeasuredCluster:
    """Context manager: a LocalCluster of single-threaded workers and its default Client.

    Parameters
    ----------
    n_workers : int
        Number of worker processes (one thread each, no memory limit, so that
        nothing is spilled or paused and the peak is the work's own).

    Examples
    --------
    >>> with MeasuredCluster(2) as cluster:  # doctest: +SKIP
    ...     cluster.reset()
    ...     x.sum().compute()
    ...     print(cluster.read())
    """

    def __init__(self, n_workers: int) -> None:
        self.n_workers = n_workers
        self.sampler: RssSampler | None = None

    def __enter__(self) -> MeasuredCluster:
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(
            n_workers=self.n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit=0,
            dashboard_address=None,
        )
        self.client = Client(self.cluster)
        self.client.run(warm_up)
        return self

    def reset(self) -> None:
        """Record the workers' RSS, reset their peak marks and start sampling."""
        self.baseline = max(self.client.run(memory.current_rss).values())
        self.cpu = sum(self.client.run(process_cpu_seconds).values())
        self.client.run(memory.reset_peak)
        self.sampler = RssSampler(list(self.client.run(os.getpid).values()))
        self.sampler.start()

    def read(self) -> dict[str, float]:
        """Stop sampling and return the workers' memory figures, in MiB.

        Returns
        -------
        dict
            ``worker_baseline_rss_mib`` (largest RSS before :meth:`reset`),
            ``worker_peak_rss_mib`` (largest ``VmHWM`` since then) and
            ``worker_sampled_peak_mib`` (largest RSS psutil saw); and
            ``worker_cpu_s``, the CPU seconds all workers used since then.
        """
        sampled = self.sampler.stop() if self.sampler else {}
        self.sampler = None
        return {
            "worker_baseline_rss_mib": self.baseline / memory.MIB,
            "worker_peak_rss_mib": max(self.client.run(memory.peak_rss).values()) / memory.MIB,
            "worker_sampled_peak_mib": max(sampled.values(), default=0) / memory.MIB,
            "worker_cpu_s": sum(self.client.run(process_cpu_seconds).values()) - self.cpu,
        }

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.sampler:
            self.sampler.stop()
        self.client.close()
        self.cluster.close()


def maybe_cluster(n_workers: int) -> Any:
    """Return :class:`MeasuredCluster` for ``n_workers > 0``, else a no-op context."""
    return MeasuredCluster(n_workers) if n_workers else contextlib.nullcontext()
