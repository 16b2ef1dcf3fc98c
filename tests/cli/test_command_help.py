"""Every command's help: a summary line first, the one exit-status table last."""

from __future__ import annotations

import argparse
import re

import pytest

from shardpipe.cli.exit_statuses import EXIT_STATUSES, statuses_text
from shardpipe.cli.parser import _parser, main
from shardpipe.cli.subcommand import HelpFormatter
from shardpipe.core.shard_update import STRATEGIES

COMMANDS = [
    "plan",
    "verify",
    "cleanup",
    "info",
    "repair",
    "compact",
    "rechunk",
    "write-precomputed",
    "write-ome-zarr",
    "convert-ome-zarr",
    "migrate",
    "write-dataset",
    "repair-dataset",
]


def _summaries() -> dict[str, str]:
    """Each command's line in the list of ``shardpipe --help``."""
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: choice.help or "" for choice in commands._choices_actions}


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


def _paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_every_command_is_checked() -> None:
    assert list(_summaries()) == COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_the_help_opens_with_the_summary_line(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = _summaries()[name]
    assert summary and "\n" not in summary and not summary.endswith("."), summary
    paragraphs = _paragraphs(_help([name], capsys))
    assert paragraphs[0].startswith(f"usage: shardpipe {name}")
    first = paragraphs[1]
    assert first == summary[0].upper() + summary[1:] + ".", (name, first)
    assert len(first) <= 79, "the summary fits on one line of an 80-column terminal"
    assert not paragraphs[2].startswith(("positional arguments", "options")), (
        f"{name}: the summary is followed by what the command does, in more words"
    )


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_the_help_ends_with_the_exit_statuses(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _help([name] if name else [], capsys)
    table = text[text.index("Exit statuses:") :]
    assert table.split() == statuses_text().split(), name
    for status in EXIT_STATUSES:
        assert re.search(rf"^  {status.code}  \S", table, re.MULTILINE), (name, status.code)


def test_the_exit_statuses_read_the_same_in_every_help(capsys: pytest.CaptureFixture[str]) -> None:
    tables = {}
    for name in ["", *COMMANDS]:
        text = _help([name] if name else [], capsys)
        tables[name] = text[text.index("Exit statuses:") :]
    assert len(set(tables.values())) == 1, tables


def test_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ["", *COMMANDS]:
        text = _help([name] if name else [], capsys)
        assert "``" not in text and ":func:" not in text and ":mod:" not in text, name


def _options(name: str) -> list[argparse.Action]:
    """The optional flags of command ``name`` shown in its help (not ``-h``)."""
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = commands.choices[name]
    return [
        a
        for a in parser._actions
        if a.option_strings and a.help is not argparse.SUPPRESS and "-h" not in a.option_strings
    ]


def _shown_help(action: argparse.Action) -> str:
    """The help of ``action`` as its command's help prints it (one line, unwrapped)."""
    return HelpFormatter("shardpipe")._expand_help(action)


def _worth_showing(default: object) -> bool:
    return default not in (None, False, True, [], "", argparse.SUPPRESS)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_option_shows_its_choices_and_default(name: str) -> None:
    for action in _options(name):
        shown = _shown_help(action)
        flag = action.option_strings[0]
        assert action.help, f"{name} {flag} has no help"
        for choice in action.choices or ():
            assert str(choice) in shown, (name, flag, shown)
        if _worth_showing(action.default) and not isinstance(action, argparse._VersionAction):
            default = action.default
            text = ",".join(map(str, default)) if isinstance(default, tuple) else str(default)
            assert f"default: {text}" in shown, (name, flag, shown)


@pytest.mark.parametrize("name", ["rechunk", "write-dataset"])
def test_the_compressor_values_are_listed(name: str) -> None:
    (compressor,) = [a for a in _options(name) if "--compressor" in a.option_strings]
    shown = _shown_help(compressor)
    for value in ("zstd[:level]", "gzip[:level]", "blosc[:cname[:clevel]]", "none"):
        assert value in shown, shown


def test_write_strategy_choices_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    (strategy,) = [a for a in _options("write-dataset") if "--write-strategy" in a.option_strings]
    assert list(strategy.choices or ()) == list(STRATEGIES)
    with pytest.raises(SystemExit):
        main(["write-dataset", "a", "b", "--write-strategy", "sideways"])
    assert "invalid choice: 'sideways'" in capsys.readouterr().err
