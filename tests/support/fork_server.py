"""Child processes forked from one process that has already imported shardpipe.

A test that kills a child or races two of them needs real processes, but a fresh
``python -m ...`` pays the imports of shardpipe, Dask, zarr and xarray (seconds of CPU)
before it does anything. A :class:`ForkServer` pays them once: its server process
imports them, then forks a child for each :meth:`ForkServer.start`. A forked child is an
ordinary process with its own pid: ``child.kill()`` (``os.kill(pid, SIGKILL)``) kills it at that
instant, as it would a child started by :class:`subprocess.Popen`.

The server is this module run as ``python -m tests.support.fork_server MODULE...``, which
imports the modules named (by default :data:`PRELOADED`; the guides' pages preload less,
see ``tests/docs/conftest.py``). It reads one
JSON command per line on stdin and answers each with the child's pid on stdout; it
reaps its children (it sleeps on stdin and on their pidfds: no polling) and writes each
exit status (as :attr:`subprocess.Popen.returncode` spells it: ``-9`` after a kill -9)
to the child's ``rc`` file. A child's stdin is
``/dev/null``, its stdout and stderr go to files. The server imports nothing that
starts a thread (checked at start), so a fork copies one thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

PRELOADED = (
    "numpy",
    "dask.array",
    "zarr",
    "xarray",
    "shardpipe",
    "shardpipe.testing.datasets",
    "s3fs",
    "gcsfs",
)
"""What a server imports before it forks, unless told otherwise: the imports every child
of the fault tests would pay."""


class ForkedChild:
    """One child of a :class:`ForkServer`, with the parts of :class:`subprocess.Popen` tests use."""

    def __init__(self, pid: int, folder: Path) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._rc = folder / f"{pid}.rc"
        self._stdout = folder / f"{pid}.out"
        self._stderr = folder / f"{pid}.err"

    def poll(self) -> int | None:
        """The exit status once the child has ended and been reaped, else None."""
        if self.returncode is None and self._rc.exists():
            self.returncode = int(self._rc.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait until the child has ended; its exit status (``-9`` after a kill -9).

        It looks every 2 ms at first, then less and less often, down to every 50 ms: a
        child just killed is seen at once, and a minute's wait costs little CPU.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.002
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(pause)
            pause = min(pause * 1.5, 0.05)
        return code

    def wait_or_kill(self, timeout: float) -> int:
        """:meth:`wait` up to ``timeout`` seconds; past it, kill -9 the child, reap it and
        raise :class:`subprocess.TimeoutExpired` (as :func:`subprocess.run` does)."""
        try:
            return self.wait(timeout)
        finally:
            self.kill()  # nothing once it has ended
            self.wait()

    def kill(self) -> None:
        """Kill -9 the child now, unless it has ended already (as :meth:`subprocess.Popen.kill`).

        A child that has ended is reaped by the server at once: its pid is then gone.
        """
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended an instant ago
                os.kill(self.pid, signal.SIGKILL)

    def stdout(self) -> str:
        """What the child wrote to its stdout so far."""
        return self._stdout.read_text(errors="replace") if self._stdout.exists() else ""

    def stderr(self) -> str:
        """What the child wrote to its stderr so far."""
        return self._stderr.read_text(errors="replace") if self._stderr.exists() else ""


class ForkServer:
    """A server process that forks children with shardpipe already imported.

    Parameters
    ----------
    folder
        Where the children's exit statuses and outputs are written.
    preload
        The modules the server imports before it forks.
    """

    def __init__(self, folder: Path, preload: tuple[str, ...] = PRELOADED) -> None:
        from tests.support import REPOSITORY

        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fork_server", *preload],
            cwd=REPOSITORY,
            env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        ready = self._proc.stdout.readline()
        assert ready.strip() == "ready", f"the fork server did not start: {ready!r}"

    def start(
        self,
        module: str | None,
        args: list[str],
        *,
        code: str | None = None,
        cwd: Path | str | None = None,
        env: dict[str, str] | None = None,
    ) -> ForkedChild:
        """Fork a child that runs ``python -m module *args`` (or ``python -c code *args``).

        ``env`` replaces the child's environment (the default: this process's); ``cwd``
        is its working folder (the default: this process's).
        """
        assert (module is None) != (code is None), "give a module or code"
        command = {
            "module": module,
            "code": code,
            "args": [str(a) for a in args],
            "cwd": str(cwd if cwd is not None else os.getcwd()),
            "env": dict(os.environ) if env is None else env,
            "folder": str(self.folder),
        }
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps(command) + "\n")
            self._proc.stdin.flush()
            answer = self._proc.stdout.readline()
        assert answer, f"the fork server ended with {self._proc.poll()}"
        return ForkedChild(int(answer), self.folder)

    def run(
        self,
        code: str,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout: float = 600.0,
    ) -> ForkedChild:
        """Fork ``python -c code *args`` and wait until it ends; the ended child, whose
        ``returncode``, ``stdout()`` and ``stderr()`` say how it went (as
        :func:`subprocess.run` with ``capture_output=True`` would)."""
        child = self.start(None, args, code=code, env=env)
        try:
            child.wait(timeout)
        finally:
            child.kill()  # still running after the timeout
        return child

    def close(self) -> None:
        """End the server; it kills and reaps children still running."""
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait(timeout=60)


def wait_for_word(progress: Path, word: str, child: ForkedChild) -> None:
    """Wait until ``child`` has written ``word`` to its ``progress`` file.

    A child that wrote it and has ended since (a fast child on a slow test) counts: the
    file is read after the child's state, so its end is an error only if it never wrote
    ``word``.
    """
    deadline = time.monotonic() + 120
    while True:
        ended = child.poll() is not None
        if word in (progress.read_text() if progress.exists() else ""):
            return
        assert not ended, child.stderr() or child.returncode
        assert time.monotonic() < deadline, f"the child never wrote {word!r}"
        time.sleep(0.005)


def kill_when_ready(
    server: ForkServer, module: str, args: list[str], progress: Path, delay: float
) -> None:
    """Fork ``python -m module *args``; ``delay`` seconds after it writes ``ready``, kill -9 it.

    ``args`` must pass ``progress`` on to the child, which writes there.
    Returns once the child is gone.
    """
    child = server.start(module, args)
    try:
        wait_for_word(progress, "ready", child)
        time.sleep(delay)
        child.kill()
    finally:
        child.kill()
        child.wait()


def _run_child(command: dict[str, Any]) -> int:
    """In the forked child: run the command as ``python -m``/``-c`` would; its exit status."""
    import runpy

    folder = Path(command["folder"])
    pid = os.getpid()
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    os.dup2(os.open(folder / f"{pid}.out", flags), 1)
    os.dup2(os.open(folder / f"{pid}.err", flags), 2)
    os.chdir(command["cwd"])
    os.environ.clear()
    os.environ.update(command["env"])
    if "dask" in sys.modules:  # Dask read its DASK_* variables when the server imported it
        import dask.config

        dask.config.refresh()
    try:
        if command["module"] is not None:
            sys.argv = [command["module"], *command["args"]]
            runpy.run_module(command["module"], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *command["args"]]
            exec(compile(command["code"], "<string>", "exec"), {"__name__": "__main__"})
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            return end.code or 0
        print(end.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _reap(pid: int, pidfd: int, folder: Path) -> None:
    """Reap the ended child ``pid``; write its exit status to its ``rc`` file."""
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    partial = folder / f"{pid}.rc.partial"
    partial.write_text(str(os.waitstatus_to_exitcode(status)))
    os.replace(partial, folder / f"{pid}.rc")


def main() -> int:
    """The server: import the modules its arguments name, then fork a child per command
    line until stdin closes.

    It sleeps in ``select`` on stdin and on a pidfd per running child: no polling.
    """
    import importlib
    import select

    for name in sys.argv[1:]:
        with contextlib.suppress(ImportError):  # a child that needs it imports it (and fails)
            importlib.import_module(name)
    assert threading.active_count() == 1, f"imports started threads: {threading.enumerate()}"
    children: dict[int, tuple[int, Path]] = {}  # pidfd: (pid, folder)
    pending = b""
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([0, *children], [], [])
        for pidfd in readable:
            if pidfd != 0:
                pid, folder = children.pop(pidfd)
                _reap(pid, pidfd, folder)
        if 0 not in readable:
            continue
        data = os.read(0, 1 << 16)
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            command = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _run_child(command)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            children[os.pidfd_open(pid)] = (pid, Path(command["folder"]))
            # pids come round again (pid_max is often 32768): an earlier child's exit
            # status under this pid must not pass for this one's (it is reaped here, later)
            (Path(command["folder"]) / f"{pid}.rc").unlink(missing_ok=True)
            print(pid, flush=True)
    for pidfd, (pid, folder) in children.items():
        os.kill(pid, signal.SIGKILL)  # a test left it running
        _reap(pid, pidfd, folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
