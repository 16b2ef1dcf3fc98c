"""How every command's help reads: its summary line, what it does, its options, exit statuses.

:func:`add_subcommand` registers a command under ``shardpipe`` with the
summary that ``shardpipe --help`` lists, a description that opens with that
summary, the exit-status table as epilog, the function that runs it and how
it reports its errors (:mod:`shardpipe.cli.failures`).
:class:`HelpFormatter` wraps the description and epilog to the terminal
paragraph by paragraph, keeping the rows of a table apart.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable
from typing import Protocol

from shardpipe.cli.exit_statuses import statuses_text
from shardpipe.cli.failures import Failures, reported_plainly

type Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]
"""The subcommands of ``shardpipe``, as argparse holds them."""

type Run = Callable[[argparse.Namespace], int]
"""A command: its parsed arguments -> its exit status (it raises when it fails)."""

type FailuresOf = Callable[[argparse.Namespace], Failures]
"""How a command reports its errors, given its parsed arguments."""


class Command(Protocol):
    """A command module of :mod:`shardpipe.cli.commands`."""

    NAME: str
    """The command, as typed after ``shardpipe``."""

    def add_command(self, commands: Subcommands) -> None:
        """Add the command's parser (:func:`add_subcommand`) and its options."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command on its parsed arguments; return the exit status.

        It raises when it fails: :func:`~shardpipe.cli.failures.run_command` reports
        the error and ends the command in its exit status.
        """


_ROW = re.compile(r" +\S+ +")
"""The start of a table row, "  2  ...": its continuation lines are indented past it."""


def shown_default(value: object) -> str:
    """A default as the help shows it: a shape as it is typed (``0,0,0``), else as text."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


class HelpFormatter(argparse.HelpFormatter):
    """Wraps the description and epilog to the terminal: paragraphs (split at blank lines)
    are filled; in a paragraph of lines, each line that starts with spaces is a row of a
    table, wrapped on its own with a hanging indent.

    Every option's help ends with its choices (``choices: end, start``) and its
    default (``default: 1GiB``) unless it names them itself; flags that are on or
    off, and options without a default, show none.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or text is argparse.SUPPRESS:
            return action.help
        extra = []
        if action.choices is not None and not all(str(c) in text for c in action.choices):
            extra.append("choices: " + ", ".join(str(c) for c in action.choices))
        default = action.default
        if default not in (None, False, True, [], "", argparse.SUPPRESS) and "default" not in text:
            extra.append("default: " + shown_default(default).replace("%", "%%"))
        if not extra:
            return action.help
        return f"{text} ({'; '.join(extra)})" if text else "; ".join(extra)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in re.split(r"\n\s*\n", text.strip("\n")):
            lines = paragraph.splitlines()
            if not any(line.startswith(" ") for line in lines):
                lines = [" ".join(line.strip() for line in lines)]
            paragraphs.append("\n".join(_wrap(line, width, indent) for line in lines))
        return "\n\n".join(paragraphs)


def _wrap(line: str, width: int, indent: str) -> str:
    row = _ROW.match(line)
    hanging = " " * len(row.group()) if row else ""
    return textwrap.fill(line, width, initial_indent=indent, subsequent_indent=indent + hanging)


def add_subcommand(
    commands: Subcommands,
    name: str,
    summary: str,
    details: str,
    run: Run,
    failures: FailuresOf = reported_plainly,
) -> argparse.ArgumentParser:
    """Add the command ``name`` to ``commands``; return its parser, to add its options to.

    Parameters
    ----------
    commands : Subcommands
        The subcommands of the top-level parser.
    name : str
        The command, e.g. ``"verify"``.
    summary : str
        What it does, in one line without a full stop (listed by
        ``shardpipe --help``; the first line of its own help).
    details : str
        What it does, in more words.
    run : Run
        What runs it (``args.run``); it raises when it fails.
    failures : FailuresOf
        How it reports the errors ``run`` raises (``args.failures``; by default in
        one line, as before writing began).
    """
    command = commands.add_parser(
        name,
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}.\n\n{details}",
        epilog=statuses_text(),
        formatter_class=HelpFormatter,
    )
    command.set_defaults(run=run, failures=failures)
    return command
