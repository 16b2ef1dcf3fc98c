"""Where the parts of an object lie, from their receipts alone."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardpipe.storage.parts import PartReceipt, lay_out_parts


def test_parts_without_a_place_lie_by_their_numbers() -> None:
    receipts = [PartReceipt(2, 5), PartReceipt(0, 10), PartReceipt(1, 3)]
    layout = lay_out_parts(receipts)
    assert layout.starts == (13, 0, 10)
    assert layout.spans == ((None, 18),)
    assert layout.nbytes == 18
    assert lay_out_parts([]).nbytes == 0


def test_placed_parts_lie_where_they_were_placed() -> None:
    receipts = [
        PartReceipt(3, 4, place="b", offset=0),
        PartReceipt(1, 5, place="a", offset=7),  # an earlier try took bytes 0-7 of "a"
        PartReceipt(0, 2, place="b", offset=4),
    ]
    layout = lay_out_parts(receipts)
    assert layout.spans == (("b", 6), ("a", 12))  # "b" holds part 0
    assert layout.starts == (0, 13, 4)
    assert layout.nbytes == 18
    preferred = lay_out_parts(receipts, first="a")
    assert preferred.spans == (("a", 12), ("b", 6))
    assert preferred.starts == (12, 7, 16)
    assert lay_out_parts(receipts, first="c") == layout


@pytest.mark.parametrize(
    ("receipts", "message"),
    [
        ([PartReceipt(0, 1), PartReceipt(0, 2)], "numbered twice"),
        ([PartReceipt(0, 1), PartReceipt(1, 2, place="a")], "placed by the backend and others not"),
    ],
)
def test_receipts_that_make_no_object_are_refused(
    receipts: list[PartReceipt], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        lay_out_parts(receipts)


@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 50), st.integers(0, 9)), max_size=8)
)
def test_placed_parts_never_overlap_and_fit_the_object(
    tries: list[tuple[str, int, int]],
) -> None:
    """Parts appended to their places as written (dead bytes before some) never overlap."""
    ends: dict[str, int] = {}
    receipts = []
    for number, (place, size, dead) in enumerate(tries):
        offset = ends.get(place, 0) + dead
        ends[place] = offset + size
        receipts.append(PartReceipt(number, size, place=place, offset=offset))
    for first in (None, "b"):
        layout = lay_out_parts(receipts, first=first)
        ranges = sorted(
            (start, start + r.size) for start, r in zip(layout.starts, receipts, strict=True)
        )
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
        assert all(stop <= layout.nbytes for _, stop in ranges)
        assert layout.nbytes == sum(n for _, n in layout.spans)
