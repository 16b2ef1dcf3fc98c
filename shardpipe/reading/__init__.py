"""Reading sharded arrays as Dask arrays: one block per shard (:mod:`shardpipe.reading.open`)."""

from shardpipe.reading.open import open_array

__all__ = ["open_array"]
