"""The ``shardpipe`` command line: one module per command, shared options, one exit table.

The console script ``shardpipe`` and ``python -m shardpipe`` call
:func:`~shardpipe.cli.parser.main`.
"""

from shardpipe.cli.parser import main

__all__ = ["main"]
