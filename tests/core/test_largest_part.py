"""MemoryModel.largest_part: the most raw bytes a part may hold, against brute force."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shardpipe.core.memory import MemoryModel

models = st.builds(
    MemoryModel,
    chunk_nbytes=st.integers(1, 4_096),
    expansion=st.sampled_from([1.0, 1.0078125, 1.5]),
    chunk_overhead=st.integers(0, 2_048),
    join_copies=st.booleans(),
    undo=st.booleans(),
)


def _cost(model: MemoryModel, block: int, raw: int, gathered: bool) -> int:
    return max(model.direct(block, raw), model.gathered(raw) if gathered else 0)


@given(models, st.integers(0, 200_000), st.integers(0, 50_000), st.booleans())
def test_the_largest_part_that_fits(
    model: MemoryModel, budget: int, block: int, gathered: bool
) -> None:
    """It fits, and one byte more does not: a part of whole chunks that fits is never
    refused (a step-down by 1/64 could skip past one inner chunk, and a write whose
    chunks fit was refused as holding "-1,679 more than max_mem")."""
    raw = model.largest_part(budget, block, gathered=gathered)
    if raw == 0:
        assert _cost(model, block, 1, gathered) > budget
        return
    assert _cost(model, block, raw, gathered) <= budget
    assert _cost(model, block, raw + 1, gathered) > budget


def test_one_inner_chunk_that_fits_is_allowed() -> None:
    """The case a review found: one chunk of 220 bytes holds 5,664 of 7,343."""
    model = MemoryModel(220, expansion=1.0078125, chunk_overhead=1028, join_copies=True)
    assert model.gathered(220) == 5_664
    assert model.largest_part(7_343, 64, gathered=True) >= 220
