"""One error path for every command: commands raise, the runner prints and picks the status."""

from __future__ import annotations

import argparse
import ast
import errno
from pathlib import Path

import pytest

from shardpipe.cli.exit_statuses import BAD_INPUT, PROBLEMS, STORAGE_FAILED
from shardpipe.cli.failures import Failures, run_command, step
from shardpipe.cli.parser import COMMANDS
from shardpipe.errors import InvalidArgumentError
from tests.support import REPOSITORY

COMMANDS_FOLDER = REPOSITORY / "shardpipe" / "cli" / "commands"


def _args(run: object, failures: object = lambda args: Failures()) -> argparse.Namespace:
    return argparse.Namespace(command="demo", run=run, failures=failures, store="s")


def _noted(err: Exception) -> Exception:
    err.add_note("shardpipe: a note")
    return err


def _raise(err: BaseException) -> int:
    raise err


def test_an_error_is_one_line_naming_the_command_where_and_notes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = _noted(InvalidArgumentError("--shards", "is 0,\nzero", "Pass a positive size"))
    status = Failures(where="vol.zarr").report("plan", err)
    assert status == BAD_INPUT
    line = capsys.readouterr().err
    assert line.count("\n") == 1
    assert line.startswith("shardpipe plan: vol.zarr: ")
    assert "--shards" in line and line.rstrip().endswith("[a note]")


def test_during_work_a_failure_not_about_arguments_is_a_failed_write(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = ValueError("a task failed")
    assert Failures().report("x", err) == BAD_INPUT
    assert Failures(during_work=True).report("x", err) == PROBLEMS
    assert capsys.readouterr().err == "shardpipe x: a task failed\n" * 2


def test_a_task_failure_names_the_error_then_how_to_carry_on_and_notes_below(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failures = Failures(as_task_failure=True, carry_on="run it again")
    status = failures.report("rechunk", _noted(OSError(errno.ENOSPC, "disk full")))
    assert status == STORAGE_FAILED
    assert capsys.readouterr().err == (
        "shardpipe rechunk: failed (OSError: [Errno 28] disk full); run it again\n  a note\n"
    )


def test_bad_arguments_stay_one_line_in_a_command_of_tasks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = InvalidArgumentError("--workers", "is 0", "Pass 1 or more")
    assert Failures(as_task_failure=True).report("migrate", err) == BAD_INPUT
    assert capsys.readouterr().err.startswith("shardpipe migrate: ")


def test_the_runner_reports_with_the_command_failures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = _args(lambda args: _raise(KeyError("v")), lambda args: Failures(where=args.store))
    assert run_command(args) == BAD_INPUT
    assert capsys.readouterr().err == "shardpipe demo: s: 'v'\n"
    assert run_command(_args(lambda args: 7)) == 7


def test_a_step_reports_its_own_way(capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace) -> int:
        with step(Failures(where="a step", catches=(Exception,))):
            raise RuntimeError("boom")

    assert run_command(_args(run)) == BAD_INPUT
    assert capsys.readouterr().err == "shardpipe demo: a step: boom\n"


def test_an_unexpected_error_keeps_its_traceback() -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        run_command(_args(lambda args: _raise(RuntimeError("a bug"))))
    with pytest.raises(RuntimeError, match="a bug"):  # a step catches only what it says
        run_command(_args(lambda args: _in_step(RuntimeError("a bug"))))


def _in_step(err: BaseException) -> int:
    with step(Failures()):
        raise err


@pytest.mark.parametrize("module", sorted(COMMANDS_FOLDER.glob("[a-z]*.py")), ids=lambda p: p.stem)
def test_no_command_catches_its_own_errors_in_run(module: Path) -> None:
    """Commands raise; only the runner turns errors into messages and statuses."""
    tree = ast.parse(module.read_text())
    run = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run")
    tails = [n.lineno for n in ast.walk(run) if isinstance(n, ast.Try)]
    assert not tails, f"{module}: run() catches errors at lines {tails}; raise instead"


def test_every_command_module_is_checked() -> None:
    assert {c.NAME.replace("-", "_") for c in COMMANDS} == {
        p.stem for p in COMMANDS_FOLDER.glob("[a-z]*.py")
    }
