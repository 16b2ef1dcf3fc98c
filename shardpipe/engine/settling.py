"""A run's side of the uploads its tasks hand on: open, settle batch by batch, close.

Shard tasks on an object store hand their encoded shards to their process's
uploads (:mod:`shardpipe.storage.uploads`) and return. The run that computes
them opens its group in every process its tasks run in before the first
batch, settles each batch's tickets before the batch counts as done (its
shards in the report, its waves recorded for ``resume=True``), and closes the
group at the end: after a failure that waits for every upload still in
flight, so that the caller cleans up after the last byte landed.

:class:`LocalSettling` serves Dask's schedulers in this process (threads,
synchronous; on ``"processes"`` the worker processes never see the group
open, and their tasks upload themselves). :class:`ClusterSettling` serves a
``distributed`` cluster: each worker process has its own uploads, reached
with ``client.run``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Protocol

from shardpipe import advice
from shardpipe.engine.reports import WriteReport, settled
from shardpipe.errors import StorageError
from shardpipe.storage import uploads
from shardpipe.storage.uploads import Ticket


class Settling(Protocol):
    """How a runner settles the uploads of its batches."""

    def settle(self, reports: Sequence[WriteReport]) -> list[WriteReport]:
        """Wait for the uploads ``reports`` carry; return them settled (or raise a failure)."""
        ...

    def close(self, *, failed: bool) -> None:
        """Close the group (after a failure: once every upload still in flight ended)."""
        ...


class LocalSettling:
    """Uploads handed on in this process (Dask's threaded or synchronous scheduler).

    Parameters
    ----------
    group : str
        The run's token.
    """

    def __init__(self, group: str) -> None:
        self.group = group
        uploads.open_group(group)

    def settle(self, reports: Sequence[WriteReport]) -> list[WriteReport]:
        """Wait for each report's uploads; return the reports settled."""
        return [settled(r, sum(uploads.settle(r.uploads))) if r.uploads else r for r in reports]

    def close(self, *, failed: bool) -> None:
        """Close the group here."""
        uploads.close_group(self.group, failed=failed)


class ClusterSettling:
    """Uploads handed on in the worker processes of a ``distributed`` cluster.

    Parameters
    ----------
    client : distributed.Client
        The client computing the run.
    group : str
        The run's token.

    Notes
    -----
    A ticket names its process by worker address (``Ticket.place``). A
    worker that joins after the group was opened uploads in its tasks, as
    does a task retried on another worker; a worker that died with uploads
    in flight fails the settling of its tickets, and the run.
    """

    def __init__(self, client: Any, group: str) -> None:
        self.client = client
        self.group = group
        client.run(uploads.open_group, group)

    def settle(self, reports: Sequence[WriteReport]) -> list[WriteReport]:
        """Wait, in each worker, for the uploads handed on there; return the reports settled."""
        places: dict[str, list[Ticket]] = defaultdict(list)
        for report in reports:
            for ticket in report.uploads:
                places[ticket.place].append(ticket)
        retries: dict[Ticket, int] = {}
        for place, tickets in places.items():
            answer = self.client.run(_settle_in_worker, tickets, workers=[place])
            if place not in answer:
                raise StorageError(
                    f"the worker {place} holding {len(tickets)} upload(s) of this write is "
                    f"gone; whether they landed is unknown ({advice.setting('resume')} writes "
                    "them again)"
                )
            retries.update(zip(tickets, answer[place], strict=True))
        return [settled(r, sum(retries[t] for t in r.uploads)) if r.uploads else r for r in reports]

    def close(self, *, failed: bool) -> None:
        """Close the group in every worker."""
        self.client.run(_close_in_worker, self.group, failed)


async def _settle_in_worker(tickets: list[Ticket]) -> list[int]:
    # off the worker's event loop: uploads may take a while
    return await asyncio.to_thread(uploads.settle, tickets)


async def _close_in_worker(group: str, failed: bool) -> None:
    await asyncio.to_thread(uploads.close_group, group, failed=failed)
