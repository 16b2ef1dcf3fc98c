"""Keys to paths under a local root, never through a symbolic link that leads out of it.

The local half of the key discipline (:mod:`shardpipe.storage.keys`), shared
by shardpipe's local backend (:class:`~shardpipe.storage.local.store.LocalShardStore`)
and by the zarr store it pairs with
(:class:`~shardpipe.storage.local.contained.ContainedLocalStore`):

* a key is checked (:func:`~shardpipe.storage.keys.edge_key`) before it
  becomes a path;
* the folder of a key may be a link, or lie under one, only if it resolves
  inside the root's real path; each folder is resolved once (``realpath``,
  which resolves the part of a path that does not exist yet too) and the
  answer remembered, so that the check costs nothing per inner chunk;
* the file at a key is never a link, wherever it points: it is opened with
  ``O_NOFOLLOW`` and looked at with ``lstat``, and a link is refused by
  name (:class:`~shardpipe.errors.UnsafeKeyError`). A link at a key may be
  deleted or replaced (which changes only the link).

The check is against the layout as it is found, not against someone who
swaps folders for links while a job runs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from shardpipe.errors import UnsafeKeyError
from shardpipe.storage.keys import edge_key

LINK_REFUSED = (
    "it is a symbolic link, which a local store neither reads nor writes through (it could "
    "lead outside the store); replace the link by the file it points to, or delete it"
)
"""Why a key whose file is a symbolic link is refused."""


class LocalKeys:
    """Paths of the keys under ``root``, each kept inside it.

    Parameters
    ----------
    root : str
        The absolute path of the root folder.
    owner : object
        The store the keys belong to, named when a key is refused.
    """

    def __init__(self, root: str, owner: object) -> None:
        self.root = root
        self.owner = owner
        self._folders: dict[str, str] = {}  # folder key -> its path, found inside the root

    def __getstate__(self) -> dict[str, object]:
        return {"root": self.root, "owner": self.owner, "_folders": {}}

    def _refuse(self, key: str, why: str) -> UnsafeKeyError:
        return UnsafeKeyError(key, f"a call to {self.owner!r}", why)

    def path(self, key: str) -> str:
        """The file of ``key``: the key checked, its folder resolved inside the root."""
        folder, _, name = edge_key(key, self.owner).rpartition("/")
        path = self._folders.get(folder)
        if path is None:
            path = self.folder(folder, key)
        return f"{path}{os.sep}{name}"

    def folder(self, prefix: str, key: str | None = None) -> str:
        """The folder a key prefix names (``""``: the root), resolved inside the root.

        ``key`` is the key named when the folder is refused (else ``prefix``).
        """
        folder = edge_key(prefix, self.owner, prefix=True).strip("/")
        path = self._folders.get(folder)
        if path is not None:
            return path
        path = os.path.join(self.root, *folder.split("/")) if folder else self.root
        root, real = os.path.realpath(self.root), os.path.realpath(path)
        if folder and real != root and not real.startswith(root + os.sep):
            raise self._refuse(
                prefix if key is None else key,
                f"its folder {path} leads to {real}, outside the store's root {root} "
                "(through a symbolic link)",
            )
        self._folders[folder] = path
        return path

    def open(self, key: str, path: str, flags: int, mode: int = 0o644) -> int:
        """``os.open`` of the file of ``key`` (at ``path``), refusing a symbolic link by name."""
        try:
            return os.open(path, flags | os.O_NOFOLLOW, mode)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise self._refuse(key, LINK_REFUSED) from None
            raise

    def lstat(self, key: str, path: str) -> os.stat_result:
        """``os.lstat`` of the file of ``key`` (at ``path``), refusing a symbolic link by name."""
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise self._refuse(key, LINK_REFUSED)
        return st

    def no_link(self, key: str) -> str:
        """The path of ``key`` (:meth:`path`), refusing a link there; absent files are fine."""
        path = self.path(key)
        with contextlib.suppress(FileNotFoundError):
            self.lstat(key, path)
        return path
