"""Listing the local backend: the keys under a folder, in string order, never collected.

A shard listing of a petabyte array may name millions of keys; they come
out one by one, in the order S3 lists them, without being held.
"""

from __future__ import annotations

import os
from collections.abc import Iterator


def sorted_keys(path: str, folder: str, start: str = "") -> Iterator[str]:
    """Keys of the files under the folder at ``path`` (key ``folder``), sorted as strings.

    Only names beginning with ``start`` are taken at the top. A folder sorts
    by its name plus ``/``, which every key under it begins with, so the
    keys come out in string order without being collected. A folder that
    vanishes while listed, and a link to a folder, list nothing.
    """
    try:
        with os.scandir(path) as it:
            entries = []
            for entry in it:
                if not entry.name.startswith(start):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    entries.append((f"{entry.name}/", entry.path))
                elif not entry.is_dir():
                    entries.append((entry.name, ""))
    except (FileNotFoundError, NotADirectoryError):
        return
    entries.sort()
    base = f"{folder}/" if folder else ""
    for name, sub in entries:
        if sub:
            yield from sorted_keys(sub, base + name[:-1])
        else:
            yield base + name
