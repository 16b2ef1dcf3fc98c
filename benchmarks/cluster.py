"""Alias: ``python -m benchmarks.cluster ...`` is ``python -m benchmarks cluster ...``."""

import sys

from benchmarks.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["cluster", *sys.argv[1:]]))
