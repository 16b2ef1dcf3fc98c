"""The pure core's tests need the runtime dependencies, pytest and hypothesis, nothing more.

The suite's cloud fixtures (``shardpipe.testing.s3``, ``.gcs``, ``.azure``) are
registered for every test, so their modules must import their clients (boto3,
moto, gcsfs, the Azure SDK) only when a test asks for a server.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPOSITORY

CLOUD_CLIENTS = {"boto3", "botocore", "moto", "gcsfs", "azure", "adlfs"}


def _imported_while_collecting(folder: str) -> set[str]:
    """Top-level packages imported by ``pytest FOLDER --collect-only`` (``-X importtime``)."""
    command = [sys.executable, "-X", "importtime", "-m", "pytest", folder, "--co", "-q", "-s"]
    done = subprocess.run(
        [*command, "-p", "no:cacheprovider"],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "_pytest" in names, "-X importtime reported nothing: is the output captured?"
    return names


def test_collecting_the_core_tests_imports_no_cloud_client() -> None:
    imported = _imported_while_collecting("tests/core")
    assert not imported & CLOUD_CLIENTS, (
        f"collecting tests/core imported {sorted(imported & CLOUD_CLIENTS)}: import them "
        "inside the fixtures of shardpipe.testing that start a server, not at module level"
    )
