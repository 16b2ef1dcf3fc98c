"""The shard-update planner against a brute-force byte model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardpipe.core.shard_update import (
    Abilities,
    ShardBytes,
    choose_strategy,
    plan_shard_update,
)
from shardpipe.errors import PlanError
from tests.support.examples import scaled

EMPTY = np.uint64(2**64 - 1)
INDEX = 10  # bytes of the made-up index


def make_shard(
    sizes: list[int | None], gaps: list[int], at_start: bool
) -> tuple[bytearray, ShardBytes]:
    """A shard whose slot ``s`` holds ``sizes[s]`` bytes of value ``s + 1``, with gaps of zeros."""
    entries = np.full((len(sizes), 2), EMPTY, dtype=np.uint64)
    data = bytearray(b"I" * INDEX if at_start else b"")
    for slot, (n, gap) in enumerate(zip(sizes, gaps, strict=True)):
        data += bytes(gap)
        if n is not None:
            entries[slot] = (len(data), n)
            data += bytes([slot + 1]) * n
    if at_start:
        index_range = (0, INDEX)
    else:
        index_range = (len(data), len(data) + INDEX)
        data += b"I" * INDEX
    return data, ShardBytes(len(data), entries, index_range, at_start)


def apply(data: bytearray, old: ShardBytes, plan, new: dict[int, int | None]) -> bytearray:  # type: ignore[no-untyped-def]
    """Carry the plan out on a copy of ``data``; new chunk of slot s is bytes 100 + s."""
    out = bytearray(data)
    if plan.strategy == "rewrite":
        out = bytearray(plan.new_size)
        for slot in plan.layout_order:
            off, n = (int(v) for v in plan.entries[slot])
            if slot in new:
                out[off : off + n] = bytes([100 + slot]) * n
            else:
                o, m = old.stored()[slot]
                out[off : off + n] = data[o : o + m]
        out[plan.index_offset : plan.index_offset + INDEX] = b"J" * INDEX
        return out
    for slot, off in plan.in_place.items():
        n = new[slot]
        out[off : off + n] = bytes([100 + slot]) * n
    pos = plan.append_offset
    assert pos == len(data)
    for slot in plan.appended:
        out[pos : pos + new[slot]] = bytes([100 + slot]) * new[slot]
        pos += new[slot]
    if len(out) < plan.index_offset + INDEX:
        out.extend(bytes(plan.index_offset + INDEX - len(out)))
    out[plan.index_offset : plan.index_offset + INDEX] = b"J" * INDEX
    return out


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 8))
    sizes = draw(st.lists(st.one_of(st.none(), st.integers(1, 40)), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    at_start = draw(st.booleans())
    changed = draw(st.sets(st.integers(0, n - 1), min_size=1))
    new = {s: draw(st.one_of(st.none(), st.integers(1, 50))) for s in changed}
    strategy = draw(st.sampled_from(["auto", "in_place", "append", "rewrite"]))
    return sizes, gaps, at_start, new, strategy


LOCAL = Abilities(write_at=True, append=True)


@settings(max_examples=scaled(300), deadline=None)
@given(cases())
def test_every_slot_reads_its_old_or_new_bytes(case) -> None:  # type: ignore[no-untyped-def]
    sizes, gaps, at_start, new, strategy = case
    data, old = make_shard(sizes, gaps, at_start)
    plan = plan_shard_update(old, new, strategy, LOCAL)
    out = apply(data, old, plan, new)
    assert len(out) == plan.new_size
    for slot in range(len(sizes)):
        entry = plan.entries[slot]
        want_new = slot in new
        n = new[slot] if want_new else sizes[slot]
        if n is None:
            assert entry[0] == EMPTY and entry[1] == EMPTY
            continue
        off = int(entry[0])
        assert int(entry[1]) == n
        assert out[off : off + n] == bytes([(100 + slot) if want_new else (slot + 1)]) * n
    # the index lies where the format says: first bytes, or last bytes
    start = plan.index_offset
    assert out[start : start + INDEX] == b"J" * INDEX
    assert (start == 0) if at_start else (start + INDEX == plan.new_size)
    if plan.strategy != "rewrite":
        # positioned writes touch only the declared ranges of the old bytes
        touched = np.zeros(len(data), dtype=bool)
        for a, b in plan.overwritten:
            touched[a:b] = True
        for i in np.flatnonzero(~touched):
            assert out[i] == data[i]
        assert plan.new_size >= old.size
    assert plan.unused_nbytes(INDEX) >= 0


@settings(max_examples=scaled(200), deadline=None)
@given(cases())
def test_compose_layout_keeps_the_old_bytes_as_a_prefix(case) -> None:  # type: ignore[no-untyped-def]
    """On S3 an append is the old object (with only its index replaced) plus new bytes."""
    sizes, gaps, at_start, new, _ = case
    _, old = make_shard(sizes, gaps, at_start)
    s3 = Abilities(compose_min=1)
    plan = plan_shard_update(old, new, "append", s3)
    if plan.strategy == "rewrite":
        return
    assert not plan.in_place
    assert set(plan.overwritten) <= {old.index_range}


def test_uncompressed_updates_go_in_place_and_never_grow() -> None:
    _, old = make_shard([8, 8, 8, 8], [0, 0, 0, 0], at_start=False)
    plan = plan_shard_update(old, {1: 8, 2: 8}, "auto", LOCAL)
    assert plan.strategy == "in_place"
    assert plan.new_size == old.size
    assert plan.overwritten == ((8, 16), (16, 24), (32, 42))


@pytest.mark.parametrize(
    ("sizes", "new", "abilities", "expected"),
    [
        # nothing kept: a fresh shard
        ([8, 8], {0: 9, 1: 9}, LOCAL, "rewrite"),
        # a small change that does not fit: append
        ([40, 40, 40, 40], {1: 50}, LOCAL, "append"),
        # most of the shard changes: rewrite
        ([10, 10, 10, 10], {0: 30, 1: 30, 2: 30}, LOCAL, "rewrite"),
        # a store that can do neither: rewrite
        ([40, 40, 40, 40], {1: 50}, Abilities(), "rewrite"),
        # S3 compose needs the kept range to reach the part size
        ([40, 40, 40, 40], {1: 50}, Abilities(compose_min=100), "append"),
        ([40, 40, 40, 40], {1: 50}, Abilities(compose_min=1000), "rewrite"),
        # a rewrite that does not fit memory gives way to an append
        (
            [10, 10, 10, 10],
            {0: 30, 1: 30, 2: 30},
            Abilities(True, True, rewrite_fits=False),
            "append",
        ),
        # chunks that fit their room go in place, unless keeping the old bytes does not fit
        ([40, 40, 40, 40], {1: 30}, LOCAL, "in_place"),
        ([40, 40, 40, 40], {1: 30}, Abilities(True, True, in_place_fits=False), "append"),
        (
            [40, 40, 40, 40],
            {1: 30},
            Abilities(True, False, rewrite_fits=False, in_place_fits=False),
            "rewrite",
        ),
    ],
)
def test_auto_rule(sizes, new, abilities, expected) -> None:  # type: ignore[no-untyped-def]
    _, old = make_shard(sizes, [0] * len(sizes), at_start=False)
    assert choose_strategy(old, new, abilities) == expected


def test_auto_rewrites_once_unused_space_passes_the_threshold() -> None:
    _, old = make_shard([40, 40, 40, 40], [60, 0, 0, 60], at_start=False)  # 120 of 290 unused
    # after the append: 170 of 350 bytes unused (0.49)
    assert choose_strategy(old, {1: 50}, LOCAL, threshold=0.4) == "rewrite"
    assert choose_strategy(old, {1: 50}, LOCAL, threshold=0.5) == "append"


def test_strategies_the_storage_cannot_do_are_refused() -> None:
    _, old = make_shard([8, 8], [0, 0], at_start=False)
    with pytest.raises(PlanError, match="offset"):
        plan_shard_update(old, {0: 8}, "in_place", Abilities())
    with pytest.raises(PlanError, match="append"):
        plan_shard_update(old, {0: 8}, "append", Abilities())


def test_overlapping_chunks_are_never_overwritten_in_place() -> None:
    entries = np.array([[0, 10], [5, 10]], dtype=np.uint64)
    old = ShardBytes(25, entries, (15, 25), False)
    assert old.rooms() == {0: 0, 1: 10}
    plan = plan_shard_update(old, {0: 4}, "in_place", LOCAL)
    assert plan.in_place == {} and plan.appended == (0,)
