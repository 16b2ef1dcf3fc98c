"""A backend whose calls wait until a start has finished: encoding before the metadata is written.

A new array's write begins with a few requests in a row: its marker, its
job record, its ``zarr.json``. On an object store each waits out a round
trip, and the shards' encoding need not wait for them. A run that starts
its job on another thread (:class:`~shardpipe.write.run.StartInBackground`) gives its
tasks the target's store wrapped in a :class:`GatedStore`: tasks compute
and encode at once, and every call they make to the store waits for the
``gate``, a future the start resolves once the metadata is there (an
upload handed on waits in its I/O thread, so encoding goes on within the
uploads' byte budget). Nothing reaches the store before the start is
done; when the start fails, every call raises the start's error, and the
run stops with nothing of it written.

The gate lives in this process: a gated store does not travel to other
processes (it refuses to be pickled), so only runs on Dask's threaded or
synchronous scheduler start early.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import NoReturn

from shardpipe.storage.base import ShardStore
from shardpipe.storage.delegating import DelegatingStore


class GatedStore(DelegatingStore):
    """``inner``, with every call waiting for ``gate`` (and raising its error, if it failed).

    Parameters
    ----------
    inner : ShardStore
        The backend.
    gate : concurrent.futures.Future
        Resolved when calls may go through; its exception, if any, is what
        every call raises.
    """

    def __init__(self, inner: ShardStore, gate: Future[None]) -> None:
        super().__init__(inner)
        self.gate = gate

    def _forward[T](self, method: str, call: Callable[[], T]) -> T:
        self.gate.result()
        return call()

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a GatedStore waits on a start in its own process and cannot be sent to another"
        )
