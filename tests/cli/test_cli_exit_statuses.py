"""The exit-status table covers every error class, and the help and README show that table."""

from __future__ import annotations

import inspect
import re

import pytest

from shardpipe import errors
from shardpipe.cli.exit_statuses import (
    EXIT_STATUSES,
    ExitStatus,
    exit_status,
    statuses_markdown,
    statuses_text,
)
from shardpipe.cli.parser import _parser
from tests.support import REPOSITORY

README = REPOSITORY / "README.md"

PUBLIC_ERRORS = sorted(
    (
        cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.ShardpipeError)
        if not name.startswith("_")
    ),
    key=lambda cls: cls.__name__,
)


def _row(code: int) -> ExitStatus:
    return next(s for s in EXIT_STATUSES if s.code == code)


def _covers(row: ExitStatus, cls: type[BaseException], during_work: bool) -> bool:
    """Whether the documented row says that ``cls`` ends in it."""
    if issubclass(cls, row.errors):
        return True
    if not during_work and row.before_work and issubclass(cls, row.before_work):
        return True
    return row.otherwise == ("after" if during_work else "before")


@pytest.mark.parametrize("during_work", [False, True], ids=["before writing", "during work"])
@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_class_ends_in_a_documented_status(
    cls: type[errors.ShardpipeError], during_work: bool
) -> None:
    err = cls.__new__(cls)  # every constructor differs; the status depends on the class alone
    code = exit_status(err, during_work=during_work)
    assert code in {s.code for s in EXIT_STATUSES}
    assert _covers(_row(code), cls, during_work), (cls, code)
    named = [s.code for s in EXIT_STATUSES if s.errors and issubclass(cls, s.errors)]
    assert len(named) <= 1, f"{cls.__name__} is named by the rows of statuses {named}"


def test_a_job_conflict_is_listed() -> None:
    """The issue's case: JobConflictError exited 2, which the table did not say."""
    code = exit_status(errors.JobConflictError("another job holds the array"))
    assert code == 2
    row = next(line for line in statuses_markdown().splitlines() if line.startswith("| 2 |"))
    assert "`JobConflictError`" in row and "another job holds the array" in row


def test_the_readme_shows_the_table() -> None:
    text = README.read_text()
    section = text[text.index("### Exit statuses of the command line") :]
    assert statuses_markdown() in section.split("\n\n### ")[0]


def test_the_help_shows_the_table() -> None:
    def words(text: str) -> str:
        return re.sub(r"\s+", " ", text).strip()

    assert words(statuses_text()) in words(_parser().format_help())
    for status in EXIT_STATUSES:
        for cls in status.errors:
            assert cls.__name__ in statuses_text()
