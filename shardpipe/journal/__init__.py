"""The journal: job markers and undo records, how jobs learn they are not alone and undo crashes.

Everything lives in one folder beside the array's ``zarr.json``
(:data:`~shardpipe.storage.keys.JOB_DIR`; its layout is in
:mod:`shardpipe.storage.keys`): the job marker
(:data:`~shardpipe.storage.keys.JOB_MARKER`), claims on a stale marker while it is taken
over (:data:`~shardpipe.storage.keys.CLAIMS_DIR`), one undo record per shard being
changed (:data:`~shardpipe.storage.keys.UNDO_DIR`) and the parts of shards written in
parts (:data:`~shardpipe.storage.keys.STAGING_DIR`).

**Job marker.** A job (a write, an update, a compaction, a repair, a
cleanup) holds the array while it works: it creates its marker
create-only (``O_EXCL``/``link`` / ``If-None-Match: *``) before it changes
anything, re-reads it before every shard it publishes
(:func:`~shardpipe.journal.markers.check_held`) and removes it at the end. A second job that finds
it stops with :class:`~shardpipe.errors.JobConflictError` naming the job. A
marker left by a process of this machine that no longer runs is *stale*:
the next job takes it over in one atomic step and only then, holding the
array, rolls back what the dead job left (:mod:`shardpipe.journal.array_lock`
says how; a job never recovers anything while it does not hold the array).

**Undo records.** An update that changes a shard in place (positioned writes
or appends, which no file system makes atomic) first records, durably, the
shard's size and the old bytes of every range it will overwrite. Rolling the
record back (:func:`~shardpipe.journal.undo.roll_back`) restores exactly the old shard: the old
bytes go back and the object is cut to its old size. The record is removed once the
shard is complete (and durable), so a record found later marks a shard whose
update may be torn. The task that fails while writing a shard rolls it back
at once (:mod:`shardpipe.engine.update_tasks`); a record stays only when the job was
killed or that rollback failed too, and then whichever job next holds the
array rolls it back (:func:`~shardpipe.journal.undo.recover`) before it changes anything.

**What a crash or a race can leave**, and who removes it: a killed job
leaves its marker, its undo records, staging data and temporary files; the
next job takes the marker over and removes them. A job stalled for any
time at any step (:mod:`shardpipe.journal.stalls` makes tests stall it)
either still holds the array when it goes on, or finds that it does not
and stops with :class:`~shardpipe.errors.JobConflictError`; it never
rolls back, deletes or overwrites what a live job wrote. The temporary
files of a live process are never removed by another job's cleanup (their
names say which process writes them: :mod:`shardpipe.storage.local.store`).
"""
