"""DelegatingStore forwards every part of the ShardStore interface; wrappers build on it.

The interface is read from :class:`~shardpipe.storage.base.ShardStore` itself, so a
method added there fails these tests until it is forwarded (and retried, or listed as
not retried).
"""

from __future__ import annotations

import inspect
import pickle
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from shardpipe.storage.base import ShardStore, StoreAbilities
from shardpipe.storage.delegating import DelegatingStore
from shardpipe.storage.gated import GatedStore
from shardpipe.storage.local.store import LocalShardStore
from shardpipe.storage.retry import RetryingStore
from shardpipe.testing.faults import FaultyStore
from shardpipe.testing.io_errors import DeviceErrorStore

NO_IO = {"joined_body", "part_layout"}
"""Methods that make no request: forwarded straight to the inner store, not through its hook
(a gate, a retry, an injected fault would have nothing to act on)."""

NOT_RETRIED = (
    {"abilities", "min_part_size", "max_parts", "supports_parts"}
    | NO_IO
    | {
        "collecting",  # a task's whole body: its storage calls are retried one by one
        "merge_changes",  # applies a transactional backend's changes in the client
    }
)
"""What RetryingStore forwards as it is."""


def _interface() -> dict[str, Any]:
    """Every public method, property and attribute (``abilities``) of ShardStore, by name."""
    return {name: member for name, member in vars(ShardStore).items() if not name.startswith("_")}


def _methods() -> list[str]:
    return sorted(n for n, m in _interface().items() if inspect.isfunction(m))


def _abilities() -> list[str]:
    return sorted(n for n, m in _interface().items() if not inspect.isfunction(m))


class _Recorder(ShardStore):
    """A backend that records each call made on it and answers with a marker."""

    abilities = StoreAbilities(parts=True, min_part_size=7, max_parts=9)

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []


def _recording(name: str) -> Any:
    def method(self: _Recorder, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((name, args, kwargs))
        return ("answer of", name)

    return method


for _name in _methods():
    setattr(_Recorder, _name, _recording(_name))
_Recorder.__abstractmethods__ = frozenset()


def _arguments(name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Distinct objects for every parameter of ``ShardStore.<name>``."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in list(inspect.signature(getattr(ShardStore, name)).parameters.values())[1:]:
        value = f"<{parameter.name}>"
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[parameter.name] = value
        else:
            args.append(value)
    return tuple(args), kwargs


def test_the_interface_is_what_these_tests_expect() -> None:
    """The introspection finds the interface (so the tests below cannot pass on nothing)."""
    assert {"put", "get", "list", "finish_parts", "collecting", "cleanup"} <= set(_methods())
    assert {"abilities", "min_part_size", "max_parts", "supports_parts"} <= set(_interface())


@pytest.mark.parametrize("name", sorted(_interface()))
def test_every_part_of_the_interface_is_defined_by_the_delegating_store(name: str) -> None:
    assert name in vars(DelegatingStore), f"DelegatingStore does not forward ShardStore.{name}"


@pytest.mark.parametrize("name", _methods())
def test_every_method_reaches_the_inner_store_with_its_arguments(name: str) -> None:
    inner = _Recorder()
    args, kwargs = _arguments(name)
    answer = getattr(DelegatingStore(inner), name)(*args, **kwargs)
    assert inner.calls == [(name, args, kwargs)]
    if inspect.signature(getattr(ShardStore, name)).return_annotation != "None":
        assert answer == ("answer of", name)


@pytest.mark.parametrize("name", _abilities())
def test_every_ability_is_the_inner_stores(name: str) -> None:
    inner = _Recorder()
    assert getattr(DelegatingStore(inner), name) == getattr(inner, name)


@pytest.mark.parametrize("name", sorted(set(_interface()) - NOT_RETRIED))
def test_the_retry_layer_retries_every_storage_call(name: str) -> None:
    """A new ShardStore method is retried, or listed in NOT_RETRIED on purpose."""
    assert name in vars(RetryingStore), f"RetryingStore forwards {name} without retrying it"


def test_every_forwarded_call_passes_the_one_hook() -> None:
    """A wrapper that treats every call alike overrides ``_forward`` alone."""
    seen: list[str] = []

    class Counting(DelegatingStore):
        def _forward[T](self, method: str, call: Any) -> T:
            seen.append(method)
            result: T = call()
            return result

    store = Counting(_Recorder())
    for name in _methods():
        args, kwargs = _arguments(name)
        getattr(store, name)(*args, **kwargs)
    assert seen == [name for name in _methods() if name not in NO_IO]


def test_a_closed_gate_holds_requests_but_not_the_joining_of_a_body() -> None:
    """A task joins its shard while the start runs; only the put waits for the gate."""
    gate: Future[None] = Future()
    store = GatedStore(_Recorder(), gate)
    assert store.joined_body([b"ab", b"c"]) == ("answer of", "joined_body")
    pending = ThreadPoolExecutor(1).submit(store.put, "k", [b"x"])
    with pytest.raises(TimeoutError):
        pending.result(timeout=0.2)
    gate.set_result(None)
    pending.result(timeout=5)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda inner: DelegatingStore(inner),
        lambda inner: RetryingStore(inner),
        lambda inner: FaultyStore(inner, share=0.5, seed=3),
        lambda inner: DeviceErrorStore(inner, fail={2}, sticky=True),
        lambda inner: RetryingStore(FaultyStore(inner, share=0.0)),
    ],
    ids=["delegating", "retrying", "faulty", "device-error", "retrying-faulty"],
)
def test_wrappers_pickle_and_work_after(tmp_path: Path, wrap: Any) -> None:
    """Stores travel to Dask workers: a wrapper pickles with its inner store and settings."""
    store = wrap(LocalShardStore(tmp_path))
    copy = pickle.loads(pickle.dumps(store))
    assert type(copy) is type(store) and repr(copy) == repr(store)
    assert copy.abilities == store.abilities
    RetryingStore(copy).put("a/b", [b"xyz"])
    assert LocalShardStore(tmp_path).get("a/b") == b"xyz"


def test_device_errors_forward_every_other_call(tmp_path: Path) -> None:
    """Only positioned writes fail; a streamed put streams through the backend as it is."""
    store = DeviceErrorStore(LocalShardStore(tmp_path), fail={1})
    assert store.put_streamed("k", iter([b"ab", b"cd"])) == 4
    assert list(store.list("")) == ["k"] and store.get_range("k", 1, 3) == b"bc"
    with pytest.raises(OSError, match="Input/output error"):
        store.append("k", [b"ef"])
    assert store.failed == ["k"] and store.get("k") == b"abcd"
