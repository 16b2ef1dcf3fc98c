"""Alias: ``python -m benchmarks.s3 ...`` is ``python -m benchmarks s3 ...``."""

import sys

from benchmarks.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["s3", *sys.argv[1:]]))
