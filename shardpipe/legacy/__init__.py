"""Migrating arrays of the sharding storage-transformer draft to Zarr v3.

Reads the draft's hierarchy, translates every document, and copies every
shard byte for byte to its v3 key (server side or as a hard link where the
store can), without decoding a chunk; a marker makes an interrupted
migration finish when it is run again.
"""
