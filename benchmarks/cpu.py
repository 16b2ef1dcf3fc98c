"""CPU-time probes: this process's CPU time and the machine's, to spot contention.

On a shared machine wall-clock throughput drops when other processes run. Each
timed write therefore also records its own CPU seconds (all threads) and the
CPU seconds the rest of the machine spent during it, from ``/proc/stat``.
"""

from __future__ import annotations

import os
import resource


def process_cpu_seconds() -> float:
    """Return user + system CPU seconds used so far by this process (all threads).

    Returns
    -------
    float
        CPU seconds.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_busy_seconds() -> float | None:
    """Return the CPU seconds all processes have spent non-idle since boot.

    Returns
    -------
    float or None
        Sum of the non-idle fields of the ``cpu`` line of ``/proc/stat``
        (idle and iowait excluded), or None where ``/proc/stat`` is missing.
    """
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal [guest guest_nice]
    ticks = [int(v) for v in fields[1:9]]
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """Measure own and other processes' CPU use over a region of code.

    Examples
    --------
    >>> meter = CpuMeter()
    >>> meter.start()
    >>> _ = sum(range(1000))
    >>> own, others = meter.stop(wall=0.01)
    """

    def start(self) -> None:
        """Record the starting counters."""
        self._own = process_cpu_seconds()
        self._busy = machine_busy_seconds()

    def stop(self, wall: float) -> tuple[float, float | None]:
        """Return this process's CPU seconds and others' share of the machine.

        Parameters
        ----------
        wall : float
            Wall-clock seconds of the region (for the share).

        Returns
        -------
        own_cpu_s : float
            CPU seconds this process used in the region.
        others_share : float or None
            CPU seconds used by other processes divided by ``wall * cores``,
            clipped at 0 (tick granularity is 10 ms), or None without ``/proc``.
        """
        own = process_cpu_seconds() - self._own
        busy = machine_busy_seconds()
        if busy is None or self._busy is None or wall <= 0:
            return own, None
        others = max(0.0, (busy - self._busy) - own)
        return own, others / (wall * (os.cpu_count() or 1))
