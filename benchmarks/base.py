"""Common interface of benchmark writers, their errors and codec settings."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from benchmarks.data import Layout


class WriterUnavailable(RuntimeError):
    """The library behind a writer cannot be imported."""


class WriterUnsupported(RuntimeError):
    """The library cannot perform the requested write at all."""


class VerificationError(AssertionError):
    """Data read back from a writer's output differs from the source volume."""


def n_threads() -> int:
    """Return the number of worker threads the anchors use (all cores).

    Returns
    -------
    int
        ``os.cpu_count()``, at least 1.
    """
    return os.cpu_count() or 1


def zarr_compressors(codec: str) -> Any:
    """Return the ``compressors`` argument of ``zarr.create_array`` for a codec setting.

    Parameters
    ----------
    codec : {"zstd1", "none"}
        Codec setting name.

    Returns
    -------
    zarr.codecs.ZstdCodec or None
        ``ZstdCodec(level=1)`` for ``zstd1``, None (no compression) for ``none``.
    """
    from zarr.codecs import ZstdCodec

    if codec == "zstd1":
        return ZstdCodec(level=1)
    if codec == "none":
        return None
    raise ValueError(f"unknown codec setting {codec!r}")


class Writer(ABC):
    """One way of getting the benchmark volume onto disk (or one limit anchor).

    Parameters
    ----------
    scratch : pathlib.Path
        Directory the writer may use for temporary files of its own.

    Notes
    -----
    ``run_one`` drives a writer as: :meth:`load` (imports), data generation,
    :meth:`prepare` (untimed), then ``reps`` timed calls of :meth:`write`, each
    into a fresh directory, then :meth:`verify` once on the last output.
    """

    name: ClassVar[str]
    """Short name used on the command line."""
    label: ClassVar[str]
    """Human-readable name used in the report."""
    uses_blocks: ClassVar[bool] = False
    """Whether the writer takes a Dask array with a block case."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.notes: list[str] = []

    @abstractmethod
    def load(self) -> None:
        """Import the writer's libraries (untimed).

        Raises
        ------
        WriterUnavailable
            If a library cannot be imported.
        """

    def prepare(self, volume: np.ndarray, layout: Layout, blocks: tuple[int, ...] | None) -> Any:
        """Wrap the volume into the writer's input object (untimed).

        Parameters
        ----------
        volume : numpy.ndarray
            The source volume.
        layout : Layout
            Target layout.
        blocks : tuple of int or None
            Dask block shape for block-based writers, else None.

        Returns
        -------
        object
            The input passed to :meth:`write`; the volume itself by default.
        """
        return volume

    @abstractmethod
    def write(self, source: Any, path: Path, layout: Layout, codec: str) -> None:
        """Write ``source`` to ``path`` (the timed operation).

        Parameters
        ----------
        source : object
            Object returned by :meth:`prepare`.
        path : pathlib.Path
            Output location; it does not exist yet.
        layout : Layout
            Target layout.
        codec : {"zstd1", "none"}
            Codec setting.
        """

    @abstractmethod
    def verify(self, path: Path, volume: np.ndarray, layout: Layout, codec: str) -> int:
        """Check the output of the last :meth:`write` against the volume (untimed).

        Parameters
        ----------
        path : pathlib.Path
            Output location of the last write.
        volume : numpy.ndarray
            The source volume.
        layout : Layout
            Target layout.
        codec : {"zstd1", "none"}
            Codec setting.

        Returns
        -------
        int
            Bytes of output produced (on disk, or encoded for encode-only).

        Raises
        ------
        VerificationError
            If the output does not reproduce the volume exactly.
        """
