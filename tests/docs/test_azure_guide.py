"""The Azure guide's examples run as written, in order, against the Azurite emulator."""

from __future__ import annotations

import re

import pytest

from tests.support import REPOSITORY

GUIDE = REPOSITORY / "docs" / "guides" / "cloud-storage-azure.md"


@pytest.mark.azure
def test_the_azure_guide_examples_run(azurite_server: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(GUIDE), "exec"), namespace)
    assert str(namespace["url"]).startswith("az://")
