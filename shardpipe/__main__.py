"""``python -m shardpipe``: the command line."""

import sys

from shardpipe.cli.parser import main

sys.exit(main())
