"""What an array holds: its metadata, the shards present, and their integrity.

Read-only views of what is stored, shared by the writers (resume, updates)
and by maintenance: ``zarr.json`` read and checked, shards found by listing,
each shard's index and chunks checked.
"""
