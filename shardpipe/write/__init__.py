"""The write job: checking, planning and running a write of a sharded array.

``prepare_write`` checks every argument and plans the write into a
:class:`~shardpipe.write.job.ShardedWrite`, a value that shows the plan and
runs it; ``to_sharded_zarr`` is the one-call front door. Updates of existing
arrays (regions, appends), resume and Icechunk transactions live here too.
"""
