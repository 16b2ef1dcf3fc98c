"""Output to a reader that left early (``shardpipe info DIR | head -1``) is dropped quietly.

Python ignores ``SIGPIPE``, so a write to a pipe whose reader has gone raises
:class:`BrokenPipeError`. Restoring the default handler would make the
process die on any closed socket too (Dask's among them), so, as the
CPython documentation of ``SIGPIPE`` advises instead, the first
``BrokenPipeError`` on standard output points the file descriptor at
``os.devnull``: what is left to print goes nowhere, the command finishes its
work and ends with the status it would have had, and the interpreter's last
flush finds nothing to complain about.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class _DropsWhenClosed:
    """Standard output that discards what is written once its reader has gone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                self._stream.write(text)
            except BrokenPipeError:
                self._reader_left()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_left()

    def _reader_left(self) -> None:
        self.reader_gone = True
        with contextlib.suppress(OSError, ValueError):  # no descriptor (a test's capture)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def output_may_be_cut_short() -> Iterator[None]:
    """Within, a closed standard output ends no command in error (see the module)."""
    original = sys.stdout
    guarded = _DropsWhenClosed(original)
    sys.stdout = guarded
    try:
        yield
        guarded.flush()
    finally:
        sys.stdout = original
