"""What a dataset write that failed part way says to do with what it left.

``ds.shard.to_zarr`` has no ``resume``. A storage fault (a full disk, a
refused write) or a failed task after xarray began writing leaves:

- a new dataset (``mode="w"`` or ``"w-"``) without its consolidated metadata
  (written last), some arrays or shards missing: the recovery is the same
  write with ``mode="w"``, which replaces it;
- an append or a region write: arrays of different lengths, undo records:
  :func:`~shardpipe.dataset.repair.repair_dataset` (``shardpipe repair-dataset``)
  brings every array back to the last complete dataset, then the same write
  is run again.

The storage errors themselves say "run the same write with ``resume=True``",
as every write's do; :func:`recovery_noted` adds the dataset's own recovery
as a note. Errors about the arguments, raised before anything is written,
and writes into an Icechunk session (nothing reaches the branch before the
commit) get none.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shardpipe import advice
from shardpipe.errors import ShardpipeError, StorageError, WriteFailedError
from shardpipe.storage.resolve import ResolvedStore
from shardpipe.write.update_mode import UNFINISHED_UPDATE

__all__ = ["recovery_note", "recovery_noted"]


def recovery_note(mode: str) -> str:
    """The note for a write in ``mode`` that stopped part way."""
    if mode in ("w", "w-"):
        return (
            "shardpipe: the new dataset was not completely written (its consolidated "
            "metadata is written last); a dataset write has no "
            f"{advice.name('resume')}: write it again with {advice.setting('mode', 'w')}"
        )
    repair = (
        "shardpipe repair-dataset"
        if advice.for_command_line()
        else "shardpipe.dataset.repair_dataset"
    )
    return (
        f"shardpipe: run {repair} on the store to bring every array back to the last "
        "complete dataset, then the same write again"
    )


@contextmanager
def recovery_noted(root: ResolvedStore, mode: str) -> Iterator[None]:
    """Within, an error that may have left the dataset part written gets :func:`recovery_note`."""
    try:
        yield
    except BaseException as err:
        about_arguments = isinstance(err, ShardpipeError) and not isinstance(
            err, StorageError | WriteFailedError
        )
        note = recovery_note(mode)
        notes = getattr(err, "__notes__", None)
        if notes:  # an update's own advice names a resume a dataset write does not have
            err.__notes__ = [n for n in notes if not n.startswith(UNFINISHED_UPDATE)]
        if not (root.transactional or about_arguments or note in getattr(err, "__notes__", ())):
            err.add_note(note)
        raise
