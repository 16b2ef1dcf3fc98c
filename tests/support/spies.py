"""Counting the calls a piece of the package makes, for tests of how often work is done."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest


def count_calls(monkeypatch: pytest.MonkeyPatch, module: ModuleType, *names: str) -> dict[str, int]:
    """Count the calls of the functions ``names`` as ``module`` looks them up.

    Returns the counts by name, which grow as the calls are made (the functions still
    run). ``monkeypatch`` puts the functions back after the test.
    """
    calls = dict.fromkeys(names, 0)
    for name in names:
        function = getattr(module, name)

        def counted(*args: Any, _name: str = name, _function: Any = function, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _function(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls
