"""The version of shardpipe: the one place it is written (``pyproject.toml`` reads it)."""

__version__ = "0.2.0.dev0"
