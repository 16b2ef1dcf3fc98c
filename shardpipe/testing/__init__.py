"""What users of shardpipe need to test their own code.

* :mod:`shardpipe.testing.strategies`: hypothesis strategies for writes
  (data, Dask chunkings, shards, inner chunks, codecs, fill values);
* :mod:`shardpipe.testing.backends`: :class:`~shardpipe.testing.backends.ShardStoreTests`,
  the contract suite every storage backend passes, to subclass for your own;
* :mod:`shardpipe.testing.s3`: pytest fixtures for a moto S3 server on
  127.0.0.1 (``pytest_plugins = ["shardpipe.testing.s3"]``);
* :mod:`shardpipe.testing.null_store`: :class:`~shardpipe.testing.null_store.NullShardStore`, a
  backend that
  counts the shards published to it and keeps none of their bytes, and
  :func:`~shardpipe.testing.null_store.null_target`, a write target on it (scale runs, dry runs).

These modules need the ``test`` extra (pytest, hypothesis, moto[server],
boto3), except ``null_store``; importing ``shardpipe`` itself never imports them.
"""

from shardpipe.testing.null_store import NullCounts, NullShardStore, null_target

__all__ = ["NullCounts", "NullShardStore", "null_target"]

try:  # pytest explains failed asserts of the suite only if it rewrites the module
    import pytest
except ImportError:  # pragma: no cover - the test extra is not installed
    pass
else:
    pytest.register_assert_rewrite(
        "shardpipe.testing.backends",
        "shardpipe.testing.update_contract",
        "shardpipe.testing.store_kit",
    )
