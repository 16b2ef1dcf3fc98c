"""How the GCS backend sends its requests: timeouts and tries.

Defaults that fit shardpipe's own retry layer
(:mod:`shardpipe.storage.retry`): the backend tries each request a few
times with a short jittered backoff, and what still fails is retried with
longer backoff above it, so that a silent server fails a call in seconds
rather than minutes. gcsfs's own retries (six tries, up to 32 s apart) are
not used for the shard requests: the backend sends them on gcsfs's session
itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestSettings:
    """Timeouts and tries of the backend's requests.

    Attributes
    ----------
    attempts : int
        Tries of each request in all (transient faults only).
    first_delay : float
        Upper bound of the delay before the first retry, in seconds (doubled
        for each further retry, drawn uniformly below the bound).
    connect_timeout : float
        Seconds to open a connection.
    read_timeout : float
        Most seconds the server may stay silent while answering.
    concurrency : int
        Most requests in flight when the backend deletes or composes many
        objects at once.
    """

    attempts: int = 3
    first_delay: float = 0.2
    connect_timeout: float = 5.0
    read_timeout: float = 30.0
    concurrency: int = 16


DEFAULT_SETTINGS = RequestSettings()
"""The settings of the backends :func:`~shardpipe.storage.gcs.backend.gcs_backend` makes."""
