"""Shard formats: siblings behind one protocol (:mod:`shardpipe.formats.base`)."""
