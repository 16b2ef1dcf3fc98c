"""An option name means one thing in every command, and is defined once: in cli/options.py."""

from __future__ import annotations

import argparse
import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardpipe.cli
from shardpipe.cli import options
from shardpipe.cli.parser import _parser
from shardpipe.cli.subcommand import HelpFormatter
from shardpipe.core.memory import DEFAULT_MAX_MEM

CLI = Path(shardpipe.cli.__file__).parent

TWO_MEANINGS = {
    # dataset commands give sizes by dimension name (time=365), array commands a shape
    "--shards": "a shape (256,256,256), or sizes by dimension name (time=365)",
    "--chunks": "a shape (64,64,64), or sizes by dimension name (time=365)",
}
"""Flags that mean two things today; each must still do so, or leave this list."""


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flags() -> Iterator[tuple[str, str, argparse.Action]]:
    """(command, flag, action) for every optional flag of every command (not ``-h``, nor a
    deprecated spelling, hidden from the help: see test_deprecated_spellings_still_work)."""
    for name, parser in _commands().items():
        for action in parser._actions:
            if action.help is argparse.SUPPRESS:
                continue
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    yield name, flag, action


def _meaning(action: argparse.Action) -> tuple[Any, ...]:
    """What a flag does, its help's wording aside."""
    return (
        type(action).__name__,
        action.dest,
        action.type,
        repr(action.default),
        repr(action.choices),
        action.nargs,
        repr(action.const),
        action.metavar,
        action.required,
    )


def _shared() -> dict[str, set[str]]:
    """Flags several commands take -> those commands."""
    commands: dict[str, set[str]] = defaultdict(set)
    for name, flag, _ in _flags():
        commands[flag].add(name)
    return {flag: names for flag, names in commands.items() if len(names) > 1}


def _definitions() -> dict[str, list[tuple[Any, ...]]]:
    """Flag -> the meanings cli/options.py defines for it."""
    found: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for value in vars(options).values():
        if isinstance(value, options.Option) and value.help is not argparse.SUPPRESS:
            action = value.add(argparse.ArgumentParser(add_help=False))
            for flag in action.option_strings:
                found[flag].append(_meaning(action))
    return found


def test_options_are_shared() -> None:
    """The checks below have something to check."""
    shared = _shared()
    assert {"--max-mem", "--storage-option", "--path", "--progress", "--overwrite"} <= set(shared)
    assert len(shared["--storage-option"]) == len(_commands())


def test_a_flag_means_one_thing_in_every_command() -> None:
    meanings: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
    for _, flag, action in _flags():
        meanings[flag].add(_meaning(action))
    two = {flag for flag, seen in meanings.items() if len(seen) > 1}
    assert two == set(TWO_MEANINGS), {flag: meanings[flag] for flag in two ^ set(TWO_MEANINGS)}


@pytest.mark.parametrize("flag", sorted(_shared()))
def test_a_flag_of_several_commands_is_defined_in_the_shared_module(flag: str) -> None:
    defined = _definitions().get(flag, [])
    assert defined, f"{flag} ({sorted(_shared()[flag])}) is not defined in cli/options.py"
    assert len(defined) == (2 if flag in TWO_MEANINGS else 1), defined
    for name, seen, action in _flags():
        if seen == flag:
            assert _meaning(action) in defined, (name, flag, _meaning(action))


def test_no_command_module_spells_a_shared_flag() -> None:
    """Command modules add shared options through cli/options.py, never by their flags."""
    shared = set(_shared())
    spelled = []
    for path in sorted(CLI.rglob("*.py")):
        if path.name == "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                flags = {a.value for a in node.args if isinstance(a, ast.Constant)}
                spelled += [f"{path.relative_to(CLI)}: {f}" for f in sorted(flags & shared)]
    assert not spelled, spelled


def test_max_mem_has_the_library_default_everywhere() -> None:
    taking = [(name, action) for name, flag, action in _flags() if flag == "--max-mem"]
    assert len(taking) == 6
    for name, action in taking:
        assert action.default == DEFAULT_MAX_MEM, name
        assert f"default: {DEFAULT_MAX_MEM}" in HelpFormatter(name)._expand_help(action), name


def test_progress_is_one_destination() -> None:
    """``--progress`` and ``--no-progress`` set one value, None (the terminal decides) unless
    one is given (tests/cli/test_progress_policy.py checks the policy)."""
    for name, parser in _commands().items():
        flags = {f for a in parser._actions for f in a.option_strings}
        if flags & {"--progress", "--no-progress"}:
            assert {"--progress", "--no-progress"} <= flags, name
            assert parser.parse_args(_required(name)).progress is None, name


def _required(name: str) -> list[str]:
    """The fewest arguments ``name`` parses."""
    positional = {
        "rechunk": ["a", "b"],
        "write-precomputed": ["a", "b", "--resolution", "1,1,1", "--chunk-size", "8,8,8"],
        "migrate": ["a"],
        "write-dataset": ["a", "b"],
        "write-ome-zarr": ["a", "b"],
        "convert-ome-zarr": ["a", "b"],
        "plan": ["a", "--shape", "4"],
    }
    return positional.get(name, ["a"])


def test_migrate_copy_concurrency_has_its_own_name(capsys: pytest.CaptureFixture[str]) -> None:
    """``--workers`` is LocalCluster processes wherever it is shown; migrate's shards copied
    at once are ``--copy-concurrency``."""
    migrate = _commands()["migrate"]
    shown = {
        f for a in migrate._actions if a.help is not argparse.SUPPRESS for f in a.option_strings
    }
    assert "--copy-concurrency" in shown and "--workers" not in shown
    assert migrate.parse_args(["a", "--copy-concurrency", "3"]).copy_concurrency == 3
    assert migrate.parse_args(["a"]).copy_concurrency == 8
    assert capsys.readouterr().err == ""
    for name, flag, action in _flags():
        if flag == "--workers":
            assert action.dest == "workers" and "LocalCluster" in (action.help or ""), name


def test_deprecated_spellings_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    """``migrate --workers N`` still sets the copy concurrency, with a warning, until 0.3.0."""
    args = _commands()["migrate"].parse_args(["a", "--workers", "3"])
    assert args.copy_concurrency == 3
    err = capsys.readouterr().err
    assert "--workers is deprecated" in err and "--copy-concurrency" in err and "0.3.0" in err
