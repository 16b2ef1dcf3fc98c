"""Counting the calls a piece of the package makes, for tests of how often work is done."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from shardpipe.storage.base import ShardStore
from shardpipe.storage.delegating import DelegatingStore


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


def count_calls_by_module(
    monkeypatch: pytest.MonkeyPatch,
    function: Callable[..., Any],
    *,
    when: Callable[..., bool] | None = None,
) -> Counter[str]:
    """Count the calls of ``function`` made through every shardpipe module that imported it.

    Every loaded ``shardpipe`` module holding ``function`` under its own name
    gets a counting stand-in; the counts are by calling module's name, so that
    a test sees both how often and where the work is done (a module that
    moves the work elsewhere still shows). Only the modules loaded by then are
    watched: import the doors a test calls before counting. ``when``, given,
    says which calls count (it gets the call's arguments: ``lambda name, *_:
    name == "progress"`` counts the checks of one option). ``monkeypatch`` puts
    the functions back.
    """
    calls: Counter[str] = Counter()
    name = function.__name__
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("shardpipe") or getattr(module, name, None) is not function:
            continue

        def counted(*args: Any, _where: str = module_name, **kwargs: Any) -> Any:
            if when is None or when(*args, **kwargs):
                calls[_where] += 1
            return function(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


class CountingStore(DelegatingStore):
    """A store that keeps the name of every call made of it, in order (``calls``)."""

    def __init__(self, inner: ShardStore) -> None:
        super().__init__(inner)
        self.calls: list[str] = []

    def _forward[T](self, method: str, call: Callable[[], T]) -> T:
        self.calls.append(method)
        return call()
