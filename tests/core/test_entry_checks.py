"""The checks of per-name options (a dataset's ``encoding=``, a group rechunk's ``arrays=``)."""

from __future__ import annotations

import pytest

from shardpipe.core.checks import check_entry_keys, check_int_tuple, checking_entry
from shardpipe.errors import InvalidArgumentError

KNOWN = ("chunks", "shards")


def test_known_keys_pass() -> None:
    check_entry_keys("arrays", "entry 'big'", {"shards": (4,), "chunks": (2,)}, KNOWN, "settings")
    check_entry_keys("arrays", "entry 'big'", {}, KNOWN, "settings")


def test_an_unknown_key_is_named_with_the_nearest_known_one() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_entry_keys("arrays", "entry 'big'", {"shard": 1}, KNOWN, "per-array settings")
    err = caught.value
    assert err.parameter == "arrays"
    assert err.problem == "entry 'big': unknown key(s) ['shard'], which are not per-array settings"
    assert err.fix == "Did you mean 'shards'? Give only 'chunks', 'shards'"


def test_keys_near_none_are_listed_with_the_known_ones() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_entry_keys("encoding", "variable 't'", {"zz": 1, 5: 2}, KNOWN, "encoding keys")
    assert "variable 't': unknown key(s) ['5', 'zz']" in caught.value.problem
    assert caught.value.fix == "Give only 'chunks', 'shards'"


def test_a_setting_refused_inside_an_entry_names_the_option_the_entry_and_the_setting() -> None:
    with pytest.raises(InvalidArgumentError) as caught, checking_entry("arrays", "entry 'big'"):
        check_int_tuple("chunks", "x")
    err = caught.value
    assert err.parameter == "arrays"
    assert err.problem.startswith("entry 'big': chunks: ")
    with pytest.raises(InvalidArgumentError) as alone:
        check_int_tuple("chunks", "x")
    assert err.problem == f"entry 'big': chunks: {alone.value.problem}"
    assert err.fix == alone.value.fix
    assert err.__cause__ is None and err.__suppress_context__


def test_nothing_refused_inside_an_entry_passes_through() -> None:
    with checking_entry("arrays", "entry 'big'"):
        shape = check_int_tuple("chunks", (2, 3))
    assert shape == (2, 3)
