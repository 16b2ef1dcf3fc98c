"""What the tests share: independent readers, the scripts tests start as child processes,
and where things are in the checkout."""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
"""The checkout's root: the working directory and ``PYTHONPATH`` of child processes."""

DRAFT_FIXTURES = REPOSITORY / "tests" / "legacy" / "fixtures"
"""Arrays and hierarchies of the sharding storage-transformer draft, made by its own script."""
