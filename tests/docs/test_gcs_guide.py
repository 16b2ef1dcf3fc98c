"""The GCS guide's examples run as written against fake-gcs-server.

``docs/guides/cloud-storage-gcs.md`` writes to ``gs://my-lab``; with
``STORAGE_EMULATOR_HOST`` pointing at the session's emulator (as the guide
says) every Python block runs in order in one namespace, the pytest example
is called with a fresh bucket, and the command line example runs through
``shardpipe.cli.parser.main``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from shardpipe.cli.parser import main
from shardpipe.testing.gcs import make_gcs_bucket, remove_gcs_bucket
from tests.support import REPOSITORY

pytestmark = pytest.mark.gcs

GUIDE = REPOSITORY / "docs" / "guides" / "cloud-storage-gcs.md"


@pytest.fixture
def my_lab(gcs_server: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The guide's bucket on the emulator, which gcsfs reaches by STORAGE_EMULATOR_HOST."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    make_gcs_bucket(gcs_server, "my-lab")
    yield gcs_server
    remove_gcs_bucket(gcs_server, "my-lab")


def test_the_guide_runs_as_written(
    my_lab: str,
    gcs_bucket: tuple[str, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = GUIDE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 6
    namespace: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), namespace)
    namespace["test_my_pipeline"](gcs_bucket)
    printed = capsys.readouterr().out
    assert "does not exist" in printed and "no-such-bucket" in printed, printed
    assert "problems: 0 in 0 shard(s)" in printed, printed  # the verify of the first example
    (command,) = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert main(shlex.split(command)[1:]) == 0
