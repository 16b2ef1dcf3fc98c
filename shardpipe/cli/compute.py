"""Where a command's Dask work runs: ``--scheduler``, ``--workers``, or threads.

``rechunk`` and ``write-precomputed`` take both options
(:func:`shardpipe.cli.options.add_compute`) and run their work inside
:func:`compute_on`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from shardpipe.cli.worker_interrupts import PRELOAD, QuietGathers
from shardpipe.errors import InvalidArgumentError


@contextlib.contextmanager
def compute_on(address: str | None, workers: int | None) -> Iterator[None]:
    """Compute on the scheduler at ``address``, on a LocalCluster of ``workers`` processes
    of one thread each, or (neither given) on Dask's default scheduler."""
    if address is None and workers is None:
        yield
        return
    from distributed import Client, LocalCluster  # distributed only when asked for

    if address is not None:
        with _connected(Client, address):
            yield
        return
    quiet = QuietGathers()
    logging.getLogger("asyncio").addFilter(quiet)
    try:
        with (
            LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                dashboard_address=":0",
                preload=[PRELOAD],  # Ctrl-C reaches the command alone
            ) as cluster,
            Client(cluster),
        ):
            yield
    finally:
        logging.getLogger("asyncio").removeFilter(quiet)


def _connected(client_class: Any, address: str) -> Any:
    """A client of the scheduler at ``address``; one that cannot be reached is bad input.

    Before anything is written, so that the error names ``--scheduler``, not a
    write that failed part way (``--resume`` would resume nothing).
    """
    try:
        return client_class(address)
    except Exception as err:  # nothing ran yet: whatever it is, the address is at fault
        # (a refused or timed-out connection, tls:// without its settings, a server
        # that speaks another protocol: distributed raises all sorts)
        raise InvalidArgumentError(
            "--scheduler",
            f"no Dask scheduler answers at {address!r} ({type(err).__name__}: {err})",
            "Check the address (tcp://host:8786) and that the scheduler runs, or leave "
            "--scheduler out to compute here",
        ) from err
