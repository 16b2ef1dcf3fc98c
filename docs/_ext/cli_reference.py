"""The command-line reference, generated from shardpipe's argparse parsers.

The page ``cli.md`` holds the line ``{shardpipe-cli-reference}``; when Sphinx
reads that page, the line is replaced by a section per command (its summary,
usage, description and every option with its choices and default) and the
table of exit statuses, all taken from the parsers that ``shardpipe`` runs
and from :data:`shardpipe.cli.exit_statuses.EXIT_STATUSES`. So the reference
cannot drift from the command line. ``tests/docs/test_docs.py`` calls
:func:`cli_reference_markdown` directly.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from shardpipe.cli.exit_statuses import statuses_markdown
from shardpipe.cli.parser import COMMANDS, _parser

PLACEHOLDER = "{shardpipe-cli-reference}"
"""The line of ``cli.md`` that the generated reference replaces."""

_SPECIAL = re.compile(r"([\\`*_\[\]<>|{}#~$])")


def escape(text: str) -> str:
    """``text`` as Markdown that shows it literally (no emphasis, links or HTML)."""
    return _SPECIAL.sub(r"\\\1", text)


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, by name, in the order ``shardpipe --help`` lists them."""
    parser = _parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    choices: dict[str, argparse.ArgumentParser] = subparsers.choices
    return {command.NAME: choices[command.NAME] for command in COMMANDS}


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def _option(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """One option as a list item: its flags and metavar, help, choices and default."""
    formatter = parser._get_formatter()
    if action.option_strings:
        name = ", ".join(action.option_strings)
        if action.nargs != 0:
            name += " " + formatter._format_args(action, action.dest.upper())
    else:
        name = formatter._format_args(action, action.dest)
    words = [" ".join(formatter._expand_help(action).split())] if action.help else []
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        words.append("Choices: " + ", ".join(str(c) for c in action.choices) + ".")
    default: Any = action.default
    shows_default = action.help is not None and "%(default)" in action.help
    has_default = default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0
    if has_default and not shows_default:
        words.append(f"Default: {default}.")
    text = " ".join(w if w.endswith((".", ":")) else w + "." for w in words)
    return f"- `{name}`: " + escape(text)


def command_markdown(name: str, parser: argparse.ArgumentParser) -> str:
    """The section of one command."""
    description = _paragraphs(parser.description or "")
    lines = [f"## shardpipe {name}", ""]
    if description:
        lines += [escape(description[0]), ""]
    usage = parser.format_usage().strip().removeprefix("usage: ")
    lines += ["```text", usage, "```", ""]
    for paragraph in description[1:]:
        if any(line.startswith(" ") for line in paragraph.splitlines()):
            lines += ["```text", paragraph, "```", ""]
        else:
            lines += [escape(" ".join(paragraph.split())), ""]
    positionals = [a for a in parser._actions if not a.option_strings]
    options = [
        a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)
    ]
    if positionals:
        lines += ["Arguments:", ""] + [_option(parser, a) for a in positionals] + [""]
    if options:
        lines += ["Options:", ""] + [_option(parser, a) for a in options] + [""]
    return "\n".join(lines)


def cli_reference_markdown() -> str:
    """The whole generated reference: every command, then the exit statuses."""
    sections = [command_markdown(name, p) for name, p in command_parsers().items()]
    sections.append(
        "## Exit statuses\n\n"
        "Every command ends with one of these statuses; a failure is one line on stderr "
        "naming the cause and the fix (with the error's notes in brackets: what was rolled "
        "back, what is left for `shardpipe repair`). A traceback means a bug.\n\n"
        + statuses_markdown()
        + "\n"
    )
    return "\n".join(sections)


def _insert_reference(app: object, docname: str, source: list[str]) -> None:
    if PLACEHOLDER in source[0]:
        source[0] = source[0].replace(PLACEHOLDER, cli_reference_markdown())


def setup(app: Any) -> dict[str, Any]:
    """Register the ``source-read`` hook that fills the CLI reference in."""
    app.connect("source-read", _insert_reference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
