"""How a command's errors end it: a message on stderr and an exit status, in one place.

A command's body raises; :func:`run_command`, which ``main`` calls, catches
what the command expects to fail with and reports it as the command's
:class:`Failures` say (given when the command is added:
:func:`~shardpipe.cli.subcommand.add_subcommand`). A step of a command that
reports its errors otherwise (``verify``'s check, ``rechunk``'s run) runs
inside :func:`step`. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from shardpipe.cli.exit_statuses import EXPECTED, exit_status
from shardpipe.cli.options import store_and_path
from shardpipe.errors import InvalidArgumentError


@dataclass(frozen=True)
class Failures:
    """How a command, or a step of one, reports an error it raised.

    Attributes
    ----------
    where : str
        What the message names before the error (a store, an array); ``""`` for nothing.
    during_work : bool
        Whether writing may have begun: an error that is not about the arguments
        then ends in the status of a write that failed part way.
    as_task_failure : bool
        Report every error but bad arguments as a run that failed: ``failed (Type:
        message)``, then the error's notes on lines of their own, in the status of a
        write that failed part way. Bad arguments keep the one-line message.
    carry_on : str
        What to do next, appended to the message of a task failure.
    catches : tuple of exception classes
        What is reported in a message; anything else keeps its traceback.
    """

    where: str = ""
    during_work: bool = False
    as_task_failure: bool = False
    carry_on: str = ""
    catches: tuple[type[BaseException], ...] = EXPECTED

    def report(self, command: str, err: BaseException) -> int:
        """Print ``err`` for ``shardpipe command``; return the exit status it ends in."""
        notes = [note.removeprefix("shardpipe: ") for note in getattr(err, "__notes__", ())]
        if self.as_task_failure and not isinstance(err, InvalidArgumentError):
            then = f"; {self.carry_on}" if self.carry_on else ""
            print(
                f"shardpipe {command}: failed ({type(err).__name__}: {err}){then}", file=sys.stderr
            )
            for note in notes:
                print(f"  {note}", file=sys.stderr)
            return exit_status(err, during_work=True)
        prefix = f"shardpipe {command}: " + (f"{self.where}: " if self.where else "")
        line = " ".join([str(err), *(f"[{note}]" for note in notes)])
        print(prefix + line.replace("\n", " "), file=sys.stderr)
        return exit_status(err, during_work=self.during_work)


def reported_plainly(args: argparse.Namespace) -> Failures:
    """The default: the error in one line, its status as if nothing was written yet."""
    return Failures()


def reported_at_store(args: argparse.Namespace) -> Failures:
    """Errors of a command on ``STORE [--path PATH]``, each naming them."""
    return Failures(where=store_and_path(args))


def reported_as_task_failures(args: argparse.Namespace) -> Failures:
    """Errors of a command whose work runs as tasks (see :attr:`Failures.as_task_failure`)."""
    return Failures(as_task_failure=True)


class _StepFailed(Exception):
    """An error raised in a :func:`step`, with how that step reports it (never escapes
    :func:`run_command`)."""

    def __init__(self, error: BaseException, failures: Failures) -> None:
        super().__init__(str(error))
        self.error = error
        self.failures = failures


@contextlib.contextmanager
def step(failures: Failures) -> Iterator[None]:
    """Report what the block raises as ``failures`` say, not as its command's default."""
    try:
        yield
    except _StepFailed:
        raise
    except failures.catches as err:
        raise _StepFailed(err, failures) from err


def run_command(args: argparse.Namespace) -> int:
    """Run the command ``args`` were parsed for; report what it raised; return the exit status.

    ``args.run`` is the command, ``args.failures`` how it reports its errors
    (both set by :func:`~shardpipe.cli.subcommand.add_subcommand`).
    """
    command: str = args.command
    try:
        status: int = args.run(args)
    except KeyboardInterrupt as err:  # Ctrl-C: what to do next, not a traceback
        print(f"shardpipe {command}: interrupted", file=sys.stderr)
        for note in getattr(err, "__notes__", ()):
            print(f"  {note.removeprefix('shardpipe: ')}", file=sys.stderr)
        return exit_status(err)
    except _StepFailed as failed:
        return failed.failures.report(command, failed.error)
    except Exception as err:
        failures: Failures = args.failures(args)
        if not isinstance(err, failures.catches):
            raise
        return failures.report(command, err)
    return status
