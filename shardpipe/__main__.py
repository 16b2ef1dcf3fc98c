"""``python -m shardpipe``: the command line."""

import sys

from shardpipe.cli.parser import run

sys.exit(run())
