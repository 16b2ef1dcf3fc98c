"""One progress policy: every command shows a bar on a terminal (stderr), none otherwise,
``--progress`` forces one, ``--no-progress`` hides it; each job draws one bar of its own,
ending in one 100% line."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest

import shardpipe
from shardpipe.cli.parser import _parser, main

WRITING = {
    "rechunk": lambda d: [str(d / "a"), str(d / "b"), "--shards", "32,32", "--chunks", "8,8"],
    "write-precomputed": lambda d: [
        str(d / "a"),
        str(d / "v"),
        "--resolution",
        "1,1,1",
        "--chunk-size",
        "8,8,8",
    ],
}


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _positional(name: str) -> list[str]:
    return {
        "rechunk": ["a", "b"],
        "write-precomputed": ["a", "b", "--resolution", "1,1,1", "--chunk-size", "8,8,8"],
        "migrate": ["a"],
        "write-dataset": ["a", "b"],
        "plan": ["a", "--shape", "4"],
    }.get(name, ["a"])


LONG_JOBS = [
    "verify",
    "info",
    "repair",
    "compact",
    "rechunk",
    "write-precomputed",
    "migrate",
    "write-dataset",
    "repair-dataset",
]


@pytest.mark.parametrize("name", LONG_JOBS)
def test_every_long_command_takes_both_flags_with_one_default(name: str) -> None:
    parser = _commands()[name]
    flags = {f for a in parser._actions for f in a.option_strings}
    assert {"--progress", "--no-progress"} <= flags, name
    assert parser.parse_args(_positional(name)).progress is None, "decided by the terminal"
    assert parser.parse_args([*_positional(name), "--progress"]).progress is True
    assert parser.parse_args([*_positional(name), "--no-progress"]).progress is False


def _volume(path: Path) -> None:
    shardpipe.to_sharded_zarr(
        np.arange(64 * 64, dtype="u1").reshape(64, 64), path, shards=(16, 16), chunks=(8, 8)
    )


def _run(argv: list[str]) -> str:
    """Run ``shardpipe *argv`` through the CLI's ``main`` in this process, its stderr a pipe's
    stand-in (not a terminal); return what it wrote there."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(argv)
    assert status == 0, err.getvalue()
    return err.getvalue()


SEPARATOR = "--- end of a command, status "
ON_A_TERMINAL = f"""
import json, sys
from shardpipe.cli import main

for argv in json.loads(sys.argv[1]):
    status = main(argv)
    sys.stderr.write("\\n{SEPARATOR}%d\\n" % status)
    sys.stderr.flush()
"""


def _run_on_terminal(*argvs: list[str]) -> list[str]:
    """Run each ``shardpipe *argv`` in turn in one child whose stderr is a pseudo-terminal;
    return what each wrote there."""
    command = [sys.executable, "-c", ON_A_TERMINAL, json.dumps(argvs)]
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        done = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=follower, check=False, env=os.environ
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    stderr = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    assert done.returncode == 0, stderr
    parts = stderr.split(SEPARATOR)  # each after the first begins with a status and a newline
    statuses = [part.split("\n", 1)[0] for part in parts[1:]]
    assert statuses == ["0"] * len(argvs), stderr
    return [parts[0], *(part.split("\n", 1)[1] for part in parts[1:-1])]


@pytest.mark.parametrize("command", ["info", "verify"])
def test_a_terminal_gets_a_bar_a_pipe_none(tmp_path: Path, command: str) -> None:
    _volume(tmp_path / "a")
    assert "shard" not in _run([command, str(tmp_path / "a")])
    assert "100%" in _run([command, str(tmp_path / "a"), "--progress"])
    on_terminal, hidden = _run_on_terminal(
        [command, str(tmp_path / "a")], [command, str(tmp_path / "a"), "--no-progress"]
    )
    assert "100%" in on_terminal
    assert "%" not in hidden


def _lines(stderr: str) -> list[str]:
    return [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]


def test_rechunk_prints_one_final_line(tmp_path: Path) -> None:
    _volume(tmp_path / "a")
    lines = _lines(_run(["rechunk", *WRITING["rechunk"](tmp_path), "--progress"]))
    assert sum("100%" in line for line in lines) == 1, lines


def test_compact_draws_no_empty_bar(tmp_path: Path) -> None:
    _volume(tmp_path / "a")
    shardpipe.to_sharded_zarr(
        np.ones((32, 32), "u1"),
        tmp_path / "a",
        region=(slice(0, 32), slice(0, 32)),
        write_strategy="append",
    )
    lines = _lines(_run(["compact", str(tmp_path / "a"), "--progress"]))
    assert lines and all("/16" in line for line in lines), lines
    assert sum("100%" in line for line in lines) == 1, lines


def test_the_precomputed_writer_draws_shardpipes_bar(tmp_path: Path) -> None:
    volume = np.arange(32 * 32 * 32, dtype="u1").reshape(32, 32, 32)
    shardpipe.to_sharded_zarr(volume, tmp_path / "a", shards=(16, 16, 16), chunks=(8, 8, 8))
    stderr = _run(
        ["write-precomputed", *WRITING["write-precomputed"](tmp_path), "--progress"],
    )
    lines = _lines(stderr)
    assert lines and all(line.startswith("shardpipe") for line in lines), lines
    assert sum("100%" in line for line in lines) == 1, lines
    assert "[" not in lines[0].split("|")[0] or "elapsed" not in stderr, "not dask's bar"


def test_the_api_default_is_no_bar_everywhere() -> None:
    import inspect

    from shardpipe.dataset.accessor import ShardAccessor

    functions = [
        getattr(shardpipe, name)
        for name in dir(shardpipe)
        if callable(getattr(shardpipe, name, None)) and not name.startswith("_")
    ]
    functions.append(ShardAccessor.to_zarr)
    taking = {}
    for function in functions:
        try:
            parameters = inspect.signature(function).parameters
        except (TypeError, ValueError):
            continue
        if "progress" in parameters:
            taking[function.__name__] = parameters["progress"].default
    assert {"verify", "info", "repair", "compact", "rechunk", "to_sharded_zarr"} <= set(taking)
    assert set(taking.values()) == {False}, taking


def test_bars_are_plain_console_bars_without_widgets(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    import tqdm.auto
    import tqdm.std

    from shardpipe.engine import progress

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "ipywidgets" else real(name, *a),
    )
    progress.bar_class.cache_clear()  # looked up once per process
    assert progress.bar_class() is tqdm.std.tqdm
    monkeypatch.setattr(importlib.util, "find_spec", real)
    progress.bar_class.cache_clear()
    if real("ipywidgets") is not None:
        assert progress.bar_class() is tqdm.auto.tqdm


def test_no_module_picks_tqdm_auto_itself() -> None:
    root = Path(shardpipe.__file__).parent
    users = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if re.search(r"^\s*(from tqdm.auto|import tqdm)", path.read_text(), re.MULTILINE)
        and path.name != "progress.py"
    ]
    assert users == [], users
