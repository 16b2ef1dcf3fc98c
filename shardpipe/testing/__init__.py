"""What users of shardpipe need to test their own code.

* :mod:`shardpipe.testing.strategies`: hypothesis strategies for writes
  (data, Dask chunkings, shards, inner chunks, codecs, fill values);
* :mod:`shardpipe.testing.backends`: :class:`~shardpipe.testing.backends.ShardStoreTests`,
  the contract suite every storage backend passes, to subclass for your own;
* :mod:`shardpipe.testing.s3`: pytest fixtures for a moto S3 server on
  127.0.0.1 (``pytest_plugins = ["shardpipe.testing.s3"]``).

These modules need the ``test`` extra (pytest, hypothesis, moto[server],
boto3); importing ``shardpipe`` itself never imports them.
"""

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
