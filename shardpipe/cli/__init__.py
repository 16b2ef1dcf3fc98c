"""The ``shardpipe`` command line: one module per command, shared options, one exit table.

The console script ``shardpipe`` and ``python -m shardpipe`` call
:func:`~shardpipe.cli.parser.run`, which readies the process and calls
:func:`~shardpipe.cli.parser.main` (what a program or test calls to run a command
in its own process).
"""

from shardpipe.cli.parser import main

__all__ = ["main"]
