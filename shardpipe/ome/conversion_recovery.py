"""What an interrupted conversion says to do: run it again with ``overwrite=True``.

A conversion (:mod:`shardpipe.ome.convert`) has no ``resume``: its levels are
copies of the source, and the stated recovery from any interruption (a full
disk, an I/O error, ``kill -9``) is the same conversion run again with
``overwrite=True``, which removes what the stopped one left and converts
everything again. The storage errors it raises say "run the same write with
``resume=True``", as every write's do; :func:`advise_conversion_rerun` adds
a note with the conversion's own recovery to any error a conversion stops on
after it recorded itself in the target group.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, Protocol

from shardpipe import advice
from shardpipe.errors import MetadataError
from shardpipe.ome.run import read_group_record
from shardpipe.storage.resolve import ResolvedStore

__all__ = ["advise_conversion_rerun", "conversion_rerun_note"]


class _Conversion(Protocol):
    @property
    def target(self) -> ResolvedStore: ...


def conversion_rerun_note() -> str:
    """The note: the conversion is unfinished, and how to finish it."""
    return (
        "shardpipe: the conversion did not finish (verify reports it); a conversion has no "
        f"{advice.name('resume')}: run the same conversion again with "
        f"{advice.setting('overwrite')}, which replaces what it left"
    )


def _interrupted(target: ResolvedStore) -> bool:
    """Whether the group at ``target`` records a conversion under way."""
    if target.transactional:  # nothing of it reached the branch
        return False
    try:
        record = read_group_record(target)
    except (MetadataError, OSError):
        return False
    return record is not None and record.get("doing") == "conversion"


def advise_conversion_rerun[C: _Conversion, **P, R](
    execute: Callable[Concatenate[C, P], R],
) -> Callable[Concatenate[C, P], R]:
    """Decorate a conversion's ``execute``: an error after it began gets the rerun note."""

    def run(self: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return execute(self, *args, **kwargs)
        except BaseException as err:
            note = conversion_rerun_note()
            if _interrupted(self.target) and note not in getattr(err, "__notes__", ()):
                err.add_note(note)
            raise

    functools.update_wrapper(run, execute)
    return run
