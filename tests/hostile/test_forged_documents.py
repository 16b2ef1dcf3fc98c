"""Readers refuse forged ``zarr.json`` documents quickly, by name (issue 39).

A hostile-input audit opened 18 absurd documents with ``open_array`` and
``open_dataset``: 14 gave a raw ``MemoryError``, ``ValueError`` or
``OverflowError`` (a shape of 2**62 in shards of 1, a negative shape, a shard
shape of 0, 1,000 dimensions, inner chunks larger than the shards), and a
(10**6)^3 array in shards of 1 opened as a Dask array of 10**18 blocks.
Every forgery of :data:`tests.hostile.forged_documents.FORGERIES` is opened
here in one child process (forked from the fork server) limited to 3 GiB of
address space, by every reader:

* ``open_array`` (with and without ``max_mem``) and ``open_dataset`` on the
  group holding the array refuse it with the ``ShardpipeError`` subclass the
  table gives, naming what is wrong;
* ``verify`` and ``info`` refuse it with a ``ShardpipeError`` or report on it;
* never another exception, and every call within 2 s (each takes milliseconds;
  the bound leaves room for a loaded machine, and the imports are done before
  the first call is timed).
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import zarr

import shardpipe
from shardpipe.errors import MetadataError
from tests.hostile.forged_documents import FORGERIES, MUST_REFUSE, write_stores
from tests.support import REPOSITORY
from tests.support.fork_server import ForkServer

MOST_SECONDS = 2.0


@pytest.fixture(scope="module")
def outcomes(
    tmp_path_factory: pytest.TempPathFactory, fork_server: ForkServer
) -> list[dict[str, Any]]:
    """What every reader did on every forgery (one child process for all)."""
    root = tmp_path_factory.mktemp("forged")
    names = write_stores(root)
    child = fork_server.start("tests.hostile.forged_documents", [str(root), *names], cwd=REPOSITORY)
    assert child.wait(timeout=300) == 0, child.stderr()[-3000:]
    return [json.loads(line) for line in child.stdout().splitlines() if line.startswith("{")]


def test_the_table_holds_what_the_audit_found() -> None:
    assert len(FORGERIES) >= 18


@pytest.mark.parametrize("case", list(FORGERIES))
def test_readers_refuse_the_forgery_by_name_and_fast(
    outcomes: list[dict[str, Any]], case: str
) -> None:
    forgery = FORGERIES[case]
    found = {o["reader"]: o for o in outcomes if o["case"] == case}
    assert set(found) == {*MUST_REFUSE, "verify", "info"}, found
    problems = []
    for reader, outcome in found.items():
        what = f"{reader}: {outcome['outcome']} {outcome['error']}: {outcome['message'][:300]}"
        if outcome["outcome"] == "raw":
            problems.append(f"not a ShardpipeError: {what}")
        elif reader in MUST_REFUSE:
            if outcome["error"] != forgery.refusal:
                problems.append(f"expected {forgery.refusal}: {what}")
            for word in forgery.named:
                if word not in outcome["message"]:
                    problems.append(f"does not name {word!r}: {what}")
        if outcome["seconds"] > MOST_SECONDS:
            problems.append(f"took {outcome['seconds']:.2f} s: {what}")
    assert not problems, "\n".join(problems)


@pytest.fixture
def group_of_one(tmp_path: Path) -> Path:
    """The valid store of the forgeries: the group ``g`` holding the array ``arr``."""
    write_stores(tmp_path, names=[])
    return tmp_path / "base" / "g"


def _forged(case: str, document: dict[str, Any]) -> dict[str, Any]:
    forged: dict[str, Any] = FORGERIES[case].forge(copy.deepcopy(document))
    return forged


def test_a_forged_array_in_consolidated_metadata_is_refused(group_of_one: Path) -> None:
    """xarray opens a group's arrays from its consolidated metadata when it has some: there,
    the member's own ``zarr.json`` (valid here) is never read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # consolidated metadata is no part of Zarr v3
        zarr.consolidate_metadata(str(group_of_one))
    root = json.loads((group_of_one / "zarr.json").read_text())
    members = root["consolidated_metadata"]["metadata"]
    members["arr"] = _forged("shard shape 0", members["arr"])
    (group_of_one / "zarr.json").write_text(json.dumps(root))
    expected = r"zarr\.json \(consolidated metadata of 'arr'\).*\(0, 8\) has a zero"
    with pytest.raises(MetadataError, match=expected):
        shardpipe.open_dataset(str(group_of_one))
    with pytest.raises(MetadataError, match=expected):
        shardpipe.verify(str(group_of_one))


def test_open_array_on_a_group_with_a_forged_member_names_it(group_of_one: Path) -> None:
    """Asked for a group, open_array names the arrays in it; a forged one is named as such."""
    document = json.loads((group_of_one / "arr" / "zarr.json").read_text())
    (group_of_one / "arr" / "zarr.json").write_text(json.dumps(_forged("shard shape 0", document)))
    with pytest.raises(MetadataError, match=r"'arr/zarr\.json'.*\(0, 8\) has a zero"):
        shardpipe.open_array(str(group_of_one))
