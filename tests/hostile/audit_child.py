"""A process that runs shardpipe commands on hostile layouts and reports every file it touched.

Run as ``python -m tests.hostile.audit_child SANDBOX LAYOUT REPORT [OPTIONS_JSON]``, in a
process forked from the fork server (:mod:`tests.support.fork_server`: shardpipe, Dask and
zarr already imported) whose environment points ``HOME``, ``TMPDIR`` and Dask's
configuration at ``SANDBOX/run``. What the imports read of that environment once, it sets
again: the folder of temporary files and Dask's configuration (that folder's, none; the
``synchronous`` scheduler). It installs an audit hook (:func:`sys.addaudithook`) before it
imports the layouts; then, for each command of ``LAYOUT`` (see
:mod:`tests.hostile.layouts`), it builds the layout afresh in a folder of
``SANDBOX`` (the hook paused), snapshots the decoy tree beside the store,
runs the command with the hook recording, snapshots the decoy again, and
writes one JSON line per command to ``REPORT``: its outcome, every path it
touched outside the places it may touch, and every change in the decoy.

What counts as touching a path: opening it (any mode), listing it, making,
removing, renaming or linking it, changing its size, times or mode. The
path is resolved as the kernel would: through every symbolic link, except
the last part for calls that do not follow it (``unlink``, ``rename``,
``mkdir``, ``O_NOFOLLOW`` opens...), so a link inside the store that leads
out counts as the place it leads to. An attempt counts even when it fails:
an open of a missing file outside is still a look outside.

A command may touch its layout's store folders, the child's own folder
(home, temporary files, the report) and what Python needs: the
interpreter's standard library, the virtual environment, what is on
``sys.path`` (the repository's code among it), ``/proc``, ``/sys`` and
``/dev``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

FOLLOWS = {"open": 0, "os.listdir": 0, "os.scandir": 0, "os.truncate": 0, "os.chmod": 0}
"""Events whose path argument (by position) is followed through a final link."""
NO_FOLLOW = {
    "os.remove": 0,
    "os.rmdir": 0,
    "os.mkdir": 0,
    "os.symlink": 1,
    "shutil.rmtree": 0,
}
"""Events whose path argument (by position) is not followed through a final link."""
DIR_FD = {"os.remove": 1, "os.rmdir": 1, "os.mkdir": 2}
"""Position of the ``dir_fd`` argument of events that take one."""
TWO_PATHS = {"os.rename", "os.link", "shutil.copyfile", "shutil.move", "shutil.copytree"}
"""Events whose first two arguments are paths (source and destination)."""

_state: dict[str, Any] = {"recording": False, "touched": set()}


def _resolve(path: Any, follow: bool, dir_fd: Any = None) -> str | None:
    """Where ``path`` leads, as the kernel resolves it (None for a file descriptor)."""
    if isinstance(path, int) or path is None:
        return None
    text = os.fsdecode(path)
    if not os.path.isabs(text):
        base = os.getcwd()
        if isinstance(dir_fd, int):
            base = os.readlink(f"/proc/self/fd/{dir_fd}")
        text = os.path.join(base, text)
    head, tail = os.path.split(text)
    if follow or tail in ("", ".", ".."):
        return os.path.realpath(text)
    return os.path.join(os.path.realpath(head), tail)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _state["recording"]:
        return
    found: list[str | None] = []
    if event in FOLLOWS:
        follow = True
        if event == "open" and len(args) > 2 and isinstance(args[2], int):
            follow = not args[2] & os.O_NOFOLLOW
        found.append(_resolve(args[FOLLOWS[event]], follow))
    elif event in NO_FOLLOW:
        position = DIR_FD.get(event)
        dir_fd = args[position] if position is not None and len(args) > position else None
        found.append(_resolve(args[NO_FOLLOW[event]], False, dir_fd))
    elif event in TWO_PATHS:
        found += [_resolve(args[0], False), _resolve(args[1], False)]
    elif event == "os.utime":
        found.append(_resolve(args[0], True))
    for path in found:
        if path is not None and not path.startswith(_state["allowed"]):
            _state["touched"].add(f"{event} {path}")


def _allowed(roots: list[str]) -> tuple[str, ...]:
    import sysconfig

    places = [
        *roots,
        sys.prefix,
        sys.exec_prefix,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"],
        *[p for p in sys.path if p],  # the repository, site-packages, the zipped stdlib
        "/proc",
        "/sys",
        "/dev",
    ]
    resolved = {os.path.realpath(p) for p in places} | set(places)
    return tuple(sorted({p.rstrip("/") + "/" for p in resolved} | resolved))


def _isolate(own: str) -> None:
    """Temporary files and Dask's configuration as a fresh process would have them.

    The environment already points ``HOME``, ``TMPDIR`` and ``DASK_CONFIG`` at ``own``;
    :mod:`tempfile` and Dask read it when they were first used, in the fork server.
    """
    import tempfile

    import dask

    tempfile.tempdir = own
    dask.config.refresh(paths=[own])  # no YAML file there: the defaults and DASK_* variables
    dask.config.set(scheduler="synchronous")


def main(sandbox: str, layout_name: str, report: str, options: str = "{}") -> None:
    import json

    own = os.path.join(sandbox, "run")
    os.makedirs(own, exist_ok=True)
    _isolate(own)
    sys.addaudithook(_hook)
    from tests.hostile import layouts

    layout = {**layouts.LAYOUTS, **layouts.CONTROLS}[layout_name]
    settings = json.loads(options)
    with open(report, "w", encoding="utf-8") as out:
        for number, command in enumerate(layout.commands):
            place = os.path.join(sandbox, f"case{number}")
            built = layout.build(place, settings)
            before = layouts.snapshot(built.decoy)
            _state["allowed"] = _allowed([*built.roots, own])
            _state["touched"] = set()
            os.chdir(own)
            _state["recording"] = True
            try:
                outcome = layouts.run(command, built)
            finally:
                _state["recording"] = False
            after = layouts.snapshot(built.decoy)
            changed = sorted(
                name for name in set(before) | set(after) if before.get(name) != after.get(name)
            )
            line = {
                "command": command.name,
                "expect": command.expect,
                **outcome,
                "touched": sorted(_state["touched"]),
                "decoy_changed": changed,
            }
            out.write(json.dumps(line) + "\n")
            out.flush()


if __name__ == "__main__":
    main(*sys.argv[1:])
