"""Alias: ``python -m benchmarks.large_shard ...`` is ``python -m benchmarks large-shard ...``."""

import sys

from benchmarks.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["large-shard", *sys.argv[1:]]))
