"""``python -m shardpipe``: the command line."""

import sys

from shardpipe.cli import main

sys.exit(main())
